"""Recipe ablations at equal wall-clock on this machine.

Every run trains the quickstart's model on the quickstart's corpus and tokenizer (built once
in ``--work``) from the same seed. Runs are budgeted in **steps**, so other work on the
machine slows them without changing their results: the baseline (today's recipe: AdamW,
cosine, no FIM) for 1x, 2x and 4x ``--steps``, each variant for 1x. A variant's held-out loss
read on the baseline's loss-versus-log-steps curve (linear between the two baseline runs
around it) gives its worth in baseline steps; divided
by its cost per step relative to the baseline's (``--stage calibrate``: short runs
alternating in rounds, the only part that needs a quiet machine), that is its
**compute-equivalent factor** at equal wall-clock: "worth N x the compute".

Reported per run: held-out nats/char on the held-out packages (``codeparrot eval loss``),
greedy line exact match (``codeparrot eval lines``), single-line infilling pass@1 and exact
match on ``--infill`` seeded HumanEval infilling tasks from the prefix alone (what a model
without FIM can do), and for FIM runs with the suffix too, in the engine's default SPM order.

    .venv/bin/python bench/recipe.py --work runs/recipe --steps 150 --stage runs
    OMP_WAIT_POLICY=ACTIVE .venv/bin/python bench/recipe.py --work runs/recipe --steps 150 --stage calibrate
    .venv/bin/python bench/recipe.py --work runs/recipe --steps 150 --stage runs   # the table

Finished runs are reused when the command is run again; results go to ``WORK/recipe.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path; keep bench/eval.py from shadowing.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

# name -> TrainConfig changes against today's recipe (AdamW, cosine, no FIM). Muon runs name
# their peak: the tiny preset's default with Muon moved from 2e-3 to 3e-3 after these runs.
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "wsd": {"schedule": "wsd"},
    "muon": {"optimizer": "muon", "learning_rate": 2e-3},
    "muon-wsd": {"optimizer": "muon", "schedule": "wsd", "learning_rate": 2e-3},
    "muon-wsd-lr3e-3": {"optimizer": "muon", "schedule": "wsd", "learning_rate": 3e-3},
    "fim-context": {"fim_rate": 0.5, "fim_mode": "context"},
    "fim-document": {"fim_rate": 0.5, "fim_mode": "document"},
    "qwen": {"preset": "tiny-qwen"},
    "qwen-muon-wsd": {"preset": "tiny-qwen", "optimizer": "muon", "schedule": "wsd"},
    "muon-wsd-fim": {
        "optimizer": "muon",
        "schedule": "wsd",
        "fim_rate": 0.5,
        "fim_mode": "context",
        "learning_rate": 2e-3,
    },
    "muon-wsd-fim-lr3e-3": {
        "optimizer": "muon",
        "schedule": "wsd",
        "fim_rate": 0.5,
        "fim_mode": "context",
        "learning_rate": 3e-3,
    },
    "muon-wsd-fim0.9-lr3e-3": {
        "optimizer": "muon",
        "schedule": "wsd",
        "fim_rate": 0.9,
        "fim_mode": "context",
        "learning_rate": 3e-3,
    },
    "qwen-muon-wsd-lr3e-3": {
        "preset": "tiny-qwen",
        "optimizer": "muon",
        "schedule": "wsd",
        "learning_rate": 3e-3,
    },
    "qwen-muon-wsd-fim-lr3e-3": {
        "preset": "tiny-qwen",
        "optimizer": "muon",
        "schedule": "wsd",
        "fim_rate": 0.5,
        "fim_mode": "context",
        "learning_rate": 3e-3,
    },
    "qwen-muon-wsd-fim0.9-lr3e-3": {
        "preset": "tiny-qwen",
        "optimizer": "muon",
        "schedule": "wsd",
        "fim_rate": 0.9,
        "fim_mode": "context",
        "learning_rate": 3e-3,
    },
    "muon-wsd-fim-document": {
        "optimizer": "muon",
        "schedule": "wsd",
        "fim_rate": 0.5,
        "fim_mode": "document",
        "learning_rate": 2e-3,
    },
}

# a second seed (model initialisation, data order, FIM draws) of the FIM-rate comparison on
# the quickstart's preset: whether the infilling gain of one seed holds
VARIANTS.update(
    {
        f"{name}-seed1": {**VARIANTS[name], "seed": 1}
        for name in (
            "qwen-muon-wsd-lr3e-3",
            "qwen-muon-wsd-fim-lr3e-3",
            "qwen-muon-wsd-fim0.9-lr3e-3",
        )
    }
)
# the same tokens per step in 512-token windows: with 256 positions over half the HumanEval
# infilling tasks lose the start of their prefix
VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-512"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3"],
    "n_positions": 512,
    "batch_size": 8,
}

# half of the FIM examples with a middle that ends at a line end (the editor's and HumanEval
# infilling's unit) instead of between two random characters
VARIANTS["qwen-muon-wsd-fim0.9-lines0.5-lr3e-3"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3"],
    "fim_line_rate": 0.5,
}

# every FIM example in SPM order, the order the engine and the editor prompt in
VARIANTS["qwen-muon-wsd-fim0.9-spm-lr3e-3"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3"],
    "fim_spm_rate": 1.0,
}

# the quickstart's tokenizer trained with half and twice its 8k vocabulary (the tied head is
# ~40% of tiny-qwen's FLOPs at 8k; a larger vocabulary packs more text per token)
for size in (4096, 16384):
    VARIANTS[f"qwen-muon-wsd-fim0.9-lr3e-3-vocab{size // 1024}k"] = {
        **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3"],
        "vocab_size": size,
    }
# 4k for the 8k default's minutes: its steps cost 0.84x (calibration of 2026-11-24 17:12)
VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-vocab4k-1190steps"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-vocab4k"],
    "max_steps": 1190,
}
VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-vocab4k-1190steps-seed1"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-vocab4k-1190steps"],
    "seed": 1,
}

# data selection: the same recipe on the training files whose functions are mostly documented
# (``select``: a rule of ``SELECTIONS``; the held-out data and the tokenizer stay the same)
VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-docstrings"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3"],
    "select": "docstrings",
}


# function-level documents ("function-level filtering"): the training files' short
# documented top-level functions added as documents of HumanEval's shape, ``functions`` copies
for _copies in (1, 3):
    VARIANTS[f"qwen-muon-wsd-fim0.9-lr3e-3-functions{_copies}"] = {
        **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3"],
        "functions": _copies,
    }
VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-functions1-seed1"] = {
    **VARIANTS["qwen-muon-wsd-fim0.9-lr3e-3-functions1"],
    "seed": 1,
}


def quickstart_defaults() -> Any:
    from codeparrot.quickstart.cli import QuickstartConfig

    return QuickstartConfig(output=Path("unused"))


def prepare(work: Path, qs: Any) -> tuple[Path, Path]:
    """The quickstart's corpus and tokenizer, built once in ``work``."""
    from codeparrot.data import DataConfig, build_corpus
    from codeparrot.tokenizer import TokenizerConfig, train_tokenizer

    corpus, tokenizer = work / "corpus", work / "tokenizer"
    if not (corpus / "manifest.json").exists():
        build_corpus(DataConfig(output=corpus, max_files=qs.max_files, seed=qs.seed, force=True))
    if not (tokenizer / "tokenizer.json").exists():
        train_tokenizer(
            TokenizerConfig(
                data=corpus, output=tokenizer, vocab_size=qs.vocab_size,
                files=qs.tokenizer_files, pre_tokenizer=qs.pre_tokenizer, overwrite=True,
            )
        )  # fmt: skip
    return corpus, tokenizer


