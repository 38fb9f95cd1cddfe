"""Where Python files come from: directories, git checkouts, hub datasets, or this machine.

A source yields :class:`SourceFile` records: metadata plus either a filesystem path (read
later, in a worker process) or the content itself (hub datasets). Listing a directory is
cheap; reading happens in :func:`codeparrot.data.pipeline.process_file`.

Repository rules (they decide the train/valid split):

* a git checkout is one repository, named after ``remote.origin.url`` (``owner/name``) or
  its folder; its license comes from its LICENSE/COPYING file;
* a plain directory: each top-level package or module is a repository
  (``folder/top``); git checkouts nested inside it are repositories of their own;
* the embedded default: each top-level package or module of the standard library
  (``stdlib/json``) and of site-packages (``site-packages/numpy``);
* ``hub:NAME``: the dataset's ``repo_name``/``path``/``license`` columns when present.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.data.config import HUB_PREFIX
from codeparrot.errors import DataError

SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages"})
LICENSE_FILE = re.compile(r"^(LICEN[CS]E|COPYING)(\..*)?$", re.IGNORECASE)


@dataclass(frozen=True)
class SourceFile:
    """One input file: where it came from, and its path on disk or its content."""

    repo_name: str
    path: str
    license: str
    fs_path: str | None = None
    content: str | None = None


def check_sources(sources: tuple[str, ...]) -> None:
    """Fail before any work if a local source does not exist or is not a directory."""
    missing = [s for s in sources if not s.startswith(HUB_PREFIX) and not Path(s).exists()]
    if missing:
        raise DataError(f"source path(s) do not exist: {', '.join(missing)}")
    files = [s for s in sources if not s.startswith(HUB_PREFIX) and not Path(s).is_dir()]
    if files:
        raise DataError(f"source(s) must be directories (or hub:NAME): {', '.join(files)}")


def embedded_roots() -> list[tuple[Path, str, bool]]:
    """(root, repository prefix, is_stdlib) for this interpreter's stdlib and site-packages."""
    paths = sysconfig.get_paths()
    roots: list[tuple[Path, str, bool]] = [(Path(paths["stdlib"]), "stdlib", True)]
    seen = {roots[0][0]}
    for key in ("purelib", "platlib"):
        root = Path(paths[key])
        if root not in seen and root.is_dir():
            roots.append((root, "site-packages", False))
            seen.add(root)
    return roots


def classify_license(text: str) -> str:
    """A GitHub-style license key from a license file's text ('other' if unrecognised)."""
    head = " ".join(text[:4000].split()).lower()
    if "apache license" in head:
        return "apache-2.0"
    if "gnu lesser general public license" in head or "gnu library general public" in head:
        return "lgpl-3.0" if "version 3" in head else "lgpl-2.1"
    if "gnu affero general public license" in head:
        return "agpl-3.0"
    if "gnu general public license" in head:
        return "gpl-3.0" if "version 3" in head else "gpl-2.0"
    if "mozilla public license" in head:
        return "mpl-2.0"
    if "permission is hereby granted, free of charge" in head:
        return "mit"
    if "redistribution and use in source and binary forms" in head:
        return "bsd-3-clause" if "neither the name" in head else "bsd-2-clause"
    if "this is free and unencumbered software" in head:
        return "unlicense"
    if "python software foundation" in head:
        return "psf-2.0"
    return "other"


def directory_license(root: Path) -> str:
    """License key of the LICENSE/COPYING file at ``root``; 'unknown' when there is none."""
    try:
        names = sorted(p for p in os.listdir(root) if LICENSE_FILE.match(p))
    except OSError:
        return "unknown"
    for name in names:
        try:
            with open(root / name, encoding="utf-8", errors="replace") as fh:
                return classify_license(fh.read(8000))
        except OSError:
            continue
    return "unknown"


def git_remote_name(root: Path) -> str | None:
    """``owner/name`` from the checkout's ``remote.origin.url``, or ``None``."""
    git = root / ".git"
    if git.is_file():  # worktree or submodule: "gitdir: <path>"
        try:
            text = git.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None
        if not text.startswith("gitdir:"):
            return None
        git = (root / text[len("gitdir:") :].strip()).resolve()
    try:
        config = (git / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r'\[remote\s+"origin"\](.*?)(?:\n\s*\[|\Z)', config, re.DOTALL)
    if not match:
        return None
    url = re.search(r"^\s*url\s*=\s*(\S+)", match.group(1), re.MULTILINE)
    return repo_name_from_url(url.group(1)) if url else None


def repo_name_from_url(url: str) -> str:
    """``https://github.com/o/n.git`` or ``git@github.com:o/n.git`` -> ``o/n``."""
    url = url.rstrip("/")
    if url.endswith(".git"):
        url = url[: -len(".git")]
    parts = re.split(r"[/:]", url)
    parts = [p for p in parts if p]
    return "/".join(parts[-2:]) if len(parts) >= 2 else (parts[-1] if parts else url)


def is_git_checkout(root: Path) -> bool:
    return (root / ".git").exists()


def _walk_python_files(root: Path) -> Iterator[tuple[str, str, bool]]:
    """(path, path relative to ``root`` in POSIX form, is_nested_checkout) for ``*.py``.

    Nested checkouts are reported, not walked. Symlinked directories are not followed (no
    loops); hidden and cache folders are skipped. Plain strings: this runs once per file.
    """
    top = os.fspath(root)
    prefix = len(os.path.join(top, ""))
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False, onerror=lambda e: None):
        keep = []
        for d in sorted(dirnames):
            if d.startswith(".") or d in SKIPPED_DIRS:
                continue
            full = os.path.join(dirpath, d)
            if os.path.exists(os.path.join(full, ".git")):
                yield full, full[prefix:].replace(os.sep, "/"), True
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.endswith(".py"):
                full = os.path.join(dirpath, name)
                yield full, full[prefix:].replace(os.sep, "/"), False


