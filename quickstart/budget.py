"""The quickstart's training budget: what its total time leaves once the other steps are paid.

``make quickstart`` is promised to end within ``--total-minutes`` (15) on a 2-core machine,
its install included. Training is the one step whose length can give: so it gets the total,
less what the steps before it took (measured: the install, the corpus, the tokenizer), less
an estimate of what is still to come outside the training loop (tokenizing the corpus into
shards, building the model, the last save, the evaluations), less a margin. The estimate is
the time those steps take on the machine the quickstart was tuned on, scaled by how much
slower this machine ran the tokenizer step (never scaled down: a faster machine keeps the
reference figures as a margin). A slow machine thus trains for fewer minutes, and the step
planner (training/plan.py) lays the schedule over the steps those minutes hold.

Standard library only: pure functions of the measured figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Seconds on the machine the quickstart was tuned on (2 cores, AMD EPYC Zen 4; a fresh
# clone's `make quickstart`, RESULTS.md): the tokenizer step (training it and its report),
# the train step outside its loop (tokenizing the corpus into shards, building the model,
# the precision probe, the final evaluation and save, the loss on HumanEval's solutions),
# and the two evaluations at their default sizes.
REFERENCE_TOKENIZER_S = 15.0
REFERENCE_TRAIN_OVERHEAD_S = 55.0
REFERENCE_HUMANEVAL_S = 70.0  # 164 problems x 2 samples
REFERENCE_HUMANEVAL_SAMPLES = 164 * 2
REFERENCE_INFILL_S = 18.0  # 200 single-line tasks
REFERENCE_INFILL_TASKS = 200
MARGIN_S = 60.0  # for a machine that slows down after the budget is set
# Below this the run cannot even measure its pace: on a machine slowed to a third (2 cores
# shared with other work, fp32), compiling and the first step took 187 s and the planner's
# timed steps come after it. A slow machine runs over the total, with a warning, rather
# than stop before it has trained.
MIN_TRAINING_MINUTES = 5.0


@dataclass(frozen=True)
class TrainingBudget:
    """The minutes training gets, and the figures behind them."""

    minutes: float
    total_minutes: float
    elapsed_s: float  # spent before training (install included where it was timed)
    reserve_s: float  # kept for what follows outside the training loop, margin included
    slowness: float  # this machine's tokenizer step against the reference's (at least 1)
    over: bool = False  # the floor applies: the quickstart will run over its total

    def describe(self) -> str:
        """The line a user reads before training starts."""
        line = (
            f"budget: {self.total_minutes:g} minutes in all; {self.elapsed_s / 60:.1f} spent "
            f"so far, {self.reserve_s / 60:.1f} kept for what follows (evaluations, saving, "
            f"a margin; this machine ran the tokenizer step at {self.slowness:.1f}x the "
            f"reference's time): training gets {self.minutes:.1f} minutes"
        )
        if self.over:
            line += (
                f" (the floor: the quickstart will run over its {self.total_minutes:g} "
                "minutes; give more with --total-minutes)"
            )
        return line


def slowness(tokenizer_s: float | None) -> float:
    """How many times slower than the reference machine this one ran the tokenizer step
    (1 where it was faster or not timed)."""
    if tokenizer_s is None or tokenizer_s <= 0:
        return 1.0
    return max(1.0, tokenizer_s / REFERENCE_TOKENIZER_S)


def reserve_seconds(
    *, slowness: float, humaneval_samples: int, infill_tasks: int, margin_s: float = MARGIN_S
) -> float:
    """Seconds to keep for the work after the training budget is set and outside its loop
    (``humaneval_samples`` and ``infill_tasks`` 0 where those steps do not run)."""
    evals = (
        REFERENCE_HUMANEVAL_S * humaneval_samples / REFERENCE_HUMANEVAL_SAMPLES
        + REFERENCE_INFILL_S * infill_tasks / REFERENCE_INFILL_TASKS
    )
    return (REFERENCE_TRAIN_OVERHEAD_S + evals) * slowness + margin_s


def training_budget(
    *,
    total_minutes: float,
    elapsed_s: float,
    tokenizer_s: float | None,
    humaneval_samples: int,
    infill_tasks: int,
    floor_minutes: float = MIN_TRAINING_MINUTES,
) -> TrainingBudget:
    """The minutes training gets out of ``total_minutes`` when ``elapsed_s`` are spent
    (at least ``floor_minutes``: a GPU, which compiles and times its steps in seconds,
    passes a lower floor than a CPU's)."""
    factor = slowness(tokenizer_s)
    reserve = reserve_seconds(
        slowness=factor, humaneval_samples=humaneval_samples, infill_tasks=infill_tasks
    )
    minutes = (total_minutes * 60 - max(0.0, elapsed_s) - reserve) / 60
    over = minutes < floor_minutes
    return TrainingBudget(
        minutes=floor_minutes if over else math.floor(minutes * 100) / 100,
        total_minutes=total_minutes,
        elapsed_s=elapsed_s,
        reserve_s=reserve,
        slowness=factor,
        over=over,
    )


__all__ = [
    "MIN_TRAINING_MINUTES",
    "TrainingBudget",
    "reserve_seconds",
    "slowness",
    "training_budget",
]
