"""``codeparrot app``: serve the Gradio playground. Imports gradio only when run."""

from __future__ import annotations

import argparse

from codeparrot.app.config import AppConfig
from codeparrot.config import add_config_arguments, add_either_form, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "app",
        help="serve the Gradio playground over one or more checkpoints",
        description=(
            "A Gradio playground over the checkpoints given (a picker when several): prompt "
            "editor, sampling controls, streamed candidates, the CodeParrot chapter's "
            "examples, and each checkpoint's model card, training curve and HumanEval report."
        ),
    )
    # `codeparrot app A B`; the earlier `--checkpoint A --checkpoint B` still works (hidden)
    add_either_form(parser, AppConfig, "checkpoints", positional=True)
    add_config_arguments(parser, AppConfig, skip=("checkpoints",))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from codeparrot.generation.waits import prefer_passive_waits

    prefer_passive_waits()  # before torch loads (codeparrot.generation.waits)
    config = config_from_args(AppConfig, args)
    from codeparrot.app.model_card import read_model_card
    from codeparrot.app.ui import launch

    for ref in config.served_checkpoints:
        path = ref.name
        if not read_model_card(path).exists:
            print(
                f"codeparrot app: warning: checkpoint {path}: no such directory (shown as missing)"
            )
    print(f"codeparrot app: serving {len(config.checkpoints)} checkpoint(s); Ctrl+C stops")
    launch(config, block=True)
    return 0
