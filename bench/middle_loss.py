"""Does a FIM model read the code after the cursor? The middle's loss with and without it.

Greedy infilling pass@1 (`bench/suffix.py`) counts whole lines a small model gets exactly
right, and moves little. This bench asks the question one step earlier: on held-out code,
how many nats does the model pay for a middle when it sees the suffix (SPM and PSM
prompts, the layouts of `codeparrot.fim.layout`) against the same middle from the prefix
alone (left to right)? A model that uses the suffix pays less in SPM or PSM. A checkpoint
trained without FIM is scored the same way where its tokenizer has the sentinels (in SPM it
reads the suffix as plain text before the prefix: more context for it too); without them,
left to right only.

Two kinds of middle, from ``--windows`` seeded windows of each held-out file (each about
twice the model's context in characters): ``random``, between two random characters at most
``--middle-chars`` apart (the training distribution), and ``line``, one whole non-blank line
from its start to its line break (HumanEval's single-line tasks, an editor's empty line).
Scores are nats per character of the middles, so the orders compare whatever the tokens:
SPM and PSM score the middle healed as the engine heals it (the prefix's last token backed
up and written again with the middle, where the prefix runs into it); left to right scores
prefix + middle tokenized together, as plain text. Prefix and suffix lose tokens at their far ends to fit the context.

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


def split(
    text: str, kind: str, rng: random.Random, max_chars: int = 160
) -> tuple[str, str, str] | None:
    """(prefix, middle, suffix) of ``text``, or None where it has no middle of that kind.

    A random middle is cut between two random characters at most ``max_chars`` apart."""
    if kind == "random":
        a, b = sorted(rng.sample(range(1, len(text)), 2))
        b = min(b, a + max_chars)
        return text[:a], text[a:b], text[b:]
    quarter = len(text) // 4  # keep some prefix and suffix on both sides
    lines = []  # (start, end) of each non-blank whole line in the middle half
    start = text.find("\n", quarter) + 1
    while 0 < start < len(text) - quarter:
        end = text.find("\n", start) + 1
        if not end:
            break
        if text[start:end].strip():
            lines.append((start, end))
        start = end
    if not lines:
        return None
    a, b = rng.choice(lines)
    return text[:a], text[a:b], text[b:]


def fit(prefix: list[int], suffix: list[int], room: int) -> tuple[list[int], list[int]]:
    """Drop tokens at the far ends (the prefix's start, the suffix's end) until both fit."""
    cut_prefix = max(0, len(prefix) - max(room // 2, room - len(suffix)))
    prefix = prefix[cut_prefix:]
    return prefix, suffix[: max(0, room - len(prefix))]


def nats_after(model: Any, ids: list[int], start: int) -> float:
    """Total nats of ``ids[start:]`` given ``ids[:start]`` (one forward pass)."""
    import torch

    if start >= len(ids):
        return 0.0
    x = torch.tensor([ids], device=model.device)
    with torch.inference_mode():
        logprobs = model(x).logits[0, start - 1 : -1].float().log_softmax(-1)
    return float(-logprobs.gather(1, x[0, start:, None]).sum())


def left_to_right(model: Any, prefix: list[int], joint: list[int], context: int) -> float:
    """Nats of the middle from the prefix alone, tokenized as plain text would be:
    nats of ``joint`` (prefix + middle encoded together) after the tokens it shares with
    ``prefix``, less those of the prefix's own tokens after that point (one or two at the
    seam, where the middle's first characters may have merged with the prefix's last)."""
    shared = next(
        (i for i, (x, y) in enumerate(zip(prefix, joint, strict=False)) if x != y),
        min(len(prefix), len(joint)),
    )
    cut = max(0, len(joint) - context)  # the same left edge for both
    if shared - cut < 1:
        return float("nan")
    return nats_after(model, joint[cut:], shared - cut) - nats_after(
        model, prefix[cut:], shared - cut
    )


def fim_nats(
    model: Any, parts: tuple[list[int], list[int], str], fim: Any, order: str, encode: Any,
    tokenizer: Any,
) -> float:  # fmt: skip
    """Nats of the middle in a FIM prompt, healed as the engine heals it.

    The engine backs up over the prefix's last token where the prefix runs into the middle
    (SPM always, PSM when the prefix ends inside a word), so the model writes that token's
    text and the middle as plain text would tokenize them. Scored the same way: the seam
    token's text plus the middle, less what the seam token alone costs there."""
    from codeparrot.fim import layout
    from codeparrot.generation.prompt import ends_in_word as _ends_in_word

    prefix, suffix, middle = parts
    seam = tokenizer.decode(prefix[-1:])
    if prefix and (order == "spm" or _ends_in_word(seam)):
        healed, alone = encode(seam + middle), prefix[-1:]
        head = layout(prefix[:-1], suffix, [], fim, order)
        return nats_after(model, head + healed, len(head)) - nats_after(
            model, head + alone, len(head)
        )
    ids = layout(prefix, suffix, encode(middle), fim, order)
    return nats_after(model, ids, len(ids) - len(encode(middle)))


