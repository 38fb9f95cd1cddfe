"""Planning pays: at half the quickstart's minutes, the planned schedule ends with a lower
held-out loss than the schedule laid over ``--max-steps`` and stopped by the clock.

Two runs of the quickstart's recipe (tiny-qwen, Muon, WSD, FIM, batch 16, compiled) on the
quickstart's data, with the same seed and the same budget (``--minutes``, 7 by default:
half of the quickstart's 14 training minutes): one planned (the default: the first steps
are timed and the schedule is laid over the steps the budget holds, so it ends annealed),
one with ``--no-plan`` (the schedule spans the recipe's 1,000 steps and the clock stops the
run wherever it is: in WSD's stable phase, at the peak learning rate, on a machine that
cannot reach them all). Then ``codeparrot eval loss`` scores both on the corpus's held-out
split (nats/char) and on HumanEval's reference solutions; the script prints both and the
ratio planned / unplanned (below 1: planning pays).

``--data`` is a quickstart output directory: its ``corpus/`` and ``tokenizer/`` are used,
and its ``model/tokens/`` shards too where they are there (so no run pays to tokenize the
corpus); a directory without them gets them built first (the quickstart's own steps).

Each run trains in a process of its own with an empty compilation cache
(``TORCHINDUCTOR_CACHE_DIR`` in its run directory): a second run in a warm cache compiles
in seconds instead of ~40 s, and would train that much longer. ``--side-by-side`` trains
both at once, each pinned to a core of its own with one thread: a machine half as fast,
whose passing load slows both runs alike (one run after the other, a few percent of
throughput between them outweighs what the schedule changes). ``--only train`` stops
after the two runs (time them on a quiet machine), ``--only score`` scores the runs
already in ``--output`` (the losses do not depend on the machine's load).

    .venv/bin/python bench/plan_pays.py --data runs/quickstart [--minutes 7] [--output DIR]
        [--side-by-side] [--only train|score] [--heldout-files 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = {"planned": True, "clock-stopped": False}


def prepared(data: Path) -> None:
    """The quickstart's corpus and tokenizer in ``data`` (built by its steps when missing)."""
    from codeparrot.quickstart import QuickstartConfig
    from codeparrot.quickstart.cli import step_corpus, step_tokenizer

    cfg = QuickstartConfig(output=data)
    if not (cfg.corpus_dir / "manifest.json").is_file():
        print(f"building the corpus in {cfg.corpus_dir} ...", flush=True)
        step_corpus(cfg)
    if not (cfg.tokenizer_dir / "tokenizer.json").is_file():
        print(f"training the tokenizer in {cfg.tokenizer_dir} ...", flush=True)
        step_tokenizer(cfg)


def one_run(data: Path, output: Path, minutes: float, plan: bool, seed: int) -> dict:
    """The quickstart's training run into ``output`` with ``minutes`` and ``plan``."""
    from codeparrot.quickstart import QuickstartConfig
    from codeparrot.quickstart.cli import _train_config
    from codeparrot.training import train

    cfg = QuickstartConfig(output=data)
    config = _train_config(cfg, max_minutes=minutes).replace(
        output=output, plan=plan, seed=seed, progress=False
    )
    tokens = cfg.model_dir / "tokens"
    if tokens.is_dir():  # up-to-date shards are reused (training.data.pretokenize)
        shutil.copytree(tokens, output / "tokens")
    started = time.perf_counter()
    result = train(config, log=lambda line: print(f"  {line}", flush=True))
    return {
        "plan": plan,
        "output": str(output),
        "step": result.step,
        "planned_steps": result.planned_steps,
        "stopped_by": result.stopped_by,
        "train_minutes": result.seconds / 60,
        "wall_minutes": (time.perf_counter() - started) / 60,
        "tokens_per_s": result.tokens_per_s,
        "valid_loss": result.eval_loss,
        "last_lr": _last_lr(output),
    }


def _last_lr(output: Path) -> float | None:
    from codeparrot.training.loop import read_metrics

    lrs = [r["lr"] for r in read_metrics(output / "metrics.jsonl") if "lr" in r]
    return lrs[-1] if lrs else None


