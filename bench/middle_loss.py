"""Does a FIM model read the code after the cursor? The middle's loss with and without it.

Greedy infilling pass@1 (`bench/suffix.py`) counts whole lines a small model gets exactly
right, and moves little. This bench asks the question one step earlier: on held-out code,
how many nats a token does the model pay for a middle when it sees the suffix (SPM and PSM
prompts, the layouts of `codeparrot.fim.layout`) against the same middle from the prefix
alone (left to right)? A model that uses the suffix pays less in SPM or PSM. A checkpoint
trained without FIM is scored the same way where its tokenizer has the sentinels (in SPM it
reads the suffix as plain text before the prefix: more context for it too); without them,
left to right only.

Two kinds of middle, from ``--windows`` seeded windows of each held-out file (each about
twice the model's context in characters): ``random``, between two random characters (the
training distribution), and ``line``, one whole line from its start to its line break
(HumanEval's single-line tasks, an editor's empty line). The first ``--middle-tokens``
tokens of a middle are scored; prefix and suffix lose tokens at their far ends to fit.

    .venv/bin/python bench/middle_loss.py RUN/model [RUN/model ...] [--data DIR]

``--data``: a folder of .py files or a corpus (its valid split); default: the held-out
packages that `codeparrot eval loss` and `eval lines` use (not in the embedded default).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/eval.py would then
# shadow the project's `eval` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

KINDS = ("random", "line")
ORDERS = ("left to right", "spm", "psm")


def split(text: str, kind: str, rng: random.Random) -> tuple[str, str, str] | None:
    """(prefix, middle, suffix) of ``text``, or None where it has no middle of that kind."""
    if kind == "random":
        a, b = sorted(rng.sample(range(1, len(text)), 2))
        return text[:a], text[a:b], text[b:]
    quarter = len(text) // 4  # keep some prefix and suffix on both sides
    starts = [
        i + 1
        for i, ch in enumerate(text[quarter : len(text) - quarter], quarter)
        if ch == "\n" and text[i + 1 : i + 2].strip() and "\n" in text[i + 1 :]
    ]
    if not starts:
        return None
    a = rng.choice(starts)
    b = text.index("\n", a) + 1
    return text[:a], text[a:b], text[b:]


def fit(prefix: list[int], suffix: list[int], room: int) -> tuple[list[int], list[int]]:
    """Drop tokens at the far ends (the prefix's start, the suffix's end) until both fit."""
    cut_prefix = max(0, len(prefix) - max(room // 2, room - len(suffix)))
    prefix = prefix[cut_prefix:]
    return prefix, suffix[: max(0, room - len(prefix))]


def middle_nats(model: Any, ids: list[int], n_middle: int) -> float:
    """Total nats of the last ``n_middle`` tokens of ``ids`` given what precedes them."""
    import torch

    x = torch.tensor([ids], device=model.device)
    with torch.inference_mode():
        logprobs = model(x).logits[0, -n_middle - 1 : -1].float().log_softmax(-1)
    return float(-logprobs.gather(1, x[0, -n_middle:, None]).sum())


def score(path: Path, files: list[Any], kind: str, args: argparse.Namespace) -> dict[str, float]:
    """Mean nats per middle token of one checkpoint, per prompt order."""
    from codeparrot.fim import FimTokens, layout
    from codeparrot.models.checkpoint import load_checkpoint

    model, tokenizer, _meta = load_checkpoint(path)
    model.eval()
    fim = FimTokens.from_tokenizer(tokenizer)  # None: left to right only
    context = int(getattr(model.config, "n_positions", 0) or model.config.max_position_embeddings)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    rng = random.Random(args.seed)
    nats = dict.fromkeys(ORDERS, 0.0)
    tokens = 0
    width = int(context * args.chars_per_position)
    for f in (f for f in files for _ in range(args.windows)):
        start = rng.randrange(max(1, len(f.text) - width))
        window = f.text[start : start + width]
        pieces = split(window, kind, rng) if len(window) >= 3 else None
        if pieces is None:
            continue
        prefix, middle, suffix = (encode(p) for p in pieces)
        middle = middle[: args.middle_tokens]
        if not middle:
            continue
        room = context - len(middle) - 3  # the three sentinels
        p, s = fit(prefix, suffix, room)
        nats["left to right"] += middle_nats(model, [*prefix[-(room + 3) :], *middle], len(middle))
        for order in ("spm", "psm") if fim is not None else ():
            nats[order] += middle_nats(model, layout(p, s, middle, fim, order), len(middle))
        tokens += len(middle)
    if fim is None:
        nats["spm"] = nats["psm"] = float("nan")
    return {order: total / max(1, tokens) for order, total in nats.items()} | {"tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkpoints", type=Path, nargs="+", help="checkpoints (without FIM: left to right only)"
    )
    parser.add_argument("--data", type=Path, default=None, help="held-out code (see above)")
    parser.add_argument("--files", type=int, default=300, help="held-out files (seeded)")
    parser.add_argument("--windows", type=int, default=4, help="windows drawn per file")
    parser.add_argument("--middle-tokens", type=int, default=40, help="tokens scored a middle")
    parser.add_argument(
        "--chars-per-position", type=float, default=2.2, help="window size / context"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from codeparrot.eval.heldout import read_heldout

    files = read_heldout(args.data, max_files=args.files, seed=args.seed)
    print("| checkpoint | middle | tokens | left to right | SPM | PSM | SPM / left to right |")
    print("|---|---|---|---|---|---|---|")
    for path in args.checkpoints:
        for kind in KINDS:
            r = score(path, files, kind, args)
            print(
                f"| {path} | {kind} | {r['tokens']:,} | {r['left to right']:.3f} | "
                f"{r['spm']:.3f} | {r['psm']:.3f} | {r['spm'] / r['left to right']:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
