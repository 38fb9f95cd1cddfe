"""``codeparrot train``: pretrain a preset with Accelerate (also under ``accelerate launch``)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.training.config import DEFAULT_RECIPE, TrainConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="pretrain a model preset on a corpus (Accelerate; resumable)",
        description=(
            "Pretrain a model preset on DATA/train: by default the quickstart's recipe, or "
            "CodeParrot's with --recipe codeparrot; checkpoints, exact --resume and "
            "TensorBoard logs. Several processes (DDP; gloo on "
            "CPU): accelerate launch --cpu --num_processes 2 -m codeparrot.training --data ... (without "
            "MPI, Accelerate 1.x starts one process for it, and `-m codeparrot.training` starts the 2 "
            "with torchrun), or torchrun --nproc_per_node 2 -m codeparrot.training ...; on GPUs: "
            "accelerate launch -m codeparrot.training ... after accelerate config."
        ),
    )
    from codeparrot.training.recipes import recipe_names

    parser.add_argument(
        "--recipe",
        default=DEFAULT_RECIPE,
        metavar="NAME|FILE",
        help="the settings a run starts from, flags given override them: a commented YAML "
        f"file, or one that ships ({', '.join(recipe_names())}: training/recipes/; "
        "codeparrot is CodeParrot's 2021 recipe, scale-up CodeParrot-small's for GPUs; the "
        "defaults shown below are quickstart's; --resume needs the run's own; "
        f"default: {DEFAULT_RECIPE})",
    )
    add_config_arguments(parser, TrainConfig)
    parser.set_defaults(func=run)


def train_config(
    args: argparse.Namespace, warn: Callable[[str], None] | None = None
) -> TrainConfig:
    """The run's config: ``--recipe``'s settings, the flags given over them; ``warn`` is
    told of each flag that does not fit the recipe it overrides."""
    from codeparrot.training.recipes import load_recipe, recipe_conflicts

    recipe = load_recipe(getattr(args, "recipe", DEFAULT_RECIPE))
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(TrainConfig)
        if hasattr(args, f.name)
    }
    if warn is not None:
        for line in recipe_conflicts(recipe, given):
            warn(f"note: {line}")
    return config_from_args(TrainConfig, args, defaults=recipe.settings())


def speed_line(result: Any) -> str:
    """The run's speed: steady tokens/s and compile time apart, model FLOP/s and MFU against
    the measured peak, the datasheet's peak beside it."""
    from codeparrot.training.flops import format_flops

    if result.steady_tokens_per_s is None:
        speed = f"{result.tokens_per_s:,.0f} tokens/s (too few steps to tell warm-up apart)"
    else:
        speed = (
            f"{result.steady_tokens_per_s:,.0f} tokens/s steady, the first steps "
            f"{result.compile_seconds:.1f} s longer (compilation, warm-up); "
            f"{result.tokens_per_s:,.0f} tokens/s over the whole run"
        )
    line = f"{result.device_name}: {speed}"
    if result.mfu is not None and result.peak_flops:
        line += (
            f"; {format_flops(result.flops_per_s)}, MFU {result.mfu:.1%} of the measured "
            f"{format_flops(result.peak_flops)}"
        )
        if result.datasheet_peak_flops:
            line += f" (datasheet {format_flops(result.datasheet_peak_flops)})"
    return line


def run(args: argparse.Namespace) -> int:
    from codeparrot.generation.waits import prefer_short_spins

    prefer_short_spins()  # before torch loads (codeparrot.generation.waits)
    from codeparrot.training.loop import train

    config = train_config(args, warn=lambda line: print(line, flush=True))
    target = None
    if config.push_to_hub:
        from codeparrot.hub import preflight

        target = preflight(config.push_to_hub)  # before any work
    import os

    main_process = int(os.environ.get("RANK", "0")) == 0
    result = train(config, log=lambda line: print(line, flush=True) if main_process else None)

    if int(os.environ.get("RANK", "0")) == 0:
        ppl = "n/a" if result.perplexity is None else f"{result.perplexity:.2f}"
        eval_loss = "n/a" if result.eval_loss is None else f"{result.eval_loss:.4f}"
        print(
            f"{result.output}: step {result.step} ({result.stopped_by}), "
            f"{result.tokens_seen:,} tokens, {result.parameters:,} parameters, "
            f"eval loss {eval_loss}, perplexity {ppl}"
        )
        print(speed_line(result))
        if config.max_minutes is not None and result.designed_tokens:
            from codeparrot.training.plan import undertrained_warning

            warning = undertrained_warning(
                tokens_seen=result.tokens_seen,
                designed_tokens=result.designed_tokens,
                tokens_per_s=result.tokens_per_s,
                what=f"--max-steps {config.max_steps}",
            )
            if warning:
                print(warning)
        if target is not None:
            from codeparrot.hub import branch_name, push_run

            url = push_run(target, result.output, result.step)
            print(f"pushed {result.output} to branch {branch_name(result.output)}: {url}")
    return 0
