"""Turn raw model text into the suggestion an editor shows (pure functions).

Rules users expect from ghost text:

- one line by default; a whole block when the cursor opens an empty one
  (``def f():|`` or a blank line under it), ending where the block dedents;
- nothing that repeats what already follows the cursor (an auto-inserted ``)``, the
  rest of the line, the next line);
- no whitespace-only suggestion, nothing after a control character or broken UTF-8;
- no degenerate repetition (:mod:`codeparrot.generation.repetition`): cut before a unit
  repeats more than twice in a row or a line repeats one just above the cursor; a
  suggestion that is only repetition is dropped;
- brackets balanced on the cursor's line: a closer the text after the cursor already
  supplies is not inserted twice, a bracket the suggestion opens is closed.
"""

from __future__ import annotations

import re

from codeparrot.generation.repetition import cut_repetition
from codeparrot.lsp.documents import Window

OPENERS = "([{"
CLOSERS = ")]}"
PAIR = dict(zip(OPENERS, CLOSERS, strict=True))
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffd]")
BLOCK_KEYWORDS = frozenset(
    [
        "def",
        "class",
        "if",
        "elif",
        "else",
        "for",
        "while",
        "try",
        "except",
        "finally",
        "with",
        "async",
        "match",
        "case",
    ]
)


def indent_width(line: str) -> int:
    stripped = line.lstrip(" \t")
    return len(line[: len(line) - len(stripped)].expandtabs(8))


def _code_part(line: str) -> str:
    """``line`` without a trailing comment (quotes respected, roughly)."""
    quote = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
        i += 1
    return line


def opens_block(line: str) -> bool:
    """Does ``line`` start a compound statement (``if x:``, ``def f(a):``, ``else:``)?"""
    code = _code_part(line).rstrip()
    if not code.endswith(":"):
        return False
    words = code.lstrip().replace("(", " ").replace(":", " ").split()
    return bool(words) and words[0] in BLOCK_KEYWORDS


def block_indent(window: Window) -> int | None:
    """Indent of the block opener when the cursor opens an empty block, else ``None``.

    The cursor opens an empty block when nothing follows it on its line and either its
    line so far is a block opener, or it is blank and the previous non-blank line is
    one; and no line below is indented deeper than the opener (the block is empty).
    """
    if window.line_tail.strip():
        return None
    if window.line_head.strip():
        if not opens_block(window.line_head):
            return None
        base = indent_width(window.line_head)
    else:
        previous = [ln for ln in window.prefix.split("\n")[:-1] if ln.strip()]
        if not previous or not opens_block(previous[-1]):
            return None
        base = indent_width(previous[-1])
    for line in window.suffix.split("\n")[1:]:
        if line.strip():
            return base if indent_width(line) <= base else None
    return base


