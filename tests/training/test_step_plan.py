"""Plan the steps from the machine: a time-budgeted run lays its schedule over the steps it
can reach (faked clock: each training step takes one second)."""

from __future__ import annotations

import json
import time as real_time

import pytest

from codeparrot.errors import ConfigError
from codeparrot.training import train
from codeparrot.training.plan import (
    StepPlan,
    decide,
    fill_ceiling,
    replan,
    steps_within,
    undertrained_warning,
)

from .test_training_loop import read_weights, tiny_config, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


STEP_S = 1.0


@pytest.fixture
def clock(monkeypatch):
    """The loop's clock moves by STEP_S per training step and stands still otherwise."""
    import codeparrot.training.loop as loop

    class FakeTime:
        now = 1000.0

        @classmethod
        def perf_counter(cls) -> float:
            return cls.now

        time = staticmethod(real_time.time)

    real_step = loop.train_step

    def step(run):
        FakeTime.now += STEP_S
        return real_step(run)

    monkeypatch.setattr(loop, "time", FakeTime)
    monkeypatch.setattr(loop, "train_step", step)
    return FakeTime


def budgeted(corpus, checkpoint, output, **changes):
    settings = dict(
        max_steps=40, max_minutes=0.25, warmup_steps=2, schedule="wsd", min_lr_ratio=0.1,
        eval_every=0, mixed_precision="no",
    )  # fmt: skip
    settings.update(changes)
    return tiny_config(corpus, checkpoint, output, **settings)


def lrs(run) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in records if "lr" in r}


def test_steps_within_counts_evaluations_on_the_way():
    # 100 s left at 1 s a step, 95% of it aimed at: 95 steps; one 10 s evaluation every 20
    assert steps_within(budget_s=106, elapsed_s=6, done=6, step_s=1.0, eval_every=0,
                        eval_s=0.0) == 101  # fmt: skip
    with_evals = steps_within(budget_s=106, elapsed_s=6, done=6, step_s=1.0, eval_every=20,
                              eval_s=10.0)  # fmt: skip
    assert with_evals == 6 + 95 - 30  # evaluations at 20, 40 and 60 cost 30 s


def test_a_budget_that_holds_every_step_keeps_the_recipe():
    plan = decide(StepPlan(steps=50, max_steps=50), budget_minutes=10, elapsed_s=6, done=6,
                  step_s=1.0, eval_every=0, eval_batches=1, warmup_steps=5)  # fmt: skip
    assert plan.steps == 50 and plan.planned and not plan.shortened
    assert "holds all 50 steps" in plan.describe()


def test_a_filled_plan_is_read_against_the_recipe_not_the_ceiling():
    """Where --max-steps is only the ceiling a budget fills up to, the line names the
    recipe's steps: never "~800 of 21,905 planned steps"."""
    slow = decide(StepPlan(steps=21_905, max_steps=21_905, recipe_steps=1000),
                  budget_minutes=806 / 60, elapsed_s=6, done=6, step_s=1.0, eval_every=0,
                  eval_batches=1, warmup_steps=5)  # fmt: skip
    assert slow.steps == 6 + 760
    assert "reaches ~766 of the recipe's 1,000 steps" in slow.describe()
    assert "21,905" not in slow.describe()
    plain = StepPlan(steps=766, max_steps=1000, planned=True, budget_minutes=1.0)
    assert "~766 of 1,000 planned steps" in plain.describe()  # no recipe: as before


