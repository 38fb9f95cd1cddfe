"""``codeparrot complete``: sample completions of a prompt from the command line.

Imports only the standard library and config modules at module level; torch comes in
with the engine, inside :func:`run_complete`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.errors import ConfigError
from codeparrot.generation.config import CompleteConfig, FimSettings, GenerationConfig
from codeparrot.generation.stopping import HUMANEVAL_STOP_SEQUENCES, decode_escapes

if TYPE_CHECKING:
    from codeparrot.generation.engine import Completion, Engine


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "complete",
        help="complete a prompt with a checkpoint",
        description=CompleteConfig.__doc__,
        epilog='Example: codeparrot complete --checkpoint runs/tiny --n 3 --stop "\\n" "def add(a, b):"',
    )
    add_config_arguments(parser, CompleteConfig, positional=("prompt",))
    add_config_arguments(parser, GenerationConfig, skip=("stop",))
    add_config_arguments(parser, FimSettings)
    parser.add_argument(
        "--stop",
        action="append",
        default=argparse.SUPPRESS,
        metavar="TEXT",
        help="stop string, repeatable; backslash escapes such as \\n are understood "
        "(default: none)",
    )
    parser.set_defaults(func=run_complete)


def stop_strings(given: list[str] | None, humaneval: bool) -> tuple[str, ...]:
    """``--stop`` values with their backslash escapes decoded, plus the HumanEval set."""
    stops = [decode_escapes(s) for s in given or ()]
    if humaneval:
        stops += [s for s in HUMANEVAL_STOP_SEQUENCES if s not in stops]
    return tuple(stops)


def _configs(
    args: argparse.Namespace,
) -> tuple[CompleteConfig, GenerationConfig, FimSettings]:
    """The three configs, or one error listing the problems of all."""
    errors = []
    config = gen = fim = None
    try:
        config = config_from_args(CompleteConfig, args)
    except ConfigError as e:
        errors.append(str(e))
    try:
        stops = stop_strings(getattr(args, "stop", None), getattr(args, "humaneval_stops", False))
        gen = config_from_args(GenerationConfig, args, stop=stops)
    except ConfigError as e:
        errors.append(str(e))
    try:
        fim = config_from_args(FimSettings, args)
    except ConfigError as e:
        errors.append(str(e))
    if errors:
        raise ConfigError("\n".join(errors))
    assert config is not None and gen is not None and fim is not None
    return config, gen, fim


def run_complete(args: argparse.Namespace) -> int:
    from codeparrot.generation.heap import pause_collections, settle_heap

    pause_collections()  # while importing and loading (codeparrot.generation.heap)
    try:
        engine, config, gen, prompt, suffix = _load_for_complete(args)
    finally:
        settle_heap()
    if config.stream:
        return _print_stream(engine, prompt, gen, suffix)
    completions = engine.generate(prompt, gen, suffix=suffix)
    if config.json:
        rows = [
            {
                "text": c.text,
                "finish_reason": c.finish_reason,
                "prompt_tokens": c.prompt_tokens,
                "new_tokens": c.new_tokens,
                "seconds": round(c.seconds, 4),
                "seed": c.seed,
                "prompt_truncated": c.prompt_truncated,
            }
            for c in completions
        ]
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    for i, c in enumerate(completions):
        if len(completions) > 1:
            print(f"--- candidate {i + 1}/{len(completions)} ({_summary(c)}) ---")
        print(c.text)
    _report(completions, prompt_truncated=completions[0].prompt_truncated)
    return 0


def _load_for_complete(
    args: argparse.Namespace,
) -> tuple[Engine, CompleteConfig, GenerationConfig, str, str | None]:
    """(engine, configs, prompt, suffix) of a ``complete`` command line."""
    from codeparrot.generation.engine import Engine
    from codeparrot.hub import ModelRef

    config, gen, fim = _configs(args)
    prompt = sys.stdin.read() if config.prompt == "-" else config.prompt
    suffix = config.suffix
    if config.suffix_file is not None:
        suffix = read_text_file(config.suffix_file, "--suffix-file")
    engine = Engine.load(
        ModelRef.parse(config.checkpoint, config.revision),
        device=config.device,
        dtype=config.dtype,
        quantize=config.quantize,
        fim=fim,
        cuda_graphs=config.cuda_graphs,
    )
    return engine, config, gen, prompt, suffix


def read_text_file(path: Path, flag: str) -> str:
    """A UTF-8 text file's content, or an error naming the flag and the file."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{flag} {path}: cannot be read as UTF-8 text ({e})") from e


def _print_stream(
    engine: Engine, prompt: str, gen: GenerationConfig, suffix: str | None = None
) -> int:
    """n = 1: text as it comes; n > 1: each candidate when it is finished."""
    done = []
    for event in engine.stream(prompt, gen, suffix=suffix):
        if gen.n == 1:
            print(event.delta, end="", flush=True)
        if event.completion is not None:
            done.append(event.completion)
            if gen.n == 1:
                print()
            else:
                print(f"--- candidate {event.index + 1}/{gen.n} ({_summary(event.completion)}) ---")
                print(event.completion.text, flush=True)
    _report(done, prompt_truncated=bool(done and done[0].prompt_truncated))
    return 0


def _summary(c: Completion) -> str:
    return f"{c.finish_reason}, {c.new_tokens} tokens"


def _report(completions: list[Completion], *, prompt_truncated: bool) -> None:
    tokens = sum(c.new_tokens for c in completions)
    seconds = max((c.seconds for c in completions), default=0.0)
    rate = tokens / seconds if seconds > 0 else 0.0
    note = " (prompt truncated to fit the context)" if prompt_truncated else ""
    print(
        f"{len(completions)} candidate(s), {tokens} tokens in {seconds:.2f} s "
        f"({rate:.0f} tokens/s){note}",
        file=sys.stderr,
    )