# rule -> `codeparrot data build --min-docstring-share`, applied to the built corpus's
# training files by a data-selection variant
SELECTIONS: dict[str, float] = {"docstrings": 0.5}


def select_corpus(work: Path, corpus: Path, rule: str) -> Path:
    """``corpus`` with only the training files ``SELECTIONS[rule]`` keeps (built once)."""
    import gzip
    import shutil

    from codeparrot.data.filters import undocumented

    out = work / f"corpus-{rule}"
    if (out / "manifest.json").exists():
        return out
    tmp = work / f".corpus-{rule}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(corpus / "valid", tmp / "valid")
    (tmp / "train").mkdir(parents=True)
    kept = total = 0
    for shard in sorted((corpus / "train").glob("*.jsonl.gz")):
        with gzip.open(shard, "rt") as src, gzip.open(tmp / "train" / shard.name, "wt") as dst:
            for line in src:
                total += 1
                if undocumented(json.loads(line)["content"], SELECTIONS[rule]) is None:
                    kept += 1
                    dst.write(line)
    manifest = json.loads((corpus / "manifest.json").read_text())
    manifest["selection"] = {"rule": rule, "train_files_kept": kept, "train_files": total}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    tmp.rename(out)
    print(f"selection {rule}: {kept} of {total} training files", flush=True)
    return out


