"""The rules that turn raw model text into ghost text, on hand-made windows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codeparrot.lsp.documents import Document, cursor_window
from codeparrot.lsp.postprocess import (
    _imbalance,
    balance,
    block_indent,
    drop_tail_overlap,
    opens_block,
    postprocess,
)


def window_at(text: str):
    """A window with the cursor at ``|``."""
    offset = text.index("|")
    doc = Document("u", text.replace("|", "", 1))
    return cursor_window(doc, offset, 10_000, 10_000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def f(x):|", 0),
        ("class A:\n    def m(self):|", 4),
        ("if x:  # comment|", 0),
        ("def f(x):\n    |", 0),  # blank line under an opener
        ("for i in range(3):\n|\n\nprint(i)", 0),
        ("def f(x):|\n    return x", None),  # the block is not empty
        ("def f(x):\n    |\n    return x", None),
        ("x = {'a':|", None),  # a dict, not a block
        ("print(x)|", None),
        ("def f(x):|  # tail", None),  # text after the cursor
    ],
)
def test_block_indent(text: str, expected):
    assert block_indent(window_at(text)) == expected


def test_opens_block():
    assert opens_block("    elif a == 'x:':")
    assert opens_block("async def main():")
    assert not opens_block("d = {1:")
    assert not opens_block("lambda x:")
    assert not opens_block("s = 'if x:'")


@pytest.mark.parametrize(
    ("cursor", "raw", "expected"),
    [
        ("x = foo(|", "a, b)\nmore", "a, b)"),  # single line: stops at the line end
        ("x = foo(|)", "a, b)", "a, b"),  # the ")" after the cursor is not repeated
        ("x = foo(|)", "a) + 1", "a"),  # the suggestion ends where the tail closes it
        ("x = foo(|)", "g(a)", "g(a)"),  # its own brackets stay
        ("x = foo(|", "bar(1", "bar(1)"),  # what it opens is closed (the call may go on)
        ("x = [|]", "1, 2)", "1, 2"),  # a mismatched closer ends it
        ("x = |", "   \t", None),  # whitespace only
        ("x = |", "", None),
        ("print(|)", ")", None),  # only repeats the tail
        ("name = |", "'abc", "'abc'"),  # an unterminated string is closed
        ("s = '|", "'[", "'[]"),  # ends the user's string; its own bracket is closed
        ("s = 'ab|", "cd", "cd"),  # inside the user's string: not closed for them
        ("value = compute(|  ", "1)  ", "1)"),
        ("x = [|]", "1, 2]", "1, 2"),
        (")|", ")", None),  # closes nothing
        ("x = |", "\x17\x17", None),  # control bytes from a random model
        ("x = |", "abc\ufffddef", "abc"),  # broken UTF-8 ends it
        ("foo(\n    a, b|", ")", ")"),  # closes a call opened on an earlier line
    ],
)
def test_single_line(cursor: str, raw: str, expected):
    w = window_at(cursor)
    assert postprocess(raw, w, block_indent(w)) == expected


def test_no_repetition_of_the_next_line():
    w = window_at("a = 1\n|\nb = 2\n")
    assert postprocess("b = 2", w, block_indent(w)) is None
    assert postprocess("c = 3", w, block_indent(w)) == "c = 3"


def test_multiline_block_ends_at_the_dedent():
    w = window_at("def area(r):|\n\nprint(area(2))")
    base = block_indent(w)
    assert base == 0
    raw = "\n    pi = 3.14\n\n    return pi * r * r\n\ndef other():\n    pass"
    assert postprocess(raw, w, base) == "\n    pi = 3.14\n\n    return pi * r * r"


def test_multiline_on_a_blank_indented_line():
    w = window_at("def f(x):\n    |")
    base = block_indent(w)
    assert postprocess("y = x + 1\n    return y\nz = 0", w, base) == "y = x + 1\n    return y"
    # a model that starts with a line break and re-indents keeps the typed indent
    assert postprocess("\n    return x\n", w, base) == "return x"


def test_multiline_whitespace_only_is_nothing():
    w = window_at("if ok:|")
    assert postprocess("\n    \n\nelse:", w, block_indent(w)) is None


def test_balance_and_overlap_pieces():
    assert balance("f(a", "") == "f(a)"
    assert balance("a)", ")") == "a"
    assert balance("a)", "", "f(") == "a)"  # closes a bracket opened before the cursor
    assert balance("a)", "", "") == "a"  # closes nothing: ends there
    assert balance("'(' + x", "") == "'(' + x"  # brackets in strings do not count
    assert drop_tail_overlap("print(", "x)", ")") == "x"
    assert drop_tail_overlap("f(", "g(y)", ")") == "g(y)"
    assert drop_tail_overlap("", "abc", "") == "abc"


@given(
    st.text(st.sampled_from(list("ab()[]{} ,")), max_size=12),
    st.text(st.sampled_from(list("xy()[] ,")), max_size=20),
    st.text(st.sampled_from(list(")]} ")), max_size=3),
)
def test_single_line_never_worsens_balance(head: str, raw: str, tail: str):
    w = window_at(head + "|" + tail)
    out = postprocess(raw, w, None)
    if out is None:
        return
    assert out.strip() and "\n" not in out
    # the line with the suggestion is no less balanced than without it
    assert _imbalance(head + out + tail) <= _imbalance(head + tail)
