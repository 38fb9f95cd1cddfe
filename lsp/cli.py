"""``codeparrot lsp``: serve completions to editors over stdio (default) or TCP.

Standard library and config only at module level; pygls and torch load in :func:`run`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.lsp.config import LspConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lsp",
        help="language server: inline completion and completion items for editors",
        description=(
            "A Language Server Protocol server over a checkpoint: textDocument/inlineCompletion "
            "(ghost text) and textDocument/completion (items with a textEdit). Talks over "
            "stdin/stdout unless --tcp is given. Editor set-up: docs/editors.md."
        ),
    )
    add_config_arguments(parser, LspConfig)
    parser.set_defaults(func=main)
    commands = parser.add_subparsers(title="other commands", metavar="stats")
    stats = commands.add_parser(
        "stats",
        help="summarise the acceptance statistics the server recorded",
        description=(
            "Acceptance rate (accepted, and accepted or partially accepted, of those shown) "
            "and latency percentiles of shown suggestions, per checkpoint."
        ),
    )
    stats.add_argument(
        "file",
        nargs="?",
        type=Path,
        help="statistics file (default: the server's, under $XDG_STATE_HOME/codeparrot)",
    )
    stats.set_defaults(func=stats_main)


def main(args: argparse.Namespace) -> int:
    from codeparrot.generation.heap import pause_collections, settle_heap
    from codeparrot.generation.waits import prefer_passive_waits

    prefer_passive_waits()  # before torch loads (codeparrot.generation.waits)
    pause_collections()  # until the model is loaded (the server's load thread resumes them)
    try:
        from codeparrot.lsp.server import serve

        serve(config_from_args(LspConfig, args))
    finally:
        settle_heap()
    return 0


def stats_main(args: argparse.Namespace) -> int:
    from codeparrot.lsp.stats import default_stats_file, format_summary, summarise

    path = args.file or default_stats_file()
    per, skipped = summarise(path)
    print(format_summary(per, skipped, path))
    return 0
