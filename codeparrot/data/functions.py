"""Function-level documents: a file's short, documented top-level functions, each on its own.

HumanEval and an editor's completions are one function with its docstring: a signature and
a description, then a short body. Library files bury such functions among classes and long
modules; cut out, each becomes a document of HumanEval's shape (the imports it uses, its
signature, its docstring, its body). ``add_function_documents`` appends them to a built
corpus's training split, so a run can weight them up; the held-out split stays whole files.
"""

from __future__ import annotations

import ast
import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError

MAX_BODY_LINES = 20
MAX_CHARS = 3000


def _bound_names(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {alias.asname or alias.name.split(".")[0] for alias in node.names}


def _used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _short_documented(node: ast.stmt, max_body_lines: int) -> bool:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if ast.get_docstring(node) is None or len(node.body) < 2:
        return False
    body_lines = (node.end_lineno or node.lineno) - node.body[1].lineno + 1
    return 1 <= body_lines <= max_body_lines


def function_documents(
    text: str, *, max_body_lines: int = MAX_BODY_LINES, max_chars: int = MAX_CHARS
) -> list[str]:
    """Each top-level function of ``text`` that has a docstring and at most
    ``max_body_lines`` lines after it, as a document: the module's top-level imports whose
    names it uses, two blank lines, then the function with its decorators. A file that does
    not parse gives none; so does a document longer than ``max_chars``."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = text.splitlines(keepends=True)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    documents = []
    for node in tree.body:
        if not _short_documented(node, max_body_lines):
            continue
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        source = "".join(lines[start - 1 : node.end_lineno]).rstrip() + "\n"
        used = _used_names(node)
        header = "".join(
            "".join(lines[i.lineno - 1 : i.end_lineno]) for i in imports if _bound_names(i) & used
        )
        document = (header.rstrip() + "\n\n\n" if header.strip() else "") + source
        if len(document) <= max_chars:
            documents.append(document)
    return documents


SHARD = "shard-functions.jsonl.gz"  # sorts after the numbered shards: read last


def _records(corpus: Path) -> Iterator[dict[str, Any]]:
    """The training split's files (function documents already added are not files)."""
    for shard in sorted((corpus / "train").glob("*.jsonl.gz")):
        if shard.name == SHARD:
            continue
        with gzip.open(shard, "rt", encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)


def write_function_documents(
    corpus: Path, copies: int, *, progress: bool = False
) -> dict[str, Any]:
    """Append ``copies`` copies of the function documents of ``corpus``'s training files to
    its training split, as ``train/shard-functions.jsonl.gz`` (written to a temporary name, then
    renamed). Returns the manifest's ``function_documents`` entry."""
    if copies < 1:
        raise DataError(f"function documents: copies must be at least 1, got {copies}")
    target = corpus / "train" / SHARD
    if target.exists():
        raise DataError(f"{target}: the corpus already has function documents")
    tmp = target.with_name(f".{SHARD}.tmp")
    from tqdm.auto import tqdm

    documents = chars = 0
    records = tqdm(_records(corpus), unit="file", desc="function documents", disable=not progress)
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as out:
        for record in records:
            for i, doc in enumerate(function_documents(record["content"])):
                documents += 1
                chars += len(doc)
                for copy in range(copies):
                    extra = {
                        "repo_name": record["repo_name"],
                        "path": f"{record['path']}::function{i}",
                        "copies": 1,
                        "size": len(doc.encode("utf-8")),
                        "content": doc,
                        "license": record.get("license", ""),
                        "hash": f"{record.get('hash', '')}-f{i}-c{copy}",
                    }
                    out.write(json.dumps(extra, ensure_ascii=False) + "\n")
    tmp.rename(target)
    return {"copies": copies, "documents": documents, "chars": chars}


def add_function_documents(
    corpus: Path, output: Path, copies: int, *, only: bool = False
) -> dict[str, Any]:
    """A copy of ``corpus`` at ``output`` with ``copies`` copies of its function documents
    (:func:`write_function_documents`) added to its training split, or with ``only`` in
    place of it (data to anneal a pretrained model on); the held-out split is unchanged.
    Built in a temporary directory, then renamed."""
    if not (corpus / "manifest.json").is_file():
        raise DataError(f"{corpus}: not a corpus (no manifest.json)")
    if output.exists():
        raise DataError(f"{output}: already exists")
    tmp = output.with_name(f".{output.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(corpus, tmp, ignore=shutil.ignore_patterns(SHARD))  # made again below
    entry = write_function_documents(tmp, copies)
    if only:
        for shard in (tmp / "train").glob("*.jsonl.gz"):
            if shard.name != SHARD:
                shard.unlink()
    manifest = json.loads((tmp / "manifest.json").read_text())
    manifest["function_documents"] = entry | {"only": only}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    tmp.rename(output)
    return entry