def function_corpus(work: Path, corpus: Path, copies: int) -> Path:
    """``corpus`` with ``copies`` copies of its training files' short documented functions
    added as documents of their own (built once in ``work``)."""
    from codeparrot.data.functions import add_function_documents

    out = work / f"{corpus.name}-functions{copies}"
    if not (out / "manifest.json").exists():
        entry = add_function_documents(corpus, out, copies)
        print(f"function documents x{copies}: {entry}", flush=True)
    return out


def variant_tokenizer(work: Path, corpus: Path, qs: Any, vocab_size: int) -> Path:
    """The quickstart's tokenizer with another vocabulary size (built once in ``work``)."""
    from codeparrot.tokenizer import TokenizerConfig, train_tokenizer

    out = work / f"tokenizer-v{vocab_size}"
    if not (out / "tokenizer.json").exists():
        train_tokenizer(
            TokenizerConfig(
                data=corpus, output=out, vocab_size=vocab_size, files=qs.tokenizer_files,
                pre_tokenizer=qs.pre_tokenizer, overwrite=True,
            )
        )  # fmt: skip
    return out


def variant_data(
    work: Path, corpus: Path, tokenizer: Path, qs: Any, changes: dict[str, Any]
) -> tuple[Path, Path, str, dict[str, Any]]:
    """A variant's corpus, tokenizer, token cache's name and training-config changes
    (``select``: a data selection of ``SELECTIONS``; ``vocab_size``: another tokenizer)."""
    rest = {k: v for k, v in changes.items() if k not in ("select", "vocab_size", "functions")}
    cache = "tokens"
    if "select" in changes:
        corpus = select_corpus(work, corpus, changes["select"])
        cache += f"-{changes['select']}"
    if "functions" in changes:
        corpus = function_corpus(work, corpus, changes["functions"])
        cache += f"-functions{changes['functions']}"
    if "vocab_size" in changes:
        tokenizer = variant_tokenizer(work, corpus, qs, changes["vocab_size"])
        cache += f"-v{changes['vocab_size']}"
    return corpus, tokenizer, cache, rest