def test_a_slower_machine_shortens_the_plan_a_faster_one_lengthens_it_before_the_decay():
    plan = decide(StepPlan(steps=1000, max_steps=1000), budget_minutes=106 / 60, elapsed_s=6,
                  done=6, step_s=1.0, eval_every=0, eval_batches=1, warmup_steps=5)  # fmt: skip
    assert plan.steps == 101
    same = dict(budget_minutes=106 / 60, done=50, eval_every=0, eval_batches=1)
    assert not replan(plan, elapsed_s=50, step_s=1.0, **same)  # on pace: kept
    assert replan(plan, elapsed_s=50, step_s=2.0, **same)  # half the pace from here on
    # 98% of 56 s at 2 s a step, less 2% of the budget (2.12 s) kept in hand
    assert plan.steps == 50 + 26 and plan.step_seconds == 2.0
    assert not replan(plan, elapsed_s=50, step_s=0.5, **same) and plan.steps == 76
    # in WSD's stable phase a faster machine may lengthen it again, up to --max-steps
    assert replan(plan, elapsed_s=50, step_s=0.5, lengthen=True, **same)
    assert plan.steps == 50 + 105  # 54.88 s less 4 steps' 2 s, at 0.5 s a step


def test_a_budget_too_small_for_the_warmup_is_a_clear_error():
    with pytest.raises(ConfigError) as e:
        decide(StepPlan(steps=1000, max_steps=1000), budget_minutes=0.5, elapsed_s=10, done=6,
               step_s=2.5, eval_every=0, eval_batches=1, warmup_steps=100)  # fmt: skip
    message = str(e.value)
    assert "--max-minutes 0.5" in message and "a step takes 2.50 s" in message and "100" in message


def test_a_budgeted_run_plans_its_steps_and_ends_at_the_floor(
    tmp_path, corpus, tiny_checkpoint, clock
):
    lines: list[str] = []
    run = tmp_path / "run"
    result = train(budgeted(corpus, tiny_checkpoint, run), log=lines.append)
    # 2 steps of warm-up and 4 timed ones took 6 s of the 15; 95% of the 9 left holds 8 more
    assert result.planned_steps == 14 and result.step == 14 and result.stopped_by == "max_steps"
    assert any("reaches ~14 of 40 planned steps in 0.25 minutes" in line for line in lines)
    lr = lrs(run)
    assert lr[14] == pytest.approx(0.1 * 3e-3)  # annealed to the floor
    assert lr[12] < lr[11] == pytest.approx(3e-3)  # WSD decays over the last fifth of 14
    meta = json.loads((run / "codeparrot_checkpoint.json").read_text())
    assert meta["plan"]["steps"] == 14 and meta["plan"]["step_seconds"] == pytest.approx(STEP_S)


def test_without_a_plan_the_clock_stops_the_run_at_the_peak(tmp_path, corpus, tiny_checkpoint):
    # the same run without a time budget: the schedule spans --max-steps
    run = tmp_path / "run"
    result = train(budgeted(corpus, tiny_checkpoint, run, max_minutes=None, max_steps=14))
    assert result.planned_steps == 14
    assert lrs(run)[14] == pytest.approx(0.1 * 3e-3)


def test_a_planned_run_resumes_bitwise_exactly(tmp_path, corpus, tiny_checkpoint, clock):
    whole = tmp_path / "whole"
    train(budgeted(corpus, tiny_checkpoint, whole, eval_every=4))
    parts = tmp_path / "parts"
    tokens_per_step = 4 * 64
    first = train(budgeted(corpus, tiny_checkpoint, parts, eval_every=4,
                           max_tokens=7 * tokens_per_step))  # fmt: skip
    # stopped after the plan was made (at step 6: 9 steps, evaluations counted) and before its end
    assert first.stopped_by == "max_tokens" and first.step == 7
    resumed = train(budgeted(corpus, tiny_checkpoint, parts, eval_every=4, resume=True))
    assert resumed.resumed_from == 7 and resumed.step == resumed.planned_steps < 40
    assert lrs(parts) == lrs(whole)
    a, b = read_weights(whole), read_weights(parts)
    assert all((a[k] == b[k]).all() for k in a)


