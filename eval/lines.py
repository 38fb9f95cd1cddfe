"""``codeparrot eval lines``: line completion on held-out files, the way an editor asks.

Lines are drawn with a seed from files the model never trained on (see
:mod:`codeparrot.eval.heldout`). Half are asked at the line's start (the cursor after the
indentation, the rest of the line to write), half in the middle (the cursor at a random
character of the line's text). The document is the file without the rest of that line.

The prompt is the language server's (:func:`codeparrot.prompting.prompt_parts`): the same
window before the cursor, the same budget for this checkpoint (``--context-tokens`` and
``--max-new-tokens`` as the editor's defaults), with a fill-in-the-middle checkpoint whole
lines after the cursor within ``--fim-suffix-share`` of it, and with ``--workspace-share`` > 0
snippets of the other files of the same folder (in name order, standing for "most recently
edited first"): the other held-out files, or with ``--workspace DIR`` the files of DIR, so
that held-out files can be completed with the rest of their repository open (a fine-tune's
``corpus`` as both ``--data`` and ``--workspace``: its valid files completed, every other
file of the repository as workspace). Decoding is greedy and stops at the end of the line. The first line is cut
by the editor's repetition filter (:func:`codeparrot.generation.repetition.cut_repetition`
with the text before the cursor, as the server's post-processing calls it) before it is
scored, as the editor would show it (``--no-repetition-filter``: score the raw line).

Scores: exact match of the line's rest (trailing spaces ignored), edit similarity
(1 - Levenshtein distance / longer length), how many suggestions are degenerate
repetition raw and as shown, and how many prompts held a workspace snippet.
"""

from __future__ import annotations

import posixpath
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from codeparrot import prompting
from codeparrot.config import Config, option
from codeparrot.eval.heldout import HELDOUT_DATA, HeldoutFile, describe, read_heldout
from codeparrot.generation.repetition import cut_repetition, is_repetitive
from codeparrot.io import atomic_directory, atomic_open, provenance, write_json
from codeparrot.options import (
    CHECKPOINT,
    CONTEXT_TOKENS,
    FIM_ORDER,
    FIM_SUFFIX_SHARE,
    MAX_NEW_TOKENS,
    QUANTIZE_WEIGHTS,
    REVISION,
    SYNTAX_SAMPLES,
    WORKSPACE_SHARE,
)

LINE_START = "line_start"
MID_LINE = "mid_line"
KINDS = (LINE_START, MID_LINE)
MIN_LINE_CHARS = 4
# The language server reads this many characters after the cursor (its --suffix-chars).
SUFFIX_CHARS = 2000


@dataclass(frozen=True)
class LinesConfig(Config):
    """Greedy line completion on held-out files: exact match and edit similarity."""

    checkpoint: Path | None = CHECKPOINT.field(None)
    revision: str | None = REVISION.field()
    data: Path | None = HELDOUT_DATA.field()
    n: int = option(200, "lines to complete (half at a line's start, half mid-line)", ge=2)
    seed: int = option(0, "seed of the line draw")
    max_new_tokens: int = MAX_NEW_TOKENS.field(
        32,
        "most tokens per completion; with --context-tokens it sets the prompt budget, as in "
        "the language server (whose single-line default this is)",
        le=512,
    )
    context_tokens: int = CONTEXT_TOKENS.field(
        help="token budget of the prompt, as the language server's --context-tokens: at most "
        "what the model's context leaves after the new tokens"
    )
    fim: bool = option(
        True, "send whole lines after the cursor as the suffix when the checkpoint can"
    )
    fim_suffix_share: float = FIM_SUFFIX_SHARE.field(
        help="with FIM: the most of the prompt budget the suffix may take (whole lines after "
        "the cursor), as the language server's --fim-suffix-share; 0: the prefix alone"
    )
    fim_order: str = FIM_ORDER.field(
        help="with a suffix: psm (prefix, suffix, middle) or spm (suffix, then the prefix "
        "running straight into the middle), as the language server's --fim-order"
    )
    workspace_share: float = WORKSPACE_SHARE.field(
        help="the most of the prompt budget for snippets of the other files of the completed "
        "file's folder (taken in name order as the editor's most recently edited first), as "
        "the language server's --workspace-share"
    )
    workspace: Path | None = option(
        None,
        "the files the workspace snippets come from, matched to the completed file by folder "
        "(path under this folder as under --data; the completed file itself left out): a "
        "folder of .py files or a corpus folder (all its splits); default: the --data files",
        metavar="DIR",
    )
    repetition_filter: bool = option(
        True,
        "cut degenerate repetition from each suggestion before scoring it, as the editor "
        "shows it (--no-repetition-filter: score the raw line)",
    )
    syntax_samples: int = SYNTAX_SAMPLES.field(
        help="syntax check, as the language server's --syntax-samples: when the suggestion "
        "as shown leaves the statement around the cursor unparseable, draw this many more and "
        "show the most common one that parses (0: off; nothing is run)"
    )
    output: Path | None = option(None, "write lines.jsonl and summary.json into this folder")
    quantize: str = QUANTIZE_WEIGHTS.field("auto", "decoding steps (as the language server)")

    def problems(self) -> list[str]:
        if self.checkpoint is None:
            return ["give a CHECKPOINT"]
        from codeparrot.hub import revision_problems

        return revision_problems(self.checkpoint, self.revision)


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


