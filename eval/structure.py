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
import keyword
import logging
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError
from codeparrot.eval.tasks import TASKS, Task, plus_test

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
    return _record_shape(record)[0]


def _record_shape(record: dict[str, Any]) -> tuple[Shape, ast.Module | None]:
    """:func:`record_shape`, and the syntax tree of the record's test (None: none parsed)."""
    imports: set[str] = set()
    plus = parsed = True
    test_tree = None
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
        test_tree = tree if key == "test" else test_tree
    return Shape(frozenset(imports), plus, parsed), test_tree


def _read_plus_calls(
    record: dict[str, Any], tree: ast.Module, read: dict[tuple[str, str], Any]
) -> None:
    """Into ``read``: the calls of a plus test as HumanEval+'s problems run it (evalplus's
    checks, :func:`~codeparrot.eval.tasks.plus_test`, called on the entry point), read
    from ``tree``, the syntax tree of the record's own test, where they can be without
    parsing the test again (:func:`literal_calls_from`)."""
    test, entry_point = record.get("test"), record.get("entry_point")
    if type(test) is not str or type(entry_point) is not str:
        return
    run = plus_test(test)
    changed = _reparsed(tree, test, run)
    whole = None if changed is None else _called_tree(changed, run, entry_point)
    if whole is not None:
        key = (called(run, entry_point), entry_point)
        read[key] = literal_calls_from(whole, key[0], entry_point)


def recognise(
    task: Task, records: list[dict[str, Any]], path: Path, humaneval_ids: Iterable[str]
) -> tuple[Task, frozenset[str], dict[tuple[str, str], Any]]:
    """The task a problem file's records are of, the task ids whose base test is the
    installed HumanEval test (the file's own being their plus test), and the calls of
    the plus tests as HumanEval+ runs them (:func:`literal_calls`), by (test as it runs,
    entry point): read from the syntax trees parsed here, so that the run need not parse
    the same megabytes again (entries for another task's tests are never looked up).

    - A file given as HumanEval is HumanEval+ when every record is a HumanEval task laid
      out as evalplus's plus tests are (evalplus's release given alone).
    - Under HumanEval+, only such records have the installed test as their base test; any
      other record is checked by its own test alone.
    - Tests that import a package the task's checker is not given are refused here, before
      any sample is generated or run (they would fail every sample, the canonical ones too).
    """
    shapes, read = [], {}
    for record in records:  # each tree dropped once its calls are read: HumanEval+'s are large
        shape, tree = _record_shape(record)
        shapes.append(shape)
        if shape.plus_layout and tree is not None:
            _read_plus_calls(record, tree, read)
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
    return task, plus_ids if task is plus else frozenset(), read


# At most this many calls are read from a plus test's ``inputs`` (HumanEval+'s largest has
# about a thousand); a longer list is recorded against the reference as any other test.
MAX_PLUS_CALLS = 1 << 16
_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _element(target: ast.expr, source: ast.expr) -> str | None:
    """The loop variable ``target`` binds to each item of ``inputs`` when it iterates
    ``source`` (``inputs``, ``enumerate(...)`` or ``zip(...)`` of them), or None."""
    if isinstance(source, ast.Name) and source.id == "inputs":
        return target.id if isinstance(target, ast.Name) else None
    if not (isinstance(source, ast.Call) and isinstance(source.func, ast.Name)):
        return None
    if source.keywords or not isinstance(target, ast.Tuple):
        return None
    if source.func.id == "enumerate" and len(source.args) == 1 and len(target.elts) == 2:
        return _element(target.elts[1], source.args[0])
    if source.func.id == "zip" and len(source.args) == len(target.elts):
        found = [_element(t, s) for t, s in zip(target.elts, source.args, strict=True)]
        named = [name for name in found if name is not None]
        return named[0] if len(named) == 1 else None
    return None


