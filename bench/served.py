"""Served generation (`eval --backend openai` against `codeparrot serve`) vs the direct engine.

    .venv/bin/python bench/served.py [--checkpoint DIR] [--problems 8] [--n 4] [--repeat 3]
    .venv/bin/python bench/served.py --checkpoint DIR --repeat 0 --greedy 164 --max-new-tokens 24

Without ``--checkpoint`` it builds a `tiny`-preset GPT-2 (4 layers, 256 wide, random
weights, 1,024 positions; see bench/generate.py). The server runs as a subprocess, as a
user runs it (``--quantize none``: the weights `eval` itself loads), loaded before any
timing; the direct engine is loaded once too. Each round generates the same samples
(HumanEval's first ``--problems`` problems, ``--n`` per problem, sampled, seeded) three
ways, in alternating order so that load from other jobs hits all alike:

- direct, ``--threads`` default (two problems at once on a CPU);
- direct, one problem at a time;
- served, ``--concurrency`` requests in flight (default 4).

Prints samples/s of each, the ratio served / direct (median over rounds) and in how many
rounds the served samples equal the direct ones (every one: a prompt gets the same text
whatever the server or the engine ran before it).

``--greedy N``: then greedy samples (one per problem) of HumanEval's first N problems,
direct and served, at ``--max-new-tokens``; prints how many are identical and the ids of
those that are not. Where a prompt and ``--max-new-tokens`` do not fit the model's context
the two differ by design: the server keeps the whole prompt and clamps ``max_tokens``, the
local engine cuts the prompt's start; those problems are counted apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def start_server(checkpoint: Path) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "codeparrot", "serve", "--checkpoint", str(checkpoint),
            "--port", "0", "--model-name", "bench", "--quantize", "none"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if " on http://" not in line:
        proc.kill()
        raise SystemExit(f"codeparrot serve did not start: {line!r}")
    return proc, line.rsplit(" on ", 1)[1].strip()


def timed_generate(config, problems, engine) -> tuple[float, list]:
    from codeparrot.eval.humaneval import generate_samples

    start = time.perf_counter()
    path = generate_samples(config, problems, engine=engine, progress=False)
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return seconds, [(r["task_id"], r["completion"], r["seed"]) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--n", type=int, default=4, help="samples per problem (one request)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (0: none)")
    parser.add_argument("--greedy", type=int, default=0, help="problems of the greedy check")
    args = parser.parse_args()

    from codeparrot.eval.config import GenerateConfig
    from codeparrot.eval.data import load_problems, select_problems
    from codeparrot.generation import Engine

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint
        if checkpoint is None:
            sys.path.insert(0, str(Path(__file__).parent))
            from generate import build_checkpoint

            checkpoint = build_checkpoint(Path(tmp) / "ckpt", 8192, 1024)
        problems = select_problems(load_problems(), limit=args.problems)
        common = dict(n=args.n, batch_size=args.n, max_new_tokens=args.max_new_tokens,
                      temperature=0.8, top_p=0.95, seed=1)  # fmt: skip
        engine = Engine.load(checkpoint)
        server, url = start_server(checkpoint)

        def served_config(out: Path) -> GenerateConfig:
            return GenerateConfig(backend="openai", base_url=url, model="bench", output=out,
                                  concurrency=args.concurrency, **common)  # fmt: skip

        sides = {
            "direct": lambda out: timed_generate(
                GenerateConfig(checkpoint=checkpoint, output=out, **common), problems, engine
            ),
            "direct-1-thread": lambda out: timed_generate(
                GenerateConfig(checkpoint=checkpoint, output=out, threads=1, **common),
                problems,
                engine,
            ),
            "served": lambda out: timed_generate(served_config(out), problems, None),
        }
        rates: dict[str, list[float]] = {name: [] for name in sides}
        equal_rounds = 0
        try:
            for r in range(args.repeat):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                made = {}
                for name in order:
                    seconds, made[name] = sides[name](Path(tmp) / f"{name}-{r}")
                    rates[name].append(len(made[name]) / seconds)
                equal_rounds += made["served"] == made["direct"] == made["direct-1-thread"]
            if args.greedy:
                greedy_check(args, checkpoint, engine, url, Path(tmp))
        finally:
            server.terminate()
            server.wait(timeout=30)
    if args.repeat:
        report_rates(args, checkpoint, rates, equal_rounds)


def greedy_check(args, checkpoint: Path, engine, url: str, tmp: Path) -> None:
    """Greedy samples of the first ``--greedy`` problems, direct and served: how many equal."""
    from codeparrot.eval.config import GenerateConfig
    from codeparrot.eval.data import load_problems, select_problems

    problems = select_problems(load_problems(), limit=args.greedy)
    common = dict(n=1, temperature=0.0, max_new_tokens=args.max_new_tokens)
    direct_config = GenerateConfig(checkpoint=checkpoint, output=tmp / "greedy-direct", **common)
    served_config = GenerateConfig(backend="openai", base_url=url, model="bench",
                                   output=tmp / "greedy-served", **common)  # fmt: skip
    _, direct = timed_generate(direct_config, problems, engine)
    _, served = timed_generate(served_config, problems, None)
    budget = engine.context_length - args.max_new_tokens
    over = {t for t, p in problems.items() if len(engine.encode_prompt(p["prompt"], 1)[0]) > budget}
    differ = [d[0] for d, s in zip(sorted(direct), sorted(served), strict=True) if d != s]
    fit = [t for t in problems if t not in over]
    print(f"greedy, {args.max_new_tokens} new tokens at most, {len(problems)} problems: "
          f"{len(problems) - len(differ)}/{len(problems)} served samples equal direct's; "
          f"of the {len(fit)} whose prompt fits the context with them: "
          f"{sum(t not in differ for t in fit)}/{len(fit)}")  # fmt: skip
    if differ:
        print(
            "differ: " + ", ".join(t + (" (prompt too long)" if t in over else "") for t in differ)
        )


def report_rates(args, checkpoint, rates: dict[str, list[float]], equal_rounds: int) -> None:
    samples = args.problems * args.n
    print(f"{samples} samples ({args.problems} problems x {args.n}), {args.max_new_tokens} new "
          f"tokens at most, {args.repeat} alternating rounds; checkpoint {checkpoint}")  # fmt: skip
    for name, values in rates.items():
        print(f"{name:16} {statistics.median(values):7.2f} samples/s  "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    for base in ("direct", "direct-1-thread"):
        ratios = [s / d for s, d in zip(rates["served"], rates[base], strict=True)]
        print(f"served / {base}: {statistics.median(ratios):.2f}x (median of rounds)")
    print(f"served samples equal direct's (both ways) in {equal_rounds} of {args.repeat} rounds")


if __name__ == "__main__":
    main()
