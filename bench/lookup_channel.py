"""The kernel's cache of file-name lookups as a channel: how many bits cross?

    .venv/bin/python bench/lookup_channel.py [--bits 256] [--trials 3] [--eval DIR]

A writer sample looks up, for each 1 bit of a random message, four names that do not
exist under its standard library's folder; a later reader sample times one lookup pass
over every bit's names and reads a 1 where they are much faster than names nothing
looked up (a cached failed lookup answers in about half the time). Printed: the bits
read back out of ``--bits`` (chance is half), for

- the writer and reader in two separate runs (``run_programs`` twice),
- the writer and reader as consecutive samples of one worker in one run,
- the same two programs run directly on the host (no sandbox): the method's own check,
  which must read back nearly every bit where the channel is open.

``--eval DIR`` measures another version's ``eval/`` folder (``git archive REF eval | tar
-x -C DIR``, then ``DIR/eval``), e.g. main's, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys

NAMES_PER_BIT = 4

WRITER = """
import os
ROOT = os.path.dirname(os.__file__)
def f(x):
    for i, bit in enumerate(MESSAGE):
        if bit:
            for k in range(NAMES):
                os.path.exists(f'{ROOT}/cp-TAG-{i}-{k}')
    return 0
"""

READER = """
import os, time
ROOT = os.path.dirname(os.__file__)
def _group(name):
    start = time.perf_counter_ns()
    for k in range(NAMES):
        os.path.exists(f'{ROOT}/{name}-{k}')
    return time.perf_counter_ns() - start
def f(x):
    for j in range(32):  # warm up the code path on names nobody else looks up
        _group(f'cp-TAG-warm-{j}')
    fresh = sorted(_group(f'cp-TAG-fresh-{j}') for j in range(64))[32]
    times = [_group(f'cp-TAG-{i}') for i in range(BITS)]
    return ''.join('1' if t < 0.6 * fresh else '0' for t in times)
"""

REPORT = "assert False, f(0)\n"  # the reader's bits come back in its verdict
WRITE = "f(0)\n"


def programs(bits: int) -> tuple[str, str, list[int]]:
    """(writer, reader, message) for a fresh random message and tag."""
    message = [secrets.randbits(1) for _ in range(bits)]
    tag = secrets.token_hex(6)
    fill = {"MESSAGE": repr(message), "TAG": repr(tag)[1:-1], "BITS": str(bits)}
    fill["NAMES"] = str(NAMES_PER_BIT)
    writer, reader = WRITER, READER
    for key, value in fill.items():
        writer, reader = writer.replace(key, value), reader.replace(key, value)
    return writer, reader, message


def read_back(result: str, message: list[int]) -> int:
    """Bits of ``message`` the reader's verdict (``failed: AssertionError BITS``) got right."""
    decoded = result.removeprefix("failed: AssertionError ").strip()
    if len(decoded) != len(message) or set(decoded) - {"0", "1"}:
        raise RuntimeError(f"the reader did not report: {result[:200]!r}")
    return sum(int(c) == b for c, b in zip(decoded, message, strict=True))


def on_host(writer: str, reader: str, message: list[int]) -> int:
    """The same programs run directly (no sandbox): is the channel there at all?"""
    w, r = {}, {}
    exec(compile(writer, "<writer>", "exec"), w)
    w["f"](0)
    exec(compile(reader, "<reader>", "exec"), r)
    return read_back("failed: AssertionError " + r["f"](0), message)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bits", type=int, default=256)
    parser.add_argument("--trials", type=int, default=3, help="messages per setting")
    parser.add_argument("--eval", type=str, default=None, help="another version's eval/ folder")
    args = parser.parse_args()
    if args.eval is not None:
        import codeparrot.eval

        codeparrot.eval.__path__.insert(0, os.path.abspath(args.eval))
    from codeparrot.eval import sandbox
    from codeparrot.eval.execution import Program, run_programs

    isolation = sandbox.detect_isolation()
    print(f"sandbox mode {isolation.mode}; eval from {os.path.dirname(sandbox.__file__)}")
    scores: dict[str, list[int]] = {}
    for _ in range(args.trials):
        writer, reader, message = programs(args.bits)
        w, r = Program(writer, WRITE, "f"), Program(reader, REPORT, "f")
        run_programs([w], workers=1, isolation=isolation)
        (verdict,) = run_programs([r], workers=1, isolation=isolation)
        scores.setdefault("separate runs", []).append(read_back(verdict.result, message))
        writer, reader, message = programs(args.bits)
        w, r = Program(writer, WRITE, "f"), Program(reader, REPORT, "f")
        _, verdict = run_programs([w, r], workers=1, isolation=isolation)
        scores.setdefault("one run, one worker", []).append(read_back(verdict.result, message))
        writer, reader, message = programs(args.bits)
        scores.setdefault("host, no sandbox", []).append(on_host(writer, reader, message))
    for label, values in scores.items():
        print(
            f"{label}: {statistics.median(values):.0f} of {args.bits} bits read back "
            f"(trials: {', '.join(map(str, values))}; chance {args.bits // 2})"
        )


if __name__ == "__main__":
    sys.exit(main())
