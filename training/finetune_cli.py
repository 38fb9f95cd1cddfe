"""``codeparrot finetune REPOSITORY --checkpoint CHECKPOINT --output DIR`` (standard library
imports only)."""

from __future__ import annotations

import argparse
import sys

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.training.finetune import FinetuneConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune a checkpoint on your own repository; loss before and after",
        description=(
            "Build a corpus from REPOSITORY (the usual cleaning, validation held out by file), "
            "measure the checkpoint's loss on the held-out files, continue training it with a "
            "fine-tuning schedule, measure again, and print how to start the language server "
            "and the playground on the result (OUTPUT/model)."
        ),
    )
    add_config_arguments(parser, FinetuneConfig, positional=("repository",))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from codeparrot.training.finetune import finetune

    config = config_from_args(FinetuneConfig, args)
    result = finetune(config, log=lambda msg: print(f"finetune: {msg}", file=sys.stderr))
    print(
        f"{result.model}: {result.steps} steps ({result.stopped_by}) in "
        f"{result.seconds / 60:.1f} min on {result.train_files} files "
        f"({result.train_tokens:,} tokens), {result.valid_files} held out"
    )
    print(
        f"held-out loss {result.valid_loss_before:.4f} -> {result.valid_loss_after:.4f} "
        f"nats/token ({result.valid_tokens:,} tokens); train split "
        f"{result.train_loss_before:.4f} -> {result.train_loss_after:.4f}"
    )
    if result.warning:
        print(result.warning)
    if result.pushed:
        print(f"pushed: {result.pushed}")
    print("complete in your editor:  " + result.lsp_command)
    print("try it in the browser:    " + result.app_command)
    return 0
