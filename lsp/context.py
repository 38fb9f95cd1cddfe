"""Workspace context: snippets of other open documents at the top of the prompt (pure).

As Tabby does, the lines of other files most like the code around the cursor go into the
prompt as comment blocks headed ``# Path: …``, within a token budget. Likeness is the
Jaccard similarity of the identifiers (Python keywords and ``self`` left out) of a window
of lines and of the last lines before the cursor; ties go to the more recently edited
document. Huge documents and ones holding NUL bytes are skipped.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from urllib.parse import unquote, urlparse

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset(keyword.kwlist) | {"self", "cls", "None", "True", "False"}
WINDOW_LINES = 12  # lines per snippet
QUERY_LINES = 10  # lines before the cursor that a snippet should resemble
MAX_SNIPPETS = 3
MAX_DOCUMENT_CHARS = 1_000_000  # a bigger open document is skipped


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
    count_tokens: Callable[[str], int],
) -> str:
    """Comment blocks from ``others`` (``(uri, text)``, most recently edited first) like
    the end of ``prefix``, within ``budget`` tokens; ``""`` when none is alike or fits."""
    query = identifiers("\n".join(prefix.split("\n")[-QUERY_LINES:]))
    if not query or budget <= 0:
        return ""
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
    return "".join(blocks)
