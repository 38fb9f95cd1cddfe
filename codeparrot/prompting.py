"""The prompt an editor sends for a cursor: one builder for the language server and the
line benchmark (pure functions of text and a token counter; no torch).

For a cursor in a document the prompt is built in four steps, each a function here:

1. :func:`window_start`: the text before the cursor is read from a start that moves in
   steps of :func:`prompt_quantum` characters of the document (then to a line start), so
   that successive prompts of a document being typed share their beginning;
2. :func:`prompt_budget`: the prompt's tokens, what the model's context leaves after the
   new tokens (at most the editor's ``context_tokens``);
3. :func:`workspace_snippets`: optionally, comment blocks of other files' lines most like
   the code before the cursor, within ``workspace_share`` of the budget;
4. :func:`fit_suffix` and :func:`fit_prefix`: with fill in the middle, whole lines after
   the cursor within ``suffix_share`` of what is left, and the nearest text before the
   cursor within the rest.

:func:`prompt_parts` runs steps 3 and 4; the language server
(``codeparrot.lsp.completion``) and ``codeparrot eval lines`` both call it, so the
benchmark measures the prompts the editor sends.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

CountTokens = Callable[[str], int]

# Prompt starts move in steps of characters (see prompt_quantum, fit_prefix, window_start).
QUANTUM_MIN_CHARS = 64
QUANTUM_MAX_CHARS = 512
# Code runs ~3-4 characters per token; 8 leaves room for long whitespace-heavy tokens.
GUESS_CHARS_PER_TOKEN = 8
# The fewest characters before the cursor a prompt window reads (the language server's
# cache keys on the last 1024 of them and compares windows 4 keys long).
MIN_WINDOW_CHARS = 4096

# -- the window before the cursor -----------------------------------------------------------


def prompt_quantum(budget_tokens: int) -> int:
    """The step, in characters, in which the start of a prompt of ``budget_tokens`` moves.

    While the user types, the start stays put until the text has grown by about a step,
    then the whole prompt is read again (a jump: ~1 s for a 164M model on 2 cores). Half a
    character per budget token (384 for 768 tokens: a jump every ~5 lines typed) costs the
    prompt a quarter of a step on average, about 7% of its text; between 64 and 512.
    """
    return max(QUANTUM_MIN_CHARS, min(QUANTUM_MAX_CHARS, budget_tokens // 2))


def window_chars(context_tokens: int) -> int:
    """Characters before the cursor to read for a prompt of ``context_tokens`` tokens."""
    return max(MIN_WINDOW_CHARS, context_tokens * GUESS_CHARS_PER_TOKEN)


def window_start(text: str, offset: int, prefix_chars: int, grid: int = 1) -> int:
    """Offset in ``text`` where the window of ``prefix_chars`` before ``offset`` starts.

    The start is moved back to a multiple of ``grid`` (so that it stays put while the user
    types), then forward to the next line start when one is before ``offset`` (models see
    whole lines).
    """
    offset = max(0, min(offset, len(text)))
    lo = max(0, offset - prefix_chars)
    lo -= lo % max(1, grid)
    if lo > 0:
        cut = text.find("\n", lo, offset)
        if cut != -1:
            lo = cut + 1
    return lo


FIM_SENTINEL_TOKENS = 3  # prefix, suffix and middle of any family (codeparrot.fim.TEMPLATES)


def prompt_budget(context_length: int, context_tokens: int, max_new_tokens: int) -> tuple[int, int]:
    """(prompt tokens, new tokens) that fit in a model's context of ``context_length``.

    The new tokens take at most half the context; the prompt what is left (one token
    spare), at most ``context_tokens``.
    """
    new = min(max_new_tokens, max(1, context_length // 2))
    return min(context_tokens, context_length - new - 1), new


# -- fitting text to a token budget ----------------------------------------------------------


def _cut(prefix: str, lo: int, quantum: int) -> str:
    """``prefix`` from the first line start at or after ``lo`` rounded up to ``quantum``."""
    lo = min(-(-lo // quantum) * quantum, len(prefix) - 1)
    cut = prefix.find("\n", lo)
    return prefix[cut + 1 :] if cut != -1 and cut + 1 < len(prefix) else prefix[lo:]


def fit_suffix(suffix: str, budget: int, count_tokens: CountTokens) -> str:
    """The most whole lines at the start of ``suffix`` within ``budget`` tokens.

    The first line is the rest of the cursor's line; when even it is over the budget the
    suffix is left out (``""``) rather than cut inside a line (or a token).
    """
    if budget <= 0 or not suffix:
        return ""
    if count_tokens(suffix) <= budget:
        return suffix
    ends = [i + 1 for i, ch in enumerate(suffix) if ch == "\n"]
    lo, hi = 0, len(ends)  # how many lines fit (heads grow with the count)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(suffix[: ends[mid - 1]]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return suffix[: ends[lo - 1]] if lo else ""


def fit_prefix(prefix: str, budget: int, count_tokens: CountTokens, quantum: int = 1) -> str:
    """An end of ``prefix`` within ``budget`` tokens, cut at a line start if possible.

    Tokenizes a few candidates, never the whole document: the caller passes a window.
    Cuts are made at multiples of ``quantum`` characters from the start of ``prefix`` (then
    the next line start), so that typing at the end rarely moves the start. A window far
    longer than the budget is first cut to its last ``budget * GUESS_CHARS_PER_TOKEN``
    characters when those alone hold at least ``budget`` tokens (tokenizing a few thousand
    characters less is a few milliseconds of every request).
    """
    guess = budget * GUESS_CHARS_PER_TOKEN
    if budget > 0 and len(prefix) > 2 * guess:
        tail = _cut(prefix, len(prefix) - guess, quantum)
        if count_tokens(tail) >= budget:
            prefix = tail
    for _ in range(8):
        n = count_tokens(prefix)
        if n <= budget:
            return prefix
        # drop a proportional share of the text (a little more, to converge fast)
        keep = int(len(prefix) * budget / n * 0.95)
        if keep <= 0:
            return ""
        prefix = _cut(prefix, len(prefix) - keep, quantum)
    while prefix and count_tokens(prefix) > budget:
        prefix = prefix[max(1, len(prefix) // 8) :]
    return prefix


# -- workspace context -----------------------------------------------------------------------
# As Tabby does, the lines of other files most like the code around the cursor go into the
# prompt as comment blocks headed ``# Path: …``. Likeness is the Jaccard similarity of the
# identifiers (Python keywords and ``self`` left out) of a window of lines and of the last
# lines before the cursor; ties go to the more recently edited document. Huge documents and
# ones holding NUL bytes are skipped.

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset(keyword.kwlist) | {"self", "cls", "None", "True", "False"}
WINDOW_LINES = 12  # lines per snippet
QUERY_LINES = 10  # lines before the cursor that a snippet should resemble
MAX_SNIPPETS = 3
MAX_DOCUMENT_CHARS = 1_000_000  # a bigger document is skipped


def identifiers(text: str) -> set[str]:
    return {w for w in _IDENT.findall(text) if w not in _COMMON}


def display_path(uri: str) -> str:
    """The last two components of a document's path (``pkg/module.py``)."""
    path = unquote(urlparse(uri).path) or uri
    return "/".join(path.rstrip("/").split("/")[-2:])


