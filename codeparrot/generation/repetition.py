"""Cut degenerate repetition out of generated code (pure functions, no torch).

Small models fall into loops: ``sympy.polys.polys.polys…``, ``class f(self, self, self…``,
the same line again and again, or a line copied from just above the cursor. Editors'
completion systems cut such text before showing it (Tabby drops repetitive lines and
blocks and trims lines that end in repetition; Continue stops at repeated lines). Here:

- a *unit* (a run of tokens, a word group, or a group of lines) may occur at most
  :data:`MAX_REPEATS` times in a row; the text is cut before the next occurrence;
- a line may not end in a short string repeated :data:`LINE_END_REPEATS` times or more
  (``for q in = = = = =``, ``dtemp.unkunkunkunk``, ``def __init________``: a unit of one
  token or a few characters that tokenization hides from the token runs above); the text is
  cut before the run (Tabby trims such lines too);
- a line may not repeat one of the lines just above the cursor; the text is cut before it;
- what is left is ``""`` when the text was only repetition.

Units made only of literals and punctuation (``0, 0, 0, 0``, ``None, None, None``,
``'-' * 8``) are data, not loops, and are left alone, and so are short or structural lines
(``pass``, ``return None``, ``)``) that honest code repeats; so are numbers
(``0x00000000``, ``1000000``) and rulers (``====`` or ``# ----`` on a line of their own, in
a comment or a string).

Used by the language server's post-processing and the playground.
"""

from __future__ import annotations

import re

# A unit may occur this many times in a row; the next occurrence is cut.
MAX_REPEATS = 2
# Longest unit looked for, in tokens (a word, a run of spaces or of punctuation each count one).
MAX_UNIT_TOKENS = 16
# Lines above the cursor that a suggested line may not repeat.
LINES_ABOVE = 40
# A line may not end in a unit of up to LINE_END_UNIT_CHARS characters repeated this often.
LINE_END_REPEATS = 4
LINE_END_UNIT_CHARS = 8

_TOKEN = re.compile(r"\w+|\s+|[^\w\s]+")
_LITERAL_WORD = re.compile(r"(?:\d\w*|None|True|False|_)\Z")
_WORD = re.compile(r"\w+")


def cut_repetition(text: str, before: str = "", above: str = "") -> str:
    """``text`` cut before its first degenerate repetition.

    ``before`` is what precedes ``text`` on its line (a unit repeated there counts
    toward the limit); ``above`` the text before the cursor, whose last
    :data:`LINES_ABOVE` lines a suggested line may not repeat. Trailing whitespace and
    a dangling separator are removed after a cut; ``""`` means only repetition was left.
    """
    end = min(
        _run_cut(text, before),
        _line_run_cut(text, before),
        _line_above_cut(text, before, above),
    )
    # a run at a line end cuts there unless a token run already cut that line (which keeps
    # the allowed repeats: ``polys.polys``)
    lines_before = text[: text.rfind("\n", 0, end) + 1] if end < len(text) else text
    run = _line_end_cut(lines_before, before)
    if run < len(lines_before):
        end = min(end, run)
    if end >= len(text):
        return text
    kept = text[:end].rstrip()
    return kept.rstrip(",.;") if kept.endswith((",", ".", ";")) else kept


def is_repetitive(text: str, before: str = "", above: str = "") -> bool:
    """Would :func:`cut_repetition` change ``text``?"""
    return cut_repetition(text, before, above) != text


def _is_data(unit: list[str]) -> bool:
    """A unit of literals and punctuation only: a table, not a loop."""
    return all(_LITERAL_WORD.match(tok) or not _WORD.match(tok) for tok in unit)


def _run_cut(text: str, before: str) -> int:
    """Character offset in ``text`` of the earliest occurrence of a token unit beyond the
    allowed repeats (``len(text)`` when there is none)."""
    head = _TOKEN.findall(before.split("\n")[-1])
    tokens = head + _TOKEN.findall(text)
    best = len(tokens)  # token index to cut at
    for start in range(len(tokens)):
        for size in range(1, MAX_UNIT_TOKENS + 1):
            cut = start + MAX_REPEATS * size
            run_end = cut + size
            if cut >= best or run_end > len(tokens):
                break
            if run_end <= len(head) or tokens[start + size] != tokens[start]:
                continue  # the run must reach into ``text``; cheap test first
            unit = tokens[start : start + size]
            if all(
                tokens[start + k * size : start + (k + 1) * size] == unit
                for k in range(1, MAX_REPEATS + 1)
            ) and not _is_data(unit):
                best = max(cut, len(head))
                break
    if best >= len(tokens):
        return len(text)
    return sum(len(tok) for tok in tokens[len(head) : best])


