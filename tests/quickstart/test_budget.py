"""The quickstart ends within --total-minutes: training gets what the other steps leave
(the steps faked, the clock faked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codeparrot.quickstart import QuickstartConfig
from codeparrot.quickstart import cli as quickstart
from codeparrot.quickstart.budget import MIN_TRAINING_MINUTES, training_budget

REFERENCE = dict(humaneval_samples=164 * 2, infill_tasks=200)


def test_on_the_reference_machine_training_gets_the_total_less_the_other_steps():
    budget = training_budget(total_minutes=15, elapsed_s=100, tokenizer_s=15, **REFERENCE)
    # kept: 55 s around the loop + 70 s HumanEval + 18 s infilling + a 60 s margin
    assert budget.reserve_s == pytest.approx(203)
    assert budget.minutes == pytest.approx((900 - 100 - 203) / 60, abs=0.01)
    assert not budget.over and "training gets 9.9 minutes" in budget.describe()


def test_a_slower_machine_keeps_more_for_the_evaluations_a_faster_one_no_less():
    slow = training_budget(total_minutes=15, elapsed_s=200, tokenizer_s=30, **REFERENCE)
    assert slow.slowness == 2.0 and slow.reserve_s == pytest.approx(143 * 2 + 60)
    assert slow.minutes == pytest.approx((900 - 200 - 346) / 60, abs=0.01)
    fast = training_budget(total_minutes=15, elapsed_s=100, tokenizer_s=5, **REFERENCE)
    assert fast.slowness == 1.0 and fast.reserve_s == pytest.approx(203)
    # without code execution the evaluations do not run, and nothing is kept for them
    quiet = training_budget(total_minutes=15, elapsed_s=100, tokenizer_s=15,
                            humaneval_samples=0, infill_tasks=0)  # fmt: skip
    assert quiet.reserve_s == pytest.approx(55 + 60)


def test_a_total_already_spent_trains_the_floor_and_says_it_will_run_over():
    budget = training_budget(total_minutes=15, elapsed_s=800, tokenizer_s=15, **REFERENCE)
    assert budget.over and budget.minutes == MIN_TRAINING_MINUTES
    assert "will run over its 15 minutes" in budget.describe()
    assert "--total-minutes" in budget.describe()


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fake_steps(monkeypatch, clock: FakeClock, seconds: dict[str, float]) -> dict[str, Any]:
    """Each step advances the clock by its seconds; training records the minutes it got."""
    seen: dict[str, Any] = {}

    def step(name: str):
        def run(cfg, interrupted=False, log=None, max_minutes=None, plan=None):
            seen[name] = max_minutes
            clock.now += seconds[name] if name != "train" else max_minutes * 60
            return {}

        return run

    steps = tuple(
        (name, title, step(name), config_of) for name, title, _f, config_of in quickstart.STEPS
    )
    monkeypatch.setattr(quickstart, "STEPS", steps)
    monkeypatch.setattr(quickstart, "step_train", step("train"))
    return seen


def test_the_training_minutes_are_what_the_total_leaves_measured_as_the_steps_run(
    tmp_path: Path, monkeypatch
):
    # the install took 90 s before the command started; corpus 10 s, tokenizer 30 s (2x slow)
    clock = FakeClock(1090.0)
    seen = fake_steps(monkeypatch, clock, {"corpus": 10, "tokenizer": 30, "eval": 140,
                                           "infill": 36})  # fmt: skip
    cfg = QuickstartConfig(output=tmp_path / "qs", started_at=1000.0, allow_code_execution=True)
    lines: list[str] = []
    state = quickstart.run_quickstart(cfg, log=lines.append, clock=clock)
    # 130 s spent, (55 + 70 + 18) x 2 + 60 = 346 s kept: 424 s of training
    assert seen["train"] == pytest.approx(7.06)
    assert any("training gets 7.1 minutes" in line for line in lines)
    assert state["minutes"] == pytest.approx((130 + 7.06 * 60 + 140 + 36) / 60)
    assert state["minutes"] < 15  # the evaluations took what was kept for them
    # the recorded config keeps --max-minutes as given, so a re-run reuses the model
    assert state["steps"]["train"]["config"]["max_minutes"] is None
    summary = quickstart.format_summary(cfg, {**state, "steps": {}})
    assert "12.2 minutes in all, of --total-minutes 15 (from make quickstart's start" in summary


def test_given_max_minutes_are_kept(tmp_path: Path, monkeypatch):
    clock = FakeClock(1000.0)
    seen = fake_steps(monkeypatch, clock, {"corpus": 10, "tokenizer": 30, "eval": 1,
                                           "infill": 1})  # fmt: skip
    cfg = QuickstartConfig(output=tmp_path / "qs", max_minutes=3.0, allow_code_execution=True)
    lines: list[str] = []
    quickstart.run_quickstart(cfg, log=lines.append, clock=clock)
    assert seen["train"] == 3.0 and not any(line.startswith("budget:") for line in lines)
