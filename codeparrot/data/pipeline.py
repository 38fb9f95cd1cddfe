"""``build_corpus(config)``: sources in, a cleaned, deduplicated, split corpus out.

Pass 1 (worker processes): read each file, reject bad input (binary, invalid UTF-8,
empty, too large, unreadable, symlink loops) with a reason, apply the heuristic filters
and decontamination, and compute the MinHash signature of what survives. The main process
keeps only small per-file records (hash, metadata, signature) and appends surviving
contents to a spool file on disk, so memory stays flat as the input grows.

Then, with every decision a function of the set of files rather than their order: exact
dedup groups, near-duplicate clusters, the split by repository. Pass 2 copies the kept
contents from the spool into gzipped JSON-lines shards. Everything is written inside a
temporary directory that is renamed into place only when complete.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from codeparrot.data.config import HUB_PREFIX, DataConfig
from codeparrot.data.decontaminate import SnippetIndex
from codeparrot.data.filters import FILTER_NAMES
from codeparrot.data.sources import SourceFile
from codeparrot.errors import DataError

FORMAT = "codeparrot-corpus/1"
SPLITS = ("train", "valid")
CHUNKSIZE = 16

# Reasons a file is rejected before the filters look at it.
INPUT_REASONS = (
    "unreadable",
    "symlink_loop",
    "not_regular",
    "too_large",
    "empty",
    "binary",
    "invalid_utf8",
    "processing_error",
)
# Every reason a file can be removed for, in the order the pipeline applies them.
REMOVAL_REASONS = (
    *INPUT_REASONS,
    "exact_duplicate",
    *FILTER_NAMES,
    "humaneval",
    "near_duplicate",
)


@dataclass(frozen=True)
class Processed:
    """What pass 1 learns about one input file (``content`` only for files that pass)."""

    repo_name: str
    path: str
    license: str
    size: int
    reason: str | None
    hash: str | None = None
    content: str | None = None
    signature: Any = None  # numpy uint32 array, or None when too short to compare


class FileProcessor:
    """Reads, checks, filters and fingerprints one file; built once per worker process."""

    def __init__(self, config: DataConfig, index: SnippetIndex | None) -> None:
        self.config = config
        self.index = index
        self._tokenizer: Any = None

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(
                str(Path(self.config.tokenizer) / "tokenizer.json")
            )
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def read(self, item: SourceFile) -> tuple[str | None, int, str | None]:
        """(text, size in bytes, rejection reason)."""
        limit = self.config.max_size
        if item.fs_path is None:
            if item.content is None:
                return None, 0, "empty"
            data = item.content.encode("utf-8", errors="surrogatepass")
            if len(data) > limit:
                return None, len(data), "too_large"
        else:
            try:
                st = os.stat(item.fs_path)
            except OSError as e:
                return None, 0, "symlink_loop" if e.errno == errno.ELOOP else "unreadable"
            if not stat.S_ISREG(st.st_mode):
                return None, 0, "not_regular"
            if st.st_size > limit:
                return None, st.st_size, "too_large"
            try:
                with open(item.fs_path, "rb") as fh:
                    data = fh.read(limit + 1)
            except OSError:
                return None, st.st_size, "unreadable"
            if len(data) > limit:
                return None, len(data), "too_large"
        if b"\0" in data:
            return None, len(data), "binary"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None, len(data), "invalid_utf8"
        if not text.strip():
            return None, len(data), "empty"
        return text, len(data), None

    def __call__(self, item: SourceFile) -> Processed:
        try:
            return self.process(item)
        except Exception:  # one odd file must not end a long build; it is counted
            return Processed(item.repo_name, item.path, item.license, 0, reason="processing_error")

    def process(self, item: SourceFile) -> Processed:
        from codeparrot.data.dedup import minhash_signature
        from codeparrot.data.filters import content_hash, first_failing_filter

        text, size, reason = self.read(item)
        meta = (item.repo_name, item.path, item.license, size)
        if text is None:
            return Processed(*meta, reason=reason)
        key = content_hash(text)
        config = self.config
        reason = first_failing_filter(
            text,
            config,
            key=key,
            count_tokens=self.count_tokens if config.tokenizer is not None else None,
        )
        if reason is None and self.index is not None and self.index.contains_snippet(text):
            reason = "humaneval"
        if reason is not None:
            return Processed(*meta, reason=reason, hash=key)
        signature = None
        if config.near_dedup:
            signature = minhash_signature(
                text, num_perm=config.num_perm, min_tokens=config.min_tokens
            )
        return Processed(*meta, reason=None, hash=key, content=text, signature=signature)


# A worker process's FileProcessor, set once by the pool initializer (the usual
# multiprocessing idiom: the snippet index and tokenizer are not re-sent with every task).
_WORKER_PROCESSOR: FileProcessor | None = None


def _init_worker(processor: FileProcessor) -> None:
    import signal

    global _WORKER_PROCESSOR
    _WORKER_PROCESSOR = processor
    # Ctrl-C reaches the whole process group: the main process alone handles it (and
    # terminates the pool), instead of every worker printing a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _process_in_worker(item: SourceFile) -> Processed:
    assert _WORKER_PROCESSOR is not None
    return _WORKER_PROCESSOR(item)


def process_files(
    items: Iterable[SourceFile], processor: FileProcessor, workers: int
) -> Iterator[Processed]:
    """Run ``processor`` over ``items``, in ``workers`` processes when more than one.

    Results come back in any order (every later decision is order-independent). At most a
    few hundred files are in flight, so a long input stream is never buffered whole.
    """
    if workers <= 1:
        for item in items:
            yield processor(item)
        return
    import multiprocessing

    in_flight = threading.BoundedSemaphore(workers * CHUNKSIZE * 4)
    stop = threading.Event()

    def gated() -> Iterator[SourceFile]:
        for item in items:
            while not in_flight.acquire(timeout=0.5):
                if stop.is_set():
                    return
            yield item

    with multiprocessing.Pool(workers, initializer=_init_worker, initargs=(processor,)) as pool:
        try:
            for result in pool.imap_unordered(_process_in_worker, gated(), CHUNKSIZE):
                in_flight.release()
                yield result
        finally:
            stop.set()


def select_files(items: Iterable[SourceFile], max_files: int, seed: int) -> list[SourceFile]:
    """A seeded sample of ``max_files`` files, independent of the order they were listed in."""
    from codeparrot.data.filters import seeded_uniform

    ranked = sorted(items, key=lambda f: seeded_uniform(seed, "sample", f"{f.repo_name}\0{f.path}"))
    return ranked[:max_files]


def input_files(
    config: DataConfig, opened: dict[str, Any] | None = None
) -> tuple[Iterable[SourceFile], int | None]:
    """The files to read and, when known, how many (``opened``: hub streams by source)."""
    from codeparrot.data.sources import count_python_files, iter_source, iter_sources

    local = tuple(s for s in config.sources if not s.startswith(HUB_PREFIX))
    hub = tuple(s for s in config.sources if s.startswith(HUB_PREFIX))
    if config.max_files == 0:
        # Listing is cheap next to reading: count first so the progress bar has a total.
        total = None if hub else count_python_files(local)
        return iter_sources(config.sources, opened), total
    chosen: list[SourceFile] = []
    if local or not config.sources:
        chosen = select_files(iter_sources(local), config.max_files, config.seed)
    rest = config.max_files - len(chosen)
    streamed = itertools.islice(
        itertools.chain.from_iterable(iter_source(s, opened) for s in hub), rest
    )
    return itertools.chain(chosen, streamed), (len(chosen) if not hub else None)


@dataclass
class _Group:
    """An exact-duplicate group: its representative (smallest repo_name, path) and copies."""

    copies: int
    repo_name: str
    path: str
    license: str
    size: int
    reason: str | None
    spool: tuple[int, int] | None  # (offset, length) of the representative's content
    signature: Any


class _ShardWriter:
    """Writes records to ``root/split/shard-NNNNN.jsonl.gz``, ``shard_files`` per shard."""

    def __init__(self, root: Path, split: str, shard_files: int) -> None:
        self.dir = root / split
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shard_files = shard_files
        self.shards: list[str] = []
        self.files = 0
        self.bytes = 0
        self.repos: set[str] = set()
        self._fh: IO[str] | None = None
        self._in_shard = 0

    def _open(self) -> None:
        import gzip

        name = f"shard-{len(self.shards):05d}.jsonl.gz"
        self.shards.append(f"{self.dir.name}/{name}")
        self._fh = gzip.open(self.dir / name, "wt", encoding="utf-8", compresslevel=3)
        self._in_shard = 0

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is None or self._in_shard >= self.shard_files:
            self.close()
            self._open()
        assert self._fh is not None
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._in_shard += 1
        self.files += 1
        self.bytes += record["size"]
        self.repos.add(record["repo_name"])

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def summary(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "repositories": len(self.repos),
            "shards": self.shards,
        }


def _check_inputs(config: DataConfig) -> dict[str, Any]:
    """Every check that can fail before work starts; returns the opened hub streams."""
    from codeparrot.data.sources import check_sources, open_sources

    check_sources(config.sources)
    if config.tokenizer is not None and not (Path(config.tokenizer) / "tokenizer.json").is_file():
        raise DataError(f"--tokenizer {config.tokenizer}: no tokenizer.json in that directory")
    output = Path(config.output)
    if output.exists() and not config.force:
        raise DataError(f"--output {output} already exists; pass --force to replace it")
    if output.exists() and not output.is_dir():
        raise DataError(f"--output {output} exists and is not a directory")
    return open_sources(config.sources)


@dataclass
class _Build:
    """What the phases of :func:`build_corpus` hand on to each other."""

    config: DataConfig
    index: SnippetIndex | None  # benchmark snippets (None without decontamination)
    workers: int
    started: float  # perf_counter() at the start
    groups: dict[str, _Group] = field(default_factory=dict)  # by content hash
    removed: Counter[str] = field(default_factory=Counter)  # files by reason
    n_input: int = 0
    input_bytes: int = 0
    read_s: float = 0.0
    duplicates: int = 0
    survivors: dict[str, _Group] = field(default_factory=dict)  # what the shards will hold
    near_summary: dict[str, Any] = field(default_factory=lambda: {"enabled": False})
    writers: dict[str, _ShardWriter] = field(default_factory=dict)  # by split

    @classmethod
    def start(cls, config: DataConfig) -> _Build:
        from codeparrot.data.decontaminate import benchmark_index

        started = time.perf_counter()
        index = (
            benchmark_index(
                config.decontamination_min_lines,
                config.decontamination_min_chars,
                mbpp=config.decontaminate_mbpp,
            )
            if config.decontaminate
            else None
        )
        return cls(config, index, config.workers or os.cpu_count() or 1, started)


def build_corpus(config: DataConfig, *, progress: bool = True) -> dict[str, Any]:
    """Build the corpus described by ``config``; return its manifest (also in manifest.json)."""
    from codeparrot.io import atomic_directory, write_json

    opened = _check_inputs(config)
    build = _Build.start(config)
    items, total = input_files(config, opened)
    with atomic_directory(config.output, overwrite=config.force) as tmp:
        spool = tmp / ".spool"
        _read_files(build, items, total, spool, progress=progress)  # pass 1
        _exact_dedup(build)
        _near_dedup(build)
        _write_shards(build, tmp, spool, progress=progress)  # split, then pass 2
        spool.unlink()
        manifest = _manifest(build)
        if config.function_documents:
            from codeparrot.data.functions import write_function_documents

            manifest["function_documents"] = write_function_documents(
                tmp, config.function_documents, progress=progress
            )
        write_json(tmp / "manifest.json", manifest)
    return manifest


def _read_files(
    build: _Build, items: Iterable[SourceFile], total: int | None, spool_path: Path, *,
    progress: bool,
) -> None:  # fmt: skip
    """Pass 1: every file processed once; one exact-duplicate group per content hash, whose
    representative's content (if it passed the filters) is appended to the spool file."""
    from tqdm.auto import tqdm

    groups = build.groups
    with open(spool_path, "wb") as spool:
        results = process_files(items, FileProcessor(build.config, build.index), build.workers)
        for r in tqdm(results, total=total, unit="file", desc="reading", disable=not progress):
            build.n_input += 1
            build.input_bytes += r.size
            if r.hash is None:
                build.removed[r.reason or "unknown"] += 1
                continue
            group = groups.get(r.hash)
            if group is not None:
                group.copies += 1
                if (r.repo_name, r.path) >= (group.repo_name, group.path):
                    continue
            span = None
            if r.reason is None:
                data = r.content.encode("utf-8", errors="surrogatepass")
                span = (spool.tell(), len(data))
                spool.write(data)
            copies = 1 if group is None else group.copies
            groups[r.hash] = _Group(
                copies, r.repo_name, r.path, r.license, r.size, r.reason, span, r.signature
            )
    build.read_s = time.perf_counter() - build.started


