"""Fill in the middle for free? Held-out left-to-right loss of FIM and non-FIM runs.

Trains one tokenizer (with the FIM sentinels) on a corpus, then the same model with the same
seed, data and steps once per variant: ``off`` (``--fim-rate 0``), ``document`` and
``context`` (``--fim-rate``, ``--fim-spm-rate``), and prints each variant's held-out
left-to-right loss per character on the corpus' first ``--files`` validation files, as a
ratio to ``off``. The issue's target: within 2% (ratio <= 1.02) at the quickstart's budget.

    OMP_WAIT_POLICY=ACTIVE .venv/bin/python bench/fim.py --corpus runs/quickstart/corpus

The budget is a step count (the quickstart's 1,000 steps of 16 x 256 tokens by default),
never wall time, so every variant sees the same tokens; finished runs are reused, so an
interrupted benchmark restarts with the same command. Infilling pass@1 (the issue's second
target) needs the engine's suffix support: ``codeparrot eval humaneval --task
infill-single-line`` on the runs this leaves in ``--output``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

# Run as a script, this folder comes first on sys.path, and bench/eval.py would then
# shadow the project's `eval` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

VARIANTS = ("off", "document", "context")


def _loss_per_char_module():
    spec = importlib.util.spec_from_file_location(
        "loss_per_char", Path(__file__).parent / "loss_per_char.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path("runs/quickstart/corpus"))
    parser.add_argument("--output", type=Path, default=Path("runs/fim"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--fim-rate", type=float, default=0.5)
    parser.add_argument("--fim-spm-rate", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--pre-tokenizer", default="gpt2", choices=("gpt2", "code"))
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--files", type=int, default=120, help="validation files scored")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from codeparrot.tokenizer import TokenizerConfig, train_tokenizer
    from codeparrot.training import TrainConfig, train

    tokenizer = args.output / "tokenizer"
    if not tokenizer.is_dir():
        train_tokenizer(
            TokenizerConfig(
                data=args.corpus, output=tokenizer, vocab_size=args.vocab_size, files=3000,
                pre_tokenizer=args.pre_tokenizer, model_max_length=256,
            )
        )  # fmt: skip
    lpc = _loss_per_char_module()
    texts = lpc.valid_texts(args.corpus, args.files)
    chars = sum(len(t) for t in texts)
    results = {}
    for variant in args.variants:
        run = args.output / variant
        if not (run / "codeparrot_checkpoint.json").exists():
            train(
                TrainConfig(
                    data=args.corpus, tokenizer=tokenizer, output=run, preset="tiny",
                    optimizer="adamw", schedule="cosine",
                    max_steps=args.steps, batch_size=args.batch_size, compile=args.compile,
                    pretokenized=True, seed=args.seed, progress=False,
                    fim_rate=0.0 if variant == "off" else args.fim_rate,
                    fim_spm_rate=args.fim_spm_rate,
                    fim_mode="context" if variant == "off" else variant,
                )
            )  # fmt: skip
        nll, tokens = lpc.score(run, texts)
        results[variant] = {"nats_per_char": nll / chars, "nats_per_token": nll / tokens}
    base = results.get("off", {}).get("nats_per_char")
    print(f"\n{len(texts)} held-out files, {chars:,} chars; {args.steps} steps each")
    print("| variant | nats/char | bits/char | ratio to off |")
    for variant, r in results.items():
        ratio = f"{r['nats_per_char'] / base:.4f}" if base else "-"
        bits = r["nats_per_char"] / math.log(2)
        print(f"| {variant} | {r['nats_per_char']:.4f} | {bits:.4f} | {ratio} |")
    settings = vars(args) | {"corpus": str(args.corpus), "output": str(args.output)}
    record = {"config": settings, "results": results}
    (args.output / "fim.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
