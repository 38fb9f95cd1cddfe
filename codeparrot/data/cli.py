"""``codeparrot data build`` and ``codeparrot data stats`` (standard library imports only)."""

from __future__ import annotations

import argparse

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.data.config import DataConfig, StatsConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser(
        "data", help="build and inspect the training corpus", description="The corpus stage."
    )
    sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    build = sub.add_parser(
        "build",
        help="clean, deduplicate and split Python files into a corpus",
        description=(
            "Read Python files (no SOURCE: this Python installation's stdlib and "
            "site-packages), drop bad input, apply the CodeParrot filters, remove exact and "
            "near duplicates and HumanEval contamination, split by repository and write "
            "OUTPUT/train, OUTPUT/valid and OUTPUT/manifest.json."
        ),
    )
    add_config_arguments(build, DataConfig, positional=("sources",))
    build.set_defaults(func=run_build)
    stats = sub.add_parser(
        "stats",
        help="summarise a built corpus (table + PNG histogram)",
        description="Print files, bytes, removals and duplicate fractions; plot sizes and line lengths.",
    )
    add_config_arguments(stats, StatsConfig, positional=("corpus",))
    stats.set_defaults(func=run_stats)


def run_build(args: argparse.Namespace) -> int:
    from codeparrot.data.pipeline import build_corpus
    from codeparrot.data.stats import summary_lines

    config = config_from_args(DataConfig, args)
    target = None
    if config.push_to_hub:
        from codeparrot.hub import preflight

        target = preflight(config.push_to_hub, repo_type="dataset")  # before any work
    manifest = build_corpus(config)
    print("\n".join(summary_lines(manifest)))
    print(f"wrote {config.output}")
    if target is not None:
        from codeparrot.hub import push_corpus

        print(f"pushed to {push_corpus(target, config.output)}")
    return 0


def run_stats(args: argparse.Namespace) -> int:
    from codeparrot.data.stats import corpus_stats, format_table

    config = config_from_args(StatsConfig, args)
    print(format_table(corpus_stats(config)))
    return 0
