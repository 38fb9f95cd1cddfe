"""Held-out Python for the usefulness metrics: code the models here never trained on.

The embedded default corpus is this interpreter's standard library and site-packages, so the
default held-out set is a few pure-Python packages that the project does not install:
their wheels are downloaded once from PyPI (``pip download``, pinned versions) into a cache
folder and only their ``.py`` files are kept. None of them is imported, installed or run.

``--data`` points elsewhere: a folder of ``.py`` files (read recursively), or a corpus folder
written by ``codeparrot data build`` (its ``valid`` split is read).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Declaration
from codeparrot.errors import DataError
from codeparrot.io import atomic_directory, provenance, write_json

# Pure-Python packages absent from this Python, vendored copies included (a test checks the
# embedded corpus's folders): utilities, a web framework, a parser, linters, text.
# (more-itertools was dropped: setuptools vendors it in site-packages.)
HELDOUT_PACKAGES: tuple[str, ...] = (
    "boltons==26.2.0",
    "bottle==0.13.4",
    "humanize==4.17.0",
    "parso==0.8.7",
    "pycodestyle==2.15.0",
    "pyflakes==4.1.0",
    "tabulate==0.10.0",
    "toolz==1.2.0",
)
MANIFEST = "heldout.json"
HELDOUT_DATA = Declaration(
    None,
    "a folder of .py files or a corpus folder (its valid split); default: the held-out "
    "packages (see codeparrot.eval.heldout), downloaded once from PyPI",
)
MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class HeldoutFile:
    """One held-out file: a name to report and its text.

    ``context``: text the model reads before ``text`` that is not scored (a benchmark
    problem's prompt before its reference solution).
    """

    name: str
    text: str
    context: str = ""


def default_heldout_dir() -> Path:
    """``$XDG_CACHE_HOME/codeparrot/heldout`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "codeparrot" / "heldout"


def installed_heldout_packages() -> list[str]:
    """Held-out packages in this Python, installed or vendored: the default corpus reads them."""
    import importlib.metadata  # (not at import: it costs every CLI start ~30 ms)

    found = []
    for pin in HELDOUT_PACKAGES:
        name = pin.split("==")[0]
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found + vendored_heldout_copies()


def vendored_heldout_copies() -> list[str]:
    """Folders or modules named like a held-out package anywhere in the embedded corpus."""
    from codeparrot.data.sources import SKIPPED_DIRS, embedded_roots

    names = {pin.split("==")[0].replace("-", "_") for pin in HELDOUT_PACKAGES}
    found = []
    for root, _prefix, _stdlib in embedded_roots():
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]  # as the corpus walks
            for entry in (*dirs, *(f[:-3] for f in files if f.endswith(".py"))):
                if entry in names:
                    found.append(str(Path(folder, entry).relative_to(root)))
    return sorted(found)


def fetch_heldout(target: Path | None = None) -> Path:
    """The default held-out folder, downloading the pinned wheels the first time."""
    target = target or default_heldout_dir()
    if (target / MANIFEST).is_file():
        return target
    installed = installed_heldout_packages()
    if installed:
        raise DataError(
            f"held-out package(s) {', '.join(installed)} are installed in this Python, so the "
            "default corpus (site-packages) may hold them: uninstall them or pass --data"
        )
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary", ":all:", "--dest", tmp, *HELDOUT_PACKAGES],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise DataError(
                f"cannot download the held-out packages ({', '.join(HELDOUT_PACKAGES)}) from "
                f"PyPI: {done.stderr.strip()[-400:]}; pass --data DIR with Python files instead"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(target, overwrite=True) as out:
            count = _extract_wheels(Path(tmp), out)
            write_json(
                out / MANIFEST,
                {"packages": list(HELDOUT_PACKAGES), "files": count, "provenance": provenance()},
            )
    return target


def _extract_wheels(wheels: Path, out: Path) -> int:
    count = 0
    for wheel in sorted(wheels.glob("*.whl")):
        package = wheel.name.split("-")[0]
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if not name.endswith(".py") or ".dist-info/" in name or ".." in name.split("/"):
                    continue
                dest = out / package / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(zf.read(info))
                count += 1
    return count


def read_heldout(
    data: Path | None,
    *,
    max_files: int | None = None,
    seed: int = 0,
    corpus_splits: Sequence[str] = ("valid",),
) -> list[HeldoutFile]:
    """The held-out files: ``data`` (a folder of .py files or a corpus), or the default set.

    A corpus folder is read from its ``corpus_splits`` (the held-out ``valid`` split by
    default). With ``max_files`` a seeded sample of that many files, in a stable order.
    """
    root = data if data is not None else fetch_heldout()
    if not root.exists():
        raise DataError(f"held-out data {root}: no such file or directory")
    if (root / "manifest.json").is_file() and (root / "valid").is_dir():
        files = [f for split in corpus_splits for f in _corpus_files(root / split)]
    else:
        files = _folder_files(root)
    if not files:
        raise DataError(f"held-out data {root}: no Python files with text in it")
    if max_files is not None and len(files) > max_files:
        files = sorted(random.Random(seed).sample(files, max_files), key=lambda f: f.name)
    return files


def _folder_files(root: Path) -> list[HeldoutFile]:
    paths = [root] if root.is_file() else sorted(root.rglob("*.py"))
    out = []
    for path in paths:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"held-out file {path}: cannot be read as UTF-8 ({e})") from e
        if text.strip():
            out.append(HeldoutFile(str(path.relative_to(root) if root.is_dir() else path), text))
    return out


def _corpus_files(split_dir: Path) -> list[HeldoutFile]:
    out = []
    for shard in sorted(split_dir.glob("*.jsonl.gz")):
        try:
            with gzip.open(shard, "rt", encoding="utf-8") as fh:
                for line in fh:
                    record = json.loads(line)
                    out.append(
                        HeldoutFile(f"{record['repo_name']}/{record['path']}", record["content"])
                    )
        except (OSError, ValueError, KeyError) as e:
            raise DataError(f"corpus shard {shard}: cannot be read ({e})") from e
    return out


def describe(files: Sequence[HeldoutFile]) -> dict[str, int]:
    """Counts to record beside a result."""
    return {"files": len(files), "chars": sum(len(f.text) for f in files)}
