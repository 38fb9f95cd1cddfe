"""``corpus_stats(StatsConfig)``: a short table and a PNG histogram of a built corpus."""

from __future__ import annotations

import glob
import gzip
import json
from pathlib import Path
from typing import Any

from codeparrot.data.config import StatsConfig
from codeparrot.errors import DataError

LINE_LENGTH_CAP = 200  # longer lines share the last histogram bin


def read_manifest(corpus: Path) -> dict[str, Any]:
    path = corpus / "manifest.json"
    if not path.is_file():
        raise DataError(
            f"{corpus}: no manifest.json (not a corpus built by `codeparrot data build`)"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from e


def iter_records(corpus: Path, split: str):
    for shard in sorted(glob.glob(str(corpus / split / "*.jsonl.gz"))):
        with gzip.open(shard, "rt", encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{shard}:{line_no}: not a JSON record ({e})") from e


def corpus_stats(config: StatsConfig) -> dict[str, Any]:
    """Summarise ``config.corpus``; writes the histogram PNG and returns the numbers."""
    import numpy as np

    corpus = Path(config.corpus)
    manifest = read_manifest(corpus)
    sizes: list[int] = []
    line_hist = np.zeros(LINE_LENGTH_CAP + 1, dtype=np.int64)
    per_split: dict[str, dict[str, int]] = {}
    for split in ("train", "valid"):
        files = size = 0
        for record in iter_records(corpus, split):
            files += 1
            size += record["size"]
            sizes.append(record["size"])
            lengths = np.fromiter(
                (len(line) for line in record["content"].splitlines()), dtype=np.int64
            )
            line_hist += np.bincount(
                np.minimum(lengths, LINE_LENGTH_CAP), minlength=LINE_LENGTH_CAP + 1
            )
        per_split[split] = {"files": files, "bytes": size}
    inputs = manifest.get("input", {})
    text_files = inputs.get("text_files", 0) or 0
    removed = manifest.get("removed", {})
    near = manifest.get("near_dedup", {})
    stats = {
        "corpus": str(corpus),
        "splits": per_split,
        "input_files": inputs.get("files", 0),
        "input_bytes": inputs.get("bytes", 0),
        "removed": removed,
        "exact_duplicate_fraction": removed.get("exact_duplicate", 0) / text_files
        if text_files
        else 0.0,
        "near_duplicate_fraction": removed.get("near_duplicate", 0) / text_files
        if text_files
        else 0.0,
        "near_dedup_clusters": near.get("clusters", 0),
        "plot": str(config.plot or corpus / "stats.png"),
    }
    _plot(sizes, line_hist, Path(stats["plot"]))
    return stats


def _plot(sizes: list[int], line_hist: Any, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from codeparrot.io import atomic_open

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if sizes:
        bins = np.logspace(np.log10(max(min(sizes), 1)), np.log10(max(sizes) + 1), 40)
        left.hist(sizes, bins=bins, color="tab:blue")
        left.set_xscale("log")
    left.set_title("file size")
    left.set_xlabel("bytes")
    left.set_ylabel("files")
    right.bar(np.arange(len(line_hist)), line_hist, width=1.0, color="tab:orange")
    right.set_title(f"line length (last bin: >= {LINE_LENGTH_CAP})")
    right.set_xlabel("characters")
    right.set_ylabel("lines")
    fig.tight_layout()
    with atomic_open(out.with_suffix(".png"), "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)


def format_table(stats: dict[str, Any]) -> str:
    """The stats as a short human-readable table."""
    rows: list[tuple[str, str]] = [
        ("input files", f"{stats['input_files']:,}"),
        ("input bytes", f"{stats['input_bytes']:,}"),
    ]
    for split, s in stats["splits"].items():
        rows.append((f"{split} files", f"{s['files']:,}"))
        rows.append((f"{split} bytes", f"{s['bytes']:,}"))
    rows.append(("exact duplicate fraction", f"{stats['exact_duplicate_fraction']:.1%}"))
    rows.append(("near duplicate fraction", f"{stats['near_duplicate_fraction']:.1%}"))
    rows.append(("near-duplicate clusters", f"{stats['near_dedup_clusters']:,}"))
    for reason, count in sorted(stats["removed"].items(), key=lambda kv: -kv[1]):
        if not count:
            continue
        rows.append((f"removed: {reason}", f"{count:,}"))
    rows.append(("histogram", stats["plot"]))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def summary_lines(manifest: dict[str, Any]) -> list[str]:
    """A few lines that tell the user what a build did (from its manifest)."""
    inputs = manifest["input"]
    out = [
        f"input: {inputs['files']:,} files, {inputs['bytes'] / 1e6:,.1f} MB",
        "removed: "
        + (
            ", ".join(
                f"{k} {v:,}"
                for k, v in sorted(manifest["removed"].items(), key=lambda kv: -kv[1])
                if v
            )
            or "nothing"
        ),
    ]
    near = manifest.get("near_dedup", {})
    if near.get("enabled"):
        out.append(
            f"near dedup: {near['clusters']:,} clusters, {near['kept']:,} kept, {near['removed']:,} removed"
        )
    for split, s in manifest["splits"].items():
        out.append(
            f"{split}: {s['files']:,} files, {s['bytes'] / 1e6:,.1f} MB, {s['repositories']:,} repositories"
        )
    return out
