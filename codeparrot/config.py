"""Typed, validated, serialisable stage configs and their command-line mapping.

Every stage of the pipeline takes one dataclass that inherits from :class:`Config`.
Fields carry their documentation in ``metadata={"help": ...}``; the CLI builds its
flags from it, so ``--help`` and the library docs never drift apart.

Validation happens on construction: a subclass overrides :meth:`Config.problems` and
returns every problem it finds; they are raised together as one
:class:`~codeparrot.errors.ConfigError` that names the flags.

This module imports only the standard library (the CLI imports it to build ``--help``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from codeparrot.errors import ConfigError

C = TypeVar("C", bound="Config")


def option(default: Any = dataclasses.MISSING, help: str = "", **kwargs: Any) -> Any:
    """A dataclass field with its ``--help`` text.

    ``kwargs`` may hold ``flag`` (a different flag name), ``cli=False`` (not exposed on
    the command line), ``choices`` and ``default_factory``.
    """
    metadata = {"help": help}
    for key in ("flag", "cli", "choices", "metavar"):
        if key in kwargs:
            metadata[key] = kwargs.pop(key)
    if "default_factory" in kwargs:
        return dataclasses.field(default_factory=kwargs.pop("default_factory"), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def flag_name(field: dataclasses.Field) -> str:
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Config:
    """Base class of stage configs: validation, (de)serialisation, CLI mapping."""

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            name = type(self).__name__
            lines = "\n".join(f"  - {p}" for p in problems)
            raise ConfigError(f"invalid {name}:\n{lines}")

    def problems(self) -> list[str]:
        """Every problem with the values, as messages naming the flag. Override."""
        return []

    # -- serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            out[f.name] = _to_jsonable(getattr(self, f.name))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Build from :meth:`to_dict` output; unknown keys are an error, missing keys default."""
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
        kwargs = {k: _from_jsonable(hints[k], v) for k, v in data.items()}
        return cls(**kwargs)

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _from_jsonable(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    tp, _ = _strip_optional(tp)
    origin = get_origin(tp)
    if tp is Path:
        return Path(value)
    if origin is tuple:
        args = get_args(tp)
        inner = args[0] if args else Any
        return tuple(_from_jsonable(inner, v) for v in value)
    if origin is list:
        args = get_args(tp)
        inner = args[0] if args else Any
        return [_from_jsonable(inner, v) for v in value]
    return value


# -- command line --------------------------------------------------------------------


def add_config_arguments(
    parser: argparse.ArgumentParser,
    cls: type[Config],
    *,
    skip: typing.Iterable[str] = (),
    positional: typing.Iterable[str] = (),
) -> None:
    """Add one flag per field of ``cls`` (help from the field's metadata).

    Defaults are suppressed on the parser so that :func:`config_from_args` only
    overrides what the user typed; ``--help`` still shows the dataclass default.
    ``positional`` names fields given as positional arguments (a tuple field takes ``*``).
    """
    hints = typing.get_type_hints(cls)
    skip = set(skip)
    positional = set(positional)
    for f in dataclasses.fields(cls):
        if f.name in skip or f.metadata.get("cli", True) is False:
            continue
        tp, _optional = _strip_optional(hints[f.name])
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        help_text = f.metadata.get("help", "")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if not required and default not in (None, (), []):
            shown = _to_jsonable(default)
            if isinstance(shown, list):
                shown = " ".join(map(str, shown))
            help_text = f"{help_text} (default: {shown})"
        # argparse %-formats help texts: a literal "%" must reach it doubled
        kwargs: dict[str, Any] = {"help": help_text.replace("%", "%%")}
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        if "metavar" in f.metadata:
            kwargs["metavar"] = f.metadata["metavar"]
        origin = get_origin(tp)
        if tp is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif origin in (tuple, list):
            inner = get_args(tp)[0] if get_args(tp) else str
            kwargs["type"] = _scalar_type(inner)
            kwargs["nargs"] = "*" if f.name in positional or not required else "+"
        else:
            kwargs["type"] = _scalar_type(tp)
        if f.name in positional:
            if not required and "nargs" not in kwargs:
                kwargs["nargs"] = "?"
            parser.add_argument(f.name, default=argparse.SUPPRESS, **kwargs)
        else:
            parser.add_argument(
                flag_name(f),
                dest=f.name,
                default=argparse.SUPPRESS,
                required=required,
                **kwargs,
            )


def _scalar_type(tp: Any) -> Any:
    if tp in (int, float, str):
        return tp
    if tp is Path:
        return Path
    return str


def config_from_args(cls: type[C], args: argparse.Namespace, **overrides: Any) -> C:
    """Build ``cls`` from parsed arguments; fields the user did not give keep their defaults."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if hasattr(args, f.name):
            value = getattr(args, f.name)
            tp, _ = _strip_optional(hints[f.name])
            if get_origin(tp) is tuple and isinstance(value, list):
                value = tuple(value)
            kwargs[f.name] = value
    kwargs.update(overrides)
    return cls(**kwargs)


def load_config(cls: type[C], path: str | Path) -> C:
    """Read a config written by :meth:`Config.to_json` (e.g. the ``config`` of a manifest)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such config file") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from e
    return cls.from_dict(data)
