"""An evalplus-style sanitiser: keep what the entry point needs from a program, with ``ast``.

A completion often runs on past the function: a half-written next line, a ``print`` of a
call, a test block, another unrelated definition. The sanitiser

1. keeps the longest run of leading lines that parses (a completion cut at the token
   limit ends mid-statement): it cuts before the line each ``SyntaxError`` names, at most
   :data:`MAX_PARSES` times and :data:`MAX_PARSED_CHARS` characters parsed in all, on
   programs of at most :data:`MAX_CHARS` characters;
2. keeps every top-level import, and the top-level functions, classes and assignments
   that the entry points reach through the names they use;
3. drops the rest (top-level calls, prints, ``if __name__ == "__main__":`` blocks).

It only reads the source (``ast.parse`` runs nothing), so it is safe on untrusted text, and
its work is bounded whatever the completion: a program longer than :data:`MAX_CHARS`, or
one with no parsable prefix within the bounds on parses, is left as written (it runs
unsanitised, and the run counts it: :func:`skipped`). A completion the parser cannot take
at all (``return ---...-1`` with thousands of minus signs exhausts its recursion) is not
a crash of the harness: it becomes a program that raises at once, so that sample alone
fails, with the reason.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

# The program a completion the parser cannot take is replaced by: it fails in the sandbox.
UNPARSABLE = (
    "raise SyntaxError('the sanitiser could not parse this completion ({reason}): "
    "sample not run')\n"
)


def refused(program: str) -> bool:
    """Whether ``program`` is what :func:`sanitize` gave for a completion it could not parse."""
    return program.startswith(UNPARSABLE.split("{reason}", 1)[0])


# The bounds of the work on one program: its size, the parses (each cuts at least one
# line) and the characters parsed in all (a 64 KiB program gets four full parses; an
# honest one needs two: a completion cut mid-statement).
MAX_CHARS = 64 << 10
MAX_PARSES = 16
MAX_PARSED_CHARS = 256 << 10
# What a program the sanitiser gave up on starts with; it runs as written after it. (A
# sanitised program never starts with a comment: it starts with a statement it kept.)
UNSANITISED = "# not sanitised ({reason}): run as written\n"


def skipped(program: str) -> bool:
    """Whether ``program`` is a completion :func:`sanitize` left as written (over its bounds)."""
    return program.startswith(UNSANITISED.split("{reason}", 1)[0])


class _GaveUp(Exception):
    """No parsable prefix within the bounds."""


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def source_lines(code: str) -> list[str]:
    """The lines of ``code`` as the parser numbers them, with their ends (``splitlines``
    also splits at form feeds and other characters the parser reads within a line)."""
    return _LINE.findall(code)


def parsable_prefix(
    code: str, max_parses: int = MAX_PARSES, max_parsed: int = MAX_PARSED_CHARS
) -> tuple[str, ast.Module]:
    """The longest run of leading lines of ``code`` that parses, and its tree.

    Each failed parse cuts before the line its ``SyntaxError`` names (the lines before it
    parse, or fail earlier): a completion cut mid-statement costs two parses, not one per
    line. Raises :class:`_GaveUp` rather than make more than ``max_parses`` parses or
    parse more than ``max_parsed`` characters in all.
    """
    lines = source_lines(code)
    end = next((i for i, line in enumerate(lines) if "\0" in line), len(lines))  # null bytes
    parsed = 0
    for _ in range(max_parses):
        text = "".join(lines[:end])
        parsed += len(text)
        if parsed > max_parsed:
            break
        try:
            return text, ast.parse(text)
        except SyntaxError as e:
            if end == 0:
                break
            end = max(0, min(end - 1, (e.lineno or end) - 1))
    raise _GaveUp(f"no parsable prefix within {max_parses} parses of {max_parsed:,} characters")


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
    too deeply to parse gives :data:`UNPARSABLE`, which fails when run; code over the
    sanitiser's bounds comes back as written, after :data:`UNSANITISED`.
    """
    if len(code) > MAX_CHARS:
        return UNSANITISED.format(reason=f"over {MAX_CHARS:,} characters") + code
    try:
        return _sanitize(code, entry_points)
    except _GaveUp as e:
        return UNSANITISED.format(reason=str(e)) + code
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
    lines = [line.rstrip("\r\n") for line in source_lines(text)]
    return "\n\n".join(_source(lines, node) for node in kept) + ("\n" if kept else "")


def _source(lines: list[str], node: ast.stmt) -> str:
    """The node's whole lines with its decorators (ast.get_source_segment leaves them out)."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return "\n".join(lines[first - 1 : node.end_lineno])
