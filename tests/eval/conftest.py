"""The ``way`` fixture: the two ways the sandbox answers a test's calls, for the isolation
tests that must hold on both. "call by call": the checker asks the sample for each
answer, the sample a child of the checker. "replayed": the sample answers every recorded
call at once, alone as PID 1 of its namespaces, and the worker's long-lived checker runs
the test against its answers (mode root's path for a test replayed without per-call
feedback; the other modes replay through a checker of the sample's own).

And after every test: no worker cgroup of this process outlives it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.sandbox import Verdict, WorkerCgroup, cgroup_bases


@dataclass(frozen=True)
class Way:
    name: str

    def program(self, source: str, test: str, reference: str, **kwargs: Any) -> Program:
        """A program of entry point ``f`` whose test is answered this way: "replayed"
        records ``reference`` (a solution that passes ``test``) and replays its calls."""
        replayed = self.name == "replayed"
        return Program(source, test, "f", reference=reference if replayed else "", **kwargs)

    def run(self, programs: Sequence[Program], **kwargs: Any) -> list[Verdict]:
        """``run_programs``; "replayed" checks that every program was replayed (a reference
        that failed its test, or a call it did not make, would quietly fall back to calls
        one by one, and the test would not cover the path it names)."""
        stats: dict[str, int] = {}
        verdicts = run_programs(programs, stats=stats, **kwargs)
        if self.name == "replayed":
            assert stats["fallbacks"] == stats["unrecorded"] == 0, stats
            assert stats["recorded"] + stats["literal"] > 0, stats
        return verdicts


@pytest.fixture(params=["call by call", "replayed"])
def way(request: pytest.FixtureRequest) -> Way:
    return Way(request.param)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder any uid may reach and write, for host files a sandboxed sample must not
    see or touch: pytest's own tmp_path lies under a folder only its owner may enter, which
    would hide it from the sample's uid with or without the sandbox (mode root)."""
    made = Path(tempfile.mkdtemp(prefix="codeparrot-open-", dir="/tmp"))
    try:
        made.chmod(0o777)
        assert all(p.stat().st_mode & 0o001 for p in made.parents), f"{made}: a closed parent"
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_worker_cgroup_outlives_a_test() -> Iterator[None]:
    """However a run ends, its workers' cgroups go with it: checked after every test, by
    the test that left one (which is then removed, so that no later test is blamed)."""
    yield
    kind, bases = cgroup_bases()
    left = [g for base in bases for g in base.glob(f"codeparrot-{os.getpid()}-*")]
    for group in left:
        WorkerCgroup(kind, [group.parent], group.name).remove()
    assert left == [], f"worker cgroups left behind: {left}"
