"""Tasks by name: each loader on a fixture in its Hub schema, base and plus pass@k, bad input.

The fixtures are written by the tests in the schemas of the Hub datasets
(``evalplus/humanevalplus``: HumanEval's keys; ``google-research-datasets/mbpp`` sanitized:
``source_file, task_id, prompt, code, test_imports, test_list``; ``evalplus/mbppplus``: the
same plus ``test``) and read through the same ``datasets`` loader as a ``--problem-file``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.cli import main
from codeparrot.errors import DataError
from codeparrot.eval.config import ExecuteConfig
from codeparrot.eval.data import load_problems
from codeparrot.eval.humaneval import execute
from codeparrot.eval.tasks import load_task, mbpp_prompt, plus_test

# HumanEval/2 (truncate_number) with plus inputs in evalplus's form: numpy imported by the
# checker, floats compared with evalplus's tolerance (1e6 + 0.1 has no exact fractional
# part in binary, so an exact comparison would fail the right answer).
PLUS_TEST = """
import numpy as np


def is_floats(x) -> bool:
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
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert exact_match


def check(candidate):
    inputs = [[3.5], [1.33], [123.456], [1000000.1], [12345.25]]
    results = [0.5, 0.33, 0.456, 0.1, 0.25]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)
"""
# Passes HumanEval's three base asserts, fails the plus inputs above 1000.
BASE_ONLY = "    return number % 1.0 if number < 1000 else 0.0\n"

MBPP_RECORDS = [
    {
        "source_file": "Benchmark Questions Verification V2.ipynb",
        "task_id": 2,
        "prompt": "Write a function to find the shared elements from the given two lists.",
        "code": "def similar_elements(test_tup1, test_tup2):\n"
        "  res = tuple(set(test_tup1) & set(test_tup2))\n  return (res) \n",
        "test_imports": [],
        "test_list": [
            "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
            "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
        ],
    },
    {
        "source_file": "Benchmark Questions Verification V2.ipynb",
        "task_id": 3,
        "prompt": "Write a python function to identify non-prime numbers.",
        "code": "import math\ndef is_not_prime(n):\n    if n == 1:\n        return True\n"
        "    for i in range(2, int(math.sqrt(n)) + 1):\n        if n % i == 0:\n"
        "            return True\n    return False\n",
        "test_imports": ["import math"],
        "test_list": [
            "assert is_not_prime(2) == False",
            "assert is_not_prime(10) == True",
            "assert math.isclose(float(is_not_prime(35)), 1.0)",
        ],
    },
]
MBPP_PLUS_TEST = """
import numpy as np


def assertion(out, exp, atol):
    if atol != 0 and out != exp:
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert out == exp

inputs = [[2], [10], [35], [37], [1], [4], [97]]
results = [False, True, True, False, True, True, False]
for i, (inp, exp) in enumerate(zip(inputs, results)):
    assertion(is_not_prime(*inp), exp, 0)
