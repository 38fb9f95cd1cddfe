"""``--sanitize`` on long completions: what the sanitiser adds per completion, bounded.

    .venv/bin/python bench/sanitize.py [--repeat 3]

Times :func:`codeparrot.eval.sanitize.sanitize` on HumanEval/0's prompt followed by:
a 1 MB completion that never parses and a 1 MB one of good definitions (both over the size
cap: left as written), the worst case within the cap (no parsable prefix: every cut is one
line, until the parse bound) at 60 KB and 8 KB, and a 60 KB completion cut mid-statement;
beside the inputs of under 5,000 lines, in the same run, the sanitiser's former search
(every prefix, longest first), whose time grows with the square of the length. Prints seconds per completion (best of ``--repeat``) and the parses.
"""

from __future__ import annotations

import argparse
import ast
import platform
import time
from pathlib import Path

from codeparrot.eval import sanitize as module
from codeparrot.eval.data import load_problems


def every_prefix(code: str) -> int:
    """The former search: each shorter prefix parsed again. Returns the parses made."""
    lines = code.splitlines(keepends=True)
    for end in range(len(lines), -1, -1):
        try:
            ast.parse("".join(lines[:end]))
            return len(lines) - end + 1
        except (SyntaxError, ValueError):
            continue
    return len(lines) + 1


def cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    problem = load_problems()["HumanEval/0"]
    prompt, entry = problem["prompt"], problem["entry_point"]
    good = "".join(f"def g{i}(x):\n    return x + {i}\n" for i in range(40_000))
    cases = {
        "1 MB, never parses": "    return 1\n" + "f(\n" + ")(\n" * 350_000,
        "1 MB of definitions": problem["canonical_solution"] + good[: 1 << 20],
        "60 KB, no parsable prefix": "    return 1\n" + "f(\n" + ")(\n" * 20_000,
        "8 KB, no parsable prefix": "    return 1\n" + "f(\n" + ")(\n" * 2_700,
        "60 KB, cut mid-statement": problem["canonical_solution"] + good[:60_000] + "print(f(",
    }
    print(f"CPU: {cpu_name()}; sanitiser bounds: "
          f"{module.MAX_CHARS:,} characters, {module.MAX_PARSES} parses of "
          f"{module.MAX_PARSED_CHARS:,} characters in all")  # fmt: skip
    parse = ast.parse
    for name, completion in cases.items():
        code = prompt + completion
        calls = [0]

        def counted(*a, _calls=calls, **k):
            _calls[0] += 1
            return parse(*a, **k)

        module.ast.parse = counted
        seconds = best(lambda code=code: module.sanitize(code, [entry]), args.repeat)
        module.ast.parse = parse
        out = module.sanitize(code, [entry])
        state = "left as written" if module.skipped(out) else f"{len(out):,} chars kept"
        line = (f"{name:28} {len(code) / 1e6:5.2f} MB  now {seconds:7.3f} s "
                f"({calls[0] // args.repeat} parses, {state})")  # fmt: skip
        if code.count("\n") < 5_000:  # the former search is quadratic: small inputs only
            before = best(lambda code=code: every_prefix(code), 1)
            line += f"  every prefix: {before:7.3f} s ({every_prefix(code)} parses)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
