"""Score samples of any task in the sandbox: base tests, plus tests, exact match; one row each.

A result row is the sample's own record (every field it came with) followed by the
verdict: ``completion_id``, ``passed`` and ``result`` (the base tests), ``duration``, and
where the task has them ``plus_passed`` / ``plus_result`` and ``exact_match`` (infilling).

``plus_passed`` is the verdict of the plus test alone, as evalplus scores HumanEval+ and
MBPP+: that test holds the base inputs as well as evalplus's (deduplicated), checked with
evalplus's oracle (floats within its tolerance). ``passed`` is the task's own base test
as its benchmark runs it (HumanEval's asserts, some of which compare floats exactly), so a
sample within evalplus's tolerance can pass the plus test and fail the base test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from codeparrot.eval.data import Sample
from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.infill import exact_match, infilled
from codeparrot.eval.recordings import RecordingCache
from codeparrot.eval.sandbox import Isolation, Limits, RuntimeCopy, Verdict
from codeparrot.eval.structure import called

if TYPE_CHECKING:
    from codeparrot.eval.startup import SandboxStart


def program_text(
    problem: dict[str, Any], completion: str, *, sanitize: bool = False, whole: bool = False
) -> str:
    """The untrusted program of a completion: prompt + completion, or when infilling
    prompt + middle + suffix (:func:`codeparrot.eval.infill.infilled`); with ``whole``,
    ``completion`` is the whole program (evalplus's ``solution``)."""
    if whole:
        text = completion
    elif "suffix" in problem:
        text = infilled(problem["prompt"], completion, problem["suffix"])
    else:
        text = problem["prompt"] + completion
    if sanitize:
        from codeparrot.eval.sanitize import names_used
        from codeparrot.eval.sanitize import sanitize as extract

        # MBPP names no entry point: its tests call the functions they need by name.
        entry = problem["entry_point"]
        text = extract(text, [entry] if entry else sorted(names_used(problem["test"])))
    return text


def check_program(
    problem: dict[str, Any],
    program: str,
    test: str,
    timeout: float | None = None,
    *,
    reference: bool = False,
) -> Program:
    """``program`` checked by ``test``; with an entry point the test's ``check`` is called on it.

    ``reference``: the problem's prompt and canonical solution record the test's calls
    (:mod:`codeparrot.eval.replay`), where it has both and is no infilling problem.
    """
    entry = problem["entry_point"]
    recorded = reference and entry and problem.get("canonical_solution") and "suffix" not in problem
    return Program(
        program=program,
        test=called(test, entry) if entry else test,
        entry_point=entry,
        prompt=problem.get("setup", ""),
        timeout=timeout,
        reference=problem["prompt"] + problem["canonical_solution"] if recorded else "",
    )


def score_samples(
    samples: Sequence[Sample],
    problems: dict[str, dict[str, Any]],
    *,
    sanitize: bool = False,
    workers: int | None = None,
    limits: Limits | None = None,
    isolation: Isolation | None = None,
    progress: bool = False,
    secret_dirs: tuple[str, ...] | None = None,
    time_limits: dict[tuple[str, str], float] | None = None,
    no_feedback: bool = True,
    stats: dict[str, int] | None = None,
    recordings: RecordingCache | None = None,
    runtime: RuntimeCopy | None = None,
    start: SandboxStart | None = None,
    read_calls: Mapping[tuple[str, str], Any] | None = None,
) -> list[dict[str, Any]]:
    """One result row per sample, in order. Needs permission checked by the caller.

    ``no_feedback``, ``stats``, ``recordings``, ``runtime``, ``start``, ``read_calls``:
    see :func:`~codeparrot.eval.execution.run_programs`.

    ``time_limits``: seconds per (task id, ``"base"`` or ``"plus"``) test set, where a
    limit of its own replaces ``limits.timeout`` (see :mod:`codeparrot.eval.timing`).
    """
    texts = [
        program_text(problems[s.task_id], s.completion, sanitize=sanitize, whole=s.whole)
        for s in samples
    ]
    programs, plus_index = _programs(samples, problems, texts, time_limits or {}, no_feedback)
    verdicts = run_programs(
        programs,
        workers=workers,
        limits=limits,
        isolation=isolation,
        progress=progress,
        secret_dirs=secret_dirs,
        no_feedback=no_feedback,
        stats=stats,
        recordings=recordings,
        runtime=runtime,
        start=start,
        read_calls=read_calls,
    )
    rows = []
    for i, s in enumerate(samples):
        plus = verdicts[plus_index[i]] if i in plus_index else None
        row = _row(s, problems[s.task_id], verdicts[i], plus)
        if sanitize:
            row["sanitized"] = texts[i]
        rows.append(row)
    return rows


def _programs(
    samples: Sequence[Sample],
    problems: dict[str, dict[str, Any]],
    texts: list[str],
    time_limits: dict[tuple[str, str], float],
    no_feedback: bool,
) -> tuple[list[Program], dict[int, int]]:
    """Every sample's base check in sample order, then the plus checks; ``plus_index`` maps
    a sample's index to its plus check's."""
    programs = [
        check_program(
            problems[s.task_id],
            text,
            problems[s.task_id]["test"],
            time_limits.get((s.task_id, "base")),
            reference=no_feedback,
        )
        for s, text in zip(samples, texts, strict=True)
    ]
    plus_index: dict[int, int] = {}
    for i, (s, text) in enumerate(zip(samples, texts, strict=True)):
        problem = problems[s.task_id]
        if problem.get("plus_test"):
            plus_index[i] = len(programs)
            limit = time_limits.get((s.task_id, "plus"))
            programs.append(
                check_program(problem, text, problem["plus_test"], limit, reference=no_feedback)
            )
    return programs, plus_index


def _row(
    sample: Sample, problem: dict[str, Any], verdict: Verdict, plus: Verdict | None
) -> dict[str, Any]:
    """The result row of one sample, from its base verdict and its plus verdict (or None)."""
    text = "solution" if sample.whole else "completion"
    row = dict(sample.record) | {
        "task_id": sample.task_id,
        "completion_id": sample.completion_id,
        text: sample.completion,
        "passed": verdict.passed,
        "result": verdict.result,
        "duration": round(verdict.duration, 6),
    }
    if plus is not None:
        row["plus_passed"] = plus.passed
        row["plus_result"] = plus.result
        row["duration"] = round(verdict.duration + plus.duration, 6)
    if "suffix" in problem:
        row["exact_match"] = exact_match(sample.completion, problem["canonical_solution"])
    return row