"""


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def humanevalplus_file(root: Path) -> Path:
    base = load_problems()
    records = []
    for task_id in ("HumanEval/2", "HumanEval/0"):
        record = {k: base[task_id][k] for k in ("task_id", "prompt", "canonical_solution")}
        record["entry_point"] = base[task_id]["entry_point"]
        record["test"] = PLUS_TEST if task_id == "HumanEval/2" else base[task_id]["test"]
        records.append(record)
    return write_jsonl(root / "humanevalplus.jsonl", records)


def mbpp_parquet(root: Path) -> Path:
    import datasets

    path = root / "mbpp-sanitized-test.parquet"
    datasets.Dataset.from_list(MBPP_RECORDS).to_parquet(str(path))
    return path


def mbppplus_file(root: Path) -> Path:
    records = [
        dict(r, test=MBPP_PLUS_TEST if r["task_id"] == 3 else "\n".join(r["test_list"]))
        for r in MBPP_RECORDS
    ]
    return write_jsonl(root / "mbppplus.jsonl", records)


def test_loaders_read_each_schema(tmp_path):
    plus = load_task("humanevalplus", humanevalplus_file(tmp_path))
    assert list(plus.problems) == ["HumanEval/2", "HumanEval/0"] and not plus.errors
    p2 = plus.problems["HumanEval/2"]
    assert p2["test"] == load_problems()["HumanEval/2"]["test"]  # base: HumanEval's own
    # the file's own, its answers' types checked as evalplus's evaluator checks them
    assert p2["plus_test"] == plus_test(PLUS_TEST) != PLUS_TEST

    mbpp = load_task("mbpp", mbpp_parquet(tmp_path))
    assert list(mbpp.problems) == ["Mbpp/2", "Mbpp/3"]
    first = mbpp.problems["Mbpp/2"]
    # bigcode-evaluation-harness's prompt: the text and the first test in a docstring
    assert first["prompt"] == (
        '"""\nWrite a function to find the shared elements from the given two lists.\n'
        'assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"""\n'
    )
    assert first["prompt"] == mbpp_prompt(
        MBPP_RECORDS[0]["prompt"], MBPP_RECORDS[0]["test_list"][0]
    )
    assert "plus_test" not in first
    assert mbpp.problems["Mbpp/3"]["setup"].startswith("import math")

    mbppplus = load_task("mbppplus", mbppplus_file(tmp_path))
    assert mbppplus.problems["Mbpp/3"]["plus_test"] == MBPP_PLUS_TEST


def test_missing_key_reported_by_line_rest_loaded(tmp_path):
    records = [dict(r) for r in MBPP_RECORDS]
    del records[0]["test_list"]
    found = load_task("mbpp", write_jsonl(tmp_path / "mbpp.jsonl", records))
    assert list(found.problems) == ["Mbpp/3"]
    assert found.errors == [f"{tmp_path / 'mbpp.jsonl'}: line 1: missing key(s) test_list"]
    with pytest.raises(DataError, match=re.escape("unknown task 'humaneval++'")):
        load_task("humaneval++")


def samples_of(path: Path, rows: list[tuple[str, str]], **extra) -> Path:
    return write_jsonl(
        path,
        [
            {"task_id": t, "completion": c, "note": f"#{i}", **extra}
            for i, (t, c) in enumerate(rows)
        ],
    )


@pytest.fixture
def allowed(monkeypatch):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")