def score(
    model: Any, tokenizer: Any, files: list[Any], kind: str, args: argparse.Namespace
) -> dict[str, float]:
    """Mean nats per character of the middles for one checkpoint, per prompt order."""
    from codeparrot.fim import FimTokens

    fim = FimTokens.from_tokenizer(tokenizer)  # None: left to right only
    context = int(getattr(model.config, "n_positions", 0) or model.config.max_position_embeddings)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    rng = random.Random(args.seed)
    nats = dict.fromkeys(ORDERS, 0.0)
    chars = middles = 0
    width = int(context * args.chars_per_position)
    for f in (f for f in files for _ in range(args.windows)):
        start = rng.randrange(max(1, len(f.text) - width))
        window = f.text[start : start + width]
        pieces = split(window, kind, rng, args.middle_chars) if len(window) >= 3 else None
        if pieces is None:
            continue
        prefix, middle, suffix = (encode(p) for p in pieces)
        room = context - len(middle) - 3  # the three sentinels
        if room < 2:
            continue
        lr = left_to_right(model, prefix, encode(pieces[0] + pieces[1]), context)
        if lr != lr:  # nan: the middle alone fills the context
            continue
        nats["left to right"] += lr
        p, s = fit(prefix, suffix, room)
        for order in ("spm", "psm") if fim is not None else ():
            nats[order] += fim_nats(model, (p, s, pieces[1]), fim, order, encode, tokenizer)
        chars += len(pieces[1])
        middles += 1
    if fim is None:
        nats["spm"] = nats["psm"] = float("nan")
    return {order: total / max(1, chars) for order, total in nats.items()} | {
        "chars": chars,
        "middles": middles,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkpoints", type=Path, nargs="+", help="checkpoints (without FIM: left to right only)"
    )
    parser.add_argument("--data", type=Path, default=None, help="held-out code (see above)")
    parser.add_argument("--files", type=int, default=300, help="held-out files (seeded)")
    parser.add_argument("--windows", type=int, default=4, help="windows drawn per file")
    parser.add_argument(
        "--middle-chars", type=int, default=160, help="the longest random middle, characters"
    )
    parser.add_argument(
        "--chars-per-position", type=float, default=2.2, help="window size / context"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from codeparrot.eval.heldout import read_heldout
    from codeparrot.models.checkpoint import load_checkpoint

    files = read_heldout(args.data, max_files=args.files, seed=args.seed)
    print(
        "| checkpoint | middle | middles | characters | left to right | SPM | PSM | SPM / left to right |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path in args.checkpoints:
        model, tokenizer, _meta = load_checkpoint(path)  # once for both kinds
        model.eval()
        for kind in KINDS:
            r = score(model, tokenizer, files, kind, args)
            print(
                f"| {path} | {kind} | {r['middles']:,} | {r['chars']:,} | {r['left to right']:.4f} | "
                f"{r['spm']:.4f} | {r['psm']:.4f} | {r['spm'] / r['left to right']:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
