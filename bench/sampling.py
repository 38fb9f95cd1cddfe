"""HumanEval sampling wall-clock: problems in threads (``--threads``) against one at a time.

    .venv/bin/python bench/sampling.py --checkpoint runs/quickstart/model [--limit 40] [--rounds 2]

Each side is ``codeparrot eval generate`` run as a user runs it, in its own process from
interpreter start to exit (so the start-up, model load and first steps count), on the
first ``--limit`` HumanEval problems with the quickstart's settings (5 samples per
problem in one call, T 0.8, 128 new tokens). The sides alternate ``--rounds`` times, so
load from other jobs hits both alike; prints each run, the median of each side, their
ratio, and whether the sample files are identical (they must be).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_side(checkpoint: Path, out: Path, threads: int, limit: int) -> float:
    argv = [sys.executable, "-m", "codeparrot", "eval", "generate",
            "--checkpoint", str(checkpoint), "--output", str(out), "--n", "5",
            "--batch-size", "5", "--temperature", "0.8", "--max-new-tokens", "128",
            "--limit", str(limit), "--threads", str(threads)]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=40, help="the first K problems")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="the threaded side's threads")
    args = parser.parse_args()
    times: dict[int, list[float]] = {1: [], args.threads: []}
    with tempfile.TemporaryDirectory() as tmp:
        files: dict[int, str] = {}
        for r in range(args.rounds):
            for threads in (1, args.threads) if r % 2 == 0 else (args.threads, 1):
                out = Path(tmp) / f"r{r}-t{threads}"
                seconds = run_side(args.checkpoint, out, threads, args.limit)
                times[threads].append(seconds)
                files.setdefault(threads, (out / "samples.jsonl").read_text())
                print(f"round {r + 1}: --threads {threads}: {seconds:6.1f} s", flush=True)
        same = files[1] == files[args.threads]
    one, many = statistics.median(times[1]), statistics.median(times[args.threads])
    print(f"\n{args.limit} problems x 5 samples, process start to exit (median of {args.rounds})")
    print(f"--threads 1: {one:.1f} s   --threads {args.threads}: {many:.1f} s   "
          f"ratio {one / many:.2f}x   identical samples: {same}")  # fmt: skip


if __name__ == "__main__":
    main()
