"""No per-call feedback: a sample answers every recorded call of its test before any is
checked, so it cannot learn from the test calling it again which answers were accepted."""

from __future__ import annotations

import pytest

from codeparrot.eval.execution import Program, humaneval_program, run_programs
from codeparrot.eval.replay import CAP_FACTOR, CAP_FLOOR, REPLAY, plan_from
from codeparrot.eval.sandbox import detect_isolation

REFERENCE = "def f(x):\n    return x + 1\n"
TEST = "assert f(1) == 2\nassert f(2) == 3\nassert f(3) == 4\n"
# Wrong at once; hangs at its third call, which only a sample that sees every call reaches.
COUNTER = (
    "CALLS = [0]\ndef f(x):\n    CALLS[0] += 1\n"
    "    if CALLS[0] == 3:\n        while True:\n            pass\n    return 0\n"
)
SORT_TEST = "xs = [3, 1, 2]\nassert f(xs) is None\nassert xs == [1, 2, 3]\n"
SORTS = "def f(xs):\n    xs.sort()\n"
DEPENDENT_TEST = "y = f(1)\nassert f(y) == 3\n"


@pytest.fixture(scope="module")
def isolation():
    return detect_isolation()


def run(programs, isolation, **kwargs):
    stats: dict[str, int] = {}
    verdicts = run_programs(programs, workers=2, isolation=isolation, stats=stats, **kwargs)
    return [v.result for v in verdicts], stats


def test_a_sample_sees_every_call_even_after_a_wrong_answer(isolation):
    program = Program(COUNTER, TEST, "f", reference=REFERENCE, timeout=2.0)
    assert run([program], isolation)[0] == ["failed: AssertionError"]  # call by call
    results, stats = run([program], isolation, no_feedback=True)
    assert results == ["timed out"]  # it answered the third call before any was checked
    assert stats == {"recorded": 1, "fallbacks": 0, "unrecorded": 0}


def test_verdicts_of_replayed_answers(isolation):
    programs = [
        Program(REFERENCE, TEST, "f", reference=REFERENCE),
        Program("def f(x):\n    return 0\n", TEST, "f", reference=REFERENCE),
        Program("def f(x):\n    raise ValueError(x)\n", TEST, "f", reference=REFERENCE),
        Program("import os\ndef f(x):\n    os._exit(0)\n", TEST, "f", reference=REFERENCE),
        # changes of the arguments in place reach the test's own objects
        Program(SORTS, SORT_TEST, "f", reference=SORTS),
        Program("def f(xs):\n    pass\n", SORT_TEST, "f", reference=SORTS),
    ]
    results, stats = run(programs, isolation, no_feedback=True)
    assert results[0] == "passed"
    assert results[1] == "failed: AssertionError"
    assert results[2] == "failed: ValueError: 1"
    assert results[3] == "failed: the sample process exited"
    assert results[4] == "passed"
    assert results[5].startswith("failed: AssertionError")
    assert stats == {"recorded": 2, "fallbacks": 0, "unrecorded": 0}


def test_a_call_not_recorded_falls_back_to_calls_one_by_one_and_is_counted(isolation):
    programs = [
        Program("def f(x):\n    return x + 2\n", DEPENDENT_TEST, "f", reference=REFERENCE),
        Program(REFERENCE, DEPENDENT_TEST, "f", reference=REFERENCE),
        Program(REFERENCE, TEST, "f", reference="def f(x):\n    return 0\n"),  # fails
    ]
    results, stats = run(programs, isolation, no_feedback=True)
    assert results == ["failed: AssertionError", "passed", "passed"]
    assert stats == {"recorded": 2, "fallbacks": 1, "unrecorded": 1}


def test_answers_beyond_the_cap_fail_the_sample(isolation):
    reference = "def f(x):\n    return 'a'\n"
    big = f"def f(x):\n    return 'a' * {2 * CAP_FLOOR}\n"
    program = Program(big, "assert f(0) == 'a'\n", "f", reference=reference)
    results, _ = run([program], isolation, no_feedback=True)
    assert results[0].startswith("failed: answers larger than the cap"), results[0]


def test_humaneval_canonical_solutions_pass_replayed(isolation):
    from codeparrot.eval.data import load_problems

    problems = load_problems()
    programs = [humaneval_program(p, p["canonical_solution"]) for p in problems.values()]
    results, stats = run(programs, isolation, no_feedback=True)
    assert results == ["passed"] * len(problems)
    # HumanEval/38, /50 and /53 call with unseeded random inputs: call by call
    assert stats == {"recorded": 164, "fallbacks": 3, "unrecorded": 0}


def test_a_plan_comes_only_from_a_passed_reference():
    assert plan_from("failed: AssertionError\n\0recording:AAAA") is None
    assert plan_from("passed") is None
    assert plan_from("passed\n\0recording:not base64!") is None
    plan = plan_from("passed\n\0recording:AAAA")
    assert plan == REPLAY + b"%010d" % (CAP_FLOOR + CAP_FACTOR * 3) + b"\0\0\0"


def test_eval_execute_no_feedback_reports_its_recordings(tmp_path, capsys, monkeypatch):
    import json

    from codeparrot.cli import main
    from codeparrot.eval.data import load_problems

    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    problems = load_problems()
    path, out = tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    lines = [
        {"task_id": t, "completion": c}
        for t in ("HumanEval/0", "HumanEval/53")
        for c in (problems[t]["canonical_solution"], "    return None\n")
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = ["eval", "execute", str(path), "--output", str(out), "--no-feedback"]
    assert main([*command, "--ks", "1", "--workers", "2"]) == 0
    assert "2 tests recorded; 1 samples made a call" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [True, False, True, False]
    summary = json.loads(out.with_name("r.summary.json").read_text())
    # HumanEval/53's canonical solution reaches its unseeded random calls; None fails first
    assert summary["scoring"]["no_feedback"] == {"recorded": 2, "fallbacks": 1, "unrecorded": 0}
