"""Open documents, LSP positions and the prompt window around the cursor.

LSP positions are (line, character) where lines end at ``\\n``, ``\\r\\n`` or ``\\r``
(and nowhere else: not at form feeds or U+2028, which ``str.splitlines`` would split on)
and ``character`` counts code units of the negotiated encoding: UTF-16 by default,
UTF-8 or UTF-32 when the client offers them. Python strings index code points, so
every position is converted here, once, on the one line it falls on.

Documents can be large: line starts are indexed once per version and only the window
near the cursor is ever copied.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from codeparrot.prompting import window_start

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def code_units(char: str, encoding: str) -> int:
    """Code units one code point takes in ``encoding``."""
    cp = ord(char)
    if encoding == UTF16:
        return 2 if cp > 0xFFFF else 1
    if encoding == UTF8:
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def units_to_index(line: str, units: int, encoding: str) -> int:
    """Index into ``line`` (no line break) of the position ``units`` code units in.

    Clamped to the line: a column past the end means the end of the line (LSP says so).
    A column inside a character (half a surrogate pair, part of a UTF-8 sequence) means
    that character's start.
    """
    if units <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(units, len(line))
    count = 0
    for i, char in enumerate(line):
        count += code_units(char, encoding)
        if count > units:
            return i
    return len(line)


def index_to_units(line: str, index: int, encoding: str) -> int:
    """Code units of ``line[:index]`` in ``encoding``."""
    head = line[:index]
    if encoding == UTF32 or head.isascii():
        return len(head)
    if encoding == UTF8:
        return len(head.encode("utf-8", "surrogatepass"))
    return len(head.encode("utf-16-le", "surrogatepass")) // 2


def line_starts(text: str) -> list[int]:
    """Offset of the first character of every line (LSP line breaks)."""
    starts = [0]
    starts.extend(m.end() for m in _LINE_BREAK.finditer(text))
    return starts


@dataclass(frozen=True)
class Position:
    line: int
    character: int


class Document:
    """The text of one open document and conversions between offsets and positions."""

    def __init__(self, uri: str, text: str, version: int | None = None) -> None:
        self.uri = uri
        self.version = version
        self._text = text
        self._starts: list[int] | None = None

    @property
    def text(self) -> str:
        return self._text

    @property
    def starts(self) -> list[int]:
        if self._starts is None:
            self._starts = line_starts(self._text)
        return self._starts

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_span(self, line: int) -> tuple[int, int]:
        """``(start, end)`` offsets of ``line``'s text, without its line break."""
        starts = self.starts
        start = starts[line]
        end = starts[line + 1] if line + 1 < len(starts) else len(self._text)
        while end > start and self._text[end - 1] in "\r\n":
            end -= 1
        return start, end

    def line_text(self, line: int) -> str:
        start, end = self.line_span(line)
        return self._text[start:end]

    def offset_at(self, line: int, character: int, encoding: str = UTF16) -> int:
        """Offset of an LSP position; positions past the last line mean the end of text."""
        if line < 0:
            return 0
        if line >= self.line_count:
            return len(self._text)
        start, end = self.line_span(line)
        return start + units_to_index(self._text[start:end], character, encoding)

    def position_at(self, offset: int, encoding: str = UTF16) -> Position:
        """LSP position of an offset (an offset inside a ``\\r\\n`` maps to the line end)."""
        offset = max(0, min(offset, len(self._text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        start, end = self.line_span(line)
        index = min(offset, end) - start
        return Position(line, index_to_units(self._text[start:end], index, encoding))

    def apply_change(
        self,
        text: str,
        start: Position | None = None,
        end: Position | None = None,
        encoding: str = UTF16,
        version: int | None = None,
    ) -> None:
        """Replace the range ``start..end`` (the whole text when ``start`` is None)."""
        if start is None or end is None:
            self._text = text
        else:
            a = self.offset_at(start.line, start.character, encoding)
            b = self.offset_at(end.line, end.character, encoding)
            a, b = min(a, b), max(a, b)
            self._text = self._text[:a] + text + self._text[b:]
        self._starts = None
        if version is not None:
            self.version = version

    @property
    def eol(self) -> str:
        """The document's line break (of its first line), ``\\n`` if it has none."""
        match = _LINE_BREAK.search(self._text, 0, 100_000)
        return match.group(0) if match else "\n"


@dataclass(frozen=True)
class Window:
    """The text around the cursor, line breaks normalised to ``\\n``.

    ``prefix`` ends at the cursor, ``suffix`` starts there. ``line_head``/``line_tail``
    are the cursor's line before and after it.
    """

    prefix: str
    suffix: str
    line_head: str
    line_tail: str
    offset: int
    eol: str


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def cursor_window(
    doc: Document, offset: int, prefix_chars: int, suffix_chars: int, grid: int = 1
) -> Window:
    """Copy only ``prefix_chars`` (up to ``grid`` more) before and ``suffix_chars`` after
    ``offset``.

    The prefix starts at a line start when one is in reach (models see whole lines).
    With a ``grid``, the start is first moved back to a multiple of ``grid`` in the
    document, so that it stays put while the user types: successive prompts then share
    their beginning, which the engine's prompt cache reuses
    (:func:`codeparrot.prompting.window_start`).
    """
    text = doc.text
    offset = max(0, min(offset, len(text)))
    lo = window_start(text, offset, prefix_chars, grid)
    prefix = normalise_newlines(text[lo:offset])
    suffix = normalise_newlines(text[offset : offset + suffix_chars])
    head = prefix.rsplit("\n", 1)[-1]
    tail = suffix.split("\n", 1)[0]
    return Window(prefix, suffix, head, tail, offset, doc.eol)
