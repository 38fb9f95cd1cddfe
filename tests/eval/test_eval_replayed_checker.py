"""The replayed path of mode root: the sample runs alone (PID 1 of its namespaces) and
answers every recorded call; the zygote reads its answers and the worker's long-lived
checker runs the test against them. Here: that path is taken, the checker's lifecycle
(killed by its test, past its deadline, restarted), the answers' cap, and what a sample
could leave for the next through anything this path shares."""

from __future__ import annotations

import pytest

from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.recordings import recording_codec
from codeparrot.eval.replay import MAX_PLAN, plan_of_calls
from codeparrot.eval.sandbox import Isolation, Limits, Sandbox, detect_isolation

GOOD = "def f(x):\n    return x + 1\n"
WRONG = "def f(x):\n    return 0\n"
# The count of checks the checker's process has run (the test's globals are fresh at every
# check, its modules are not): shows which samples one checker judged.
COUNTED = "import sys\nCOUNT = sys.__dict__.setdefault('checks', [0])\nCOUNT[0] += 1\n"
COUNTED_TEST = COUNTED + "assert f(1) == 2, COUNT[0]\n"


@pytest.fixture(scope="module")
def root() -> Isolation:
    isolation = detect_isolation()
    if isolation.mode != "root":
        pytest.skip("the sample runs alone, judged by the worker's checker, in mode root only")
    return isolation


def plan(cap: int = 64 << 10) -> bytes:
    """A replay plan of the one call ``f(1)``, its answers capped at ``cap`` bytes."""
    made = plan_of_calls([recording_codec().encode(((1,), {}), MAX_PLAN)], cap)
    assert made is not None
    return made


def test_a_replayed_sample_runs_alone_as_pid_1_of_its_namespace(root):
    """Call by call the checker is PID 1 and the sample its child; replayed, the sample is
    alone: what the isolation tests' "replayed" variants rely on."""
    source = "import os\ndef f(x):\n    return os.getpid()\n"
    with Sandbox(root, slot=11) as box:
        assert box.run(source, "assert f(1) == 1, f(1)", "f", plan=plan()).passed
        assert box.run(source, "assert f(1) == 2, f(1)", "f").passed


def test_a_test_that_kills_its_checker_costs_only_its_own_verdict(root):
    """A test (trusted, but the sample's answers steer it) that ends the checker's process
    gets no verdict from it (nor from the fresh checker it is retried in); the worker's
    next sample gets a fresh checker."""
    test = "import os\nif f(1) == 'exit':\n    os._exit(0)\n" + COUNTED_TEST
    exits = "def f(x):\n    return 'exit'\n"
    with Sandbox(root, slot=12) as box:
        results = [box.run(source, test, "f", plan=plan()).result for source in (WRONG, WRONG)]
        assert results == ["failed: AssertionError 1", "failed: AssertionError 2"]  # one checker
        verdict = box.run(exits, test, "f", plan=plan())
        assert verdict.result == "failed: the checker exited without a verdict"
        assert box.run(WRONG, test, "f", plan=plan()).result == "failed: AssertionError 1"
        assert box.run(GOOD, test, "f", plan=plan()).passed


def test_a_checker_past_the_deadline_is_replaced(root):
    test = "if f(1) == 'loop':\n    while True:\n        pass\n" + COUNTED_TEST
    loops = "def f(x):\n    return 'loop'\n"
    with Sandbox(root, slot=13, limits=Limits(timeout=1.0)) as box:
        assert box.run(WRONG, test, "f", plan=plan()).result == "failed: AssertionError 1"
        verdict = box.run(loops, test, "f", plan=plan())
        assert verdict.result == "timed out"
        assert verdict.duration < 1.5, verdict.duration
        assert box.run(WRONG, test, "f", plan=plan()).result == "failed: AssertionError 1"
        assert box.run(GOOD, test, "f", plan=plan()).passed


def test_a_check_ending_in_an_error_of_the_test_itself_retires_its_checker(root):
    """Any exception but a check's own (an assert, the sample's failure, a call not
    recorded) may have left the checker in a state of its own: the next check runs in a
    fresh one."""
    test = (
        COUNTED
        + "answer = f(1)\nif answer == 'key':\n    {}[answer]\nassert answer == 2, COUNT[0]\n"
    )
    keys = "def f(x):\n    return 'key'\n"
    with Sandbox(root, slot=14) as box:
        assert box.run(WRONG, test, "f", plan=plan()).result == "failed: AssertionError 1"
        assert box.run(keys, test, "f", plan=plan()).result == "failed: KeyError: 'key'"
        assert box.run(WRONG, test, "f", plan=plan()).result == "failed: AssertionError 1"


