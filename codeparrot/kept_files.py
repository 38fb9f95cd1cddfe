"""Files a start keeps in the user's cache folder for the next start (the int8 rows of
:mod:`codeparrot.generation.int8_cache`, transformers' facts of
:mod:`codeparrot.models.start_cache`): where they live, what names a file, how one is
written and how old ones go."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_folder(env: str, name: str) -> Path | None:
    """The folder ``$env`` names, ``None`` where it is ``0`` (off); by default
    ``$XDG_CACHE_HOME/codeparrot/NAME``, else ``~/.cache/codeparrot/NAME``."""
    value = os.environ.get(env)
    if value == "0":
        return None
    if value:
        return Path(os.path.expanduser(value))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expanduser(base)) / "codeparrot" / name


def file_stats(file: Path) -> tuple[int, int, int]:
    """Size, modification time (ns) and inode: what changes when a file is replaced."""
    st = file.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def write_then_rename(file: Path, write: Callable[[str], None], keep: int) -> None:
    """``write(temporary path)`` next to ``file``, then rename it to ``file``, so that no
    reader sees half a file; then remove all but the ``keep`` newest files of its kind in
    the folder. Raises OSError (the temporary file removed)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    kind = sorted(file.parent.glob(f"*{file.suffix}"), key=lambda f: f.stat().st_mtime_ns)
    for old in kind[:-keep]:
        old.unlink(missing_ok=True)