def _brackets(text: str, quote: str | None = None) -> tuple[list[tuple[int, str]], str | None]:
    """Brackets outside strings and comments, with their indices, and the quote of a
    string still open at the end. ``quote``: the string ``text`` starts inside of."""
    found: list[tuple[int, str]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            quote = None
        elif quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            end = text.find("\n", i)
            if end == -1:
                break
            i = end
            continue
        elif ch in OPENERS or ch in CLOSERS:
            found.append((i, ch))
        i += 1
    return found, quote


def _scan(text: str) -> tuple[list[tuple[int, str]], list[int], str | None]:
    """Brackets of one line of code: (open ones with their index, indices of unmatched or
    mismatched closers, the quote of an unterminated string)."""
    stack: list[tuple[int, str]] = []
    bad: list[int] = []
    found, quote = _brackets(text)
    for i, ch in found:
        if ch in OPENERS:
            stack.append((i, ch))
        elif stack and PAIR[stack[-1][1]] == ch:
            stack.pop()
        else:
            bad.append(i)
    return stack, bad, quote


def _imbalance(line: str) -> int:
    stack, bad, _ = _scan(line)
    return len(stack) + len(bad)


def balance(text: str, tail: str, head: str = "") -> str:
    """Cut at a closer that does not fit, close what the suggestion opened.

    A closer of a bracket opened before the cursor (in ``head``, the text before it) is
    kept unless the text after the cursor closes that bracket itself (an auto-paired
    ``)``): then the suggestion ends there. A closer that matches no open bracket ends
    it too.
    """
    opened, _, head_quote = _scan(head) if head else ([], [], None)
    outer = [b for _, b in opened]
    # when the text after the cursor closes some of those itself, a closer inserted
    # before it would take the innermost one's place: close none of them then
    closable = 0 if _scan(tail)[1] else len(outer)
    stack: list[str] = []
    found, quote = _brackets(text, head_quote)  # the cursor may be inside a string
    for i, ch in found:
        if ch in OPENERS:
            stack.append(ch)
        elif stack:
            if PAIR[stack[-1]] != ch:
                return _close(text[:i], stack, None)
            stack.pop()
        elif closable > 0 and PAIR[outer[-1]] == ch:
            outer.pop()  # closes a bracket opened before the cursor
            closable -= 1
        else:
            return text[:i].rstrip() if text[:i].strip() else ""
    # close a string the suggestion opened, not the user's own
    own_quote = quote if quote and (quote != head_quote or _opens_string(text, quote)) else None
    return _close(text, stack, own_quote if "\n" not in text else None)


def _opens_string(text: str, quote: str) -> bool:
    """Does ``text`` (which starts inside a ``quote`` string) close it and open another?"""
    return text.count(quote) >= 2


def _close(text: str, stack: list[str], quote: str | None) -> str:
    closing = (quote or "") + "".join(PAIR[b] for b in reversed(stack))
    return text.rstrip() + closing if closing and text.strip() else text


def drop_tail_overlap(head: str, text: str, tail: str) -> str:
    """Remove the end of ``text`` that repeats the start of ``tail``.

    Among the overlaps, the one that leaves the line best balanced wins (the longest on
    a tie): ``print(|)`` + ``x)`` -> ``x``, but ``f(|)`` + ``g(y)`` keeps its ``)``.
    """
    if not tail:
        return text
    best_k, best_err = 0, _imbalance(head + text + tail)
    for k in range(1, min(len(text), len(tail)) + 1):
        if text.endswith(tail[:k]):
            err = _imbalance(head + text[:-k] + tail)
            if err <= best_err:
                best_k, best_err = k, err
    return text[: len(text) - best_k] if best_k else text


def cut_block(text: str, base: int, head: str) -> str:
    """Lines of ``text`` up to the first non-blank line indented at or left of ``base``.

    The first line continues the cursor's line; it belongs to the block if the cursor
    is inside it (a blank, indented line), and is empty after ``def f():|``.
    """
    lines = text.split("\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if line.strip() and indent_width(line) <= base:
            break
        kept.append(line)
    while len(kept) > 1 and not kept[-1].strip():
        kept.pop()
    return "\n".join(line.rstrip() for line in kept)


def postprocess(raw: str, window: Window, base_indent: int | None) -> str | None:
    """The suggestion to insert at the cursor (``\\n`` line breaks), or ``None``.

    ``base_indent`` is :func:`block_indent` of the window: ``None`` for a single line.
    """
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    bad = _UNPRINTABLE.search(text)
    if bad is not None:  # control bytes or broken UTF-8: nothing a user would type
        text = text[: bad.start()]
    head, tail = window.line_head, window.line_tail
    if base_indent is None:
        text = text.split("\n", 1)[0].rstrip()
        text = cut_repetition(text, head, window.prefix)
        if not head.strip() and text.strip():
            following = [ln for ln in window.suffix.split("\n")[1:] if ln.strip()]
            if following and following[0].strip() == text.strip():
                return None  # the line below already says it
        # brackets still open before the cursor, over the last few lines (calls span lines)
        recent = "\n".join(window.prefix.rsplit("\n", 20)[-20:])
        text = balance(text, tail, recent)
        text = drop_tail_overlap(head, text, tail)
        text = text.rstrip() if not tail else text
    else:
        text = cut_block(text, base_indent, head)
        text = cut_repetition(text, head, window.prefix)
        if not head.strip() and text.strip():
            # the cursor's line is blank: keep the indent the user already typed
            first, _, rest = text.partition("\n")
            if not first.strip():
                text = rest
                if len(head) and text.startswith(head):
                    text = text[len(head) :]
        text = balance(text, tail)
    if not text.strip():
        return None
    return text
