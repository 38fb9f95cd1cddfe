"""``codeparrot init``: write a freshly initialised checkpoint of a model preset."""

from __future__ import annotations

import argparse

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.models.presets import PRESETS, InitConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    shapes = "; ".join(f"{p.name}: {p.description}" for p in PRESETS.values())
    parser = subparsers.add_parser(
        "init",
        help="write an initialised checkpoint of a preset (GPT-2 or Qwen3)",
        description=f"Build a model of a preset with the tokenizer's vocabulary. Presets: {shapes}.",
    )
    add_config_arguments(parser, InitConfig)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from codeparrot.models.presets import init_checkpoint

    config = config_from_args(InitConfig, args)
    result = init_checkpoint(config)
    print(
        f"{result.output}: {result.preset} preset, {result.parameters:,} parameters "
        f"({result.parameters / 1e6:.1f}M), vocabulary {result.vocab_size}"
    )
    return 0
