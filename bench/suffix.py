"""Does the code after the cursor pay? FIM with the suffix against the prefix alone, with and
without the syntax check.

For a FIM run and a run of the same budget without FIM, greedy single-line HumanEval
infilling (the 1,033 tasks, or a seeded ``--limit``) is scored in the sandbox:

- the FIM run prompted with prefix + suffix (SPM, the default, and PSM), and from the prefix
  alone;
- the non-FIM run from the prefix alone (all it can be given);

each plain and with the syntax check (``--syntax-samples K``: a middle after which the
program no longer parses is replaced by the most common of K draws that parse; the check
reads the suffix whatever the model was shown). Then ``codeparrot eval lines`` on held-out
code (the editor's prompt) for both runs, plain and checked. The issue's target is the
first row's pass@1 at least 2x the non-FIM run's plain one; the checked non-FIM row says
how much of a gain is the check's alone.

    .venv/bin/python bench/suffix.py --fim RUN --no-fim RUN [--limit 1033] [--lines 200]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/eval.py would then
# shadow the project's `eval` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]


def infill(
    engine: Any,
    tasks: list[dict],
    *,
    suffix: bool,
    samples: int,
    order: str = "spm",
    deadline_ms: float | None = None,
) -> dict[str, Any]:
    """Greedy middles of ``tasks`` (checked with ``samples``; FIM prompts in ``order``):
    pass@1 and exact match."""
    from codeparrot.eval.execution import run_programs
    from codeparrot.eval.infill import exact_match, infill_program, infilled
    from codeparrot.generation import GenerationConfig
    from codeparrot.generation.config import FimSettings
    from codeparrot.generation.syntax import checked_generate, parses

    gen = GenerationConfig(max_new_tokens=48, temperature=0.0, stop=("\n",), seed=0)
    if suffix:  # the order is the engine's setting: one engine serves both rows here
        engine.use_fim(FimSettings(fim_order=order))
    middles, started = [], time.perf_counter()
    for t in tasks:
        extra = {"suffix": t["suffix"]} if suffix else {}
        made = checked_generate(
            engine, t["prompt"], gen,
            lambda m, t=t: parses(infilled(t["prompt"], m, t["suffix"])), samples,
            deadline_ms=deadline_ms, **extra,
        )  # fmt: skip
        middles.append(made[0].text)
    seconds = time.perf_counter() - started
    pairs = list(zip(tasks, middles, strict=True))
    verdicts = run_programs([infill_program(t, m) for t, m in pairs])
    return {
        "passed": sum(v.passed for v in verdicts),
        "exact": sum(exact_match(m, t["canonical_solution"]) for t, m in pairs),
        "tasks": len(tasks),
        "seconds": seconds,
        "middles": middles,
    }


def lines(checkpoint: Path, n: int, samples: int) -> dict[str, Any]:
    from codeparrot.eval.lines import LinesConfig, evaluate_lines

    scores = evaluate_lines(LinesConfig(checkpoint=checkpoint, n=n, syntax_samples=samples))
    return scores["scores"]["all"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fim", type=Path, required=True, help="a FIM-trained checkpoint")
    parser.add_argument("--no-fim", type=Path, required=True, help="the same budget without")
    parser.add_argument("--limit", type=int, default=1033, help="infilling tasks (seeded)")
    parser.add_argument("--lines", type=int, default=200, help="held-out lines (0: none)")
    parser.add_argument("--syntax-samples", type=int, default=8)
    parser.add_argument(
        "--deadline-ms",
        type=float,
        default=100.0,
        help="one more row: FIM + suffix checked with the editor's deadline (the language "
        "server's --syntax-deadline-ms): the draws stop this long after each task started",
    )
    parser.add_argument("--output", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()

    from codeparrot.eval.infill import derive
    from codeparrot.generation import Engine

    tasks = derive("single-line")
    tasks = random.Random(0).sample(tasks, min(args.limit, len(tasks)))
    k = args.syntax_samples
    rows: dict[str, Any] = {}
    fim, plain = Engine.load(args.fim), Engine.load(args.no_fim)
    if fim.fim is None:
        parser.error(f"--fim {args.fim}: the checkpoint has no FIM sentinels")
    for name, engine, suffix, order in (
        ("fim+suffix", fim, True, "spm"),
        ("fim+suffix, PSM", fim, True, "psm"),
        ("fim, prefix only", fim, False, "spm"),
        ("no-fim, prefix only", plain, False, "spm"),
    ):
        for samples in dict.fromkeys((0, k)):  # once when the check is off
            key = f"{name}, check {samples}"
            rows[key] = r = infill(engine, tasks, suffix=suffix, samples=samples, order=order)
            plain_middles = rows[f"{name}, check 0"]["middles"]
            r["replaced"] = sum(a != b for a, b in zip(plain_middles, r["middles"], strict=True))
            print(f"{key:34} pass {r['passed']:4}/{r['tasks']}  exact {r['exact']:4}  "
                  f"replaced {r['replaced']:4}  {r['seconds']:6.0f} s", flush=True)  # fmt: skip

    if k:  # the deadline only stops the check's draws
        key = f"fim+suffix, check {k}, deadline {args.deadline_ms:g} ms"
        rows[key] = r = infill(fim, tasks, suffix=True, samples=k, deadline_ms=args.deadline_ms)
        print(f"{key:34} pass {r['passed']:4}/{r['tasks']}  exact {r['exact']:4}  "
              f"{r['seconds']:6.0f} s", flush=True)  # fmt: skip

    def ratio(fim_check: int, plain_check: int) -> float:
        top = rows[f"fim+suffix, check {fim_check}"]["passed"]
        return top / max(rows[f"no-fim, prefix only, check {plain_check}"]["passed"], 1)

    if k:
        print(f"the suffix pays: {ratio(0, 0):.2f}x plain against plain; {ratio(k, k):.2f}x both "
              f"checked; {ratio(k, 0):.2f}x checked against plain (the issue's comparison: "
              f"the editor's use of the suffix against a model that never sees it)")  # fmt: skip
    else:
        print(f"the suffix pays: {ratio(0, 0):.2f}x (the check off)")
    if args.lines:
        for name, checkpoint in (("fim", args.fim), ("no-fim", args.no_fim)):
            for samples in dict.fromkeys((0, k)):
                key = f"lines {name}, check {samples}"
                rows[key] = lines(checkpoint, args.lines, samples)
                r = rows[key]
                print(f"{key:34} exact {100 * r['exact_match']:5.1f}%  similarity "
                      f"{r['edit_similarity']:.3f}", flush=True)  # fmt: skip
    if args.output:
        args.output.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
