"""`eval lines` asks the way the editor asks: the language server's
prompt for the same cursor, its workspace snippets, and its repetition filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeparrot.eval.heldout import HeldoutFile, read_heldout
from codeparrot.eval.lines import (
    Completion,
    LinesConfig,
    LineTask,
    editor_prompt_parts,
    evaluate_lines,
    score,
    shown_line,
    workspace_documents,
    workspace_files,
)
from codeparrot.generation.repetition import is_repetitive
from codeparrot.lsp.completion import fim_prompt, prompt_budget
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Document, cursor_window
from codeparrot.prompting import prompt_quantum, window_chars

CKPT = Path("unused")  # the prompt needs no checkpoint: a fake engine counts tokens


class FakeEngine:
    """What the prompt builders ask of an engine: a token counter, a context, FIM sentinels."""

    context_length = 256
    fim = object()

    def infill_template(self) -> object:
        return self.fim

    @staticmethod
    def count_tokens(text: str) -> int:
        return -(-len(text) // 3)


HELPERS = "def compute_total(items, tax_rate):\n    subtotal = sum(items)\n    return subtotal\n"
BODY = "".join(f"row_{i} = compute_total(items_{i}, tax_rate)\n" for i in range(400))
FILES = [
    HeldoutFile("pkg/helpers.py", HELPERS),
    HeldoutFile("pkg/main.py", BODY + "grand = compute_total(rows, tax_rate)\n" + BODY),
    HeldoutFile("other/far.py", "def compute_total(a, tax_rate):\n    return 0\n"),
]


def task_in_main(cut: int) -> LineTask:
    text = FILES[1].text
    line_start = len(BODY)
    line_end = text.index("\n", line_start)
    return LineTask(
        file="pkg/main.py", line=401, kind="mid_line",
        prefix=text[: line_start + cut], target=text[line_start + cut : line_end],
        suffix=text[line_end:],
    )  # fmt: skip


@pytest.mark.parametrize(("suffix_share", "workspace_share"), [(0.25, 0.0), (0.1, 0.3)])
def test_eval_lines_builds_the_language_servers_prompt(suffix_share, workspace_share):
    engine = FakeEngine()
    task = task_in_main(8)
    others = workspace_documents(FILES, task.file)
    lines = LinesConfig(
        checkpoint=CKPT, fim_suffix_share=suffix_share, workspace_share=workspace_share
    )
    lsp = LspConfig(fim_suffix_share=suffix_share, workspace_share=workspace_share)
    # the server: the document without the rest of the line, the cursor at its end
    doc = Document("file:///w/pkg/main.py", task.prefix + task.suffix)
    window = cursor_window(
        doc, len(task.prefix), window_chars(lsp.context_tokens), lsp.suffix_chars,
        grid=prompt_quantum(lsp.context_tokens),
    )  # fmt: skip
    budget, _ = prompt_budget(engine, lsp, multiline=False)
    expected = fim_prompt(engine, window, lsp, budget, others)
    parts = editor_prompt_parts(task, lines, engine.count_tokens, budget, True, others)
    got = (parts.text, parts.suffix)
    assert got == expected
    prompt, suffix = got
    assert suffix is not None and prompt.endswith("grand = ")
    assert engine.count_tokens(prompt) + engine.count_tokens(suffix) <= budget
    # the defaults agree: the same budget for the same checkpoint
    default_lsp, default_lines = LspConfig(), LinesConfig(checkpoint=CKPT)
    assert (default_lines.fim_suffix_share, default_lines.workspace_share) == (
        default_lsp.fim_suffix_share,
        default_lsp.workspace_share,
    )
    assert (default_lines.context_tokens, default_lines.max_new_tokens) == (
        default_lsp.context_tokens,
        default_lsp.max_new_tokens,
    )


def test_sibling_files_give_the_workspace_snippets_within_the_budget():
    task = task_in_main(8)
    others = workspace_documents(FILES, task.file)
    assert others == [("pkg/helpers.py", HELPERS)]  # same folder, not itself, not other/
    count = FakeEngine.count_tokens
    config = LinesConfig(checkpoint=CKPT, workspace_share=0.3)
    parts = editor_prompt_parts(task, config, count, 200, True, others)
    prompt, suffix = parts.text, parts.suffix
    assert prompt.startswith("# Path: pkg/helpers.py\n# def compute_total(items, tax_rate):\n")
    snippets = prompt[: prompt.index("row_")]
    assert 0 < count(snippets) <= int(200 * 0.3)
    assert count(prompt) + count(suffix or "") <= 200
    no_share = editor_prompt_parts(task, LinesConfig(checkpoint=CKPT), count, 200, True, others)
    assert "# Path:" not in no_share.text


DEGENERATE = "sympy.polys.polys.polys.polys.polys"


def test_a_degenerate_suggestion_is_counted_raw_and_not_shown(tmp_path: Path):
    data = tmp_path / "data"
    (data / "pkg").mkdir(parents=True)
    (data / "pkg" / "m.py").write_text("import sympy\n\nring = sympy.polys.ring\nx = 1\n")
    config = LinesConfig(checkpoint=CKPT, data=data, n=2, seed=0, output=tmp_path / "o")
    summary = evaluate_lines(config, complete=lambda t: DEGENERATE + "\nmore")
    scores = summary["scores"]["all"]
    assert (scores["repetitive_raw"], scores["repetitive_shown"]) == (2, 0)
    records = [json.loads(x) for x in (tmp_path / "o" / "lines.jsonl").read_text().splitlines()]
    for record in records:
        assert record["raw"] == DEGENERATE and record["repetitive_raw"] is True
        assert "polys.polys.polys" not in record["shown"] and DEGENERATE.startswith(record["shown"])
    assert summary["prompt"]["repetition_filter"] is True
    raw = evaluate_lines(
        config.replace(repetition_filter=False, output=None), complete=lambda t: DEGENERATE
    )
    assert raw["scores"]["all"]["repetitive_shown"] == 2
    # the filter is the editor's call: the cursor's line before it, the text above it
    task = LineTask("pkg/m.py", 4, "line_start", "import sympy\nx = sympy.polys.polys", "", "")
    shown = shown_line(task, ".polys.polys", 768, filtered=True)
    assert shown.repetitive_raw and shown.shown == ""
    assert not is_repetitive(shown.shown, "x = sympy.polys.polys", task.prefix)


def write_corpus(root: Path, splits: dict[str, list[tuple[str, str]]]) -> Path:
    """A corpus folder as ``codeparrot data build`` writes it: ``(path, text)`` per split."""
    import gzip

    root.mkdir(parents=True)
    (root / "manifest.json").write_text("{}")
    for split, files in splits.items():
        (root / split).mkdir()
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            for path, text in files:
                fh.write(json.dumps({"repo_name": "me/repo", "path": path, "content": text}) + "\n")
    return root


HELD_OUT = "from pkg.helpers import compute_total\n\n" + "".join(
    f"total_{i} = compute_total(items_{i}, tax_rate)\n" for i in range(40)
)


def test_a_fine_tunes_held_out_files_are_completed_with_the_rest_of_the_repository(
    tiny_checkpoint, tmp_path: Path
):
    corpus = write_corpus(
        tmp_path / "corpus",
        {
            "train": [("pkg/helpers.py", HELPERS), ("other/far.py", FILES[2].text)],
            "valid": [("pkg/main.py", HELD_OUT)],
        },
    )
    held_out = read_heldout(corpus)
    assert [f.name for f in held_out] == ["me/repo/pkg/main.py"]  # --data: the valid split
    # by default the workspace is the held-out files, so a lone held-out file has none
    default = workspace_files(LinesConfig(checkpoint=CKPT), held_out)
    assert workspace_documents(default, "me/repo/pkg/main.py") == []
    config = LinesConfig(checkpoint=CKPT, data=corpus, workspace=corpus, workspace_share=0.5)
    workspace = workspace_files(config, held_out)
    # every split; the completed file itself and other folders left out
    assert workspace_documents(workspace, "me/repo/pkg/main.py") == [
        ("me/repo/pkg/helpers.py", HELPERS)
    ]
    with_workspace = evaluate_lines(
        config.replace(checkpoint=tiny_checkpoint, n=6, max_new_tokens=2, output=tmp_path / "o")
    )
    assert with_workspace["prompt"]["workspace"] == str(corpus)
    assert with_workspace["scores"]["all"]["prompts_with_snippets"] == 6
    records = [json.loads(x) for x in (tmp_path / "o" / "lines.jsonl").read_text().splitlines()]
    assert all(r["snippets"] >= 1 for r in records)
    alone = evaluate_lines(
        config.replace(checkpoint=tiny_checkpoint, n=6, max_new_tokens=2, workspace=None)
    )
    assert alone["scores"]["all"]["prompts_with_snippets"] == 0


def test_prompts_with_snippets_are_counted_per_kind():
    kinds = ("line_start", "mid_line", "line_start", "mid_line")
    tasks = [LineTask("pkg/m.py", i + 2, k, "x = 1\n", "y = 2", "") for i, k in enumerate(kinds)]
    completions = [Completion("y = 2", 0), Completion("y = 2", 1), Completion("y = 2", 2), "y = 2"]
    shown = [shown_line(t, c, 768, True) for t, c in zip(tasks, completions, strict=True)]
    assert [s.snippets for s in shown] == [0, 1, 2, 0]  # a plain string: no snippet known
    scores = score(tasks, shown)
    assert scores["line_start"]["prompts_with_snippets"] == 1
    assert scores["mid_line"]["prompts_with_snippets"] == 1
    assert scores["all"]["prompts_with_snippets"] == 2
    assert scores["all"]["exact_match"] == 1.0
