"""An evalplus-style sanitiser: keep what the entry point needs from a program, with ``ast``.

A completion often runs on past the function: a half-written next line, a ``print`` of a
call, a test block, another unrelated definition. The sanitiser

1. keeps the longest run of leading lines that parses (a completion cut at the token
   limit ends mid-statement);
2. keeps every top-level import, and the top-level functions, classes and assignments
   that the entry points reach through the names they use;
3. drops the rest (top-level calls, prints, ``if __name__ == "__main__":`` blocks).

It only reads the source (``ast.parse`` runs nothing), so it is safe on untrusted text.
A completion the parser cannot take at all (``return ---...-1`` with thousands of minus
signs exhausts its recursion; a huge one its memory) is not a crash of the harness: it
becomes a program that raises at once, so that sample alone fails, with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

# The program a completion the parser cannot take is replaced by: it fails in the sandbox.
UNPARSABLE = (
    "raise SyntaxError('the sanitiser could not parse this completion ({reason}): "
    "sample not run')\n"
)


def refused(program: str) -> bool:
    """Whether ``program`` is what :func:`sanitize` gave for a completion it could not parse."""
    return program.startswith(UNPARSABLE.split("{reason}", 1)[0])


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign


def parsable_prefix(code: str) -> tuple[str, ast.Module]:
    """The longest run of leading lines of ``code`` that parses, and its tree."""
    lines = code.splitlines(keepends=True)
    for end in range(len(lines), -1, -1):
        text = "".join(lines[:end])
        try:
            return text, ast.parse(text)
        except (SyntaxError, ValueError):  # ValueError: null bytes
            continue
    return "", ast.parse("")


# Deeper syntax trees are refused whatever this interpreter's recursion limit (another
# library may have raised it): CPython's compiler fails on them at its default limit, and
# no honest completion nests this deep.
MAX_TREE_DEPTH = 1000


def _check_depth(tree: ast.AST) -> None:
    """Raise RecursionError when ``tree`` nests deeper than :data:`MAX_TREE_DEPTH`."""
    level = [tree]
    for _ in range(MAX_TREE_DEPTH):
        level = [child for node in level for child in ast.iter_child_nodes(node)]
        if not level:
            return
    raise RecursionError(f"the syntax tree nests deeper than {MAX_TREE_DEPTH} levels")


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def names_used(code: str) -> set[str]:
    """The names a piece of (test) code reads, or an empty set when it does not parse."""
    try:
        return _used(ast.parse(code))
    except (SyntaxError, ValueError):
        return set()


def sanitize(code: str, entry_points: Iterable[str]) -> str:
    """The imports of ``code`` and the definitions ``entry_points`` reach, in source order.

    With no entry point found in ``code``, every top-level definition is kept. Code nested
    too deeply (or too large) to parse gives :data:`UNPARSABLE`, which fails when run.
    """
    try:
        return _sanitize(code, entry_points)
    except RecursionError:
        return UNPARSABLE.format(reason="nested too deeply")
    except MemoryError:
        return UNPARSABLE.format(reason="too large")


def _sanitize(code: str, entry_points: Iterable[str]) -> str:
    text, tree = parsable_prefix(code)
    _check_depth(tree)
    definitions: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        if isinstance(node, Definition):
            for name in _defined(node):
                definitions.setdefault(name, []).append(node)
    todo = [n for n in entry_points if n in definitions]
    if not todo:
        todo = list(definitions)
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        if name in reached or name not in definitions:
            continue
        reached.add(name)
        for node in definitions[name]:
            todo.extend(_used(node) - reached)
    kept = [
        node
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        or (isinstance(node, Definition) and reached.intersection(_defined(node)))
    ]
    lines = text.splitlines()
    return "\n\n".join(_source(lines, node) for node in kept) + ("\n" if kept else "")


def _source(lines: list[str], node: ast.stmt) -> str:
    """The node's whole lines with its decorators (ast.get_source_segment leaves them out)."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return "\n".join(lines[first - 1 : node.end_lineno])