def test_answers_beyond_the_cap_fail_and_a_flood_is_cut_short(root):
    """The zygote reads at most the cap and its slack (and a byte more); the checker finds
    the cap passed. A sample that writes without end is cut off, not waited for."""
    test = "assert f(1) == 'a'\n"
    sizes = (5_000, 500_000)
    flood = "def f(x):\n    return 'a' * 10**7\n"
    limits = Limits(timeout=10.0, memory=1 << 30)
    with Sandbox(root, slot=15, limits=limits) as box:
        assert box.run("def f(x):\n    return 'a'\n", test, "f", plan=plan(1000)).passed
        for size in sizes:
            verdict = box.run(f"def f(x):\n    return 'a' * {size}\n", test, "f", plan=plan(1000))
            assert verdict.result == "failed: answers larger than the cap of 1000 bytes"
        verdict = box.run(flood, test, "f", plan=plan(1000))
        assert verdict.result == "failed: answers larger than the cap of 1000 bytes"
        assert verdict.duration < 5.0, verdict.duration
        # a writer without end on every descriptor it holds, the answers' pipe among them:
        # only a reader that stops at the cap ends this one (one reading to the end waits)
        endless = (
            "import os\ndef f(x):\n    while True:\n        for fd in range(3, 16):\n"
            "            try:\n                os.write(fd, b'a' * 65536)\n"
            "            except OSError:\n                pass\n"
        )
        verdict = box.run(endless, test, "f", plan=plan(1000))
        assert verdict.result == "failed: answers larger than the cap of 1000 bytes"
        assert verdict.duration < 5.0, verdict.duration


def test_a_sample_that_keeps_running_after_answering_still_gets_its_verdict(root):
    """A thread or a child left running holds no verdict up: the sample's namespace dies
    with it once it has answered (PID 1's exit ends every process of the namespace, and
    with them their copies of the answers' pipe)."""
    lingering = (
        "import os, threading, time\n"
        "def f(x):\n"
        "    threading.Thread(target=time.sleep, args=(3600,)).start()\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(3600)\n"
        "    return x + 1\n"
    )
    with Sandbox(root, slot=16, limits=Limits(timeout=5.0)) as box:
        verdict = box.run(lingering, "assert f(1) == 2\n", "f", plan=plan())
        assert verdict.passed, verdict.result
        assert verdict.duration < 2.0, verdict.duration


def test_verdicts_are_the_same_replayed_and_call_by_call(root):
    test = "assert f(1) == 2\nassert f(2) == 3\n"
    sources = [
        GOOD,
        WRONG,
        "def f(x):\n    raise ValueError(x)\n",
        "class Anything:\n    def __eq__(self, other):\n        return True\n"
        "def f(x):\n    return Anything()\n",
        "class Int(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\ndef f(x):\n    return Int(-1)\n",
        "import os\ndef f(x):\n    os._exit(0)\n",
        "import sys\ndef f(x):\n    sys.exit(0)\n",
        "def f(x):\n    return x + 1 if x == 1 else None\n",
    ]
    programs = [Program(source, test, "f", reference=GOOD) for source in sources]
    stats: dict[str, int] = {}
    replayed = run_programs(programs, workers=2, isolation=root, stats=stats)
    assert stats["fallbacks"] == stats["unrecorded"] == 0 and stats["recorded"] == 1, stats
    by_call = run_programs(programs, workers=2, isolation=root, no_feedback=False)
    assert [v.result for v in replayed] == [v.result for v in by_call]
    assert [v.passed for v in replayed] == [True] + [False] * (len(sources) - 1)


# What a sample can read of the memory it was forked with (Z's, freed blocks included):
# the readable pages of the heap below the break and within 32 MiB of a few objects
# (found by writing a byte of each to a file: EFAULT where unreadable), searched in place
# (memmem: no copy) for MARK, the hits but its own needle counted.
MARK = b"CODEPARROT-LEAKS"
SCANNER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_long]
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
libc.memmem.restype = ctypes.c_void_p
libc.memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
PAGE = 4096