def _exact_dedup(build: _Build) -> None:
    """One representative per group; the rest are duplicates."""
    build.duplicates = sum(g.copies - 1 for g in build.groups.values())
    build.removed["exact_duplicate"] = build.duplicates
    for g in build.groups.values():
        if g.reason is not None:
            build.removed[g.reason] += 1
    build.survivors = {h: g for h, g in build.groups.items() if g.reason is None}


def _near_dedup(build: _Build) -> None:
    """Near-duplicate clusters over the survivors (with ``near_dedup``); frees the signatures."""
    from codeparrot.data.dedup import near_duplicate_clusters

    config, survivors, groups = build.config, build.survivors, build.groups
    if config.near_dedup:
        report = near_duplicate_clusters(
            ((h, g.signature) for h, g in survivors.items()),
            threshold=config.jaccard_threshold,
            num_perm=config.num_perm,
        )
        for h in report.removed:
            del survivors[h]
        build.removed["near_duplicate"] = len(report.removed)
        build.near_summary = {
            "enabled": True,
            **report.summary(lambda h: f"{groups[h].repo_name}:{groups[h].path}"),
        }
    for g in survivors.values():
        g.signature = None


def _write_shards(build: _Build, root: Path, spool_path: Path, *, progress: bool) -> None:
    """Split by repository (or by file), then pass 2: copy the kept contents into shards."""
    from tqdm.auto import tqdm

    from codeparrot.data.split import assign_splits, split_unit

    config, survivors = build.config, build.survivors
    units = {h: split_unit(config.split_by, g.repo_name, g.path) for h, g in survivors.items()}
    splits = assign_splits(Counter(units.values()), config.valid_fraction, config.seed)
    build.writers = writers = {s: _ShardWriter(root, s, config.shard_files) for s in SPLITS}
    with open(spool_path, "rb") as spool:
        for h in tqdm(sorted(survivors), unit="file", desc="writing", disable=not progress):
            g = survivors[h]
            assert g.spool is not None
            spool.seek(g.spool[0])
            content = spool.read(g.spool[1]).decode("utf-8", errors="surrogatepass")
            writers[splits[units[h]]].write(
                {
                    "repo_name": g.repo_name,
                    "path": g.path,
                    "copies": g.copies,
                    "size": g.size,
                    "content": content,
                    "license": g.license,
                    "hash": h,
                }
            )
    for w in writers.values():
        w.close()  # an empty split keeps an empty folder: `datasets` rejects empty shards