def _line_run_cut(text: str, before: str) -> int:
    """Offset of the first line of a group of lines repeated beyond the allowed repeats."""
    lines = text.split("\n")
    if len(lines) <= MAX_REPEATS:
        return len(text)
    keys = [ln.strip() for ln in lines]
    keys[0] = (before.split("\n")[-1] + lines[0]).strip()
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln) + 1)
    for start in range(len(lines)):
        for size in range(1, (len(lines) - start) // (MAX_REPEATS + 1) + 1):
            unit = keys[start : start + size]
            if not any(_WORD.search(k) for k in unit):
                continue  # closers and blank lines
            copies = (
                keys[start + k * size : start + (k + 1) * size] for k in range(1, MAX_REPEATS + 1)
            )
            if all(c == unit for c in copies):
                return offsets[start + MAX_REPEATS * size]
    return len(text)


def _substantial(line: str) -> bool:
    """A line worth checking against the lines above: not a keyword, a closer or a short
    statement such as ``return None`` or ``i += 1`` that honest code repeats."""
    return len(_WORD.findall(line)) >= 3 and len(line) >= 12


def _line_above_cut(text: str, before: str, above: str) -> int:
    """Offset of the first suggested line that repeats one of the lines above the cursor."""
    previous = above.split("\n")[:-1][-LINES_ABOVE:]  # the last one is the cursor's line
    seen = {ln.strip() for ln in previous if _substantial(ln.strip())}
    if not seen:
        return len(text)
    offset = 0
    for i, line in enumerate(text.split("\n")):
        whole = (before.split("\n")[-1] + line) if i == 0 else line
        if whole.strip() in seen:
            return offset
        offset += len(line) + 1
    return len(text)


def _line_end_run(line: str) -> tuple[int, str] | None:
    """(start, unit) of the run at the end of ``line``: its shortest unit of at most
    :data:`LINE_END_UNIT_CHARS` characters repeated :data:`LINE_END_REPEATS` times or more
    right up to the end; None when there is none."""
    for size in range(1, LINE_END_UNIT_CHARS + 1):
        if len(line) < size * LINE_END_REPEATS:
            break
        unit = line[len(line) - size :]
        start = len(line) - size
        while start >= size and line[start - size : start] == unit:
            start -= size
        if (len(line) - start) // size >= LINE_END_REPEATS and unit.strip():
            return start, unit
    return None


def _honest_run(line: str, start: int, unit: str) -> bool:
    """A run that honest code writes: a number or a table of numbers (``0x00000000``,
    ``0xFFFFFFFF``, ``0, 0, 0, 0``), or a ruler of punctuation alone on its line, in a comment or a string."""
    word = start
    while word > 0 and (line[word - 1].isalnum() or line[word - 1] == "_"):
        word -= 1
    if word < start and line[word].isdigit() and unit.isalnum():
        return True  # inside a number (0xFFFFFFFF)
    if not any(ch.isalpha() or ch == "_" for ch in unit):
        if any(ch.isdigit() for ch in unit):
            return True  # digits: a literal or a table of them
        head = line[:start].strip()
        return not head or head.endswith(("#", '"', "'", "//", "/*", "*"))
    return False


def _line_end_cut(text: str, before: str) -> int:
    """Offset of the first run that ends one of the suggested lines (``len(text)``: none)."""
    head = before.split("\n")[-1]
    offset = 0
    for i, line in enumerate(text.split("\n")):
        lead = head if i == 0 else ""
        whole = (lead + line).rstrip()
        found = _line_end_run(whole)
        if found is not None and not _honest_run(whole, *found):
            return offset + max(0, found[0] - len(lead))
        offset += len(line) + 1
    return len(text)


def cut_line_end_repetition(text: str, before: str = "") -> str:
    """``text`` cut before the first run that ends one of its lines, and only that rule of
    :func:`cut_repetition` (a short string repeated :data:`LINE_END_REPEATS` times or more
    right up to a line end: ``for q in = = = =``, ``dtemp.unkunkunk``), honest numbers and
    rulers kept. ``before`` is what precedes ``text`` on its line. For an API's answers,
    where the editor's other rules (lines copied from above, repeated blocks) would change
    text a client may want whole."""
    end = _line_end_cut(text, before)
    if end >= len(text):
        return text
    kept = text[:end].rstrip()
    return kept.rstrip(",.;") if kept.endswith((",", ".", ";")) else kept


class LineEndRepetitionStream:
    """:func:`cut_line_end_repetition` over a text that arrives in pieces.

    :meth:`feed` returns the part of the text that no later piece can take back, keeping
    back the tail that could still become a cut run (the end of the unfinished line that
    repeats with a period of at most :data:`LINE_END_UNIT_CHARS` characters, and the
    whitespace and separators a cut would drop before it); :meth:`finish` returns the rest.
    What they return, joined, is ``cut_line_end_repetition(whole_text, before)``; nothing
    more is returned after a cut.
    """

    def __init__(self, before: str = "") -> None:
        self.before = before
        self.text = ""
        self.sent = 0  # characters of ``text`` returned so far
        self.cut = False

    def feed(self, piece: str) -> str:
        if self.cut:
            return ""
        self.text += piece
        done = self.text.rfind("\n") + 1  # the finished lines end here
        finished = cut_line_end_repetition(self.text[:done], self.before)
        if finished != self.text[:done]:
            self.cut = True  # a finished line ended in a run: the answer is known
            return self._send(finished)
        lead = self.before.split("\n")[-1] if done == 0 else ""
        line = (lead + self.text[done:]).rstrip()
        start = done + max(0, _open_run_start(line) - len(lead))
        safe = start
        while safe > 0 and (self.text[safe - 1].isspace() or self.text[safe - 1] in ",.;"):
            safe -= 1
        return self._send(self.text[:safe])

    def finish(self) -> str:
        """The rest of the cut text, once the whole text has arrived."""
        if self.cut:
            return ""
        self.cut = True
        return self._send(cut_line_end_repetition(self.text, self.before))

    def _send(self, upto: str) -> str:
        if len(upto) <= self.sent:
            return ""
        piece = upto[self.sent :]
        self.sent = len(upto)
        return piece


def _open_run_start(line: str) -> int:
    """Start of the longest end of ``line`` that repeats with a period of at most
    :data:`LINE_END_UNIT_CHARS` characters: where a run at the line's end could begin once
    more text comes (the last :data:`LINE_END_UNIT_CHARS` characters at least)."""
    start = len(line)
    for size in range(1, LINE_END_UNIT_CHARS + 1):
        s = max(0, len(line) - size)
        while s > 0 and line[s - 1] == line[s - 1 + size]:
            s -= 1
        start = min(start, s)
    return start
