"""Per-task time limits as evalplus sets them: scaled by the reference solution's own time.

A flat limit (``--timeout``) turns slow-but-right samples into failures on a slow or busy
CPU, and a verdict then depends on the machine (evalplus issue #5). evalplus instead
gives each test input ``max(min_time_limit, gt_time_limit_factor x the reference's time
on it)`` (defaults 1.0 s and 4.0 in evalplus 0.3.1, the reference timed once, in the
evaluator's own process) and caps a task at ``EVALPLUS_TIMEOUT_PER_TASK`` (60 s) plus
one. Our checker runs a task's whole test set as one program, so the same rule applies
to the test set: the reference solution (the task's ``canonical_solution``) is first run
through the same sandbox, and each (task, base or plus tests) gets
``min(ceiling, max(floor, factor x its time))``. The floor is 4 s, not 1 s: it is per
test set, where evalplus's total is at least 1 s per input. The two differ at the edges
(``bench/evalplus_agree.py``): a sample slow on every input by more than the factor fails
here and can pass evalplus (each input under 1 s); one slow on a single heavy input can
fail evalplus's limit for that input (4x one noisy measurement) and pass here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from codeparrot.eval.execution import Program

logger = logging.getLogger(__name__)

EVALPLUS_MIN_TIME_LIMIT = 4.0  # per test set (evalplus 0.3.1: 1.0 s per input)
EVALPLUS_GT_TIME_LIMIT_FACTOR = 4.0  # evalplus's DEFAULT_GT_TIME_LIMIT_FACTOR
TASK_CEILING = 60.0  # evalplus's EVALPLUS_TIMEOUT_PER_TASK default

Key = tuple[str, str]  # (task id, "base" or "plus")


def limit_for(seconds: float, floor: float, factor: float, ceiling: float = TASK_CEILING) -> float:
    """The time limit of a test set whose reference solution took ``seconds``."""
    return min(ceiling, max(floor, factor * seconds))


def reference_programs(problems: dict[str, dict[str, Any]]) -> tuple[list[Key], list[Program]]:
    """Each problem's canonical solution against its base tests, and its plus tests if any."""
    from codeparrot.eval.scoring import check_program, program_text

    keys, programs = [], []
    for task_id, problem in problems.items():
        text = program_text(problem, problem["canonical_solution"])
        for kind, test_key in (("base", "test"), ("plus", "plus_test")):
            if problem.get(test_key):
                keys.append((task_id, kind))
                programs.append(check_program(problem, text, problem[test_key], TASK_CEILING))
    return keys, programs


def task_time_limits(
    problems: dict[str, dict[str, Any]],
    run: Callable[[Sequence[Program]], Sequence[Any]],
    *,
    floor: float = EVALPLUS_MIN_TIME_LIMIT,
    factor: float = EVALPLUS_GT_TIME_LIMIT_FACTOR,
    ceiling: float = TASK_CEILING,
) -> tuple[dict[Key, float], dict[str, Any]]:
    """The limit of each (task id, base/plus) and the report of how it was set.

    ``run`` executes programs and returns verdicts (``passed``, ``result``, ``duration``)
    in order: the sandbox's :func:`~codeparrot.eval.execution.run_programs`, or a fake
    timer in tests. A reference solution that fails keeps the limit its time gives
    (it is listed in the report: the task's tests or the sandbox need a look).
    """
    keys, programs = reference_programs(problems)
    verdicts = run(programs)
    limits, seconds, failures = {}, {}, []
    for key, verdict in zip(keys, verdicts, strict=True):
        seconds[key] = round(verdict.duration, 4)
        limits[key] = round(limit_for(verdict.duration, floor, factor, ceiling), 3)
        if not verdict.passed:
            failures.append(f"{key[0]} ({key[1]}): {verdict.result}")
    if failures:
        logger.warning("%d reference solutions failed: %s", len(failures), "; ".join(failures[:5]))
    report = {
        "mode": "per-task",
        "min_time_limit": floor,
        "gt_time_limit_factor": factor,
        "ceiling": ceiling,
        "reference_seconds": {f"{t} ({k})": s for (t, k), s in seconds.items()},
        "limits": {f"{t} ({k})": s for (t, k), s in limits.items()},
        "reference_failures": failures,
    }
    return limits, report
