"""How training's OpenMP threads should wait, on a quiet machine and on a loaded one.

torch's CPU kernels run on GNU OpenMP, whose threads spin at the end of each parallel region
by default. With more runnable threads than cores (a build, a test run or another training
beside it) a spinning thread can burn the slice its partner needs. This runs
``codeparrot train`` (the quickstart's recipe, a fixed number of steps) under each
``OMP_WAIT_POLICY``, alternating, first alone, then beside ``--load`` busy processes (one
per core by default), and prints the steady tokens/s of each and their ratios.

    .venv/bin/python bench/train_waits.py --data CORPUS --tokenizer TOKENIZER
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEADY = re.compile(r"([\d,]+) tokens/s steady")
POLICIES = ("default", "PASSIVE")  # or a spin count: libgomp spins that long, then sleeps
BUSY = "while True: pass"


def train_tokens_per_s(args: argparse.Namespace, policy: str, steps: int) -> float:
    """Steady tokens/s of one ``codeparrot train`` run under ``policy``."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    if policy.isdigit():
        env["GOMP_SPINCOUNT"] = policy
    elif policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable, "-m", "codeparrot", "train", "--data", str(args.data),
            "--tokenizer", str(args.tokenizer), "--output", out, "--max-steps", str(steps),
            "--seed", "0", "--log-every", "10", "--no-progress", *args.train_args,
        ]  # fmt: skip
        run = subprocess.run(command, env=env, capture_output=True, text=True)
    found = STEADY.findall(run.stdout + run.stderr)
    if run.returncode != 0 or not found:
        tail = (run.stdout + run.stderr)[-2000:]
        raise RuntimeError(f"train under {policy} failed ({run.returncode}):\n{tail}")
    return float(found[-1].replace(",", ""))


def condition(args: argparse.Namespace, loaded: bool) -> dict[str, list[float]]:
    """Each policy's tokens/s over ``--rounds`` alternating rounds, alone or beside load."""
    busy = []
    if loaded:
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
        time.sleep(1)
    steps = args.loaded_steps if loaded else args.steps
    try:
        rates: dict[str, list[float]] = {p: [] for p in args.policies}
        for r in range(args.rounds):
            order = args.policies if r % 2 == 0 else args.policies[::-1]
            for policy in order:
                rates[policy].append(train_tokens_per_s(args, policy, steps))
        return rates
    finally:
        for process in busy:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a corpus folder")
    parser.add_argument("--tokenizer", type=Path, required=True, help="its tokenizer")
    parser.add_argument("--steps", type=int, default=150, help="steps of a quiet run")
    parser.add_argument("--loaded-steps", type=int, default=60, help="steps of a loaded run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument(
        "--load", type=int, default=os.cpu_count() or 2, help="busy processes beside a run"
    )
    parser.add_argument(
        "--policies", nargs="+", default=list(POLICIES),
        help="OMP_WAIT_POLICY values, default (unset), or GOMP_SPINCOUNT values (digits); "
        "the first is the baseline of the ratios",
    )  # fmt: skip
    parser.add_argument(
        "--conditions", nargs="+", choices=("alone", "loaded"), default=["alone", "loaded"]
    )
    parser.add_argument(
        "--train-args", nargs="*", default=[], help="more flags for train (e.g. --compile)"
    )
    args = parser.parse_args()
    print(f"CPU {os.cpu_count()} cores; load before: {os.getloadavg()[0]:.1f}")
    for loaded in [c == "loaded" for c in args.conditions]:
        rates = condition(args, loaded)
        median = {p: statistics.median(v) for p, v in rates.items()}
        where = f"beside {args.load} busy processes" if loaded else "alone"
        base = args.policies[0]
        shown = "; ".join(
            f"{name(p)}: {median[p]:,.0f} tokens/s "
            f"({', '.join(f'{v:,.0f}' for v in rates[p])}; {median[p] / median[base]:.2f}x)"
            for p in args.policies
        )
        print(f"{where}, against {name(base)}: {shown}")


def name(policy: str) -> str:
    return f"GOMP_SPINCOUNT={policy}" if policy.isdigit() else policy


if __name__ == "__main__":
    main()
