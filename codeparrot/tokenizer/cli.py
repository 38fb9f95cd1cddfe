"""``codeparrot tokenizer train`` and ``codeparrot tokenizer report``.

Imports only the standard library and config modules at module level; the tokenizer
machinery is imported inside the commands so ``codeparrot --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.tokenizer.config import TokenizerConfig, TokenizerReportConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tokenizer",
        help="train a byte-level BPE on the corpus, and measure it",
        description="Train a byte-level BPE tokenizer on the corpus, and report its quality.",
    )
    actions = parser.add_subparsers(dest="tokenizer_command", metavar="ACTION", required=True)

    train = actions.add_parser(
        "train",
        help="train a byte-level BPE on the corpus's train split",
        description=TokenizerConfig.__doc__,
    )
    add_config_arguments(train, TokenizerConfig)
    train.set_defaults(func=run_train)

    report = actions.add_parser(
        "report",
        help="measure a tokenizer on held-out files (and against GPT-2's)",
        description=TokenizerReportConfig.__doc__,
    )
    add_config_arguments(report, TokenizerReportConfig, positional=("paths",))
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.set_defaults(func=run_report)


def run_train(args: argparse.Namespace) -> int:
    from codeparrot.io import read_json
    from codeparrot.tokenizer.train import METADATA_FILE, train_tokenizer

    config = config_from_args(TokenizerConfig, args)
    target = None
    if config.push_to_hub:
        from codeparrot.hub import preflight

        target = preflight(config.push_to_hub)  # before any work
    output = train_tokenizer(config)
    meta = read_json(output / METADATA_FILE)
    corpus = meta["corpus"]
    print(
        f"wrote {output}: vocab {meta['vocab_size']:,}, trained on {corpus['files']:,} files "
        f"({corpus['chars']:,} chars) in {meta['training_seconds']:.1f} s"
    )
    if target is not None:
        from codeparrot.hub import push_tokenizer

        print(f"pushed to {push_tokenizer(target, output)}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from codeparrot.tokenizer.report import format_report, tokenizer_report

    config = config_from_args(TokenizerReportConfig, args)
    if args.json:
        config = config.replace(progress=False) if "progress" not in vars(args) else config
    report = tokenizer_report(config)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print(format_report(report))
    return 0