def editor_window(task: LineTask, context_tokens: int) -> tuple[str, str]:
    """(text before, text after) the cursor as the language server reads them from the
    document (the file without the rest of the line) for a ``context_tokens`` prompt."""
    chars = prompting.window_chars(context_tokens)
    start = prompting.window_start(
        task.prefix, len(task.prefix), chars, grid=prompting.prompt_quantum(context_tokens)
    )
    return task.prefix[start:], task.suffix[:SUFFIX_CHARS]


def workspace_documents(files: Sequence[HeldoutFile], name: str) -> list[tuple[str, str]]:
    """``(name, text)`` of the other files in ``name``'s folder, in name order (standing for
    the editor's "most recently edited first")."""
    folder = posixpath.dirname(name)
    return [
        (f.name, f.text)
        for f in sorted(files, key=lambda f: f.name)
        if f.name != name and posixpath.dirname(f.name) == folder
    ]


def editor_prompt_parts(
    task: LineTask,
    config: LinesConfig,
    count_tokens: prompting.CountTokens,
    budget: int,
    fim: bool,
    others: Sequence[tuple[str, str]] = (),
) -> prompting.PromptParts:
    """The prompt the language server would send for ``task``, in its parts."""
    before, after = editor_window(task, config.context_tokens)
    return prompting.prompt_parts(
        count_tokens,
        before,
        after,
        budget,
        suffix_share=config.fim_suffix_share,
        fim=fim,
        others=others if config.workspace_share > 0 else (),
        workspace_share=config.workspace_share,
    )


@dataclass(frozen=True)
class Completion:
    """A completer's text and how many workspace snippets its prompt held."""

    text: str
    snippets: int = 0


Completer = Callable[[LineTask], str | Completion]


@dataclass(frozen=True)
class Shown:
    """A suggestion's first line raw and as the editor shows it, and whether each is
    degenerate repetition (:func:`codeparrot.generation.repetition.is_repetitive`)."""

    raw: str
    shown: str
    repetitive_raw: bool
    repetitive_shown: bool
    snippets: int = 0


def shown_line(
    task: LineTask, completion: str | Completion, context_tokens: int, filtered: bool
) -> Shown:
    """The first line of ``completion`` through the editor's repetition filter: called as
    the language server's post-processing calls it, with the cursor's line before it and
    the text before the cursor above it (``filtered=False``: the raw line)."""
    if isinstance(completion, str):
        completion = Completion(completion)
    raw = first_line(completion.text)
    above, _ = editor_window(task, context_tokens)
    head = above.rsplit("\n", 1)[-1]
    shown = cut_repetition(raw, head, above) if filtered else raw
    return Shown(
        raw, shown, is_repetitive(raw, head, above), is_repetitive(shown, head, above),
        completion.snippets,
    )  # fmt: skip


def score(tasks: Sequence[LineTask], shown: Sequence[Shown]) -> dict[str, Any]:
    """Exact match, edit similarity, repetitive suggestions and prompts with a workspace
    snippet per kind and overall."""
    rows = []
    for task, s in zip(tasks, shown, strict=True):
        target = task.target.rstrip()
        rows.append({
            "kind": task.kind,
            "exact": s.shown == target,
            "similarity": edit_similarity(s.shown, target),
            "repetitive_raw": s.repetitive_raw,
            "repetitive_shown": s.repetitive_shown,
            "snippets": s.snippets,
        })  # fmt: skip
    summary: dict[str, Any] = {}
    for kind in (*KINDS, "all"):
        group = [r for r in rows if kind in ("all", r["kind"])]
        if group:
            summary[kind] = {
                "n": len(group),
                "exact_match": sum(r["exact"] for r in group) / len(group),
                "edit_similarity": sum(r["similarity"] for r in group) / len(group),
                "repetitive_raw": sum(r["repetitive_raw"] for r in group),
                "repetitive_shown": sum(r["repetitive_shown"] for r in group),
                "prompts_with_snippets": sum(r["snippets"] > 0 for r in group),
            }
    return summary


