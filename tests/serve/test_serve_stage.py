"""`serve` is a stage of its own: it and the language server stand on the core alone."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(folder: Path) -> set[str]:
    found = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
    return found


def test_serve_and_lsp_do_not_import_each_other_or_other_stages():
    stages = ("app", "eval", "lsp", "serve", "training")
    for stage in ("serve", "lsp"):
        others = [f"codeparrot.{s}" for s in stages if s != stage]
        reached = sorted(m for m in imported_modules(ROOT / stage) if m.startswith(tuple(others)))
        assert reached == [], f"{stage}/ imports another stage: {reached}"


def test_the_cli_runs_serve_from_its_own_stage():
    from codeparrot.cli import COMMANDS

    assert dict(COMMANDS)["serve"] == "codeparrot.serve.cli"
