"""Recipes are files: the shipped ones load, a user's YAML works the same, bad ones are
refused naming the key, and a flag that does not fit its recipe is named at start."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import pytest

from codeparrot.cli import build_parser
from codeparrot.errors import ConfigError
from codeparrot.training.cli import train_config
from codeparrot.training.recipes import load_recipe, recipe_names

RUN = ("train", "--data", "d", "--tokenizer", "t", "--output", "o")


@functools.cache
def parser() -> argparse.ArgumentParser:
    return build_parser(only="train")


def parse(*argv: str) -> argparse.Namespace:
    return parser().parse_args(list(argv))


def test_the_shipped_recipes_load_and_describe_themselves() -> None:
    assert set(recipe_names()) >= {"quickstart", "codeparrot", "scale-up"}
    for name in recipe_names():
        recipe = load_recipe(name)
        assert recipe.name == name and recipe.description
    scale = load_recipe("scale-up")
    assert (scale.preset, scale.optimizer) == ("small", "adamw")
    assert scale.settings()["learning_rate"] == 5e-4


def test_scale_up_trains_adamw_at_its_own_rate() -> None:
    """The documented scale-up command trains AdamW at 5e-4, not the quickstart's Muon."""
    config = train_config(parse(*RUN, "--recipe", "scale-up"))
    assert (config.preset, config.optimizer, config.schedule) == ("small", "adamw", "cosine")
    assert config.learning_rate == 5e-4 and config.warmup_steps == 2000
    assert config.max_steps == 150_000 and config.fim_rate == 0.0


def test_a_recipe_file_of_ones_own(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "# mine\ndescription: bigger batches\npreset: tiny\noptimizer: adamw\n"
        "schedule: cosine\nbatch_size: 32\npretokenized: true\nfim_rate: 0.5\n"
        "learning_rate: 1.0e-3\n"
    )
    config = train_config(parse(*RUN, "--recipe", str(path), "--batch-size", "4"))
    assert (config.batch_size, config.fim_rate, config.learning_rate) == (4, 0.5, 1e-3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("preset: tiny\n", "missing optimizer"),
        ("- a list\n", "must be a mapping"),
        ("output: /elsewhere\n", "'output' is not a recipe's to set"),
        ("no_such_setting: 1\n", "'no_such_setting' is not a training setting"),
        ("batch_size: many\n", "batch_size = 'many' is not of type"),
        ("optimizer: sgd\n", "optimizer"),
        ("preset: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_recipe_is_refused_naming_what(tmp_path: Path, text: str, message: str) -> None:
    base = {
        "preset": "tiny",
        "optimizer": "adamw",
        "schedule": "cosine",
        "batch_size": "8",
        "pretokenized": "false",
        "fim_rate": "0.0",
    }
    key = text.split(":")[0]
    body = "".join(f"{k}: {v}\n" for k, v in base.items() if k != key)
    if message.startswith("missing"):
        body = text
    elif not text.startswith("-"):
        body += text
    else:
        body = text
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_recipe(path)


def test_an_unknown_recipe_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="one of codeparrot, quickstart, scale-up"):
        load_recipe("nanogpt")
    with pytest.raises(ConfigError, match="no such file"):
        load_recipe("missing.yaml")


def test_a_flag_that_conflicts_with_its_recipe_is_named() -> None:
    said: list[str] = []
    train_config(parse(*RUN, "--preset", "small", "--learning-rate", "5e-4"), warn=said.append)
    assert len(said) == 1 and "--learning-rate 0.0005 on recipe 'quickstart'" in said[0]
    assert "Muon" in said[0] and "--optimizer adamw" in said[0]
    said.clear()
    train_config(parse(*RUN, "--recipe", "scale-up", "--optimizer", "muon"), warn=said.append)
    assert len(said) == 1 and "its learning rate 0.0005 was chosen for adamw" in said[0]
    said.clear()
    train_config(parse(*RUN, "--learning-rate", "5e-4", "--optimizer", "adamw"), warn=said.append)
    train_config(parse(*RUN, "--recipe", "codeparrot", "--learning-rate", "1e-3"), warn=said.append)
    assert said == []