def losses(data: Path, outputs: list[Path], files: int) -> dict[str, list[float]]:
    """nats/char of each run on the corpus's held-out split and on HumanEval's solutions."""
    from codeparrot.eval.loss import LossConfig, evaluate_loss

    corpus = data / "corpus"
    heldout = evaluate_loss(LossConfig(checkpoints=tuple(outputs), data=corpus, max_files=files))
    humaneval = evaluate_loss(LossConfig(checkpoints=tuple(outputs), task="humaneval"))
    return {
        "held-out (corpus valid split)": [r["nats_per_char"] for r in heldout["rows"]],
        "HumanEval solutions": [r["nats_per_char"] for r in humaneval["rows"]],
    }


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a quickstart output directory")
    parser.add_argument("--minutes", type=float, default=7.0, help="each run's --max-minutes")
    parser.add_argument("--output", type=Path, default=None, help="where the two runs go")
    parser.add_argument("--seed", type=int, default=0, help="both runs' seed (the quickstart's)")
    parser.add_argument("--only", choices=("train", "score"), default=None)
    parser.add_argument("--heldout-files", type=int, default=200, help="files scored")
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="train both runs at once, each on a core of its own with one thread (a machine "
        "half as fast, and the same load on both)",
    )
    parser.add_argument("--one", choices=tuple(RUNS), default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def start_own_process(
    args: argparse.Namespace, root: Path, name: str, core: int | None = None
) -> subprocess.Popen:
    """One run in a fresh process with an empty compilation cache (on ``core`` alone, one
    thread, when given)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(root / f"{name}-compile-cache")}
    if core is not None:
        env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, __file__, "--data", str(args.data), "--minutes",
               str(args.minutes), "--output", str(root), "--seed", str(args.seed), "--one", name]  # fmt: skip
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    return subprocess.Popen(command, env=env, preexec_fn=pin)


def train_runs(args: argparse.Namespace, root: Path) -> None:
    """Both runs: one after the other on every core, or ``--side-by-side``: at the same
    time, each on a core of its own, so that whatever else slows the machine slows both."""
    cores = sorted(os.sched_getaffinity(0))
    if args.side_by_side and len(cores) < 2:
        raise SystemExit("--side-by-side needs two cores")
    procs = []
    for k, (name, plan) in enumerate(RUNS.items()):
        core = cores[k] if args.side_by_side else None
        where = f" on core {core}, one thread" if core is not None else ""
        print(f"{name}: --max-minutes {args.minutes:g}{'' if plan else ' --no-plan'}{where}",
              flush=True)  # fmt: skip
        procs.append(start_own_process(args, root, name, core))
        if not args.side_by_side and procs[-1].wait() != 0:
            raise SystemExit(f"the {name} run failed")
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("a run failed")


def report_runs(runs: list[dict]) -> None:
    print(
        "\nrun            steps (of schedule)  stopped by   train min  tokens/s  last lr   "
        "validation nats/token"
    )
    for r in runs:
        name = "planned" if r["plan"] else "clock-stopped"
        print(
            f"{name:14} {r['step']:>5} ({r['planned_steps']:>5})       {r['stopped_by']:12} "
            f"{r['train_minutes']:8.2f}  {r['tokens_per_s']:8,.0f}  {r['last_lr']:.2e}  "
            f"{r['valid_loss']:.4f}"
        )


def main() -> None:
    args = _arguments()
    root = args.output or Path(tempfile.mkdtemp(prefix="plan_pays_"))
    if args.one is not None:  # the child process of train_in_own_process
        output = root / args.one
        result = one_run(args.data, output, args.minutes, RUNS[args.one], args.seed)
        (output / "plan_pays.json").write_text(json.dumps(result))
        return
    if args.only != "score":
        prepared(args.data)
        train_runs(args, root)
    runs = [json.loads((root / name / "plan_pays.json").read_text()) for name in RUNS]
    report_runs(runs)
    if args.only != "train":
        print()
        outputs = [Path(r["output"]) for r in runs]
        for what, (planned, stopped) in losses(args.data, outputs, args.heldout_files).items():
            print(
                f"{what}: planned {planned:.4f} nats/char, clock-stopped {stopped:.4f}; "
                f"planned / clock-stopped {planned / stopped:.3f}x "
                f"({'planning pays' if planned < stopped else 'planning does NOT pay'})"
            )
    print(f"\nruns in {root}")


if __name__ == "__main__":
    main()
