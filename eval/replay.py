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

A call the reference's run did not make (a test whose calls depend on the answers, or
on unseeded randomness) stops the replay, and that sample runs again as before, its
calls answered one by one. :class:`Schedule` counts these (``fallbacks``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from codeparrot.eval.sandbox import Verdict

if TYPE_CHECKING:
    from codeparrot.eval.execution import Program

# The checker's words for these (eval/_zygote.py: RECORD, REPLAY, RECORDING).
RECORD = b"record"
REPLAY = b"replay"
RECORDING = "\n\0recording:"
NOT_RECORDED = "not recorded: "
CAP_FLOOR = 64 << 10  # bytes of answers a sample may send whatever the reference's size
CAP_FACTOR = 4
MAX_PLAN = 15 << 20  # the checker reads frames of up to 16 MiB


def plan_from(result: str) -> bytes | None:
    """The replay plan from a record job's result: its recording and the answers' cap.

    None where the reference did not pass (its calls are no sure guide), or made no call.
    """
    verdict, sep, data = result.partition(RECORDING)
    if not sep or verdict != "passed":
        return None
    try:
        recording = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    cap = CAP_FLOOR + CAP_FACTOR * len(recording)
    plan = REPLAY + b"%010d" % min(cap, 10**10 - 1) + recording
    return plan if len(plan) <= MAX_PLAN else None


@dataclass(frozen=True)
class Job:
    kind: str  # "record", "sample" (replayed where a plan exists) or "fallback"
    index: int  # into the references for "record", into the programs otherwise
    program: Program
    plan: bytes = b""


@dataclass
class Schedule:
    """The jobs of one run without per-call feedback, handed out as they become ready.

    ``programs`` with a ``reference`` wait for their problem's record job; the others
    (and all where ``enabled`` is False) run as before. ``fallbacks`` counts the samples
    whose test made a call that was not recorded, ``unrecorded`` those whose reference
    gave no plan (it failed or made no call).
    """

    programs: Sequence[Program]
    enabled: bool = True
    verdicts: list[Verdict | None] = field(init=False)
    fallbacks: int = 0
    unrecorded: int = 0
    _waiting: dict[tuple, list[int]] = field(default_factory=dict)
    _references: list[tuple] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.verdicts = [None] * len(self.programs)

    @property
    def recorded(self) -> int:
        """References recorded (one per problem)."""
        return len(self._references)

    def first(self) -> list[Job]:
        jobs = []
        for i, p in enumerate(self.programs):
            if not (self.enabled and p.reference and p.entry_point):
                jobs.append(Job("sample", i, p))
                continue
            key = (p.reference, p.test, p.entry_point, p.prompt, p.timeout)
            if key not in self._waiting:
                self._waiting[key] = []
                self._references.append(key)
                reference = replace(p, program=p.reference)
                jobs.append(Job("record", len(self._references) - 1, reference, RECORD))
            self._waiting[key].append(i)
        return jobs

    def done(self, job: Job, verdict: Verdict) -> list[Job]:
        """Take a job's verdict; the jobs it makes ready."""
        if job.kind == "record":
            plan = plan_from(verdict.result)
            waiting = self._waiting.pop(self._references[job.index])
            if plan is None:
                self.unrecorded += len(waiting)
                return [Job("sample", i, self.programs[i]) for i in waiting]
            return [Job("sample", i, self.programs[i], plan) for i in waiting]
        if job.plan and verdict.result.startswith(NOT_RECORDED):
            self.fallbacks += 1
            return [Job("fallback", job.index, job.program)]
        self.verdicts[job.index] = verdict
        return []
