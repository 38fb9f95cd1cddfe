"""The core (``codeparrot/``) has no import cycle: a module never needs, through any chain
of imports (at the top or inside a function), a module that needs it.

A cycle makes the parts of the core impossible to read, test or reuse apart (the engine's
helpers once reached back into the engine's private methods). The CLI, which imports every
stage inside its subcommands, is outside the graph's rule only where it reaches up (the
stages live outside ``codeparrot/``).
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "codeparrot"
# Imports that still close a cycle, each to be removed with the change that ends it (and
# then from here: test_the_known_cycles_are_still_there fails once one is gone).
KNOWN: set[tuple[str, str]] = set()


def _module_name(path: Path, root: Path = CORE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, here: str, is_package: bool, modules: set[str]) -> set[str]:
    """The core modules a module imports anywhere in its text (submodules named in a
    ``from package import name`` count as imported)."""
    out = set()
    package = here if is_package else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in out if m in modules and m != here}


def import_graph(root: Path = CORE) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py", set(files))
    return graph


def _package_of(module: str, graph: dict[str, set[str]]) -> bool:
    return any(other.startswith(module + ".") for other in graph)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in order, the first again at the end), or None.

    An edge from a package's ``__init__`` to its own submodules (re-exports) and from a
    submodule to a package above it that re-exports it is how Python packages are laid out;
    only cycles through two modules that are not each other's package count.
    """
    colour: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        path.append(node)
        for nxt in sorted(graph[node] & graph.keys()):
            if node.startswith(nxt + ".") and _package_of(nxt, graph):
                continue  # a submodule importing its package's names
            if colour.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in colour and (found := visit(nxt)):
                return found
        path.pop()
        colour[node] = 2
        return None

    for start in sorted(graph):
        if start not in colour and (found := visit(start)):
            return found
    return None


def test_the_core_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "codeparrot.generation.engine" in graph  # the graph is the core's
    graph = {k: v - {b for a, b in KNOWN if a == k} for k, v in graph.items()}
    cycle = find_cycle({k: v for k, v in graph.items() if k != "codeparrot.cli"})
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_known_cycles_are_still_there() -> None:
    graph = import_graph()
    for a, b in KNOWN:
        assert b in graph[a] and find_cycle({a: {b}, b: graph[b] & {a}}), (a, b)


def test_a_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "codeparrot"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from codeparrot.sub.a import x\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from codeparrot.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .a import f\n")
    graph = import_graph(pkg)
    assert find_cycle(graph) in (
        ["codeparrot.sub.a", "codeparrot.sub.b", "codeparrot.sub.a"],
        ["codeparrot.sub.b", "codeparrot.sub.a", "codeparrot.sub.b"],
    )
    (pkg / "sub" / "b.py").write_text("X = 1\n")
    graph["codeparrot.sub.b"] = set()
    assert find_cycle(graph) is None
