"""One shape for the command line: the checkpoint argument, the training recipe, the defaults
shown in --help and flag names, checked over every subcommand's parser."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import pytest

from codeparrot import cli
from codeparrot.options import CHECKPOINT

# What the user's command line becomes: no default, no help, no subcommand table.
NOT_OPTIONS = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def commands(
    parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()
) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs something (``"eval lines"``, ``"lsp stats"``), with its parser."""
    parser = parser or build_parser()
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += commands(sub, (*path, name))
    if path and parser.get_default("func") is not None:
        out.append((" ".join(path), parser))
    return out


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    return cli.build_parser()  # once: importing every stage's module takes a while


def shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, NOT_OPTIONS)
    ]


def checkpoint_arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in shown(parser) if a.dest in ("checkpoint", "checkpoints")]


def in_required_group(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    return any(g.required and action in g._group_actions for g in parser._mutually_exclusive_groups)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


# -- the checkpoint argument ----------------------------------------------------------------

# The commands that load a model, and whether they compare several.
TAKE_A_CHECKPOINT = {
    "complete": False,
    "export": False,
    "finetune": False,
    "eval humaneval": False,
    "eval infill": False,
    "eval generate": False,
    "eval lines": False,
    "eval loss": True,
    "app": True,
    "lsp": False,
    "serve": False,
}


def test_every_command_takes_its_checkpoint_in_one_form():
    found = {}
    for name, parser in commands():
        arguments = checkpoint_arguments(parser)
        if not arguments:
            continue
        assert len(arguments) == 1, f"{name}: {len(arguments)} checkpoint arguments shown"
        (action,) = arguments
        found[name] = not action.option_strings
        assert action.metavar == "CHECKPOINT", f"{name}: metavar {action.metavar!r}"
        # one help; a command with a default says what it is after it
        assert action.help == CHECKPOINT.help or action.help.startswith(
            CHECKPOINT.help + " (default: "
        ), f"{name}: help {action.help!r}"
        if action.option_strings:
            assert action.option_strings == ["--checkpoint"] and action.dest == "checkpoint"
            assert action.nargs is None, f"{name}: --checkpoint takes one value"
        else:  # several to compare: CHECKPOINT ...
            assert action.dest == "checkpoints" and action.nargs in ("*", "+"), name
    assert found == TAKE_A_CHECKPOINT


def test_the_walk_sees_every_command():
    names = {name for name, _parser in commands()}
    assert {"train", "quickstart", "eval loss", "lsp stats", "data build"} <= names


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["app", "a", "b"], ("a", "b")),
        (["app", "--checkpoint", "a", "--checkpoint", "b", "c"], ("a", "b", "c")),
        (["eval", "loss", "a", "b"], ("a", "b")),
        (["eval", "loss", "--checkpoint", "a", "b"], ("a", "b")),
        (["eval", "lines", "--checkpoint", "a"], "a"),
        (["lsp", "--checkpoint", "a"], "a"),
        (["serve", "--checkpoint", "a"], "a"),
        (["complete", "--checkpoint", "a", "x = "], "a"),
        (["eval", "humaneval", "--checkpoint", "a"], "a"),
    ],
)
def test_either_form_of_a_checkpoint_is_read(argv, expected):
    args = parse(*argv)
    got = getattr(args, "checkpoints", None) or args.checkpoint
    if isinstance(expected, tuple):
        assert tuple(got) == tuple(Path(p) for p in expected)
    else:
        assert got == Path(expected)


@pytest.mark.parametrize(
    "argv", [["app"], ["eval", "loss"], ["eval", "lines"], ["eval", "humaneval"], ["serve"]]
)
def test_a_command_without_its_checkpoint_says_so(argv, capsys):
    # argparse refuses most; `eval humaneval` may go to a server instead (--backend openai),
    # so its config names what is missing, before any work
    from codeparrot.cli import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "CHECKPOINT" in err or "--checkpoint" in err
    assert "required" in err


# -- the training recipe ----------------------------------------------------------------------


RUN = ("train", "--data", "d", "--output", "o", "--tokenizer", "t")


