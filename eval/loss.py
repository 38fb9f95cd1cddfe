"""``codeparrot eval loss``: held-out loss per character and per byte, comparable across tokenizers.

Loss per token depends on the tokenizer (a vocabulary that packs more text per token has a
higher loss per token for the same model quality), so checkpoints are compared on the total
negative log-likelihood of the same files divided by their characters (nats/char) or by their
UTF-8 bytes (bits/byte). Each file is scored as training sees a document: after an
end-of-text token. Files longer than the context are scored in windows that overlap by half,
every token once, with at least half a context before it (except in the first window).

``--task humaneval`` scores HumanEval's 164 reference solutions after their prompts instead:
the nats of prompt + solution less those of the prompt alone, per character of the
solutions. It moves with every change of recipe, where pass@k of a small model is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.errors import DataError
from codeparrot.eval.heldout import HELDOUT_DATA, HeldoutFile, describe, read_heldout
from codeparrot.io import atomic_open, provenance, write_json
from codeparrot.options import CHECKPOINT, DEVICE

SOLUTION_TASKS = ("humaneval",)


@dataclass(frozen=True)
class LossConfig(Config):
    """Held-out nats per character and bits per byte of one or more checkpoints, side by side."""

    checkpoints: tuple[Path, ...] = CHECKPOINT.field(())
    data: Path | None = HELDOUT_DATA.field()
    task: str | None = option(
        None,
        "instead of files, score the reference solutions of a code benchmark after their "
        "prompts (humaneval: HumanEval's 164, offline), per character of the solutions",
        choices=SOLUTION_TASKS,
    )
    max_files: int = option(200, "score a seeded sample of at most this many files", ge=1)
    seed: int = option(0, "seed of the file sample")
    output: Path | None = option(None, "write the table as JSON here")
    chart: Path | None = option(None, "write a bar chart (PNG) of nats/char here")
    device: str = DEVICE.field("cpu", "torch device")

    def problems(self) -> list[str]:
        out = [] if self.checkpoints else ["give at least one CHECKPOINT"]
        if self.task is not None and self.data is not None:
            out.append("--task and --data: score a benchmark's solutions or files, not both")
        return out


@dataclass(frozen=True)
class LossRow:
    """One checkpoint's held-out loss."""

    checkpoint: str
    tokens: int
    chars: int
    bytes: int
    nats: float

    @property
    def nats_per_char(self) -> float:
        return self.nats / self.chars

    @property
    def bits_per_byte(self) -> float:
        return self.nats / self.bytes / math.log(2)

    @property
    def nats_per_token(self) -> float:
        return self.nats / self.tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "tokens": self.tokens,
            "chars": self.chars,
            "bytes": self.bytes,
            "nats": self.nats,
            "nats_per_char": self.nats_per_char,
            "bits_per_byte": self.bits_per_byte,
            "nats_per_token": self.nats_per_token,
        }


def document_nats(model: Any, ids: Sequence[int], context: int) -> float:
    """Total negative log-likelihood (nats) of ``ids[1:]`` given what precedes each token."""
    import torch

    total = 0.0
    stride = max(1, context // 2)
    scored = 1  # ids[0] (end-of-text) is given, never predicted
    while scored < len(ids):
        start = max(0, min(scored - stride, len(ids) - context)) if scored > 1 else 0
        end = min(len(ids), start + context)
        window = torch.tensor([list(ids[start:end])], device=model.device)
        with torch.no_grad():
            logits = model(window).logits[0].float()
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        targets = window[0, 1:]
        picked = -logprobs.gather(1, targets[:, None])[:, 0]
        # positions start+1 .. end-1 are predicted here; keep those not scored yet
        first = scored - (start + 1)
        total += float(picked[first:].sum())
        scored = end
    return total


def checkpoint_loss(
    path: Path, files: Sequence[HeldoutFile], *, device: str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> LossRow:  # fmt: skip
    """Score ``files`` with one checkpoint."""
    import torch

    from codeparrot.models.checkpoint import load_checkpoint

    model, tokenizer, _meta = load_checkpoint(path)
    model.to(device).eval()
    context = int(getattr(model.config, "n_positions", 0) or model.config.max_position_embeddings)
    eos = tokenizer.eos_token_id
    tokens = chars = nbytes = 0
    nats = 0.0

    def encode(text: str) -> list[int]:
        return [eos, *tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]]

    with torch.inference_mode():
        for f in files:
            ids = encode(f.context + f.text)
            nats += document_nats(model, ids, context)
            tokens += len(ids) - 1
            if f.context:  # the text given its context: what the context alone costs is not
                before = encode(f.context)  # counted (the tokenizations agree up to the seam)
                nats -= document_nats(model, before, context)
                tokens -= len(before) - 1
            chars += len(f.text)
            nbytes += len(f.text.encode("utf-8"))
            if progress is not None:
                progress(1)
    return LossRow(str(path), tokens, chars, nbytes, nats)


def evaluate_loss(
    config: LossConfig, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Every checkpoint on the same files; writes ``config.output``/``chart`` when given."""
    if config.task is not None:
        files = benchmark_solutions(config.task)
    else:
        files = read_heldout(config.data, max_files=config.max_files, seed=config.seed)
    rows = [
        checkpoint_loss(path, files, device=config.device, progress=progress)
        for path in config.checkpoints
    ]
    report = {
        "data": _data_name(config),
        **describe(files),
        "rows": [row.to_dict() for row in rows],
        "provenance": provenance(config),
    }
    if config.output is not None:
        write_json(config.output, report)
    if config.chart is not None:
        write_chart(rows, config.chart)
    return report


def benchmark_solutions(task: str) -> list[HeldoutFile]:
    """A benchmark's reference solutions, each with its prompt as unscored context."""
    from codeparrot.eval.data import load_problems

    if task not in SOLUTION_TASKS:
        raise DataError(f"--task {task!r}: choose from {', '.join(SOLUTION_TASKS)}")
    return [
        HeldoutFile(p["task_id"], p["canonical_solution"], context=p["prompt"])
        for p in load_problems().values()
    ]


def _data_name(config: LossConfig) -> str:
    if config.task is not None:
        return f"{config.task} reference solutions after their prompts"
    return str(config.data) if config.data else "held-out packages"


def write_chart(rows: Sequence[LossRow], path: Path) -> None:
    """Horizontal bars of nats/char, one per checkpoint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.2))
    names = [Path(r.checkpoint).name or r.checkpoint for r in rows]
    ax.barh(names, [r.nats_per_char for r in rows], color="#4c72b0")
    ax.set_xlabel("held-out nats per character (lower is better)")
    ax.invert_yaxis()
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    plt.close(fig)


def format_table(report: dict[str, Any]) -> str:
    """The report as a plain-text table."""
    head = (
        f"{'checkpoint':40} {'nats/char':>10} {'bits/byte':>10} {'nats/token':>11} {'tokens':>10}"
    )
    lines = [f"{report['files']} files, {report['chars']:,} characters ({report['data']})", head]
    for row in report["rows"]:
        lines.append(
            f"{row['checkpoint'][-40:]:40} {row['nats_per_char']:10.4f} "
            f"{row['bits_per_byte']:10.4f} {row['nats_per_token']:11.4f} {row['tokens']:10,}"
        )
    return "\n".join(lines)
