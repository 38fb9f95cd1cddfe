"""Repetition filters: recorded degenerate suggestions are cut, honest code is not."""

from __future__ import annotations

import pytest

from codeparrot.generation.repetition import cut_repetition, is_repetitive
from codeparrot.lsp.documents import Document, cursor_window
from codeparrot.lsp.postprocess import block_indent, postprocess


def window_at(text: str):
    offset = text.index("|")
    return cursor_window(Document("u", text.replace("|", "", 1)), offset, 10_000, 10_000)


def suggest(text_with_cursor: str, raw: str) -> str | None:
    window = window_at(text_with_cursor)
    return postprocess(raw, window, block_indent(window))


# Suggestions the quickstart model made, with the line the cursor was on.
@pytest.mark.parametrize(
    ("document", "raw", "expected"),
    [
        ("import |", "sympy.polys.polys.polys.polys.polys.polys", "sympy.polys.polys"),
        ("    :returns: |", "``True`` is a ``True`` is a ``True`` is a ``True`` is a ``True``",
         "``True`` is a ``True`` is a"),
        ("class |", "runary(self, self, self, self, self, self, self, self, self", "runary(self, self)"),
    ],
)  # fmt: skip
def test_recorded_degenerate_suggestions_are_cut(document: str, raw: str, expected: str):
    assert suggest(document, raw) == expected


@pytest.mark.parametrize(
    ("document", "raw"),
    [
        ("x = foo.bar.bar|", ".bar.bar.bar"),  # continues a run the line already holds
        ("value = compute(a, b)\nvalue = |", "compute(a, b)"),  # the line above, again
    ],
)
def test_a_suggestion_that_is_only_repetition_is_dropped(document: str, raw: str):
    assert suggest(document, raw) is None


@pytest.mark.parametrize(
    ("document", "raw"),
    [
        ("|", "a, b, c = 1, 2, 3"),
        ("grid = |", "[[0, 0, 0, 0], [0, 0, 0, 0]]"),
        ("row = |", "(None, None, None, None)"),
        ("print(|", '"-" * 40)'),
        ("# ---|", "----------------------------------"),
        ("_, _, _, |", "last = record"),
        ("def f(self):\n    |", "return self.name"),
    ],
)
def test_honest_single_lines_pass_untouched(document: str, raw: str):
    assert suggest(document, raw) == raw


def test_three_similar_assignments_pass_untouched():
    raw = "\n    first = load(path_a)\n    second = load(path_b)\n    third = load(path_c)"
    assert suggest("def setup():|", raw) == raw
    # and the same lines in a block with short statements that honest code repeats
    above = "def a():\n    i += 1\n    return None\n\ndef b():|"
    raw = "\n    i += 1\n    return None"
    assert suggest(above, raw) == raw


def test_repeated_lines_and_blocks_are_cut_in_a_block_suggestion():
    raw = "\n    x = step(x)\n    x = step(x)\n    x = step(x)\n    x = step(x)"
    assert suggest("def run(x):|", raw) == "\n    x = step(x)\n    x = step(x)"
    pair = "\n    a = f(a)\n    b = g(b)"
    assert suggest("def run(a, b):|", pair * 4) == pair * 2


def test_a_line_copied_from_above_the_cursor_is_cut():
    above = (
        "def area(w, h):\n    result = w * h * scale\n    return result\n\n\ndef volume(w, h, d):|"
    )
    raw = "\n    base = w * h\n    result = w * h * scale\n    return base * d"
    assert suggest(above, raw) == "\n    base = w * h"


def test_pure_functions_directly():
    assert cut_repetition("self, self, self, self", "f(") == "self, self"
    assert cut_repetition("ok", "x.x.x.x") == "ok"  # a run before the cursor is not cut
    assert not is_repetitive("for i in range(10):")
    assert is_repetitive("b.b.b", "a.")
    assert cut_repetition("", "anything") == ""


# Suggestions an undertrained quickstart model showed on held-out lines: a unit repeated
# within the line, which tokenization hides from the token runs (one word, or punctuation).
@pytest.mark.parametrize(
    ("document", "raw", "expected"),
    [
        ("    |", "for q in = = = = = = = = = = =", "for q in"),
        ("    |", "dtemp.unkunkunkunkunkunkunkunk", "dtemp"),
        ("class A:\n    |", "def __init________________", "def __init"),
    ],
)  # fmt: skip
def test_a_unit_repeated_at_a_line_end_is_cut(document: str, raw: str, expected: str):
    assert suggest(document, raw) == expected


@pytest.mark.parametrize(
    ("document", "raw"),
    [
        ('def f():\n    """Title.\n\n    |', "=========="),  # a ruler in a docstring
        ("MASK = |", "0x00000000"),
        ("MASK = |", "0xFFFFFFFF"),
        ("N = |", "1000000"),
        ("x = compute()  |", "# ------------"),
        ("SEP = |", '"--------------"'),
    ],
)
def test_honest_runs_within_a_line_are_kept(document: str, raw: str):
    assert suggest(document, raw) == raw


def test_a_line_end_run_cut_directly():
    assert cut_repetition("________", "def __init") == ""
    assert cut_repetition(" = = = = =", "for q in") == ""
    assert cut_repetition("kunkunk", "dtemp.unkun") == ""
    # on any line of a block suggestion; what follows goes too
    block = "\n    x = go(1)\n    y = barbarbarbarbar\n    z = 2"
    assert cut_repetition(block, "def f():") == "\n    x = go(1)\n    y ="