def test_train_defaults_to_the_quickstart_recipe():
    from codeparrot.quickstart.cli import QuickstartConfig, _train_config
    from codeparrot.training.cli import train_config
    from codeparrot.training.config import QUICKSTART_RECIPE

    config = train_config(parse(*RUN))
    quickstart = _train_config(QuickstartConfig(output=Path("q"))).to_dict()
    recipe = QUICKSTART_RECIPE.settings()
    assert {k: config.to_dict()[k] for k in recipe} == recipe
    assert {k: quickstart[k] for k in recipe} == recipe  # the quickstart trains the same
    assert config.preset == "tiny-qwen" and config.optimizer == "muon"
    assert config.schedule == "wsd" and config.pretokenized and config.fim_rate is None


def test_recipe_codeparrot_gives_codeparrots_and_flags_override_it():
    from codeparrot.training.cli import train_config

    config = train_config(parse(*RUN, "--recipe", "codeparrot"))
    assert (config.preset, config.optimizer, config.schedule) == ("tiny", "adamw", "cosine")
    assert config.fim_rate == 0.0 and not config.pretokenized and config.batch_size == 8
    given = train_config(
        parse(*RUN, "--recipe", "codeparrot", "--preset", "small", "--fim-rate", "0.5")
    )
    assert (given.preset, given.fim_rate, given.optimizer) == ("small", 0.5, "adamw")
    mixed = train_config(parse(*RUN, "--optimizer", "adamw", "--no-pretokenized"))
    assert (mixed.preset, mixed.optimizer, mixed.pretokenized) == ("tiny-qwen", "adamw", False)


def test_the_library_offers_the_same_recipes():
    from codeparrot.errors import ConfigError
    from codeparrot.training.config import QUICKSTART_RECIPE, TrainConfig
    from codeparrot.training.recipes import load_recipe

    config = TrainConfig.from_recipe(
        "codeparrot", data=Path("d"), output=Path("o"), tokenizer=Path("t")
    )
    recipe = load_recipe("codeparrot").settings()
    assert {k: config.to_dict()[k] for k in recipe} == recipe
    # TrainConfig's defaults are the quickstart recipe's file
    assert load_recipe("quickstart").settings() == QUICKSTART_RECIPE.settings()
    with pytest.raises(ConfigError, match="--recipe must be one of codeparrot, quickstart"):
        TrainConfig.from_recipe("nanogpt", data=Path("d"), output=Path("o"), tokenizer=Path("t"))


def test_train_help_names_the_recipes():
    parser = dict(commands())["train"]
    text = " ".join(parser.format_help().split())
    assert "--recipe NAME|FILE" in text
    assert "codeparrot, quickstart, scale-up" in text and "default: quickstart" in text


# -- --help: defaults, names, the eval commands -----------------------------------------------


def test_every_option_shows_its_default():
    missing = []
    for name, parser in commands():
        for action in shown(parser):
            if not action.option_strings or action.required or in_required_group(parser, action):
                continue  # a positional or a required flag: the user gives it
            if isinstance(action, argparse._StoreTrueAction):
                continue  # a switch that is off unless given
            if "default" not in action.help:
                missing.append(f"{name} {action.option_strings[0]}")
    assert missing == []


def test_switches_read_naturally_and_old_spellings_still_parse():
    for name, parser in commands():
        for action in shown(parser):
            for flag in action.option_strings:
                if flag.startswith("--no-"):
                    positive = "--" + flag.removeprefix("--no-")
                    assert positive in action.option_strings, f"{name}: {flag} alone"
    help_text = dict(commands())["quickstart"].format_help()
    assert "--allow-code-execution" in help_text and "--no-allow-code-execution" not in help_text
    assert "--compile, --no-compile" in help_text  # on by default: both spellings shown
    assert parse("quickstart", "--allow-code-execution").allow_code_execution is True
    assert parse("quickstart", "--no-allow-code-execution").allow_code_execution is False
    assert parse("quickstart", "--no-compile").compile is False


def test_eval_help_describes_every_eval_command():
    eval_parser = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["eval"]
    text = " ".join(eval_parser.format_help().split())
    for command in ("humaneval", "infill", "generate", "execute", "loss", "lines"):
        assert f" {command} " in text, command
    assert "loss" in eval_parser.description and "lines" in eval_parser.description


def test_serve_help_says_how_it_samples_by_default():
    from codeparrot.serve.request import DEFAULT_TEMPERATURE

    text = " ".join(dict(commands())["serve"].format_help().split())
    assert f"temperature {DEFAULT_TEMPERATURE}" in text
