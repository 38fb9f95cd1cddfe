"""Positions in every encoding, LSP line breaks, incremental edits and the prompt window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codeparrot.lsp.documents import (
    UTF8,
    UTF16,
    UTF32,
    Document,
    Position,
    cursor_window,
    index_to_units,
    line_starts,
    units_to_index,
)
from codeparrot.prompting import fit_prefix

ENCODINGS = (UTF8, UTF16, UTF32)
# text with the characters that break position code: astral emoji, CJK, accents,
# CR/LF in every combination, and characters str.splitlines() splits on but LSP does not
text_chars = st.sampled_from(list("ab(): \t\r\n😀é中\x0c\u2028\x1c#'\""))
texts = st.text(text_chars, max_size=60)


def reference_units(text: str, encoding: str) -> int:
    if encoding == UTF8:
        return len(text.encode("utf-8"))
    if encoding == UTF16:
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def lsp_lines(text: str) -> list[str]:
    """Lines as LSP defines them (only CR, LF, CRLF end a line)."""
    out, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch in "\r\n":
            out.append("".join(current))
            current = []
            if ch == "\r" and text[i + 1 : i + 2] == "\n":
                i += 1
        else:
            current.append(ch)
        i += 1
    out.append("".join(current))
    return out


def test_the_spec_example():
    # LSP's own example: the offset of the closing quote in a="😋" (here x="😋")
    line = 'x="😋"'
    assert index_to_units(line, 4, UTF8) == 7
    assert index_to_units(line, 4, UTF16) == 5
    assert index_to_units(line, 4, UTF32) == 4
    assert units_to_index(line, 7, UTF8) == 4
    assert units_to_index(line, 5, UTF16) == 4
    # inside the emoji: its start
    assert units_to_index(line, 4, UTF16) == 3
    assert units_to_index(line, 5, UTF8) == 3
    # past the end: the end
    assert units_to_index(line, 99, UTF16) == len(line)


@given(texts, st.sampled_from(ENCODINGS))
def test_every_offset_round_trips(text: str, encoding: str):
    doc = Document("u", text)
    lines = lsp_lines(text)
    assert doc.line_count == len(lines)
    for line_no, line in enumerate(lines):
        assert doc.line_text(line_no) == line
        for index in range(len(line) + 1):
            units = reference_units(line[:index], encoding)
            offset = doc.offset_at(line_no, units, encoding)
            assert doc.position_at(offset, encoding) == Position(line_no, units)


@given(texts)
def test_line_starts_follow_lsp_not_splitlines(text: str):
    starts = line_starts(text)
    assert len(starts) == len(lsp_lines(text))
    assert all(text[s - 1] in "\r\n" for s in starts[1:])


def test_crlf_and_positions_past_the_end():
    doc = Document("u", "ab\r\ncd\r\n")
    assert doc.line_count == 3
    assert doc.line_text(0) == "ab"
    assert doc.offset_at(0, 50) == 2  # the end of the line, never inside "\r\n"
    assert doc.offset_at(7, 0) == len(doc.text)  # past the last line: the end
    assert doc.offset_at(-1, 3) == 0
    assert doc.position_at(3) == Position(0, 2)  # between \r and \n: the line's end
    assert doc.eol == "\r\n"


@given(texts, st.data(), st.sampled_from(ENCODINGS))
@settings(max_examples=200)
def test_incremental_change_matches_string_surgery(text: str, data, encoding: str):
    doc = Document("u", text)
    a = data.draw(st.integers(0, len(text)))
    b = data.draw(st.integers(a, len(text)))
    new = data.draw(st.text(text_chars, max_size=8))
    # offsets inside a CRLF pair are not positions: move them to the line end
    pa, pb = doc.position_at(a, encoding), doc.position_at(b, encoding)
    a2, b2 = (
        doc.offset_at(pa.line, pa.character, encoding),
        doc.offset_at(pb.line, pb.character, encoding),
    )
    doc.apply_change(new, pa, pb, encoding, version=2)
    assert doc.text == text[:a2] + new + text[b2:]
    assert doc.version == 2
    assert doc.line_count == len(lsp_lines(doc.text))


def test_cursor_window_normalises_line_breaks_and_splits_the_line():
    doc = Document("u", "import os\r\ndef f(x):\r\n    return g(x)\r\n")
    offset = doc.offset_at(2, 13)
    w = cursor_window(doc, offset, 1000, 1000)
    assert w.prefix == "import os\ndef f(x):\n    return g("
    assert w.line_head == "    return g(" and w.line_tail == "x)"
    assert w.suffix == "x)\n" and w.eol == "\r\n"


def test_cursor_window_copies_only_near_the_cursor():
    text = "x = 1\n" * 2_000_000  # 12 MB
    doc = Document("u", text)
    offset = doc.offset_at(1_000_000, 3)
    w = cursor_window(doc, offset, 600, 100)
    assert len(w.prefix) <= 600 and len(w.suffix) <= 100
    assert w.prefix.startswith("x = 1\n")  # starts at a line start
    assert w.line_head == "x =" and w.line_tail == " 1"


@given(st.text(st.sampled_from(list("ab cd\n(")), max_size=300), st.integers(0, 120))
def test_fit_prefix_keeps_the_nearest_text_within_budget(prefix: str, budget: int):
    def count(s: str) -> int:  # a stand-in tokenizer: one token per word
        return len(s.split())

    fitted = fit_prefix(prefix, budget, count)
    assert prefix.endswith(fitted)
    assert count(fitted) <= budget
    if count(prefix) <= budget:
        assert fitted == prefix


def test_fit_prefix_cuts_at_a_line_start():
    prefix = "".join(f"line{i} = {i}\n" for i in range(100)) + "last = "
    fitted = fit_prefix(prefix, 40, lambda s: len(s) // 4)
    assert fitted.startswith("line") and fitted.endswith("last = ")
    assert len(fitted) // 4 <= 40


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_empty_document(encoding: str):
    doc = Document("u", "")
    assert doc.line_count == 1
    assert doc.offset_at(0, 0, encoding) == 0
    assert doc.position_at(0, encoding) == Position(0, 0)
    w = cursor_window(doc, 0, 100, 100)
    assert w.prefix == w.suffix == w.line_head == w.line_tail == ""


def test_fit_prefix_never_tokenizes_a_long_window_whole_and_keeps_its_start_while_typing():
    window = "".join(f"value_{i} = compute({i}, other)\n" for i in range(600)) + "result = "
    seen: list[int] = []

    def count(s: str) -> int:
        seen.append(len(s))
        return len(s) // 4

    fitted = fit_prefix(window, 200, count, quantum=64)
    assert max(seen) <= 200 * 8 + 64 < len(window)  # the whole window was never counted
    assert window.endswith(fitted) and fitted.startswith("value_")
    assert 150 <= len(fitted) // 4 <= 200  # most of the budget used
    # a few more characters typed at the end: the prompt still starts at the same place
    for typed in ("a", "ab", "abc"):
        assert fit_prefix(window + typed, 200, lambda s: len(s) // 4, quantum=64).startswith(
            fitted[:50]
        )