def _calls_each_input_once(loop: ast.For, element: str) -> bool:
    """Whether the loop's only use of ``candidate`` is one ``candidate(*element)``, and
    nothing in the loop but its target assigns ``element``."""
    nodes = [node for part in (loop.iter, *loop.body) for node in ast.walk(part)]
    if any(
        isinstance(n, ast.Name) and n.id == element and not isinstance(n.ctx, ast.Load)
        for n in nodes
    ):
        return False
    uses = [n for n in nodes if isinstance(n, ast.Name) and n.id == "candidate"]
    calls = [
        n
        for n in nodes
        if isinstance(n, ast.Call)
        and n.func in uses
        and not n.keywords
        and len(n.args) == 1
        and isinstance(n.args[0], ast.Starred)
        and isinstance(n.args[0].value, ast.Name)
        and n.args[0].value.id == element
    ]
    return len(uses) == 1 and len(calls) == 1


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` (from ``ast.literal_eval``) is plain data that encodes the same in
    every process: no set (a set of strings iterates in an order of its process's own)."""
    if type(value) in _PLAIN:
        return True
    if depth > 100:
        return False
    if type(value) in (list, tuple):
        return all(_plain(item, depth + 1) for item in value)
    if type(value) is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _may_name(text: str, name: str) -> bool:
    """Whether code ``text`` may use the identifier ``name``: an ASCII text without that
    word cannot (in any other, an identifier may be spelt otherwise: Python reads
    identifiers NFKC-normalised)."""
    return not text.isascii() or re.search(rf"\b{re.escape(name)}\b", text) is not None


def _check_of(tree: ast.Module, entry_point: str, test: str) -> ast.FunctionDef | None:
    """The test's ``def check(candidate):`` where it is the module's only ``check``, the
    module ends by calling it on ``entry_point`` and names it nowhere else; else None.
    (``test``: the text of ``tree``. Where the text before that last call does not hold
    the name, no statement there is walked for it: HumanEval+'s tests hold megabytes of
    literals.)"""
    *body, last = tree.body
    called = (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and isinstance(last.value.func, ast.Name)
        and last.value.func.id == "check"
        and not last.value.keywords
        and len(last.value.args) == 1
        and isinstance(last.value.args[0], ast.Name)
        and last.value.args[0].id == entry_point
    )
    checks = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not called or len(checks) != 1:
        return None
    lines = test.split("\n")  # as the parser counts lines, where no "\r" ends one
    before = test if "\r" in test else "\n".join([*lines[: last.lineno - 1], ""])
    before += lines[last.lineno - 1][: last.col_offset]
    if _may_name(before, entry_point) and any(_mentions(n, entry_point) for n in body):
        return None  # a test that calls the entry point by name as well: recorded
    (check,) = checks
    args = check.args
    plain = [a.arg for a in args.args] == ["candidate"] and not (args.vararg or args.kwarg)
    return check if plain and not check.decorator_list else None


def literal_calls(test: str, entry_point: str) -> list[tuple[tuple, dict]] | None:
    """The calls a test makes of the sample's ``entry_point``, in order, read from its
    syntax tree (nothing is run): ``(args, kwargs)`` each, every argument a literal of
    plain data. The test ends by calling its ``check(candidate)`` on the entry point, and
    ``check`` is laid out as evalplus's plus tests are (its calls read from its literal
    ``inputs``, :func:`plus_calls`) or as HumanEval's tests (:func:`assert_calls`). None
    for any other test, or more than :data:`MAX_PLUS_CALLS` calls."""
    tree = parse(test)
    return None if tree is None else literal_calls_from(tree, test, entry_point)


def literal_calls_from(
    tree: ast.Module, test: str, entry_point: str
) -> list[tuple[tuple, dict]] | None:
    """:func:`literal_calls` of ``test``, whose syntax tree is ``tree``."""
    if len(test) > MAX_TEST_CHARS or not tree.body:
        return None
    check = _check_of(tree, entry_point, test)
    if check is None:
        return None
    if plus_layout(ast.Module(body=tree.body[:-1], type_ignores=[])):
        calls = plus_calls(check)
        return None if calls is None else [(args, {}) for args in calls]
    return assert_calls(check)


def plus_calls(check: ast.FunctionDef) -> list[tuple] | None:
    """The arguments of each call evalplus's plus test makes, in order, read from its
    literal ``inputs`` list: its loop calls ``candidate(*inp)`` once for each item ``inp``
    of ``inputs``. None where it does not, or where its inputs are not all literal lists
    or tuples of plain data, or more than :data:`MAX_PLUS_CALLS`."""
    *lists, loop = check.body
    element = _element(loop.target, loop.iter)
    if element is None or loop.orelse or not _calls_each_input_once(loop, element):
        return None
    if len(lists[0].value.elts) > MAX_PLUS_CALLS:
        return None
    try:
        inputs = ast.literal_eval(lists[0].value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not all(type(inp) in (list, tuple) and _plain(inp) for inp in inputs):
        return None
    return [tuple(inp) for inp in inputs]


def _mentions(node: ast.AST, name: str = "candidate") -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _using(tree: ast.AST, name: str = "candidate") -> set[int]:
    """The ``id`` of every node of ``tree`` that uses ``name`` (itself or a node under
    it), found in one walk: asking :func:`_mentions` of each node walks its subtree again
    and again."""
    order, parents = [tree], {}
    for node in order:  # grows as it goes: every node once, each after its parent
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
            order.append(child)
    found: set[int] = set()
    for node in reversed(order):  # each before its parent
        if id(node) in found or (isinstance(node, ast.Name) and node.id == name):
            found.add(id(node))
            parent = parents.get(id(node))
            if parent is not None:
                found.add(id(parent))
    return found


# Expressions whose parts Python evaluates every time, in the order of their fields.
_ALWAYS = (ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.Subscript, ast.Attribute,
           ast.Starred, ast.Slice, ast.JoinedStr, ast.FormattedValue)  # fmt: skip


def _ordered_calls(node: ast.AST | None, out: list[ast.Call], uses: set[int]) -> bool:
    """Append the calls of ``candidate`` in expression ``node`` in the order Python makes
    them; False where one may not happen (short-circuits, branches, functions made in
    it) or ``candidate`` is used any other way. ``uses``: the nodes that use
    ``candidate`` (:func:`_using`)."""
    if node is None or id(node) not in uses:
        return True
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "candidate":
            out.append(node)
            return not any(id(part) in uses for part in (*node.args, *node.keywords))
        parts = [node.func, *node.args, *(k.value for k in node.keywords)]
    elif isinstance(node, ast.Compare | ast.BoolOp | ast.IfExp):
        # what always runs first: a chain stops at its first false comparison, `a and b`
        # runs b only where a is true, `b if a else c` one of b and c
        if isinstance(node, ast.Compare):
            parts, maybe = [node.left, node.comparators[0]], node.comparators[1:]
        elif isinstance(node, ast.BoolOp):
            parts, maybe = node.values[:1], node.values[1:]
        else:
            parts, maybe = [node.test], [node.body, node.orelse]
        if any(id(part) in uses for part in maybe):
            return False
    elif isinstance(node, _ALWAYS):
        parts = [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)]
    else:  # lambdas, comprehensions, a bare `candidate`...
        return False
    return all(_ordered_calls(part, out, uses) for part in parts)


def _literal_call(call: ast.Call) -> tuple[tuple, dict] | None:
    """The arguments of ``call`` where each is a literal of plain data, else None."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    try:
        args = tuple(ast.literal_eval(a) for a in call.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return (args, kwargs) if _plain(args) and _plain(kwargs) else None


def assert_calls(check: ast.FunctionDef) -> list[tuple[tuple, dict]] | None:
    """The calls HumanEval's layout of a test makes, in order: its ``check`` calls
    ``candidate`` only in plain statements (``assert``, an expression, an assignment to
    names), each call's arguments literals; the others never name it. None otherwise."""
    calls: list[ast.Call] = []
    uses = _using(check)
    for statement in check.body:
        if id(statement) not in uses:
            continue
        if isinstance(statement, ast.Assert):
            value = statement.test  # its message runs only once the test has failed
        elif isinstance(statement, ast.Expr) or (
            isinstance(statement, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id != "candidate" for t in statement.targets)
        ):
            value = statement.value
        else:
            return None
        if not _ordered_calls(value, calls, uses) or len(calls) > MAX_PLUS_CALLS:
            return None
    found = [_literal_call(call) for call in calls]
    return None if None in found else found  # type: ignore[return-value]


# Reading a test's calls from the syntax tree of a text it was made from (a problem file's
# own test, HumanEval+'s checks then added: tasks.plus_test), not parsing it again. A
# HumanEval+ test holds megabytes of literal inputs and outputs (/96: 319 KB, 55,000 nodes,
# ~0.07 s to parse): the file is parsed once, to recognise it.


def called(test: str, entry_point: str) -> str:
    """``test`` as a problem's check runs it: its ``check`` called on the entry point."""
    return test + f"\n\ncheck({entry_point})\n"


def _called_tree(tree: ast.Module, test: str, entry_point: str) -> ast.Module | None:
    """The syntax tree of :func:`called` ``(test, entry_point)`` from ``tree``, that of
    ``test``; None where the entry point is not a name that parses as itself."""
    plain = entry_point.isascii() and entry_point.isidentifier()  # (no NFKC normalising)
    if not plain or keyword.iskeyword(entry_point):
        return None
    line = test.count("\n") + 3  # test, an empty line, the call
    at = {"lineno": line, "col_offset": 0, "end_lineno": line}
    name = ast.Name(entry_point, ast.Load(), **at, end_col_offset=7 + len(entry_point))
    func = ast.Name("check", ast.Load(), **at, end_col_offset=5)
    end = 8 + len(entry_point)
    call = ast.Call(func, [name], [], **at, end_col_offset=end)
    return ast.Module([*tree.body, ast.Expr(call, **at, end_col_offset=end)], [])


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (a bisection of C-speed
    comparisons: a character loop in Python would take longer than the parse it saves)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a.startswith(b[:middle]):
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str, most: int) -> int:
    """The length of the longest common suffix of ``a`` and ``b``, at most ``most``."""
    low, high = 0, min(most, len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a.endswith(b[len(b) - middle :]):
            low = middle
        else:
            high = middle - 1
    return low


def _first_line(node: ast.stmt) -> int:
    """The first line of a statement: its first decorator's, where it has any."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _line_start(text: str, line: int) -> int:
    """The offset of line ``line`` (from 1) of ``text``."""
    at = 0
    for _ in range(line - 1):
        at = text.index("\n", at) + 1
    return at


def _reparsed(tree: ast.Module, old: str, new: str) -> ast.Module | None:
    """The syntax tree of ``new`` for reading its calls, from ``tree``, that of ``old``:
    the top-level statements on the lines where the two texts differ are parsed again
    from ``new`` alone, the others kept (their line numbers are ``old``'s). None where
    that cannot be told apart from a parse of the whole (a change outside every
    statement, a ``__future__`` import, a ``\\r`` line end) or ``new`` does not parse."""
    if old == new:
        return tree
    body = tree.body
    if "__future__" in old or "__future__" in new or "\r" in old or "\r" in new:
        return None  # (a future import may change how what follows it parses)
    prefix = _common_prefix(old, new)
    end = len(old) - _common_suffix(old, new, min(len(old), len(new)) - prefix)
    low = old.count("\n", 0, prefix) + 1
    high = old.count("\n", 0, max(prefix, end - 1)) + 1
    while True:  # the lines of the statements on them, until no other statement is on them
        touched = [i for i, n in enumerate(body) if _first_line(n) <= high and n.end_lineno >= low]
        if not touched:
            return None
        first, last = touched[0], touched[-1]
        lines = min(low, _first_line(body[first])), max(high, body[last].end_lineno or high)
        if lines == (low, high):
            break
        low, high = lines
    start = _line_start(old, low)
    stop = old.find("\n", _line_start(old, high))
    stop = len(old) if stop < 0 else stop
    part = new[start : stop + len(new) - len(old)]
    joined = old.endswith("\\\n", 0, start) or part.rstrip().endswith("\\")  # a "\\" line end
    if start > prefix or stop < end or joined:
        return None
    parsed = parse(part)
    if parsed is None:
        return None
    return ast.Module([*body[:first], *parsed.body, *body[last + 1 :]], [])
