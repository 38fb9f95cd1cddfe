"""Model quality within a fixed compute budget.

Builds the corpus from the embedded default, trains the tokenizer and the quickstart's model
(its preset and recipe, with 512 positions: `tiny-qwen`, Muon + WSD + FIM)
for ``--steps`` steps, then scores HumanEval with n samples per problem at temperatures 0.2
and 0.8 in the sandbox, and prints held-out loss and pass@1/10/100.

    OMP_WAIT_POLICY=ACTIVE .venv/bin/python bench/quality.py --output runs/quality

``--anneal-steps K`` spends the last K of the steps annealing the pretrained model on the
corpus's function documents alone (`codeparrot/data/functions.py`; AdamW, cosine, no FIM),
a two-stage recipe aimed at HumanEval.

The budget is a step count: 2,300 steps of 16 x 512 tokens took 65 min on 2 cores here
(RESULTS.md), so other work on the machine can make the run slower but never smaller;
``--minutes`` only caps the wall time. Torch's OpenMP threads lose 3-4x of their speed to any
other busy process unless they spin (``OMP_WAIT_POLICY=ACTIVE``); with that set, a job started
beside it under ``chrt -i 0`` barely slows it. Reuses the quickstart's steps (and their reuse
of finished work), so an interrupted run can be restarted with the same command. The
evaluation adds ~25 min (164 x n samples per temperature).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/eval.py would then
# shadow the project's `eval` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("runs/quality"))
    parser.add_argument(
        "--steps", type=int, default=2300, help="training steps (the cosine schedule ends here)"
    )
    parser.add_argument("--minutes", type=float, default=120.0, help="cap on training wall time")
    parser.add_argument(
        "--n-positions",
        type=int,
        default=512,
        help="the model's context: tiny's own 256 would truncate half the HumanEval prompts "
        "(median 125, longest 419 tokens with the quickstart tokenizer) beside 128 new tokens",
    )
    parser.add_argument(
        "--min-docstring-share",
        type=float,
        default=None,
        help="data selection (`codeparrot data build --min-docstring-share`; default: the "
        "quickstart's)",
    )
    parser.add_argument(
        "--function-documents",
        type=int,
        default=None,
        help="data selection (`codeparrot data build --function-documents`; default: the "
        "quickstart's)",
    )
    parser.add_argument(
        "--fim-rate",
        type=float,
        default=None,
        help="share of fill-in-the-middle examples (default: the quickstart's; the one-hour "
        "runs in docs/log used 0.5)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="tokenizer vocabulary (default: the quickstart's 8,192; 4,096 makes a step of "
        "`tiny-qwen` ~0.84x as long, Recipe ablations in RESULTS.md)",
    )
    parser.add_argument(
        "--anneal-steps",
        type=int,
        default=0,
        help="the last K of --steps anneal the pretrained model on function documents only "
        "(the corpus's short documented functions, HumanEval's shape: AdamW, lr "
        "--anneal-lr, cosine, no FIM); the pretraining gets --steps - K",
    )
    parser.add_argument("--anneal-lr", type=float, default=3e-4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--n", type=int, default=100, help="HumanEval samples per problem")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.2, 0.8])
    parser.add_argument("--limit", type=int, default=None, help="only the first K problems")
    return parser.parse_args()


def _config(args: argparse.Namespace) -> Any:
    """The quickstart's config for this run: its recipe with the data, FIM and vocabulary
    settings given."""
    from codeparrot.quickstart import QuickstartConfig

    cfg = QuickstartConfig(
        output=args.output,
        max_files=0,
        max_steps=args.steps - args.anneal_steps,
        n_positions=args.n_positions,
        eval_max_new_tokens=args.max_new_tokens,
        max_minutes=args.minutes,
        allow_code_execution=False,  # the evaluation below uses its own settings
    )
    if args.min_docstring_share is not None:
        cfg = cfg.replace(min_docstring_share=args.min_docstring_share)
    if args.function_documents is not None:
        cfg = cfg.replace(function_documents=args.function_documents)
    if args.fim_rate is not None:
        cfg = cfg.replace(fim_rate=args.fim_rate)
    if args.vocab_size is not None:
        cfg = cfg.replace(vocab_size=args.vocab_size)
    return cfg


def main() -> None:
    args = _arguments()
    from codeparrot.eval.config import HumanEvalConfig
    from codeparrot.eval.humaneval import run
    from codeparrot.quickstart import run_quickstart

    cfg = _config(args)
    state = run_quickstart(cfg)
    train = state["steps"]["train"]["facts"]
    model = cfg.model_dir
    if args.anneal_steps:
        model, train = anneal(cfg, args.anneal_steps, args.anneal_lr, train)
    rows = []
    for temperature in args.temperatures:
        summary = run(
            HumanEvalConfig(
                checkpoint=model,
                output=model / f"humaneval-t{temperature}-n{args.n}",
                n=args.n,
                batch_size=min(args.n, 50),
                temperature=temperature,
                max_new_tokens=args.max_new_tokens,
                limit=args.limit,
                allow_code_execution=True,
            )
        )
        rows.append((temperature, summary))
    _report(args, cfg.preset, train, rows)


def _report(args: argparse.Namespace, preset: str, train: dict, rows: list) -> None:
    """The model's figures and pass@k per temperature, printed and kept in quality.json."""
    print(
        f"\n{preset} preset with {args.n_positions} positions, {train['minutes']:.0f} min, {train['tokens_seen'] / 1e6:.1f}M tokens, "
        f"{train['parameters'] / 1e6:.1f}M parameters: held-out loss {train['eval_loss']:.3f}, "
        f"perplexity {train['perplexity']:.1f}"
    )
    print("| temperature | problems solved | " + " | ".join(rows[0][1]["pass_at_k"]) + " |")
    for temperature, summary in rows:
        scores = " | ".join(f"{100 * v:.2f}%" for v in summary["pass_at_k"].values())
        print(f"| {temperature} | {summary['solved']} / {summary['problems']} | {scores} |")
    (args.output / "quality.json").write_text(
        json.dumps(
            {
                "config": vars(args) | {"output": str(args.output)},
                "train": train,
                "humaneval": {str(t): s["pass_at_k"] for t, s in rows},
            },
            indent=2,
        )
    )


