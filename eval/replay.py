"""No per-call feedback to the sample: record a test's calls once, answer them all at once.

A test calls the candidate again only if its last answer passed the assert, so a sample
that sees its calls one by one learns which of its answers were accepted, and any state
that outlives it (a counter of the kernel, say) carries that to the next sample. Here:

1. For each problem, the test runs once against the reference solution (the prompt and
   its canonical solution), sandboxed like any sample (a problem file is input too). The
   checker records each call's arguments, in order, and its outcome (result, arguments
   changed in place, or the exception raised).
2. Each sample then gets every recorded call in one request and answers them all before
   any is checked. The answers cross back through the sandbox's codec, within a size cap
   set from the reference's (``CAP_FLOOR + CAP_FACTOR`` times its recording). The
   sample's process is killed once it has answered.
3. The test runs in the checker (a process the sample never ran in) against a stand-in
   that replays those answers, in-place changes of the arguments included. Whether call
   j+1 happens never depends on answer j.

A call the reference's run did not make (a test whose calls depend on the answers) stops
the replay, and that sample runs again, its calls answered one by one. :class:`Schedule`
counts these (``fallbacks``). The checker's ``random`` is seeded alike at the recording
and at each replay (``TEST_SEED`` in ``eval/zygote/checker.py``), so a test that draws its
inputs from it makes the same calls both times.

A test whose calls can be read from its text skips step 1: HumanEval+'s own inputs are
already a list (evalplus's plus tests loop over a literal ``inputs`` list, calling the
candidate once on each), and most of HumanEval's tests are asserts on calls of literal
arguments. Their calls are read with ``ast`` in the harness
(:func:`codeparrot.eval.structure.literal_calls`; nothing of the problem file runs
there), and steps 2 and 3 are as above. Any other test is recorded. A problem file's
plus tests are parsed once: their calls are read from the syntax trees made to recognise
the file (:func:`codeparrot.eval.structure.recognise`), for the very text the run checks.

This is how the harness runs by default; ``--feedback`` (``no_feedback=False``) answers
every test's calls one by one, as the test makes them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from codeparrot.eval.recordings import (
    RecordingCache,
    recorded_calls,
    recording_codec,
    recording_key,
)
from codeparrot.eval.sandbox import Verdict
from codeparrot.eval.structure import literal_calls

if TYPE_CHECKING:
    from codeparrot.eval.execution import Program

# The checker's words for these (eval/zygote/codec.py: RECORD, REPLAY, RECORDING).
RECORD = b"record"
REPLAY = b"replay"
RECORDING = "\n\0recording:"
NOT_RECORDED = "not recorded: "
CAP_FLOOR = 64 << 10  # bytes of answers a sample may send whatever the reference's size
CAP_FACTOR = 4
MAX_PLAN = 15 << 20  # the checker reads frames of up to 16 MiB
# The cap on a sample's answers to calls read from its test, with no reference's answers
# to size it by: a right sample of HumanEval+'s /130 answers 76 MiB (sent in parts, one
# frame each, held as bytes by the checker and decoded one by one as the test meets them).
LITERAL_CAP = 256 << 20


def recording_from(result: str) -> bytes | None:
    """The recording in a record job's result; None where the reference did not pass (its
    calls are no sure guide) or the result holds none."""
    verdict, sep, data = result.partition(RECORDING)
    if not sep or verdict != "passed":
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def plan_of(recording: bytes) -> bytes | None:
    """The replay plan of a recording: the answers' cap, then the calls (each one's encoded
    arguments; the checker needs nothing of the reference's answers). None where the
    recording is not one (:func:`~codeparrot.eval.recordings.recorded_calls`)."""
    calls = recorded_calls(recording)
    if calls is None:
        return None
    return plan_of_calls(calls, CAP_FLOOR + CAP_FACTOR * len(recording))


def plan_of_calls(calls: list[bytes], cap: int) -> bytes | None:
    """The replay plan of ``calls`` (each an encoded ``(args tuple, kwargs dict)``) with
    answers capped at ``cap`` bytes; None where it is larger than :data:`MAX_PLAN`."""
    try:
        keys = recording_codec().encode(calls, MAX_PLAN)
    except ValueError:
        return None
    plan = REPLAY + b"%010d" % min(cap, 10**10 - 1) + keys
    return plan if len(plan) <= MAX_PLAN else None


def literal_plan(
    test: str, entry_point: str, read: Mapping[tuple[str, str], Any] | None = None
) -> bytes | None:
    """The replay plan of a test whose calls are read from its syntax tree (nothing is
    run: :func:`~codeparrot.eval.structure.literal_calls`, evalplus's plus tests and
    HumanEval's asserts of literal arguments), answers capped at :data:`LITERAL_CAP`;
    None for any other test. ``read``: calls read already, by (test, entry point), as
    :func:`~codeparrot.eval.structure.recognise` reads them while a problem file is
    recognised (the test is then not parsed again)."""
    if read is not None and (test, entry_point) in read:
        calls = read[test, entry_point]
    elif "candidate" not in test:  # no need to parse it
        return None
    else:
        calls = literal_calls(test, entry_point)
    if not calls:
        return None
    codec = recording_codec()
    try:
        keys = [codec.encode(call, MAX_PLAN) for call in calls]
    except (ValueError, TypeError):
        return None
    return plan_of_calls(keys, LITERAL_CAP)


def plan_from(result: str) -> bytes | None:
    """The replay plan from a record job's result: its recording and the answers' cap.

    None where the reference did not pass (its calls are no sure guide), or made no call.
    """
    recording = recording_from(result)
    return None if recording is None else plan_of(recording)


@dataclass(frozen=True)
class Job:
    # "records" (several references at once), "record" (one), "sample" (replayed where a
    # plan exists) or "fallback"
    kind: str
    index: int  # into the batches for "records", the references for "record", else programs
    program: Program
    plan: bytes = b""


def longest_first(jobs: list[Job]) -> list[Job]:
    """``jobs`` in the order they start: the longest sample of each test first, the longest
    tests first (HumanEval+'s plus tests, say), then the second longest of each, and so on.
    Samples that run to their time limit thus start at once, on as many tests as there are
    workers, and short ones fill the gaps after them; a test's stubs (``return None``,
    which answers at once) come last."""
    by_test: dict[str, list[Job]] = {}
    for job in jobs:
        by_test.setdefault(job.program.test, []).append(job)
    ranked = []
    for test, alike in by_test.items():
        alike.sort(key=lambda job: -len(job.program.program))
        ranked += [(rank, -len(test), len(ranked) + rank, job) for rank, job in enumerate(alike)]
    ranked.sort(key=lambda item: item[:3])
    return [job for *_, job in ranked]


# References recorded in one sandbox run: as many as spread them evenly over the workers
# (each sandbox run costs about as much as a sample's: one run per worker pays it least),
# but at most BATCH, and at most BATCH_BYTES of their code and tests.
BATCH = 64
BATCH_BYTES = 4 << 20


@dataclass
class Schedule:
    """The jobs of one run without per-call feedback, handed out as they become ready.

    ``programs`` with a ``reference`` replay the calls of their test: read from its text
    where they can be (:func:`literal_plan`; ``literal`` counts these problems, whose
    reference never runs), else they wait for their problem's recording: kept from an
    earlier run in ``cache`` (``kept`` counts these), or recorded in this one, up to
    :data:`BATCH` problems per sandbox run, spread evenly over ``workers`` runs where
    fewer are needed (``record_all`` in ``eval/zygote/checker.py``; a run that fails as a whole
    records its problems one at a time instead). The others (and
    all where ``enabled`` is False) run as before. ``read``: tests' calls read already
    (see :func:`literal_plan`). ``fallbacks`` counts the samples whose
    test made a call that was not recorded, ``unrecorded`` those whose reference gave no
    plan (it failed or made no call). ``timeout``: the sandbox's limit, for programs with
    none of their own.
    """

    programs: Sequence[Program]
    enabled: bool = True
    cache: RecordingCache | None = None
    timeout: float = 3.0
    workers: int = 1
    read: Mapping[tuple[str, str], Any] | None = None
    verdicts: list[Verdict | None] = field(init=False)
    fallbacks: int = 0
    unrecorded: int = 0
    kept: int = 0
    literal: int = 0
    _literal: dict[tuple[str, str], bytes | None] = field(default_factory=dict)
    _waiting: dict[tuple, list[int]] = field(default_factory=dict)
    _references: list[tuple] = field(default_factory=list)
    _batches: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.verdicts = [None] * len(self.programs)

    @property
    def recorded(self) -> int:
        """References recorded or kept (one per problem)."""
        return len(self._references) - self.literal

    def read_calls(self) -> None:
        """Read the calls of the tests that state them (:func:`literal_plan`), each test
        once, ahead of :meth:`first` (the harness's own work, done while the sandbox
        starts)."""
        for p in self.programs:
            key = (p.test, p.entry_point)
            if self.enabled and p.reference and p.entry_point and key not in self._literal:
                self._literal[key] = literal_plan(*key, self.read)

    def first(self) -> list[Job]:
        self.read_calls()
        jobs = []
        for i, p in enumerate(self.programs):
            if not (self.enabled and p.reference and p.entry_point):
                jobs.append(Job("sample", i, p))
                continue
            key = (p.reference, p.test, p.entry_point, p.prompt, p.timeout)
            if key not in self._waiting:
                self._waiting[key] = []
                self._references.append(key)
            self._waiting[key].append(i)
        missing = []
        for index, key in enumerate(self._references):
            plan = self._literal[key[1], key[2]]
            if plan is not None:
                self.literal += 1
            else:
                kept = self.cache.get(self._cache_key(key)) if self.cache is not None else None
                plan = None if kept is None else plan_of(kept)
                if plan is None:
                    missing.append(index)
                    continue
                self.kept += 1
            jobs += [Job("sample", i, self.programs[i], plan) for i in self._waiting.pop(key)]
        if missing:  # the codec, imported now (while the zygotes start), not at a recording
            recording_codec()
        return self._batch(missing) + longest_first(jobs)

    @staticmethod
    def _cache_key(key: tuple) -> str:
        reference, test, entry_point, prompt, _ = key
        return recording_key(prompt, reference, test, entry_point)

    def _batch(self, indices: list[int]) -> list[Job]:
        """Record jobs for the references ``indices``, several problems to a job."""
        jobs, items, size, members = [], [], 0, []
        most = min(BATCH, -(-len(indices) // max(1, self.workers)))
        for index in [*indices, None]:
            if index is not None:
                reference, test, entry_point, prompt, timeout = self._references[index]
                item = [prompt, reference, test, entry_point, timeout or self.timeout]
                length = sum(len(part) for part in item[:4])
            if items and (index is None or len(items) == most or size + length > BATCH_BYTES):
                seconds = sum(item[4] for item in items)
                first = self.programs[self._waiting[self._references[members[0]]][0]]
                program = replace(first, program="", test=json.dumps(items), entry_point="",
                                  prompt="", timeout=seconds, reference="")  # fmt: skip
                jobs.append(Job("records", len(self._batches), program))
                self._batches.append(members)
                items, size, members = [], 0, []
            if index is not None:
                items.append(item)
                size += length
                members.append(index)
        return jobs

    def _recorded(self, index: int, result: str) -> list[Job]:
        """The sample jobs a reference's record result makes ready."""
        key = self._references[index]
        waiting = self._waiting.pop(key)
        recording = recording_from(result)
        plan = None if recording is None else plan_of(recording)
        if plan is None:
            self.unrecorded += len(waiting)
            return [Job("sample", i, self.programs[i]) for i in waiting]
        if self.cache is not None:
            self.cache.put(self._cache_key(key), recording)
        return [Job("sample", i, self.programs[i], plan) for i in waiting]

    def done(self, job: Job, verdict: Verdict) -> list[Job]:
        """Take a job's verdict; the jobs it makes ready."""
        if job.kind == "records":
            members = self._batches[job.index]
            try:
                results = json.loads(verdict.result)
            except ValueError:
                results = None
            ok = type(results) is list and len(results) == len(members)
            if not (ok and all(type(r) is str for r in results)):  # record each alone
                return [self._record_job(index) for index in members]
            pairs = zip(members, results, strict=True)
            return [ready for i, r in pairs for ready in self._recorded(i, r)]
        if job.kind == "record":
            return self._recorded(job.index, verdict.result)
        if job.plan and verdict.result.startswith(NOT_RECORDED):
            self.fallbacks += 1
            return [Job("fallback", job.index, job.program)]
        self.verdicts[job.index] = verdict
        return []

    def _record_job(self, index: int) -> Job:
        key = self._references[index]
        program = replace(self.programs[self._waiting[key][0]], program=key[0])
        return Job("record", index, program, RECORD)
