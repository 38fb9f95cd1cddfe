"""``codeparrot complete`` as a user runs it (in process, through the CLI table)."""

from __future__ import annotations

import io
import json

import pytest

from codeparrot.cli import main
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.cli import stop_strings


def test_json_output_has_n_candidates(tiny_checkpoint, capsys):
    argv = ["complete", "--checkpoint", str(tiny_checkpoint), "--n", "3", "--seed", "4"]
    assert main([*argv, "--max-new-tokens", "6", "--json", "def add(a, b):"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3
    assert all(r["new_tokens"] <= 6 and r["seed"] == 4 for r in rows)
    engine = Engine.load(tiny_checkpoint)
    expected = engine.generate("def add(a, b):", GenerationConfig(n=3, seed=4, max_new_tokens=6))
    assert [r["text"] for r in rows] == [c.text for c in expected]


def test_prompt_from_stdin_and_streaming(tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("import os\n"))
    argv = ["complete", "--checkpoint", str(tiny_checkpoint), "--temperature", "0"]
    assert main([*argv, "--max-new-tokens", "8", "--stream", "-"]) == 0
    captured = capsys.readouterr()
    engine = Engine.load(tiny_checkpoint)
    (c,) = engine.generate("import os\n", GenerationConfig(temperature=0, max_new_tokens=8))
    assert captured.out == c.text + "\n"
    assert "1 candidate(s)" in captured.err


def test_stop_flags_are_repeatable_and_understand_escapes():
    assert stop_strings(["\\n", "é\\t"], False) == ("\n", "é\t")
    both = stop_strings(["\\ndef"], True)
    assert both[0] == "\ndef" and "\nclass" in both and both.count("\ndef") == 1


def test_plain_output_stops_at_a_stop_string(tiny_checkpoint, capsys):
    argv = ["complete", "--checkpoint", str(tiny_checkpoint), "--seed", "1", "--temperature", "1"]
    argv += ["--n", "4", "--max-new-tokens", "30", "--stop", "e", "--stop", "\\n", "x = "]
    assert main(argv) == 0
    out = capsys.readouterr().out
    blocks = out.split("--- candidate ")[1:]
    assert len(blocks) == 4
    for block in blocks:
        _header, text = block.split(" ---\n", 1)
        assert text.endswith("\n")
        assert "e" not in text[:-1] and "\n" not in text[:-1]


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--checkpoint", "/nonexistent/ckpt", "x"], 1, "no such directory"),
        (["--n", "0", "x"], 2, "--n must be"),
        (["--max-new-tokens", "0", ""], 2, "PROMPT is empty"),
        (["--max-new-tokens", "900", "x"], 2, "leaves no room"),
    ],
)
def test_bad_input_is_a_clear_error(tiny_checkpoint, capsys, args, status, message):
    if "--checkpoint" not in args:
        args = ["--checkpoint", str(tiny_checkpoint), *args]
    assert main(["complete", *args]) == status
    assert message in capsys.readouterr().err


def test_collections_resume_after_complete_and_a_later_settle_freezes_nothing(
    tiny_checkpoint, monkeypatch
):
    """complete pauses garbage collection while it loads and resumes it after, freezing
    what the start made once; settling again, with collections on, freezes nothing (a
    model that a later load replaces stays collectable)."""
    import gc

    from codeparrot.generation import heap

    frozen: list[bool] = []
    monkeypatch.setattr(heap.gc, "freeze", lambda: frozen.append(gc.isenabled()))
    args = ["complete", "--checkpoint", str(tiny_checkpoint), "--max-new-tokens", "2", "x"]
    assert main(args) == 0
    assert gc.isenabled() and frozen == [False]  # frozen once, while paused
    heap.settle_heap()
    assert frozen == [False]