def anneal(cfg: Any, steps: int, lr: float, pretrain: dict[str, Any]) -> tuple[Path, dict]:
    """Continue the quickstart's model for ``steps`` on its corpus's function documents only
    (built once); returns the annealed model and its facts, which add up both stages."""
    from codeparrot.data.functions import add_function_documents
    from codeparrot.eval.loss import LossConfig, evaluate_loss
    from codeparrot.training import TrainConfig, train

    data = cfg.output / "corpus-functions"
    if not (data / "manifest.json").exists():
        print("function documents:", add_function_documents(cfg.corpus_dir, data, 1, only=True))
    out = cfg.output / "model-annealed"
    result = train(
        TrainConfig(
            data=data, output=out, init_from=cfg.model_dir, max_steps=steps,
            batch_size=cfg.batch_size, seq_length=cfg.n_positions, learning_rate=lr,
            optimizer="adamw", schedule="cosine", warmup_steps=20, min_lr_ratio=0.1,
            fim_rate=0.0, compile=cfg.compile, pretokenized=True, seed=cfg.seed,
            resume=(out / "checkpoints").is_dir(),
        )
    )  # fmt: skip
    solutions = evaluate_loss(LossConfig(checkpoints=(out,), task="humaneval"))
    facts = {
        "humaneval_solutions_nats_per_char": solutions["rows"][0]["nats_per_char"],
        "pretrain": pretrain,
        "step": pretrain["step"] + result.step,
        "tokens_seen": pretrain["tokens_seen"] + result.tokens_seen,
        "parameters": result.parameters,
        "eval_loss": result.eval_loss,
        "perplexity": result.perplexity,
        "minutes": pretrain["minutes"] + result.seconds / 60,
    }
    print(
        f"annealed {steps} steps on function documents: HumanEval solutions "
        f"{pretrain['humaneval_solutions_nats_per_char']:.4f} -> "
        f"{facts['humaneval_solutions_nats_per_char']:.4f} nats/char, held-out loss "
        f"{pretrain['eval_loss']:.3f} -> {result.eval_loss:.3f}"
    )
    return out, facts


if __name__ == "__main__":
    main()
