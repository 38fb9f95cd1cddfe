"""Per-task time limits (evalplus's rule): a floor, or k times the reference solution's time."""

from __future__ import annotations

import json

import pytest

from codeparrot.eval.config import ExecuteConfig
from codeparrot.eval.data import load_problems
from codeparrot.eval.humaneval import execute
from codeparrot.eval.sandbox import Verdict
from codeparrot.eval.timing import task_time_limits


class FakeTimer:
    """Runs nothing: each reference program "takes" the seconds given for its task."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self.programs = []

    def __call__(self, programs):
        self.programs.extend(programs)
        out = []
        for p in programs:
            task_id = next(t for t in self.seconds if p.program.startswith(PROBLEMS[t]["prompt"]))
            out.append(Verdict(True, "passed", self.seconds[task_id]))
        return out


PROBLEMS = {t: p for t, p in load_problems().items() if t in ("HumanEval/2", "HumanEval/3")}


def test_the_limit_follows_the_reference_solutions_time():
    timer = FakeTimer({"HumanEval/2": 0.1, "HumanEval/3": 3.0})
    limits, report = task_time_limits(PROBLEMS, timer, floor=4.0, factor=4.0)
    assert limits == {("HumanEval/2", "base"): 4.0, ("HumanEval/3", "base"): 12.0}
    assert report["reference_seconds"] == {"HumanEval/2 (base)": 0.1, "HumanEval/3 (base)": 3.0}
    assert report["limits"]["HumanEval/3 (base)"] == 12.0
    # the reference runs are the canonical solutions, allowed evalplus's per-task ceiling
    assert all(p.program.endswith(PROBLEMS[t]["canonical_solution"])
               for p, t in zip(timer.programs, PROBLEMS, strict=True))  # fmt: skip
    assert {p.timeout for p in timer.programs} == {60.0}
    slower, _ = task_time_limits(PROBLEMS, FakeTimer({"HumanEval/2": 0.1, "HumanEval/3": 30.0}))
    assert slower[("HumanEval/3", "base")] == 60.0  # capped
    assert slower[("HumanEval/2", "base")] == 4.0


def test_execute_reports_per_task_limits_and_a_slow_sample_is_judged_by_its_own(tmp_path):
    samples = tmp_path / "samples.jsonl"
    slow = "    import time\n    time.sleep(0.5)\n    return number % 1.0\n"
    rows = [{"task_id": "HumanEval/2", "completion": slow}]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = dict(samples=samples, allow_code_execution=True, ks=(1,), workers=1)
    flat = execute(ExecuteConfig(timeout=1.0, **common), progress=False)
    assert flat["scoring"]["time_limit"] == {"mode": "flat", "seconds": 1.0}
    assert flat["pass_at_k"]["pass@1"] == 0.0  # three calls of 0.5 s against a flat 1 s
    scaled = execute(
        ExecuteConfig(timeout=1.0, gt_time_limit_factor=4.0, min_time_limit=2.5, **common),
        progress=False,
    )
    timing = scaled["scoring"]["time_limit"]
    assert timing["mode"] == "per-task" and timing["reference_failures"] == []
    assert timing["limits"]["HumanEval/2 (base)"] == pytest.approx(2.5, abs=0.5)
    assert scaled["pass_at_k"]["pass@1"] == 1.0