def engine_completer(
    config: LinesConfig, workspace: Sequence[HeldoutFile]
) -> tuple[Completer, dict[str, Any]]:
    """Greedy completion of one task with the checkpoint and the editor's prompt (snippets
    of the ``workspace`` files of the task's folder), and the settings it used."""
    from codeparrot.generation import Engine, GenerationConfig
    from codeparrot.generation.config import FimSettings
    from codeparrot.generation.syntax import checked_generate, fits_in_window
    from codeparrot.hub import ModelRef

    engine = Engine.load(
        ModelRef.parse(config.checkpoint, config.revision),
        quantize=config.quantize,
        fim=FimSettings.of(config),
    )
    # a suffix can be sent: asked for, given room, and the checkpoint has the sentinels
    fim = config.fim and config.fim_suffix_share > 0 and getattr(engine, "fim", None) is not None
    budget, max_new = prompting.prompt_budget(
        engine.context_length, config.context_tokens, config.max_new_tokens
    )
    gen = GenerationConfig(max_new_tokens=max_new, temperature=0.0, n=1, seed=0, stop=("\n",))

    def complete(task: LineTask) -> Completion:
        others = workspace_documents(workspace, task.file) if config.workspace_share > 0 else ()
        parts = editor_prompt_parts(task, config, engine.count_tokens, budget, fim, others)
        prompt, suffix = parts.text, parts.suffix
        extra = {} if suffix is None else {"suffix": suffix}
        if suffix is None:
            prompt = prompt or engine.tokenizer.eos_token or "\n"
        if not config.syntax_samples:
            out = engine.generate(prompt, gen, **extra)
            return Completion(out[0].text, len(parts.snippets))
        # the check reads the whole file around the line, as the server reads the document
        fits = fits_in_window(task.prefix, task.suffix)
        shown = partial(shown_line, task, context_tokens=config.context_tokens,
                        filtered=config.repetition_filter)  # fmt: skip
        out = checked_generate(
            engine, prompt, gen, lambda raw: fits(shown(raw).shown), config.syntax_samples,
            **extra,
        )  # fmt: skip
        return Completion(out[0].text, len(parts.snippets))

    used = {
        "fim": fim,
        "quantize": config.quantize,
        "prompt_budget": budget,
        "max_new_tokens": max_new,
        "context_length": engine.context_length,
    }
    return complete, used


def evaluate_lines(
    config: LinesConfig,
    complete: Completer | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Draw the lines, complete each (``complete``: default the checkpoint, greedy), score."""
    files = read_heldout(config.data)
    tasks = pick_lines(files, config.n, config.seed)
    used: dict[str, Any] = {}
    if complete is None:
        complete, used = engine_completer(config, workspace_files(config, files))
    shown = []
    for task in tasks:
        shown.append(
            shown_line(task, complete(task), config.context_tokens, config.repetition_filter)
        )
        if progress is not None:
            progress(1)
    summary = {
        "scores": score(tasks, shown),
        "data": str(config.data) if config.data else "held-out packages",
        **describe(files),
        "prompt": {
            "fim_suffix_share": config.fim_suffix_share,
            "fim_order": config.fim_order,
            "workspace_share": config.workspace_share,
            "workspace": str(config.workspace) if config.workspace else "the --data files",
            "workspace_documents": "the other files of the completed file's folder, in name "
            "order as most recently edited first",
            "context_tokens": config.context_tokens,
            "repetition_filter": config.repetition_filter,
            "syntax_samples": config.syntax_samples,
        },
        **used,
        "provenance": provenance(config),
    }
    if config.output is not None:
        _write(config.output, tasks, shown, summary)
    return summary


def workspace_files(config: LinesConfig, files: Sequence[HeldoutFile]) -> Sequence[HeldoutFile]:
    """The files workspace snippets come from: ``--workspace`` (a corpus: all its splits),
    or the completed ``files`` themselves."""
    if config.workspace is None:
        return files
    return read_heldout(config.workspace, corpus_splits=("train", "valid"))


def _write(out: Path, tasks: Sequence[LineTask], shown: Sequence[Shown], summary: dict) -> None:
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(out, overwrite=True) as tmp:
        with atomic_open(tmp / "lines.jsonl") as fh:
            for task, s in zip(tasks, shown, strict=True):
                record = {k: v for k, v in asdict(task).items() if k not in ("prefix", "suffix")}
                fh.write(json.dumps({**record, **asdict(s)}) + "\n")
        write_json(tmp / "summary.json", summary)