def workspace_snippets(
    prefix: str,
    others: Sequence[tuple[str, str]],
    budget: int,
    count_tokens: CountTokens,
) -> str:
    """Comment blocks from ``others`` (``(uri, text)``, most recently edited first) like
    the end of ``prefix``, within ``budget`` tokens; ``""`` when none is alike or fits."""
    return "".join(snippet_blocks(prefix, others, budget, count_tokens))


def snippet_blocks(
    prefix: str,
    others: Sequence[tuple[str, str]],
    budget: int,
    count_tokens: CountTokens,
) -> list[str]:
    """The comment blocks of :func:`workspace_snippets`, one per snippet, best first."""
    query = identifiers("\n".join(prefix.split("\n")[-QUERY_LINES:]))
    if not query or budget <= 0:
        return []
    scored = []
    for rank, (uri, text) in enumerate(others):
        if len(text) > MAX_DOCUMENT_CHARS or "\x00" in text:
            continue
        lines = text.split("\n")
        for start in range(0, max(1, len(lines) - WINDOW_LINES + 1), WINDOW_LINES // 2):
            chunk = lines[start : start + WINDOW_LINES]
            found = identifiers("\n".join(chunk))
            if found & query:
                score = len(found & query) / len(found | query)
                scored.append((score, -rank, -start, uri, chunk))
    scored.sort(reverse=True)
    blocks: list[str] = []
    used = 0
    for _, _, _, uri, chunk in scored[:MAX_SNIPPETS]:
        body = "".join(f"# {line}".rstrip() + "\n" for line in chunk)
        block = f"# Path: {display_path(uri)}\n{body}"
        cost = count_tokens(block)
        if used + cost <= budget:
            blocks.append(block)
            used += cost
    return blocks


# -- the prompt ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptParts:
    """A prompt in its parts: the workspace snippets (one comment block each), the text
    before the cursor, the suffix (``None``: complete the prefix alone)."""

    snippets: tuple[str, ...]
    prefix: str
    suffix: str | None

    @property
    def text(self) -> str:
        """The prompt before the suffix: the snippets, then the text before the cursor."""
        return "".join(self.snippets) + self.prefix


def prompt_parts(
    count_tokens: CountTokens,
    before: str,
    after: str,
    budget: int,
    *,
    suffix_share: float,
    fim: bool = True,
    others: Sequence[tuple[str, str]] = (),
    workspace_share: float = 0.0,
    suffix_tokens: int | None = None,
) -> PromptParts:
    """The prompt for a cursor between ``before`` and ``after``, within ``budget`` tokens
    (``.text`` before the gap, ``.suffix`` after it; ``None``: complete the prefix alone).

    ``count_tokens`` is the model's token counter (``Engine.count_tokens``). Snippets of
    ``others`` (``(uri, text)``, most recently edited first) take at most
    ``workspace_share`` of the budget, at the top of the prompt. With ``fim`` (a checkpoint
    that learnt fill in the middle) and something but blanks after the cursor, the suffix
    takes whole lines of ``after``, at most ``suffix_share`` of what is left (and at most
    ``suffix_tokens``, where given), and the prefix the rest.
    """
    quantum = prompt_quantum(budget)  # the whole budget's: as the window's grid
    snippets: list[str] = []
    if workspace_share > 0 and others:
        room = int(budget * workspace_share)
        snippets = snippet_blocks(before, others, room, count_tokens)
        budget -= count_tokens("".join(snippets)) if snippets else 0
    suffix = None
    if fim and after.strip():
        room = int(budget * suffix_share)
        if suffix_tokens is not None:
            room = min(room, suffix_tokens)
        suffix = fit_suffix(after, room, count_tokens) or None
    # a prompt with a suffix also holds the three FIM sentinels, of which the budget's one
    # spare token covers one: without the other two the engine would cut another line
    used = count_tokens(suffix) + FIM_SENTINEL_TOKENS - 1 if suffix else 0
    prefix = fit_prefix(before, budget - used, count_tokens, quantum=quantum)
    return PromptParts(tuple(snippets), prefix, suffix)
