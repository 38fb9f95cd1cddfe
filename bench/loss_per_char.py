"""Held-out loss per character of checkpoints with different tokenizers.

A loss per token depends on how much text a token holds, so checkpoints trained with
different tokenizers are compared per character: each checkpoint scores the same
validation files (the first ``--files`` of a corpus' ``valid`` split), tokenized with its
own tokenizer, in non-overlapping windows of its context, starting from end-of-text.

    .venv/bin/python bench/loss_per_char.py --corpus runs/quickstart/corpus CKPT [CKPT ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path


def valid_texts(corpus: Path, files: int) -> list[str]:
    """The first ``files`` documents of a corpus' ``valid`` split, in shard order."""
    texts: list[str] = []
    for shard in sorted((corpus / "valid").glob("*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as fh:
            texts += [json.loads(line)["content"] for line in fh]
    if not texts:
        raise SystemExit(f"{corpus}/valid: no files")
    return texts[:files]


def score(checkpoint: Path, texts: list[str]) -> tuple[float, int]:
    """(summed next-token loss in nats, tokens predicted) of a checkpoint on ``texts``."""
    import torch
    import torch.nn.functional as F

    from codeparrot.models.checkpoint import load_checkpoint
    from codeparrot.models.presets import model_context

    # the core loader: every check, and never the checkpoint's own code
    model, tokenizer, _meta = load_checkpoint(checkpoint)
    model.eval()
    window = model_context(model.config)
    nll, tokens = 0.0, 0
    with torch.inference_mode():
        for text in texts:
            ids = [tokenizer.eos_token_id]
            ids += tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
            for start in range(0, len(ids) - 1, window - 1):
                chunk = torch.tensor([ids[start : start + window]])
                if chunk.size(1) < 2:
                    break
                logits = model(chunk).logits[0, :-1].float()
                nll += F.cross_entropy(logits, chunk[0, 1:], reduction="sum").item()
                tokens += chunk.size(1) - 1
    return nll, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", type=Path, nargs="+")
    parser.add_argument("--corpus", type=Path, required=True, help="a corpus with a valid split")
    parser.add_argument("--files", type=int, default=120, help="validation files scored")
    args = parser.parse_args()

    texts = valid_texts(args.corpus, args.files)
    chars = sum(len(t) for t in texts)
    for checkpoint in args.checkpoints:
        nll, tokens = score(checkpoint, texts)
        print(
            f"{checkpoint}: {len(texts)} files, {chars:,} chars, {tokens:,} tokens "
            f"({chars / tokens:.2f} chars/token): {nll / tokens:.3f} nats/token, "
            f"{nll / chars:.4f} nats/char ({nll / chars / math.log(2):.4f} bits/char)"
        )


if __name__ == "__main__":
    main()
