"""Training recipes as files: ``codeparrot train --recipe NAME|FILE``.

A recipe is a commented YAML mapping of :class:`~codeparrot.training.config.TrainConfig`
fields: the six of :data:`~codeparrot.training.config.RECIPE_FIELDS` always, any other
setting that decides the model (learning rate, warmup, steps, precision) where the recipe
needs it, and a one-line ``description``. Paths, budgets and logging are not a recipe's
business: they stay flags. The recipes that ship are ``training/recipes/NAME.yaml``
(:func:`recipe_names`); a path to any other YAML file works the same.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.training.config import RECIPE_FIELDS, Recipe, TrainConfig

RECIPE_DIR = Path(__file__).with_name("recipes")
# TrainConfig fields a recipe may not set: where things are, and how a run reports.
NOT_IN_A_RECIPE = frozenset(
    {"data", "output", "tokenizer", "init_from", "resume", "progress", "log_with", "push_to_hub"}
)
MAX_RECIPE_BYTES = 64 * 1024


def recipe_names() -> tuple[str, ...]:
    """The recipes that ship with codeparrot, by name."""
    return tuple(sorted(p.stem for p in RECIPE_DIR.glob("*.yaml")))


def recipe_path(ref: str | Path) -> Path:
    """The file of a recipe name (``quickstart``) or path (``my.yaml``)."""
    text = str(ref)
    if text.endswith((".yaml", ".yml")) or "/" in text or Path(text).is_file():
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"--recipe {text}: no such file")
        return path
    path = RECIPE_DIR / f"{text}.yaml"
    if not path.is_file():
        names = ", ".join(recipe_names())
        raise ConfigError(f"--recipe must be one of {names} or a YAML file, got {text!r}")
    return path


def load_recipe(ref: str | Path) -> Recipe:
    """Read and check a recipe: every key a :class:`TrainConfig` field a recipe may set,
    the six core fields present, values of the field's type."""
    path = recipe_path(ref)
    import yaml  # PyYAML; safe_load builds plain data only

    if path.stat().st_size > MAX_RECIPE_BYTES:
        raise ConfigError(f"recipe {path}: over {MAX_RECIPE_BYTES // 1024} KiB")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"recipe {path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(
            f"recipe {path}: must be a mapping of settings, got {type(data).__name__}"
        )
    description = data.pop("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"recipe {path}: description must be text")
    _check_keys(path, data)
    extra = tuple((k, data[k]) for k in sorted(data) if k not in RECIPE_FIELDS)
    core = {k: data[k] for k in RECIPE_FIELDS}
    recipe = Recipe(**core, name=path.stem, description=description, extra=extra)
    _check_values(path, recipe)
    return recipe


def _check_keys(path: Path, data: Mapping[str, Any]) -> None:
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for key in data:
        if key in NOT_IN_A_RECIPE:
            raise ConfigError(
                f"recipe {path}: {key!r} is not a recipe's to set (give it as a flag)"
            )
        if key not in fields:
            raise ConfigError(f"recipe {path}: {key!r} is not a training setting")
    missing = [k for k in RECIPE_FIELDS if k not in data]
    if missing:
        raise ConfigError(f"recipe {path}: missing {', '.join(missing)}")


def _check_values(path: Path, recipe: Recipe) -> None:
    """The field's type, then TrainConfig's own bounds and choices (on a throwaway config)."""
    hints = typing.get_type_hints(TrainConfig)
    for key, value in recipe.settings().items():
        if not _fits(value, hints[key]):
            raise ConfigError(f"recipe {path}: {key} = {value!r} is not of type {hints[key]}")
    try:
        TrainConfig(data=Path("."), output=Path("."), tokenizer=Path("."), **recipe.settings())
    except (ConfigError, ValueError, TypeError) as e:
        raise ConfigError(f"recipe {path}: {e}") from e


def _fits(value: Any, tp: Any) -> bool:
    args = typing.get_args(tp)
    if args and type(None) in args:
        if value is None:
            return True
        tp = next(a for a in args if a is not type(None))
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def recipe_conflicts(recipe: Recipe, given: Mapping[str, Any]) -> list[str]:
    """Flags given on the command line that do not fit the recipe they override, each
    named (printed at start; the run goes ahead as asked)."""
    out = []
    settings = recipe.settings()
    optimizer = given.get("optimizer", recipe.optimizer)
    if "learning_rate" in given and optimizer == "muon" and "optimizer" not in given:
        out.append(
            f"--learning-rate {given['learning_rate']} on recipe {recipe.name!r}, whose "
            "optimizer is Muon: that rate drives Muon's hidden matrices (the preset's Muon "
            "peak is the default). For an AdamW run add --optimizer adamw or use --recipe "
            "codeparrot / scale-up."
        )
    changed = "optimizer" in given and given["optimizer"] != recipe.optimizer
    if changed and "learning_rate" in settings and "learning_rate" not in given:
        out.append(
            f"--optimizer {given['optimizer']} on recipe {recipe.name!r}: its learning "
            f"rate {settings['learning_rate']} was chosen for {recipe.optimizer}; give "
            "--learning-rate too."
        )
    return out
