"""`serve` is a stage of its own: it and the language server stand on the core alone."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(folder: Path) -> set[str]:
    """Every module a stage's files import, and every name they import from one, as
    installed (``codeparrot.<stage>``): ``from codeparrot import lsp`` is
    ``codeparrot.lsp``, and a relative import is resolved from the stage's package."""
    found = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                package = ["codeparrot", folder.name]
                base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
                module = ".".join(p for p in (base, node.module) if p)
                found |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return found


def test_an_import_by_name_or_relative_is_seen(tmp_path):
    stage = tmp_path / "serve"
    stage.mkdir()
    (stage / "x.py").write_text("from codeparrot import lsp\nfrom ..training import loop\n")
    assert {"codeparrot.lsp", "codeparrot.training.loop"} <= imported_modules(stage)


def test_serve_and_lsp_do_not_import_each_other_or_other_stages():
    stages = ("app", "eval", "lsp", "serve", "training")
    for stage in ("serve", "lsp"):
        others = [f"codeparrot.{s}" for s in stages if s != stage]
        reached = sorted(m for m in imported_modules(ROOT / stage) if m.startswith(tuple(others)))
        assert reached == [], f"{stage}/ imports another stage: {reached}"


def test_the_cli_runs_serve_from_its_own_stage():
    from codeparrot.cli import COMMANDS

    assert dict(COMMANDS)["serve"] == "codeparrot.serve.cli"