def train_config(work: Path, corpus: Path, tokenizer: Path, qs: Any, name: str, steps: int,
                 changes: dict[str, Any], **extra: Any) -> Any:  # fmt: skip
    from codeparrot.training.config import TrainConfig

    settings: dict[str, Any] = dict(
        data=corpus, tokenizer=tokenizer, output=work / "runs" / name, preset=qs.preset,
        n_positions=qs.n_positions, batch_size=qs.batch_size, compile=qs.compile,
        pretokenized=qs.pretokenized, seed=qs.seed, max_steps=steps,
        warmup_steps=min(100, steps // 10), eval_every=0, log_with="none", progress=False,
        optimizer="adamw", schedule="cosine", fim_rate=0.0,  # today's recipe, whatever the defaults
        peak_tflops=1.0,
    )  # fmt: skip
    settings.update(changes)
    settings.update(extra)
    return TrainConfig(**settings)


def share_tokens(work: Path, output: Path, cache_name: str = "tokens") -> None:
    """Reuse the pretokenized corpus across runs (a run re-tokenizes only when its data
    settings differ, e.g. document-level FIM): hard links from ``work/tokens``."""
    import os

    cache, target = work / cache_name, output / "tokens"
    if target.exists():
        if not cache.exists() and (target / "train.json").exists():
            cache.mkdir(parents=True)
            for f in target.iterdir():
                os.link(f, cache / f.name)
        return
    if cache.exists():
        target.mkdir(parents=True)
        for f in cache.iterdir():
            os.link(f, target / f.name)


def calibrate(work: Path, corpus: Path, tokenizer: Path, qs: Any, names: list[str],
              steps: int, rounds: int) -> dict[str, float]:  # fmt: skip
    """Seconds per step of each variant: the median over alternating rounds of its per-step
    throughput after 5 warm-up steps (compilation, first batches) in one run."""
    import shutil

    from codeparrot.training import train

    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else list(reversed(names)):
            data, tok, cache, changes = variant_data(work, corpus, tokenizer, qs, VARIANTS[name])
            cfg = train_config(
                work, data, tok, qs, f"calib-{name}", steps + 5, changes, log_every=1,
            )  # fmt: skip
            shutil.rmtree(cfg.output, ignore_errors=True)
            share_tokens(work, cfg.output, cache)
            train(cfg)
            share_tokens(work, cfg.output, cache)
            records = [
                json.loads(x) for x in (cfg.output / "metrics.jsonl").read_text().splitlines()
            ]
            rates = sorted(
                r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] > 5
            )
            tokens_per_step = cfg.batch_size * (cfg.seq_length or 256)
            times[name].append(tokens_per_step / rates[len(rates) // 2])
            print(f"  calibration round {r + 1}: {name:18} {times[name][-1] * 1000:7.1f} ms/step")
    return {name: sorted(v)[len(v) // 2] for name, v in times.items()}


def score(checkpoint: Path, *, lines_n: int, infill_limit: int, fim: bool) -> dict[str, Any]:
    from codeparrot.eval.lines import LinesConfig, evaluate_lines
    from codeparrot.eval.loss import LossConfig, evaluate_loss

    loss = evaluate_loss(LossConfig(checkpoints=(checkpoint,), max_files=60))["rows"][0]
    # the likelihood of HumanEval's reference solutions: moves where pass@k is still 0
    humaneval = evaluate_loss(LossConfig(checkpoints=(checkpoint,), task="humaneval"))["rows"][0]
    lines = evaluate_lines(LinesConfig(checkpoint=checkpoint, n=lines_n))["scores"]
    out = {
        "nats_per_char": loss["nats_per_char"],
        "bits_per_byte": loss["bits_per_byte"],
        "line_exact_match": lines["all"]["exact_match"],
        "line_edit_similarity": lines["all"]["edit_similarity"],
        "humaneval_nats_per_char": humaneval["nats_per_char"],
    }
    if fim and infill_limit:
        out.update(infill_scores(checkpoint, infill_limit))
    return out


def infill_scores(checkpoint: Path, limit: int, *, suffix: bool = True) -> dict[str, Any]:
    """Single-line infilling pass@1 (greedy) and exact match on ``limit`` seeded tasks.

    ``suffix=False`` prompts with the prefix alone: what a model without FIM can do.
    """
    import random

    from codeparrot.eval.execution import run_programs
    from codeparrot.eval.infill import derive, exact_match, infill_program
    from codeparrot.generation import Engine, GenerationConfig

    engine = Engine.load(checkpoint)
    tasks = derive("single-line")
    tasks = random.Random(0).sample(tasks, min(limit, len(tasks)))
    gen = GenerationConfig(max_new_tokens=48, temperature=0.0, stop=("\n",))
    middles = []
    for t in tasks:
        kwargs = {"suffix": t["suffix"]} if suffix else {}
        middles.append(engine.generate(t["prompt"], gen, **kwargs)[0].text + "\n")
    verdicts = run_programs([infill_program(t, m) for t, m in zip(tasks, middles, strict=True)])
    exact = sum(
        exact_match(m, t["canonical_solution"]) for t, m in zip(tasks, middles, strict=True)
    )
    return {"infill_pass_at_1": sum(v.passed for v in verdicts) / len(tasks),
            "infill_exact_match": exact / len(tasks)}  # fmt: skip


def equivalent_factor(baseline: dict[int, float], steps: int, loss: float) -> float:
    """How many times the baseline's steps reach ``loss``: read on the baseline's loss
    versus log-steps curve, linearly between the two runs around it (the curve is not one
    line: from 1,000 to 4,000 steps it steepens), past either end on the nearest segment."""
    points = sorted((math.log2(s / steps), value) for s, value in baseline.items())
    segments = list(itertools.pairwise(points))
    around = [
        seg for seg in segments if min(seg[0][1], seg[1][1]) <= loss <= max(seg[0][1], seg[1][1])
    ]
    (x0, y0), (x1, y1) = around[0] if around else segments[0 if loss > points[0][1] else -1]
    if y1 >= y0:
        return float("nan")
    return 2 ** (x0 + (loss - y0) * (x1 - x0) / (y1 - y0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/recipe"))
    parser.add_argument("--steps", type=int, default=300, help="the baseline's 1x steps")
    parser.add_argument("--variants", nargs="+", default=["muon-wsd", "fim-context"],
                        choices=[v for v in VARIANTS if v != "baseline"])  # fmt: skip
    parser.add_argument(
        "--stage", choices=("all", "runs", "calibrate"), default="all",
        help="runs: only the step-budgeted runs (load-proof); calibrate: only the speed "
        "calibration (needs a quiet machine); all: both, then the table",
    )  # fmt: skip
    parser.add_argument(
        "--multiples", type=int, nargs="+", default=[1, 2, 4],
        help="the baseline runs, in multiples of --steps (at least two; a variant beyond the "
        "largest is read off the extended line)",
    )  # fmt: skip
    parser.add_argument("--calibration-steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=200, help="eval lines per run")
    parser.add_argument("--infill", type=int, default=300, help="infilling tasks per run")
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None,
        help="torch.compile the training step (default: as the quickstart)",
    )  # fmt: skip
    args = parser.parse_args()
    if len(set(args.multiples)) < 2 or min(args.multiples) < 1:
        parser.error("--multiples needs at least two different positive multiples")
    args.multiples = sorted(set(args.multiples))

    from codeparrot.io import provenance, write_json

    qs = quickstart_defaults()
    if args.compile is not None:
        qs = qs.replace(compile=args.compile)
    args.work.mkdir(parents=True, exist_ok=True)
    corpus, tokenizer = prepare(args.work, qs)
    calibration = args.work / "calibration.json"
    if args.stage in ("all", "calibrate"):
        names = ["baseline", *args.variants]
        per_step = calibrate(
            args.work, corpus, tokenizer, qs, names, args.calibration_steps, args.rounds
        )
        write_json(calibration, {"seconds_per_step": per_step, "compile": qs.compile})
    if args.stage in ("all", "runs"):
        results = run_all(args, qs, corpus, tokenizer)
    if args.stage == "calibrate":
        return
    if calibration.exists():
        per_step = json.loads(calibration.read_text())["seconds_per_step"]
    else:  # the runs' own throughput (fair only when they ran on a quiet machine)
        per_step = {name: run_seconds_per_step(args.work / "runs" / name) for name in results}
        per_step["baseline"] = per_step["baseline-1x"]
    report = summarise(results, per_step, args.steps, args.variants, args.multiples)
    report["provenance"] = provenance(vars(args))
    write_json(args.work / "recipe.json", report)
    print_table(report)


def run_all(args: argparse.Namespace, qs: Any, corpus: Path, tokenizer: Path) -> dict[str, Any]:
    """The baseline at each multiple of the steps and each variant at 1x, each scored
    (reused when done)."""
    from codeparrot.io import write_json
    from codeparrot.training import train

    # the cheapest comparison first: the 1x baseline and the variants, then the longer runs
    first, *longer = args.multiples
    plan = [(f"baseline-{first}x", {}, first * args.steps)]
    plan += [(name, VARIANTS[name], args.steps) for name in args.variants]
    plan += [(f"baseline-{k}x", {}, k * args.steps) for k in longer]
    results: dict[str, Any] = {}
    for name, changes, steps in plan:
        data, tok, cache, train_changes = variant_data(args.work, corpus, tokenizer, qs, changes)
        cfg = train_config(args.work, data, tok, qs, name, steps, train_changes)
        done = cfg.output / "recipe_score.json"
        if done.exists():
            results[name] = json.loads(done.read_text())
            continue
        start = time.perf_counter()
        share_tokens(args.work, cfg.output, cache)
        # a run trained before an interrupted scoring continues (and stops at once)
        result = train(cfg.replace(resume=(cfg.output / "checkpoints").exists()))
        fim = bool(changes.get("fim_rate"))
        row = {"steps": steps, "changes": changes, "train_seconds": result.seconds,
               "tokens_per_s": result.tokens_per_s, "valid_loss": result.eval_loss,
               **score(cfg.output, lines_n=args.lines, infill_limit=args.infill, fim=fim)}  # fmt: skip
        # every run from the prefix alone: what a model without FIM can do, and for a FIM
        # model what the suffix adds, read off the same model
        if args.infill:
            scores = infill_scores(cfg.output, args.infill, suffix=False)
            row.update({f"prefix_only_{k}": v for k, v in scores.items()})
        row["wall_seconds"] = time.perf_counter() - start
        write_json(done, row)
        results[name] = row
        print(f"{name:18} steps {steps:5}  nats/char {row['nats_per_char']:.4f}  "
              f"lines EM {100 * row['line_exact_match']:.1f}%", flush=True)  # fmt: skip
    return results


def run_seconds_per_step(output: Path) -> float:
    """Median seconds per step of a finished run, from its metrics (after 20 warm-up steps)."""
    records = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
    rates = sorted(r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] > 20)
    meta = json.loads((output / "codeparrot_checkpoint.json").read_text())
    return meta["train_config"]["batch_size"] * meta["seq_length"] / rates[len(rates) // 2]


def summarise(
    results: dict[str, Any],
    per_step: dict[str, float],
    steps: int,
    variants: list[str],
    multiples: list[int],
) -> dict[str, Any]:
    """Each variant's worth in baseline compute: in steps, and in wall-clock (steps / the
    variant's cost per step relative to the baseline's, from the calibration)."""
    baseline = {k * steps: results[f"baseline-{k}x"]["nats_per_char"] for k in multiples}
    for name in variants:
        in_steps = equivalent_factor(baseline, steps, results[name]["nats_per_char"])
        results[name]["compute_equivalent_steps"] = in_steps
        if name not in per_step or "baseline" not in per_step:
            continue  # not calibrated yet: worth in steps only (``--stage calibrate`` adds it)
        cost = per_step[name] / per_step["baseline"]
        results[name]["cost_per_step"] = cost
        results[name]["compute_equivalent"] = in_steps / cost
    return {"seconds_per_step": per_step, "results": results}


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{'run':18} {'steps':>6} {'ms/step':>8} {'nats/char':>10} {'x steps':>8} "
          f"{'x wall':>7} {'line EM':>8} {'infill p@1':>10} {'prefix only':>11}")  # fmt: skip
    for name, row in report["results"].items():
        key = name.split("-")[0] if name.startswith("baseline") else name
        ms = 1000 * report["seconds_per_step"].get(key, float("nan"))
        in_steps = row.get("compute_equivalent_steps")
        factor = row.get("compute_equivalent")
        infill = row.get("infill_pass_at_1")
        alone = row.get("prefix_only_infill_pass_at_1")
        print(f"{name:18} {row['steps']:6} {ms:8.1f} {row['nats_per_char']:10.4f} "
              f"{in_steps if in_steps is not None else float('nan'):8.2f} "
              f"{factor if factor is not None else float('nan'):7.2f} "
              f"{100 * row['line_exact_match']:7.1f}% "
              f"{100 * infill if infill is not None else float('nan'):9.1f}% "
              f"{100 * alone if alone is not None else float('nan'):10.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