def test_humanevalplus_base_and_plus_side_by_side(tmp_path, allowed, capsys):
    problems = humanevalplus_file(tmp_path)
    canonical = load_problems()["HumanEval/2"]["canonical_solution"]
    samples = samples_of(
        tmp_path / "s.jsonl",
        [
            ("HumanEval/2", canonical),
            ("HumanEval/2", BASE_ONLY),
            ("HumanEval/2", "    return 0.5\n"),
            # within evalplus's float tolerance: HumanEval's `candidate(3.5) == 0.5` fails it,
            # evalplus's verdict (the plus test, which holds the base inputs too) passes it
            ("HumanEval/2", "    return number % 1.0 + 1e-9\n"),
            # numpy's tolerance alone takes [0.5] for 0.5; evalplus's evaluator checks the type
            ("HumanEval/2", "    return [number % 1.0]\n"),
            # another within the tolerance: base and plus then differ (2 of 6 against 3)
            ("HumanEval/2", "    return number % 1.0 + 2e-9\n"),
        ],
    )
    argv = ["eval", "execute", str(samples), "--task", "humanevalplus", "--problem-file",
            str(problems), "--ks", "1", "--workers", "2"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "pass@1: 33.33% (base tests), 50.00% (base + plus)" in printed
    rows = [json.loads(line) for line in (tmp_path / "s_results.jsonl").read_text().splitlines()]
    assert [(r["passed"], r["plus_passed"]) for r in rows] == [
        (True, True),
        (True, False),
        (False, False),
        (False, True),
        (False, False),
        (False, True),
    ]
    assert [r["note"] for r in rows] == ["#0", "#1", "#2", "#3", "#4", "#5"]
    summary = json.loads((tmp_path / "s_results.summary.json").read_text())
    assert summary["pass_at_k"]["pass@1"] == pytest.approx(2 / 6)
    assert summary["pass_at_k_plus"]["pass@1"] == pytest.approx(3 / 6)
    assert summary["scoring"]["task"] == "humanevalplus"


def test_mbpp_canonical_solutions_pass_wrong_ones_fail(tmp_path, allowed):
    for task, problem_file in (
        ("mbpp", mbpp_parquet(tmp_path)),
        ("mbppplus", mbppplus_file(tmp_path)),
    ):
        rows = []
        for r in MBPP_RECORDS:
            rows.append((f"Mbpp/{r['task_id']}", r["code"]))
        # right on the three base tests (2, 10, 35), wrong on the plus input 1
        rows.append(
            ("Mbpp/3", "def is_not_prime(n):\n    return any(n % i == 0 for i in range(2, n))\n")
        )
        rows.append(("Mbpp/2", "def similar_elements(a, b):\n    return ()\n"))
        rows.append(("Mbpp/999", "def f():\n    pass\n"))
        samples = samples_of(tmp_path / f"{task}_samples.jsonl", rows)
        summary = execute(
            ExecuteConfig(
                samples=samples, task=task, problem_file=problem_file, ks=(1,), workers=2
            ),
            progress=False,
        )
        out = [
            json.loads(line)
            for line in (tmp_path / f"{task}_samples_results.jsonl").read_text().splitlines()
        ]
        assert [r["passed"] for r in out] == [True, True, True, False]
        assert summary["input_errors"] == [f"{samples}:5: unknown task id 'Mbpp/999'"]
        if task == "mbppplus":
            assert [r["plus_passed"] for r in out] == [True, True, False, False]
        else:
            assert "pass_at_k_plus" not in summary


def test_samples_keep_their_fields_and_completion_ids(tmp_path, allowed):
    canonical = load_problems()["HumanEval/2"]["canonical_solution"]
    records = [
        {
            "task_id": "HumanEval/2",
            "completion": canonical,
            "completion_id": 7,
            "model": "m",
            "meta": {"a": [1]},
        },
        {
            "task_id": "HumanEval/2",
            "completion": "    return 0\n",
            "completion_id": 3,
            "model": "m",
        },
        {"task_id": "HumanEval/2", "completion": "    return 0\n"},
        {"task_id": "HumanEval/2", "completion": "    return 0\n", "completion_id": "x"},
    ]
    samples = write_jsonl(tmp_path / "s.jsonl", records)
    summary = execute(ExecuteConfig(samples=samples, ks=(1,), workers=2), progress=False)
    rows = [json.loads(line) for line in (tmp_path / "s_results.jsonl").read_text().splitlines()]
    assert [r["completion_id"] for r in rows] == [7, 3, 8]
    assert rows[0]["model"] == "m" and rows[0]["meta"] == {"a": [1]}
    for record, row in zip(records[:3], rows, strict=True):
        assert {k: row[k] for k in record} == record
    assert [r["passed"] for r in rows] == [True, False, False]
    assert summary["input_errors"] == [f"{samples}:4: completion_id must be a non-negative integer"]


def test_unknown_task_name_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "execute", "x.jsonl", "--task", "humaneval++"])
    assert "humaneval++" in capsys.readouterr().err


def test_unreachable_hub_fails_before_generation(tmp_path, tiny_checkpoint):
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "codeparrot", "eval", "generate", "--task", "mbpp",
         "--checkpoint", str(tiny_checkpoint), "--output", str(out)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "'google-research-datasets/mbpp'" in proc.stderr
    assert "--problem-file" in proc.stderr
    assert not out.exists()
