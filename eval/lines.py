"""``codeparrot eval lines``: line completion on held-out files, the way an editor asks.

Lines are drawn with a seed from files the model never trained on (see
:mod:`codeparrot.eval.heldout`). Half are asked at the line's start (the cursor after the
indentation, the rest of the line to write), half in the middle (the cursor at a random
character of the line's text). The prompt is the file before the cursor; with a checkpoint
that has fill-in-the-middle sentinels the rest of the file after the line is the suffix.
Decoding is greedy and stops at the end of the line. Scores: exact match of the line's rest
(trailing spaces ignored) and edit similarity (1 - Levenshtein distance / longer length).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.eval.heldout import HELDOUT_DATA, HeldoutFile, describe, read_heldout
from codeparrot.io import atomic_directory, atomic_open, provenance, write_json
from codeparrot.options import MAX_NEW_TOKENS, QUANTIZE_WEIGHTS

LINE_START = "line_start"
MID_LINE = "mid_line"
KINDS = (LINE_START, MID_LINE)
MIN_LINE_CHARS = 4


@dataclass(frozen=True)
class LinesConfig(Config):
    """Greedy line completion on held-out files: exact match and edit similarity."""

    checkpoint: Path | None = option(None, "checkpoint directory")
    data: Path | None = HELDOUT_DATA.field()
    n: int = option(200, "lines to complete (half at a line's start, half mid-line)", ge=2)
    seed: int = option(0, "seed of the line draw")
    max_new_tokens: int = MAX_NEW_TOKENS.field(
        48, "most tokens per completion (at most the language server's 512)", le=512
    )
    fim: bool = option(True, "send the rest of the file as the suffix when the checkpoint can")
    output: Path | None = option(None, "write lines.jsonl and summary.json into this folder")
    quantize: str = QUANTIZE_WEIGHTS.field("auto", "decoding steps (as the language server)")

    def problems(self) -> list[str]:
        return ["give a CHECKPOINT"] if self.checkpoint is None else []


@dataclass(frozen=True)
class LineTask:
    """One cursor position: the text around it and the rest of the line to write."""

    file: str
    line: int
    kind: str
    prefix: str
    target: str
    suffix: str


def pick_lines(files: Sequence[HeldoutFile], n: int, seed: int) -> list[LineTask]:
    """``n`` seeded cursor positions, alternating line start and mid-line."""
    candidates = [
        (fi, li)
        for fi, f in enumerate(files)
        for li, line in enumerate(f.text.split("\n"))
        if li > 0 and len(line.strip()) >= MIN_LINE_CHARS  # never an empty prompt
    ]
    if not candidates:
        raise ValueError("no line of at least 4 characters in the held-out files")
    rng = random.Random(seed)
    chosen = rng.sample(candidates, min(n, len(candidates)))
    return [_task(files[fi], li, KINDS[i % 2], rng) for i, (fi, li) in enumerate(sorted(chosen))]


def _task(f: HeldoutFile, line_no: int, kind: str, rng: random.Random) -> LineTask:
    lines = f.text.split("\n")
    line = lines[line_no]
    before = sum(len(x) + 1 for x in lines[:line_no])
    indent = len(line) - len(line.lstrip())
    content_end = len(line.rstrip())
    cut = indent if kind == LINE_START else rng.randrange(indent + 1, content_end)
    return LineTask(
        file=f.name,
        line=line_no + 1,
        kind=kind,
        prefix=f.text[: before + cut],
        target=line[cut:content_end],
        suffix=f.text[before + len(line) :],
    )


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein(a, b) / max(len(a), len(b)); 1.0 for two empty strings."""
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1.0 - previous[-1] / max(len(a), len(b))


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip()


def score(tasks: Sequence[LineTask], completions: Sequence[str]) -> dict[str, Any]:
    """Exact match and edit similarity per kind and overall."""
    rows = []
    for task, completion in zip(tasks, completions, strict=True):
        got = first_line(completion)
        rows.append({
            "kind": task.kind,
            "exact": got == task.target.rstrip(),
            "similarity": edit_similarity(got, task.target.rstrip()),
        })  # fmt: skip
    summary: dict[str, Any] = {}
    for kind in (*KINDS, "all"):
        group = [r for r in rows if kind in ("all", r["kind"])]
        if group:
            summary[kind] = {
                "n": len(group),
                "exact_match": sum(r["exact"] for r in group) / len(group),
                "edit_similarity": sum(r["similarity"] for r in group) / len(group),
            }
    return summary


def engine_completer(config: LinesConfig) -> tuple[Callable[[LineTask], str], dict[str, Any]]:
    """Greedy completion of one task with the checkpoint, and what it used."""
    from codeparrot.generation import Engine, GenerationConfig

    engine = Engine.load(config.checkpoint, quantize=config.quantize)
    fim = bool(config.fim and getattr(engine, "fim", None) is not None)
    gen = GenerationConfig(
        max_new_tokens=config.max_new_tokens, temperature=0.0, n=1, seed=0, stop=("\n",)
    )

    def complete(task: LineTask) -> str:
        if fim:
            return engine.generate(task.prefix, gen, suffix=task.suffix)[0].text
        return engine.generate(task.prefix, gen)[0].text

    return complete, {"fim": fim, "quantize": config.quantize}


def evaluate_lines(
    config: LinesConfig,
    complete: Callable[[LineTask], str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Draw the lines, complete each (``complete``: default the checkpoint, greedy), score."""
    files = read_heldout(config.data)
    tasks = pick_lines(files, config.n, config.seed)
    used: dict[str, Any] = {}
    if complete is None:
        complete, used = engine_completer(config)
    completions = []
    for task in tasks:
        completions.append(complete(task))
        if progress is not None:
            progress(1)
    summary = {
        "scores": score(tasks, completions),
        "data": str(config.data) if config.data else "held-out packages",
        **describe(files),
        **used,
        "provenance": provenance(config),
    }
    if config.output is not None:
        _write(config.output, tasks, completions, summary)
    return summary


def _write(out: Path, tasks: Sequence[LineTask], completions: Sequence[str], summary: dict) -> None:
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(out, overwrite=True) as tmp:
        with atomic_open(tmp / "lines.jsonl") as fh:
            for task, completion in zip(tasks, completions, strict=True):
                record = {k: v for k, v in asdict(task).items() if k not in ("prefix", "suffix")}
                fh.write(json.dumps({**record, "completion": first_line(completion)}) + "\n")
        write_json(tmp / "summary.json", summary)