def f(x):
    needle = ctypes.create_string_buffer(bytes(b ^ 1 for b in XORED), len(XORED))
    own = ctypes.addressof(needle)
    fd = os.open('probe', os.O_RDWR | os.O_CREAT, 0o600)  # in its own working folder

    def readable(address):
        os.lseek(fd, 0, 0)
        return libc.write(fd, address, 1) == 1

    top = libc.sbrk(0) & ~(PAGE - 1)
    bottom = top
    while readable(bottom - PAGE):
        bottom -= PAGE
    regions = [(bottom, top)]
    for seed in {id(x), id(f), id(os), id(ctypes), id(bytearray(1000)), id(bytearray(1 << 18))}:
        start = None
        base = seed & ~(PAGE - 1)
        for address in range(max(base - (32 << 20), PAGE), base + (32 << 20), PAGE):
            if readable(address):
                start = address if start is None else start
            elif start is not None:
                regions.append((start, address))
                start = None
    hits = set()
    for low, high in regions:
        while low < high:
            hit = libc.memmem(low, high - low, own, len(XORED))
            if not hit:
                break
            hits.add(hit)
            low = hit + 1
    return len(hits - {own})
""".replace("XORED", repr(bytes(b ^ 1 for b in MARK)))
# Its answers: MARK over and over, made at run time (the program's text holds no copy).
ANSWERS = f"M = ''.join(map(chr, {list(MARK)!r}))\ndef f(x):\n    return M * SIZE\n"


@pytest.mark.parametrize("replayed", [False, True], ids=["call by call", "replayed"])
def test_what_a_sample_answered_is_not_in_the_memory_of_the_next_sample(root, replayed):
    """The zygote, which every sample of its worker is forked from, reads a replayed
    sample's answers: were they left in its heap (freed, not cleared), the next sample
    could read what the previous answered, and so carry any state from sample to sample."""
    how = plan(1 << 20) if replayed else b""
    with Sandbox(root, slot=17, limits=Limits(timeout=10.0)) as box:
        assert box.run(SCANNER, "assert f(1) == 0, f(1)", "f", plan=how).passed
        for size in (300, 7000, 20000):  # answers of 5, 112 and 320 KB
            writer = ANSWERS.replace("SIZE", str(size))
            assert box.run(writer, "assert f(1) == 2", "f", plan=how).result.startswith("failed")
            verdict = box.run(SCANNER, "assert f(1) == 0, f(1)", "f", plan=how)
            assert verdict.passed, f"{size * len(MARK)} bytes answered: {verdict.result} hits"


@pytest.mark.parametrize("replayed", [False, True], ids=["call by call", "replayed"])
def test_what_a_sample_raised_is_not_in_the_memory_of_the_next_sample(root, replayed):
    """A verdict (and the sample's exception message in it) never crosses the zygote: A, or
    the worker's checker, reports it to the worker's reporter, which no sample is forked
    from. Were it in the zygote's freed memory, the next sample could read whether the
    previous passed, and learn the test's answers sample after sample."""
    how = plan(1 << 20) if replayed else b""
    raiser = ANSWERS.replace("return M * SIZE", "raise ValueError(M * 30)")
    with Sandbox(root, slot=18) as box:
        assert box.run(raiser, "assert f(1) == 2", "f", plan=how).result.startswith("failed")
        verdict = box.run(SCANNER, "assert f(1) == 0, f(1)", "f", plan=how)
        assert verdict.passed, f"{verdict.result} hits"


# The trusted test's view of the descriptors its process holds: none is a folder (the
# zygote keeps the host's /proc open, through which a problem file's test, run as root,
# would reach the host's processes and its root).
NO_FOLDER_OPEN = """
import os, stat
def _folder(fd):
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False
OPEN = [fd for fd in range(3, 1024) if _folder(fd)]
assert f(1) == 2 and OPEN == [], OPEN
"""


@pytest.mark.parametrize("replayed", [False, True], ids=["call by call", "replayed"])
def test_the_checker_holds_no_descriptor_of_the_hosts_proc(root, replayed):
    """A problem file is input too: its test runs in the checker, which must hold nothing
    of the zygote's that reaches outside the sandbox."""
    with Sandbox(root, slot=19) as box:
        verdict = box.run(GOOD, NO_FOLDER_OPEN, "f", plan=plan() if replayed else b"")
        assert verdict.passed, verdict.result


# A problem file's test trying what only a privileged process may (drop its groups).
PRIVILEGED = """
import os
try:
    os.setgroups([])
    ALLOWED = True
except PermissionError:
    ALLOWED = False
assert f(1) == 2 and not ALLOWED, ALLOWED
"""


@pytest.mark.parametrize("replayed", [False, True], ids=["call by call", "replayed"])
def test_a_problem_files_test_runs_without_privileges(root, replayed):
    """The checker runs as root in mode root, with no capability left once its namespaces
    are made: a hostile problem file's test cannot mount, read files by handle or change
    its ids."""
    with Sandbox(root, slot=20) as box:
        verdict = box.run(GOOD, PRIVILEGED, "f", plan=plan() if replayed else b"")
        assert verdict.passed, verdict.result