def _manifest(build: _Build) -> dict[str, Any]:
    """``manifest.json``: what went in, what was removed and why, what came out."""
    from codeparrot.io import provenance

    config, groups, removed, index = build.config, build.groups, build.removed, build.index
    writers, duplicates = build.writers, build.duplicates
    decoded = sum(g.copies for g in groups.values())
    return {
        "format": FORMAT,
        "sources": list(config.sources) or ["<embedded default: stdlib + site-packages>"],
        "input": {
            "files": build.n_input,
            "bytes": build.input_bytes,
            "text_files": decoded,
            "distinct_contents": len(groups),
        },
        # Every reason, in pipeline order (zeros included, so reports line up).
        "removed": {
            k: removed[k] for k in (*REMOVAL_REASONS, *sorted(set(removed) - set(REMOVAL_REASONS)))
        },
        "exact_dedup": {
            "groups": len(groups),
            "duplicates_removed": duplicates,
            "duplicate_fraction": duplicates / decoded if decoded else 0.0,
        },
        "near_dedup": build.near_summary,
        "decontamination": {
            "enabled": index is not None,
            "removed": removed["humaneval"],
            "snippets_indexed": index.indexed if index else 0,
            "snippets_too_short": index.too_short if index else 0,
            "benchmarks": index.sources if index else {},
        },
        "splits": {s: writers[s].summary() for s in SPLITS},
        "output": {
            "files": sum(w.files for w in writers.values()),
            "bytes": sum(w.bytes for w in writers.values()),
        },
        "timing": {
            "workers": build.workers,
            "read_filter_s": round(build.read_s, 3),
            "total_s": round(time.perf_counter() - build.started, 3),
        },
        "provenance": provenance(config),
    }
