"""Plan the steps from the machine: lay the schedule over the steps a time budget holds.

A run with ``--max-minutes`` that cannot reach ``--max-steps`` would otherwise stop on the
clock wherever it is: a WSD run at its peak learning rate, never annealed. So the loop
times a few steps (after :data:`SKIP_STEPS` of compilation and warm-up), works out how
many steps the budget holds (:func:`steps_within`), and lays the whole learning-rate
schedule over that number (:func:`decide`). It keeps timing every :data:`MEASURE_STEPS`
steps and shortens the plan if the machine slows down (:func:`replan`; other work on a
shared machine). The plan is kept in the run's state, so a resumed run continues the
same plan and resumes bitwise exactly.

Standard library only: pure functions of the measured figures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from codeparrot.errors import ConfigError

SKIP_STEPS = 2  # compilation and the first allocations: not timed
MEASURE_STEPS = 4  # timed steps behind the plan
# The plan aims at this share of the time left, so that a machine slowed down by other
# work still reaches the end of the schedule before the clock stops it.
MARGIN = 0.95
# Later, the plan is shortened only when the pace falls short of this share of the time left
# (between MARGIN and 1, so that the pace the plan was made at does not shorten it again).
REPLAN_MARGIN = 0.98
# Near the end that share is a few seconds at most: a later replan also keeps this many
# steps' time in hand (at most END_SLACK_SHARE of the budget), so that one slow evaluation
# or a passing slowdown does not leave the clock to stop the run short of the floor.
END_SLACK_STEPS = 4
END_SLACK_SHARE = 0.02
# An evaluation of one batch costs about this many training steps (forward only, no
# backward or optimizer step, not compiled), and a checkpoint save with its state about
# four (the quickstart's recipe on 2 cores: 20 batches and a save paused a run ~14 steps).
EVAL_BATCH_STEPS = 0.5
SAVE_STEPS = 4.0


@dataclass
class StepPlan:
    """The number of steps the learning-rate schedule spans, and how it was decided."""

    steps: int  # the schedule's length: --max-steps, or what the budget holds
    max_steps: int
    planned: bool = False  # a budget was measured (or none applies)
    step_seconds: float | None = None
    budget_minutes: float | None = None
    decided_at: int | None = None  # the step at which it was decided
    # the recipe's own steps where ``max_steps`` is only a ceiling the budget fills up to
    recipe_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load(self, data: dict[str, Any] | None) -> None:
        """Continue a saved plan (None: a state from before plans, or one saved before the
        plan was made: the run plans again)."""
        if not data:
            return
        for key in self.__dataclass_fields__:
            if key in data:
                setattr(self, key, data[key])

    @property
    def shortened(self) -> bool:
        return self.planned and self.steps < self.max_steps

    def describe(self) -> str:
        """The line a user reads about it."""
        minutes = f"{self.budget_minutes:g} minutes"
        pace = f"{self.step_seconds:.2f} s a step" if self.step_seconds else "unmeasured"
        recipe = self.recipe_steps
        if recipe is not None and recipe < self.max_steps:  # max_steps is a ceiling
            if self.steps >= recipe:
                return (
                    f"plan: the budget of {minutes} holds ~{self.steps:,} steps ({pace}), "
                    f"{self.steps / recipe:.1f}x the recipe's {recipe:,} (ceiling "
                    f"{self.max_steps:,}); the schedule is laid over {self.steps:,}"
                )
            return (
                f"plan: this machine reaches ~{self.steps:,} of the recipe's {recipe:,} "
                f"steps in {minutes} ({pace}); the schedule is laid over {self.steps:,}"
            )
        if not self.shortened:
            return (
                f"plan: the budget of {minutes} holds all {self.max_steps:,} steps "
                f"({pace}); the schedule spans them"
            )
        return (
            f"plan: this machine reaches ~{self.steps:,} of {self.max_steps:,} planned steps "
            f"in {minutes} ({pace}); the schedule is laid over {self.steps:,}"
        )


def evaluations_between(done: int, end: int, eval_every: int) -> int:
    """In-loop evaluations after step ``done`` and before ``end`` (none at ``end`` itself:
    the last one runs after the loop, outside the budget)."""
    if eval_every <= 0 or end <= done + 1:
        return 0
    return (end - 1) // eval_every - done // eval_every


def steps_within(
    *,
    budget_s: float,
    elapsed_s: float,
    done: int,
    step_s: float,
    eval_every: int,
    eval_s: float,
    margin: float = MARGIN,
    slack_s: float = 0.0,
) -> int:
    """The step count (from 0) the budget reaches: ``done`` steps took ``elapsed_s``, each
    more takes ``step_s``, each evaluation on the way ``eval_s``; ``margin`` of the time
    left is used, less ``slack_s``."""
    available = max(0.0, (budget_s - elapsed_s) * margin - slack_s)
    per_step = step_s + (eval_s / eval_every if eval_every > 0 else 0.0)
    end = done + math.floor(available / per_step)

    def cost(n: int) -> float:
        return (n - done) * step_s + evaluations_between(done, n, eval_every) * eval_s

    while cost(end + 1) <= available:
        end += 1
    while end > done and cost(end) > available:
        end -= 1
    return end


def decide(
    plan: StepPlan,
    *,
    budget_minutes: float,
    elapsed_s: float,
    done: int,
    step_s: float,
    eval_every: int,
    eval_batches: int,
    warmup_steps: int,
) -> StepPlan:
    """Fill ``plan`` from the measured pace; a budget that cannot hold the learning-rate
    warm-up is a :class:`ConfigError` naming ``--max-minutes``."""
    eval_s = step_s * (EVAL_BATCH_STEPS * eval_batches + SAVE_STEPS)
    end = steps_within(
        budget_s=budget_minutes * 60, elapsed_s=elapsed_s, done=done, step_s=step_s,
        eval_every=eval_every, eval_s=eval_s,
    )  # fmt: skip
    needed = max(warmup_steps + 1, done + 1)
    if end < needed:
        minutes = (elapsed_s + (needed - done) * step_s / MARGIN) / 60
        raise ConfigError(
            f"--max-minutes {budget_minutes:g} is too short for this machine: a step takes "
            f"{step_s:.2f} s here, so the budget holds ~{end} steps, fewer than the "
            f"{warmup_steps} of the learning-rate warm-up; give at least --max-minutes "
            f"{math.ceil(minutes * 10) / 10:g} (or fewer --warmup-steps)"
        )
    plan.steps = min(end, plan.max_steps)
    plan.planned = True
    plan.step_seconds = step_s
    plan.budget_minutes = budget_minutes
    plan.decided_at = done
    return plan


def replan(
    plan: StepPlan,
    *,
    budget_minutes: float,
    elapsed_s: float,
    done: int,
    step_s: float,
    eval_every: int,
    eval_batches: int,
    lengthen: bool = False,
) -> bool:
    """Shorten ``plan`` when the pace measured now cannot reach its end within the budget
    (the machine slowed down); True if it changed. Lengthen it (up to ``max_steps``) only
    where ``lengthen`` says the learning rate would not move (WSD's stable phase): once the
    decay has begun, a longer plan would raise it again."""
    eval_s = step_s * (EVAL_BATCH_STEPS * eval_batches + SAVE_STEPS)
    end = steps_within(
        budget_s=budget_minutes * 60, elapsed_s=elapsed_s, done=done, step_s=step_s,
        eval_every=eval_every, eval_s=eval_s, margin=REPLAN_MARGIN,
        slack_s=min(END_SLACK_STEPS * step_s, END_SLACK_SHARE * budget_minutes * 60),
    )  # fmt: skip
    end = min(max(end, done + 1), plan.max_steps)
    if end == plan.steps or (end > plan.steps and not lengthen):
        return False
    plan.steps = end
    plan.step_seconds = step_s
    return True


# A budget that holds more than the recipe's steps trains more, up to this many passes
# over the training split: repeated data is worth almost as much as fresh data for up to
# about four epochs (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models"),
# and little beyond.
MAX_FILL_EPOCHS = 4.0
# Where the corpus's size is not known, the budget may stretch the recipe this many times.
MAX_FILL_FACTOR = 10


def fill_ceiling(
    *,
    recipe_steps: int,
    given_steps: int | None,
    tokens_per_step: int,
    corpus_tokens: float | None,
) -> int:
    """The ``--max-steps`` a budgeted run is planned under: ``given_steps`` where the user
    gave them (a cap), else room for the budget to fill: the steps of
    :data:`MAX_FILL_EPOCHS` passes over ``corpus_tokens`` (at least ``recipe_steps``), or
    :data:`MAX_FILL_FACTOR` times the recipe where the corpus's size is unknown. The
    planner (:func:`decide`) lays the schedule over what the budget holds, up to it."""
    if recipe_steps < 1 or tokens_per_step < 1:
        raise ValueError(f"recipe_steps and tokens_per_step must be positive, got "
                         f"{recipe_steps} and {tokens_per_step}")  # fmt: skip
    if given_steps is not None:
        return given_steps
    if not corpus_tokens or corpus_tokens <= 0:
        return recipe_steps * MAX_FILL_FACTOR
    return max(recipe_steps, math.floor(MAX_FILL_EPOCHS * corpus_tokens / tokens_per_step))


def undertrained_warning(
    *, tokens_seen: int, designed_tokens: int, tokens_per_s: float, what: str
) -> str | None:
    """A newcomer's warning when the model saw less than a quarter of the tokens ``what``
    was designed for (None otherwise), with what to do about it."""
    if designed_tokens <= 0 or tokens_seen * 4 >= designed_tokens:
        return None
    share = tokens_seen / designed_tokens
    needed = math.ceil(designed_tokens / max(tokens_per_s, 1e-9) / 60)
    return (
        f"WARNING: this machine trained the model on only {tokens_seen / 1e6:.2f}M of the "
        f"{designed_tokens / 1e6:.2f}M tokens {what} is designed for ({share:.0%}), so it has "
        f"learnt little and its scores say little. At {tokens_per_s:,.0f} tokens/s it needs "
        f"about {needed:,} minutes: give it more time (--max-minutes {needed}), "
        "or choose a smaller --preset where there is one"
    )


__all__ = [
    "MAX_FILL_EPOCHS",
    "MAX_FILL_FACTOR",
    "MEASURE_STEPS",
    "SKIP_STEPS",
    "StepPlan",
    "decide",
    "fill_ceiling",
    "replan",
    "steps_within",
    "undertrained_warning",
]