def _top_level(rel: str) -> str:
    first, sep, _ = rel.partition("/")
    return first[: -len(".py")] if not sep and first.endswith(".py") else first


def iter_checkout(root: Path) -> Iterator[SourceFile]:
    """Every ``*.py`` of a git checkout as one repository (nested checkouts separately)."""
    repo = git_remote_name(root) or root.resolve().name
    license = directory_license(root)
    for path, rel, nested in _walk_python_files(root):
        if nested:
            yield from iter_checkout(Path(path))
        else:
            yield SourceFile(repo, rel, license, fs_path=path)


def iter_directory(root: Path) -> Iterator[SourceFile]:
    """A plain directory: each top-level package/module is a repository named ``folder/top``."""
    if is_git_checkout(root):
        yield from iter_checkout(root)
        return
    folder = root.resolve().name or "root"
    license = directory_license(root)
    for path, rel, nested in _walk_python_files(root):
        if nested:
            yield from iter_checkout(Path(path))
            continue
        yield SourceFile(f"{folder}/{_top_level(rel)}", rel, license, fs_path=path)


def count_python_files(sources: tuple[str, ...]) -> int:
    """How many files :func:`iter_sources` yields for local ``sources`` (a cheap walk)."""

    def count(root: Path, follow_nested: bool) -> int:
        n = 0
        for path, _rel, nested in _walk_python_files(root):
            if not nested:
                n += 1
            elif follow_nested:
                n += count(Path(path), True)
        return n

    if not sources:
        return sum(count(root, False) for root, _, _ in embedded_roots())
    return sum(count(Path(s), True) for s in sources)


def _site_packages_licenses() -> dict[str, str]:
    """Top-level import name -> license of the distribution that installs it."""
    import importlib.metadata

    out: dict[str, str] = {}
    try:
        mapping = importlib.metadata.packages_distributions()
    except Exception:  # a broken installed distribution must not stop the build
        return out
    cache: dict[str, str] = {}
    for top, dists in mapping.items():
        dist = dists[0]
        if dist not in cache:
            cache[dist] = _distribution_license(dist)
        out[top] = cache[dist]
    return out


def _distribution_license(dist: str) -> str:
    import importlib.metadata

    try:
        meta = importlib.metadata.metadata(dist)
    except Exception:
        return "unknown"
    expression = meta.get("License-Expression")
    if expression:
        return expression.strip().lower()
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License :: OSI Approved :: "):
            name = classifier.rsplit("::", 1)[-1].strip().lower()
            for key, value in (
                ("apache", "apache-2.0"),
                ("mit", "mit"),
                ("bsd", "bsd-3-clause"),
                ("python software", "psf-2.0"),
                ("mozilla", "mpl-2.0"),
                ("lesser", "lgpl-3.0"),
                ("gnu general", "gpl-3.0"),
            ):
                if key in name:
                    return value
            return name
    declared = (meta.get("License") or "").strip()
    if declared and "\n" not in declared and len(declared) < 40:
        return declared.lower()
    return classify_license(declared) if declared else "unknown"


def iter_embedded_default() -> Iterator[SourceFile]:
    """This interpreter's stdlib and site-packages, one repository per top-level name."""
    licenses: dict[str, str] | None = None
    for root, prefix, is_stdlib in embedded_roots():
        for path, rel, nested in _walk_python_files(root):
            if nested:
                continue
            top = _top_level(rel)
            if is_stdlib:
                license = "psf-2.0"
            else:
                if licenses is None:
                    licenses = _site_packages_licenses()
                license = licenses.get(top, "unknown")
            yield SourceFile(f"{prefix}/{top}", rel, license, fs_path=path)


def open_hub(name: str) -> Any:
    """Open ``name`` with ``datasets.load_dataset(name, split="train", streaming=True)``."""
    import datasets

    try:
        return datasets.load_dataset(name, split="train", streaming=True)
    except Exception as e:  # network, missing dataset, bad format: all the user's to fix
        raise DataError(f"hub:{name}: could not open the dataset ({type(e).__name__}: {e})") from e


def open_sources(sources: tuple[str, ...]) -> dict[str, Any]:
    """Check every source before any work: local paths exist, hub datasets open.

    Returns the opened hub streams by source string, for :func:`iter_sources`.
    """
    check_sources(sources)
    return {s: open_hub(s[len(HUB_PREFIX) :]) for s in sources if s.startswith(HUB_PREFIX)}


def iter_hub(name: str, stream: Any = None) -> Iterator[SourceFile]:
    """The rows of a dataset with a ``content`` column (other CodeParrot columns if present)."""
    if stream is None:
        stream = open_hub(name)
    for i, row in enumerate(stream):
        if "content" not in row:
            raise DataError(f"hub:{name}: rows have no 'content' column (columns: {sorted(row)})")
        content = row["content"]
        yield SourceFile(
            str(row.get("repo_name") or name),
            str(row.get("path") or f"{i:08d}.py"),
            str(row.get("license") or "unknown"),
            content=content if isinstance(content, str) else None,
        )


def iter_source(source: str, opened: dict[str, Any] | None = None) -> Iterator[SourceFile]:
    if source.startswith(HUB_PREFIX):
        return iter_hub(source[len(HUB_PREFIX) :], (opened or {}).get(source))
    return iter_directory(Path(source))


def iter_sources(
    sources: tuple[str, ...], opened: dict[str, Any] | None = None
) -> Iterator[SourceFile]:
    """All files of ``sources`` in order; no sources means the embedded default."""
    if not sources:
        yield from iter_embedded_default()
        return
    for source in sources:
        yield from iter_source(source, opened)
