"""Streaming the corpus (``DIR/{train,valid}/*.jsonl.gz``) and held-out files as plain text.

Nothing is skipped silently: a line that is not JSON or has no string ``content`` is a
:class:`~codeparrot.errors.DataError` naming the shard and the line; a held-out file that
cannot be decoded is returned in the ``skipped`` list of :func:`heldout_texts`.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError

SHARD_PATTERN = "*.jsonl.gz"
# What a held-out directory contributes: Python sources and corpus shards.
HELD_OUT_SUFFIXES = (".py", ".jsonl.gz", ".jsonl")


def corpus_shards(corpus: Path, split: str) -> list[Path]:
    """The shards of one split of a corpus directory, in name order."""
    corpus = Path(corpus)
    if not corpus.exists():
        raise DataError(f"{corpus}: no such corpus directory")
    if not corpus.is_dir():
        raise DataError(
            f"{corpus}: not a directory (expected a corpus from `codeparrot data build`)"
        )
    split_dir = corpus / split
    if not split_dir.is_dir():
        raise DataError(f"{corpus}: no {split}/ split (expected {split}/{SHARD_PATTERN})")
    shards = sorted(split_dir.glob(SHARD_PATTERN))
    if not shards:
        raise DataError(f"{split_dir}: empty corpus split (no {SHARD_PATTERN} shards)")
    return shards


def read_manifest(corpus: Path) -> dict[str, Any] | None:
    """``DIR/manifest.json``, or ``None`` when the corpus has none."""
    path = Path(corpus) / "manifest.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: unreadable corpus manifest ({e})") from e
    if not isinstance(data, dict):
        raise DataError(f"{path}: corpus manifest is not a JSON object")
    return data


def shard_contents(shard: Path) -> Iterator[str]:
    """The ``content`` of every record of one ``.jsonl.gz`` (or ``.jsonl``) shard, in order."""
    opener = gzip.open if shard.name.endswith(".gz") else open
    try:
        with opener(shard, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{shard}:{number}: not a JSON object ({e})") from e
                content = record.get("content") if isinstance(record, dict) else None
                if not isinstance(content, str):
                    raise DataError(f"{shard}:{number}: record has no string 'content' field")
                yield content
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise DataError(f"{shard}: unreadable shard ({e})") from e


@dataclass
class StreamStats:
    """What a stream of files held: filled in while it is consumed."""

    files: int = 0
    chars: int = 0
    shards_read: list[str] = field(default_factory=list)


def stream_contents(shards: Iterable[Path], limit: int, stats: StreamStats) -> Iterator[str]:
    """The first ``limit`` file contents over ``shards``, counting them into ``stats``."""
    if limit <= 0:
        return
    for shard in shards:
        stats.shards_read.append(shard.name)
        for content in shard_contents(shard):
            stats.files += 1
            stats.chars += len(content)
            yield content
            if stats.files >= limit:
                return


def batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass
class HeldOut:
    """Held-out texts with where they came from and what could not be read."""

    texts: list[str]
    names: list[str]
    sources: list[str]
    skipped: list[dict[str, str]]


def _is_corpus(path: Path) -> bool:
    return (path / "valid").is_dir() or (path / "manifest.json").is_file()


def heldout_texts(paths: Iterable[Path], max_files: int) -> HeldOut:
    """Read held-out files: ``.py`` files, shards, directories of them, or corpus directories.

    A corpus directory contributes its ``valid`` split. At most ``max_files`` texts are read,
    in the order given (directories in sorted path order).
    """
    out = HeldOut(texts=[], names=[], sources=[], skipped=[])

    def full() -> bool:
        return len(out.texts) >= max_files

    for path in map(Path, paths):
        if full():
            break
        if not path.exists():
            raise DataError(f"{path}: no such file or directory")
        out.sources.append(str(path))
        if path.is_dir() and _is_corpus(path):
            for shard in corpus_shards(path, "valid"):
                _read_shard(shard, out, max_files)
        elif path.is_dir():
            found = [
                p for p in path.rglob("*") if p.is_file() and p.name.endswith(HELD_OUT_SUFFIXES)
            ]
            for file in sorted(found):
                if full():
                    break
                if file.name.endswith(".py"):
                    _read_source(file, out)
                else:
                    _read_shard(file, out, max_files)
        elif path.name.endswith((".jsonl.gz", ".jsonl")):
            _read_shard(path, out, max_files)
        else:
            _read_source(path, out, strict=True)
    return out


def _read_shard(shard: Path, out: HeldOut, max_files: int) -> None:
    for i, content in enumerate(shard_contents(shard)):
        if len(out.texts) >= max_files:
            break
        out.texts.append(content)
        out.names.append(f"{shard}#{i}")


def _read_source(file: Path, out: HeldOut, strict: bool = False) -> None:
    """Read one source file; a file given by name must be readable, one found in a folder
    that is not is recorded in ``out.skipped``."""
    try:
        text = file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        if strict:
            raise DataError(f"{file}: unreadable held-out file ({e})") from e
        if isinstance(e, UnicodeDecodeError):
            out.skipped.append({"path": str(file), "reason": f"not UTF-8: {e.reason}"})
            return
        out.skipped.append({"path": str(file), "reason": f"unreadable: {e.strerror or e}"})
        return
    out.texts.append(text)
    out.names.append(str(file))