def test_the_warning_of_a_model_that_saw_too_little():
    assert undertrained_warning(tokens_seen=300, designed_tokens=1000, tokens_per_s=10,
                                what="the quickstart") is None  # fmt: skip
    warning = undertrained_warning(tokens_seen=40_000, designed_tokens=8_192_000,
                                   tokens_per_s=47, what="the quickstart")  # fmt: skip
    assert warning is not None and "0.04M of the 8.19M tokens" in warning
    assert "--max-minutes 2905" in warning


def test_a_budget_gone_before_the_steps_are_timed_is_a_clear_error(
    tmp_path, corpus, tiny_checkpoint, clock
):
    with pytest.raises(ConfigError) as e:
        train(budgeted(corpus, tiny_checkpoint, tmp_path / "run", max_minutes=3 / 60))
    assert "--max-minutes 0.05 ran out after 3 step(s)" in str(e.value)
    assert "1.0 s a step" in str(e.value)


def test_no_plan_keeps_the_schedule_over_max_steps_and_the_clock_stops_it(
    tmp_path, corpus, tiny_checkpoint, clock
):
    lines: list[str] = []
    run = tmp_path / "run"
    config = budgeted(corpus, tiny_checkpoint, run, plan=False)
    result = train(config, log=lines.append)
    # 15 s at 1 s a step: the clock stops the run after step 15 of the 40 the schedule spans
    assert result.stopped_by == "max_minutes" and result.step == 15
    assert result.planned_steps == 40
    assert not any(line.startswith("plan:") for line in lines)
    lr = lrs(run)
    assert lr[10] == pytest.approx(3e-3)  # still at the peak: WSD decays over steps 32-40
    assert json.loads((run / "codeparrot_checkpoint.json").read_text())["plan"]["planned"] is False


def test_the_fill_ceiling_is_the_given_cap_or_a_few_epochs_of_the_corpus():
    # --max-steps given by hand: a cap, kept
    assert fill_ceiling(recipe_steps=1000, given_steps=300, tokens_per_step=4096,
                        corpus_tokens=1e9) == 300  # fmt: skip
    # 4 epochs of a 12.3M-token corpus at 4,096 tokens a step
    assert fill_ceiling(recipe_steps=1000, given_steps=None, tokens_per_step=4096,
                        corpus_tokens=12_288_000) == 12_000  # fmt: skip
    # never below the recipe; 10x it where the corpus's size is unknown
    assert fill_ceiling(recipe_steps=1000, given_steps=None, tokens_per_step=4096,
                        corpus_tokens=4096) == 1000  # fmt: skip
    assert fill_ceiling(recipe_steps=1000, given_steps=None, tokens_per_step=4096,
                        corpus_tokens=None) == 10_000  # fmt: skip


def test_a_machine_that_would_finish_the_recipe_early_trains_more_steps(
    tmp_path, corpus, tiny_checkpoint, clock
):
    """A recipe of 10 steps, a budget of 15 s at 1 s a step: the run trains the 14 the
    budget holds, annealed at 14; with --max-steps 10 by hand it stops at 10."""
    lines: list[str] = []
    ceiling = fill_ceiling(recipe_steps=10, given_steps=None, tokens_per_step=4 * 64,
                           corpus_tokens=None)  # fmt: skip
    run = tmp_path / "filled"
    config = budgeted(corpus, tiny_checkpoint, run, max_steps=ceiling, recipe_steps=10)
    result = train(config, log=lines.append)
    assert result.step == result.planned_steps == 14 and result.stopped_by == "max_steps"
    # the plan's line counts against the recipe's steps, not the ceiling's 100
    said = [line for line in lines if line.startswith("plan:")]
    assert said and "~14 steps" in said[0] and "1.4x the recipe's 10 (ceiling 100)" in said[0]
    lr = lrs(run)
    assert lr[14] == pytest.approx(0.1 * 3e-3) and lr[11] == pytest.approx(3e-3)
    capped = train(budgeted(corpus, tiny_checkpoint, tmp_path / "capped", max_steps=10))
    assert capped.step == capped.planned_steps == 10
