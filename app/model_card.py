"""What the playground says about a checkpoint: the facts its artefacts record.

Everything here reads small files beside the checkpoint (docs/artefacts.md) and imports
only the standard library, so showing a card never loads the model:

- ``D/codeparrot_checkpoint.json``: step, tokens seen, parameters, eval loss, perplexity;
- ``D/humaneval/summary.json`` and ``pass_at_k.png``: the harness report, when present;
- ``RUN/metrics.jsonl`` and ``RUN/loss_curve.png``: the training curve, where ``RUN`` is
  the checkpoint itself (the latest export) or the run above ``RUN/checkpoints/step-N/``.

A foreign checkpoint (any local Hugging Face causal LM) has none of these files; its
parameter count is then read from the safetensors headers.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codeparrot.fim import TEMPLATES

CHECKPOINT_FACTS = "codeparrot_checkpoint.json"


@dataclass(frozen=True)
class ModelCard:
    """Facts of one checkpoint directory; ``None`` where an artefact does not say."""

    path: Path
    exists: bool
    parameters: int | None = None
    parameters_source: str | None = None  # "checkpoint" | "safetensors"
    tokens_seen: int | None = None
    step: int | None = None
    preset: str | None = None
    eval_loss: float | None = None
    perplexity: float | None = None
    context_length: int | None = None
    fill_in_the_middle: bool | None = None  # FIM sentinels, and a model trained on them
    pass_at_k: dict[str, float] = field(default_factory=dict)
    humaneval: dict[str, Any] | None = None
    humaneval_plot: Path | None = None
    run_dir: Path | None = None
    loss_curve: Path | None = None
    metrics: tuple[dict[str, float], ...] = ()
    problems: tuple[str, ...] = ()  # artefacts present but unreadable

    @property
    def name(self) -> str:
        return checkpoint_label(self.path)

    def summary_markdown(self) -> str:
        """The short card shown next to the checkpoint picker."""
        if not self.exists:
            return f"**{self.name}**: no such directory `{self.path}`"
        rows = [
            ("parameters", _count(self.parameters)),
            ("tokens trained", _count(self.tokens_seen)),
            ("steps", _count(self.step, exact=True)),
            ("eval loss", _float(self.eval_loss)),
            ("perplexity", _float(self.perplexity, digits=2)),
            ("context", _count(self.context_length, exact=True, unit=" tokens")),
        ]
        for key, value in sorted(self.pass_at_k.items(), key=lambda kv: _k_of(kv[0])):
            rows.append((f"HumanEval {key}", f"{100 * value:.2f}%"))
        if not self.pass_at_k:
            rows.append(("HumanEval", "no report beside this checkpoint"))
        body = "\n".join(f"| {k} | {v} |" for k, v in rows)
        out = f"**{self.name}** `{self.path}`\n\n| fact | value |\n|---|---|\n{body}\n"
        if self.parameters_source == "safetensors":
            out += "\n_No training record: parameters counted from the weights file._\n"
        for p in self.problems:
            out += f"\n⚠️ {p}\n"
        return out

    def humaneval_markdown(self) -> str:
        """The harness report for the second tab."""
        if not self.humaneval:
            return (
                "No HumanEval report beside this checkpoint. Run "
                f"`codeparrot eval humaneval --checkpoint {self.path}` to make one."
            )
        lines = ["| metric | value |", "|---|---|"]
        for key, value in sorted(self.pass_at_k.items(), key=lambda kv: _k_of(kv[0])):
            lines.append(f"| {key} | {100 * value:.2f}% |")
        for key in ("problems", "samples", "solved"):
            value = _int(self.humaneval.get(key))
            if value is not None:
                lines.append(f"| {key} | {value:,} |")
        gen = self.humaneval.get("generation") or self.humaneval.get("generation_config")
        if isinstance(gen, dict):
            shown = ", ".join(
                f"{k}={gen[k]}"
                for k in ("n", "temperature", "top_p", "max_new_tokens", "seed")
                if k in gen
            )
            if shown:
                lines.append(f"| generation | {shown} |")
        out = "\n".join(lines) + "\n"
        solved = self.solved_problems()
        if solved:
            shown = ", ".join(f"`{t}` ({c}/{n})" for t, c, n in solved[:40])
            more = f" and {len(solved) - 40} more" if len(solved) > 40 else ""
            out += f"\nSolved at least once: {shown}{more}.\n"
        return out

    def solved_problems(self) -> list[tuple[str, int, int]]:
        """(task id, samples passed, samples) of each problem solved at least once."""
        per = (self.humaneval or {}).get("per_problem")
        if not isinstance(per, dict):
            return []
        out = []
        for task, counts in per.items():
            if isinstance(counts, dict):
                passed, samples = _int(counts.get("passed")), _int(counts.get("samples"))
                if passed and samples:
                    out.append((str(task), passed, samples))
        return out


def checkpoint_label(path: Path) -> str:
    """A short name for a checkpoint: ``run/step-000500`` or the directory name."""
    path = Path(path)
    if path.parent.name == "checkpoints" and path.parent.parent.name:
        return f"{path.parent.parent.name}/{path.name}"
    return path.name or str(path)


def _hub_snapshot(path: Path) -> Path | None:
    """The local directory of a Hub id ``ORG/NAME[@REV]``; None when it is not one or
    cannot be fetched (the engine's loader then says why)."""
    from codeparrot.errors import CodeparrotError
    from codeparrot.hub import looks_like_hub_id
    from codeparrot.models.checkpoint import resolve_checkpoint

    if not looks_like_hub_id(str(path)):
        return None
    try:
        local = resolve_checkpoint(path)
    except CodeparrotError:
        return None
    return local if local.is_dir() else None


def read_model_card(path: str | Path) -> ModelCard:
    """Gather the facts of checkpoint ``path`` from the files beside it. Never raises on them."""
    path = Path(path)
    if not path.is_dir():
        local = _hub_snapshot(path)  # a Hub id: the facts of its snapshot in the cache
        if local is None:
            return ModelCard(path=path, exists=False)
        return replace(read_model_card(local), path=path)
    problems: list[str] = []
    facts = _read_json_object(path / CHECKPOINT_FACTS, problems) or {}
    model_config = _read_json_object(path / "config.json", problems) or {}

    parameters = _int(facts.get("parameters"))
    source = "checkpoint" if parameters is not None else None
    if parameters is None:
        parameters = safetensors_parameter_count(path)
        source = "safetensors" if parameters is not None else None
    context = _int(model_config.get("n_positions") or model_config.get("max_position_embeddings"))

    report_dir = path / "humaneval"
    humaneval = _read_json_object(report_dir / "summary.json", problems)
    pass_at_k: dict[str, float] = {}
    if humaneval:
        raw = humaneval.get("pass_at_k") or {}
        if isinstance(raw, dict):
            pass_at_k = {
                str(k): float(v)
                for k, v in raw.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
    plot = report_dir / "pass_at_k.png"

    run_dir = training_run_dir(path)
    curve = run_dir / "loss_curve.png" if run_dir else None
    metrics = read_metrics(run_dir / "metrics.jsonl", problems) if run_dir else ()
    return ModelCard(
        path=path,
        exists=True,
        parameters=parameters,
        parameters_source=source,
        tokens_seen=_int(facts.get("tokens_seen")),
        step=_int(facts.get("step")),
        preset=facts.get("preset") if isinstance(facts.get("preset"), str) else None,
        eval_loss=_num(facts.get("eval_loss")),
        perplexity=_num(facts.get("perplexity")),
        context_length=context,
        fill_in_the_middle=_fills_in(path, facts),
        pass_at_k=pass_at_k,
        humaneval=humaneval,
        humaneval_plot=plot if plot.is_file() else None,
        run_dir=run_dir,
        loss_curve=curve if curve is not None and curve.is_file() else None,
        metrics=metrics,
        problems=tuple(problems),
    )


def _fills_in(path: Path, facts: dict[str, Any]) -> bool | None:
    """The tokenizer has the sentinels and the model learnt them (as far as the files say)."""
    from codeparrot.models.checkpoint import trained_to_infill

    sentinels = has_fim_sentinels(path)
    return False if sentinels and trained_to_infill(facts) is False else sentinels


def has_fim_sentinels(path: Path) -> bool | None:
    """Whether the tokenizer beside the checkpoint has the three FIM sentinels of a known
    family (:data:`codeparrot.fim.TEMPLATES`) as added tokens (read from ``tokenizer.json``,
    else ``tokenizer_config.json``); ``None`` when neither file can be read. The engine
    decides for good once the model is loaded."""
    tokenizer = _read_json_object(path / "tokenizer.json", [])
    if tokenizer is not None:
        entries = tokenizer.get("added_tokens")
    else:
        config = _read_json_object(path / "tokenizer_config.json", [])
        if config is None:
            return None
        entries = config.get("added_tokens_decoder")
        entries = list(entries.values()) if isinstance(entries, dict) else None
    # not only special ones: DeepSeek-Coder's tokenizer marks its FIM tokens as not special
    added = {
        t["content"]
        for t in (entries if isinstance(entries, list) else [])
        if isinstance(t, dict) and isinstance(t.get("content"), str)
    }
    return any({t.prefix, t.suffix, t.middle} <= added for t in TEMPLATES)


def training_run_dir(path: Path) -> Path | None:
    """The training run a checkpoint belongs to, if its curve or metrics are there."""
    candidates = [path]
    if path.parent.name == "checkpoints":
        candidates.append(path.parent.parent)
    for run in candidates:
        if (run / "metrics.jsonl").is_file() or (run / "loss_curve.png").is_file():
            return run
    return None


def read_metrics(path: Path, problems: list[str] | None = None) -> tuple[dict[str, float], ...]:
    """Numeric fields of each line of ``metrics.jsonl`` that has a step; bad lines are skipped."""
    if not path.is_file():
        return ()
    rows = []
    skipped = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(record, dict) or _num(record.get("step")) is None:
                skipped += 1
                continue
            rows.append(
                {k: float(v) for k, v in record.items() if _num(v) is not None and math.isfinite(v)}
            )
    if skipped and problems is not None:
        problems.append(f"{path}: skipped {skipped} unreadable line(s)")
    return tuple(rows)


def safetensors_parameter_count(path: Path) -> int | None:
    """Parameters stored in ``path``'s safetensors file(s), read from their headers only."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted({path / name for name in weight_map.values()})
        except (OSError, ValueError, KeyError, TypeError):
            return None
    else:
        files = [path / "model.safetensors"]
    total = 0
    for file in files:
        try:
            with open(file, "rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                if size > 100_000_000:  # not a safetensors header
                    return None
                header = json.loads(fh.read(size))
        except (OSError, ValueError, struct.error):
            return None
        for name, entry in header.items():
            if name != "__metadata__":
                total += math.prod(entry.get("shape", []))
    return total


# -- formatting ----------------------------------------------------------------------


def _count(value: int | None, *, exact: bool = False, unit: str = "") -> str:
    if value is None:
        return "unknown"
    if exact or value < 1000:
        return f"{value:,}{unit}"
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= div:
            return f"{value / div:.1f}{suffix}{unit} ({value:,})"
    return f"{value:,}{unit}"


def _float(value: float | None, digits: int = 3) -> str:
    return "unknown" if value is None else f"{value:.{digits}f}"


def _k_of(key: str) -> int:
    digits = "".join(ch for ch in key if ch.isdigit())
    return int(digits) if digits else 0


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _read_json_object(path: Path, problems: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        problems.append(f"{path.name} is unreadable ({e})")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name} is not a JSON object")
        return None
    return data
