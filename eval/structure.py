"""What a problem file's tests are, read from their syntax trees: never from their text.

A problem file is input like any other. Which task it is of decides which packages the
checker gets and, for HumanEval+, whether the installed HumanEval test runs as a problem's
base test beside the file's own: so it is read from what the tests *do*, with ``ast``
(nothing is run), not from what their text contains. ``"import numpy"`` inside a string
literal imports nothing, and changes nothing.

- :func:`record_shape`: the modules a test imports (``import``/``from`` statements anywhere
  in it), and whether it has evalplus's layout of a plus test;
- :func:`recognise`: the task of a file's records, and the problems whose base test is the
  installed HumanEval one.

evalplus's layout (its ``to_original_fmt``, the ``HumanEvalPlus-OriginFmt`` release): at the
top level only imports and definitions (``is_floats``, ``assertion``, ``ref_func``, helpers
such as ``_poly``), among them ``def check(candidate):`` whose body assigns literal lists
(``inputs``, and ``results`` where the outputs are stored) and then runs one ``for`` loop
over ``inputs``.
"""

from __future__ import annotations

import ast
import logging
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError
from codeparrot.eval.tasks import TASKS, Task

logger = logging.getLogger(__name__)

# A test longer than this is not parsed (a syntax tree costs ~100 bytes per token); the
# sandbox takes no larger one either (its frames are at most 16 MiB).
MAX_TEST_CHARS = 16 << 20
# The fields of a record whose code runs on the checker's side (MBPP: its test_imports).
TEST_FIELDS = ("test", "test_imports", "test_setup")


@dataclass(frozen=True)
class Shape:
    """What a test's syntax tree says: the top-level names of the modules it imports, and
    whether it is laid out as evalplus's plus tests are. ``parsed`` is False for a test
    that does not parse (or is too large to): it imports nothing that is seen here."""

    imports: frozenset[str] = frozenset()
    plus_layout: bool = False
    parsed: bool = True


def parse(code: str) -> ast.Module | None:
    """The syntax tree of ``code``, or None where it does not parse (or is too large)."""
    if len(code) > MAX_TEST_CHARS:
        return None
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# The fields of a statement (and of an ``except`` or ``case`` clause) that hold statements.
STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def imported_modules(tree: ast.AST) -> set[str]:
    """Top-level names of the modules imported anywhere in ``tree`` (relative imports aside).

    Only statements are visited (an import is one, and no expression holds a statement):
    HumanEval+'s tests hold megabytes of literal inputs, whose nodes a full walk visits."""
    names = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        for field in STATEMENT_FIELDS:
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                todo.extend(inner)
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _literal_list(node: ast.stmt) -> str | None:
    """The name a statement binds to a list or tuple display, or None."""
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.List | ast.Tuple)
    ):
        return node.targets[0].id
    return None


def _plus_check(node: ast.stmt) -> bool:
    """Whether ``node`` is evalplus's ``def check(candidate):`` (literal lists, one loop)."""
    if not isinstance(node, ast.FunctionDef) or node.name != "check" or node.decorator_list:
        return False
    args = node.args
    if [a.arg for a in args.args] != ["candidate"] or args.vararg or args.kwarg:
        return False
    *lists, loop = node.body
    names = [_literal_list(stmt) for stmt in lists]
    if not names or names[0] != "inputs" or None in names or not isinstance(loop, ast.For):
        return False
    return any(isinstance(n, ast.Name) and n.id == "inputs" for n in ast.walk(loop.iter))


def plus_layout(tree: ast.Module) -> bool:
    """Whether ``tree`` is laid out as evalplus's plus tests are (see the module's doc)."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign)
    checks = 0
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if not isinstance(node, allowed):
            return False
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            if not _plus_check(node):
                return False
            checks += 1
    return checks == 1


def record_shape(record: dict[str, Any]) -> Shape:
    """The shape of a record's checker-side code (its test, and MBPP's test imports)."""
    imports: set[str] = set()
    plus = parsed = True
    for key in TEST_FIELDS:
        value = record.get(key)
        if not value:
            plus = plus and key != "test"
            continue
        code = "\n".join(map(str, value)) if isinstance(value, list) else str(value)
        tree = parse(code)
        if tree is None:
            parsed = plus = False
            continue
        imports |= imported_modules(tree)
        plus = plus and (key != "test" or plus_layout(tree))
    return Shape(frozenset(imports), plus, parsed)


def recognise(
    task: Task, records: list[dict[str, Any]], path: Path, humaneval_ids: Iterable[str]
) -> tuple[Task, frozenset[str]]:
    """The task a problem file's records are of, and the task ids whose base test is the
    installed HumanEval test (the file's own being their plus test).

    - A file given as HumanEval is HumanEval+ when every record is a HumanEval task laid
      out as evalplus's plus tests are (evalplus's release given alone).
    - Under HumanEval+, only such records have the installed test as their base test; any
      other record is checked by its own test alone.
    - Tests that import a package the task's checker is not given are refused here, before
      any sample is generated or run (they would fail every sample, the canonical ones too).
    """
    shapes = [record_shape(record) for record in records]
    needs: Counter[str] = Counter()
    for shape in shapes:
        needs.update(shape.imports - set(sys.stdlib_module_names))
    known = set(humaneval_ids)
    plus_ids = frozenset(
        r["task_id"]
        for r, shape in zip(records, shapes, strict=True)
        if shape.plus_layout and r.get("task_id") in known
    )
    plus = TASKS["humanevalplus"]
    all_plus = bool(records) and all(
        s.plus_layout and r.get("task_id") in known for r, s in zip(records, shapes, strict=True)
    )
    if task.name == "humaneval" and all_plus and not set(needs) - set(plus.checker_packages):
        logger.warning("%s: laid out as evalplus's HumanEval+: read as task humanevalplus", path)
        task = plus
    missing = sorted(set(needs) - set(task.checker_packages))
    if missing:
        counts = ", ".join(f"{m} ({needs[m]} problems)" for m in missing)
        hint = {"humaneval": "humanevalplus", "mbpp": "mbppplus"}.get(task.name)
        raise DataError(
            f"--problem-file {path}: its tests import {counts}, which the checker of --task "
            f"{task.name} is not given, so every sample would fail"
            + (f"; if it is {hint}'s file, pass --task {hint}" if hint else "")
        )
    return task, plus_ids if task is plus else frozenset()
