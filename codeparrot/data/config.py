"""The configuration of the corpus build (``codeparrot data build``).

Standard library only: the CLI imports this module to build ``--help``.
Thresholds follow the CodeParrot reference recipe (see ANCHORS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option
from codeparrot.options import (
    FUNCTION_DOCUMENTS,
    MIN_DOCSTRING_SHARE,
    VALID_FRACTION,
    WORKERS,
)

HUB_PREFIX = "hub:"
SPLIT_UNITS = ("repository", "file")


@dataclass(frozen=True)
class DataConfig(Config):
    """Where the Python files come from, how they are cleaned and where the corpus goes."""

    output: Path = option(help="directory to create: train/ and valid/ shards and manifest.json")
    sources: tuple[str, ...] = option(
        (),
        "directories, git checkouts or hub:NAME datasets with a `content` column "
        "(none: this Python installation's stdlib and site-packages)",
        metavar="SOURCE",
    )
    force: bool = option(False, "replace --output if it exists (only once the new one is complete)")
    max_files: int = option(
        0, "read at most this many input files, a seeded sample of them (0: no limit)", ge=0
    )
    workers: int = WORKERS.field(
        help="worker processes for reading, filtering and MinHash (0: all cores)"
    )
    seed: int = option(0, "seed of the random filters, the --max-files sample and the split")
    valid_fraction: float = VALID_FRACTION.field(
        help="share of files (whole repositories) that go to the validation split"
    )
    split_by: str = option(
        "repository",
        "what --valid-fraction holds out: whole repositories, or single files (for one "
        "repository; seeded hash of the path)",
        choices=SPLIT_UNITS,
    )
    shard_files: int = option(5000, "files per output shard", ge=1)
    push_to_hub: str | None = option(
        None,
        "after the build, push the corpus to this Hub dataset repository (needs "
        "huggingface_hub, a token and the network; checked before any work)",
        metavar="NAME",
    )
    # -- size and decoding ---------------------------------------------------------------
    max_size: int = option(
        1_000_000, "drop files larger than this many bytes (reference: 1 MB)", ge=1
    )
    # -- heuristic filters (reference thresholds) --------------------------------------
    line_max: int = option(1000, "drop files with a line longer than this many characters", ge=1)
    line_mean: float = option(100.0, "drop files whose mean line length exceeds this", gt=0)
    alpha_frac: float = option(
        0.25, "drop files with a smaller fraction of alphanumeric characters", ge=0, le=1
    )
    header_lines: int = option(
        5, "lines scanned for auto-generated and config/test markers at the top of a file", ge=0
    )
    config_test_fraction: float = option(
        0.05,
        "a file is config/test-like if 'config' or 'test' occur more than this x lines",
        ge=0,
    )
    filter_probability: float = option(
        0.7,
        "probability of dropping a config/test-like file or one without keywords (seeded)",
        ge=0,
        le=1,
    )
    min_assignments: int = option(5, "drop files with fewer `=` characters than this", ge=0)
    min_docstring_share: float = MIN_DOCSTRING_SHARE.field()
    function_documents: int = FUNCTION_DOCUMENTS.field()
    tokenizer: Path | None = option(
        None, "tokenizer directory (tokenizer.json): enables the characters-per-token filter"
    )
    min_chars_per_token: float = option(
        1.5, "with --tokenizer, drop files with fewer characters per token", ge=0
    )
    # -- dedup and decontamination ---------------------------------------------------------
    near_dedup: bool = option(True, "remove near duplicates with MinHash LSH")
    num_perm: int = option(256, "MinHash permutations", ge=16)
    jaccard_threshold: float = option(
        0.85, "Jaccard similarity above which files are duplicates", gt=0, le=1
    )
    min_tokens: int = option(10, "files with fewer distinct tokens are not near-deduplicated", ge=1)
    decontaminate: bool = option(
        True,
        "drop files that contain a HumanEval prompt or canonical solution, or an MBPP "
        "solution or test list",
    )
    decontaminate_mbpp: bool = option(
        True,
        "also look for MBPP (Hub dataset google-research-datasets/mbpp, read from the local "
        "Hugging Face cache when present; offline without it: left out, with a warning and "
        "a note in the manifest)",
    )
    decontamination_min_lines: int = option(
        3, "HumanEval snippets with fewer non-blank lines are too generic to look for", ge=1
    )
    decontamination_min_chars: int = option(
        40,
        "HumanEval snippets with fewer non-whitespace characters are too generic (e.g. gcd)",
        ge=0,
    )

    def problems(self) -> list[str]:
        out: list[str] = []
        if not str(self.output):
            out.append("--output: a directory is required")
        for source in self.sources:
            if source.startswith(HUB_PREFIX) and not source[len(HUB_PREFIX) :]:
                out.append(f"SOURCE {source!r}: hub: needs a dataset name, e.g. hub:user/name")
        return out


@dataclass(frozen=True)
class StatsConfig(Config):
    """Summarise a built corpus: a table and a PNG histogram."""

    corpus: Path = option(help="a directory written by `codeparrot data build`")
    plot: Path | None = option(None, "where to write the PNG (default: CORPUS/stats.png)")

    def problems(self) -> list[str]:
        return [] if str(self.corpus) else ["CORPUS: a directory is required"]
