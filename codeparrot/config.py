"""Typed, validated, serialisable stage configs and their command-line mapping.

Every stage of the pipeline takes one dataclass that inherits from :class:`Config`.
Fields carry their documentation in ``metadata={"help": ...}``; the CLI builds its
flags from it, so ``--help`` and the library docs never drift apart.

Bounds and choices are declared with the field (``option(8, "...", ge=1)``); one
declaration gives the check on construction, the argparse ``choices`` and the range shown
in ``--help``. A setting several stages share is a :class:`Declaration`, made into each
stage's field with :meth:`Declaration.field` (the stage may change the default and the
help, not the bounds). Every float field must be finite.

Validation happens on construction: the declared bounds first, then the cross-field
rules a subclass returns from :meth:`Config.problems`; every problem is raised together
as one :class:`~codeparrot.errors.ConfigError` that names the flags.

This module imports only the standard library (the CLI imports it to build ``--help``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import numbers
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from codeparrot.errors import ConfigError

C = TypeVar("C", bound="Config")


_BOUND_KEYS = ("ge", "gt", "le", "lt")
_METADATA_KEYS = ("flag", "cli", "choices", "metavar", *_BOUND_KEYS, "declaration")


def option(default: Any = dataclasses.MISSING, help: str = "", **kwargs: Any) -> Any:
    """A dataclass field with its ``--help`` text and its bounds.

    ``kwargs`` may hold ``flag`` (a different flag name), ``cli=False`` (not exposed on
    the command line), ``metavar``, ``default_factory``, the bounds ``ge``, ``gt``,
    ``le``, ``lt`` (checked on construction, shown in ``--help``) and ``choices``
    (checked on construction, given to argparse). ``None`` always passes the bounds and
    choices of an optional field; on a tuple field they apply to every element.
    """
    metadata = {"help": help}
    for key in _METADATA_KEYS:
        if key in kwargs:
            metadata[key] = kwargs.pop(key)
    if "choices" in metadata:
        metadata["choices"] = tuple(metadata["choices"])
    if "default_factory" in kwargs:
        return dataclasses.field(default_factory=kwargs.pop("default_factory"), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """What a field accepts: its bounds and choices (``None``: no such limit)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None

    @classmethod
    def of(cls, field: dataclasses.Field) -> Bounds:
        return cls(**{k: field.metadata.get(k) for k in (*_BOUND_KEYS, "choices")})

    @property
    def minimum(self) -> float | None:
        """The lower bound, inclusive or not (what a slider starts at)."""
        return self.ge if self.ge is not None else self.gt

    @property
    def maximum(self) -> float | None:
        """The upper bound, inclusive or not (what a slider ends at)."""
        return self.le if self.le is not None else self.lt

    def admits(self, value: Any) -> bool:
        if self.choices is not None and value not in self.choices:
            return False
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def within(self, outer: Bounds) -> bool:
        """Whether every value these bounds admit is admitted by ``outer`` too."""
        if outer.choices is not None and not set(self.choices or ()) <= set(outer.choices):
            return False
        low, high = (self.minimum, self.maximum)
        if outer.minimum is not None and (low is None or low < outer.minimum):
            return False
        if outer.maximum is not None and (high is None or high > outer.maximum):
            return False
        return (outer.gt is None or self.gt is not None or self.ge > outer.gt) and (
            outer.lt is None or self.lt is not None or self.le < outer.lt
        )

    def describe(self, integer: bool = False) -> str:
        """``"in 1..4096"``, ``"in (0, 1]"``, ``">= 0"``, ``"one of a, b"`` or ``""``."""
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        low, high = self.minimum, self.maximum
        if integer and self.ge is not None and self.le is not None:
            return f"in {_number(self.ge)}..{_number(self.le)}"
        if low is not None and high is not None:
            left, right = (
                ("[" if self.ge is not None else "("),
                ("]" if self.le is not None else ")"),
            )
            return f"in {left}{_number(low)}, {_number(high)}{right}"
        if integer and self.ge is not None:
            return f"at least {_number(self.ge)}"
        if integer and self.le is not None:
            return f"at most {_number(self.le)}"
        for key, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(self, key) is not None:
                return f"{symbol} {_number(getattr(self, key))}"
        return ""


def _number(x: float) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


@dataclasses.dataclass(frozen=True)
class Declaration:
    """A setting several stage configs share: its help, default, bounds and choices.

    ``TEMPERATURE.field()`` is the field in a stage config; ``field(0.0, "...")`` gives
    a stage its own default and help. ``field(le=512)`` may narrow the bounds (a stage
    that accepts less), never widen them: that is checked when the class is defined.
    """

    default: Any
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    flag: str | None = None
    metavar: str | None = None

    @property
    def bounds(self) -> Bounds:
        return Bounds(self.ge, self.gt, self.le, self.lt, self.choices)

    def field(
        self, default: Any = dataclasses.MISSING, help: str | None = None, **narrower: Any
    ) -> Any:
        """The dataclass field for one stage: this declaration, optionally a default, help
        and narrower bounds of its own."""
        unknown = set(narrower) - {*_BOUND_KEYS, "choices"}
        if unknown:
            raise TypeError(f"Declaration.field() got unexpected arguments {sorted(unknown)}")
        limits = {k: getattr(self, k) for k in (*_BOUND_KEYS, "choices")} | narrower
        for key, other in (("ge", "gt"), ("gt", "ge"), ("le", "lt"), ("lt", "le")):
            if key in narrower:  # an exclusive bound replaces the inclusive one, and back
                limits[other] = None
        if not Bounds(**limits).within(self.bounds):
            raise ValueError(f"{narrower} widens the shared bounds {self.bounds.describe()}")
        extra = {k: v for k, v in (("flag", self.flag), ("metavar", self.metavar)) if v}
        limits = {k: v for k, v in limits.items() if v is not None}
        return option(
            self.default if default is dataclasses.MISSING else default,
            self.help if help is None else help,
            declaration=self,
            **limits,
            **extra,
        )


def flag_name(field: dataclasses.Field) -> str:
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def field_bounds(cls: type[Config], name: str) -> Bounds:
    """The bounds and choices declared for ``cls``'s field ``name`` (for a UI's sliders)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return Bounds.of(f)
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def field_default(cls: type[Config], name: str) -> Any:
    """The default of ``cls``'s field ``name`` (a UI's initial value)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            if f.default is dataclasses.MISSING:
                raise KeyError(f"{cls.__name__}.{name} has no default")
            return f.default
    raise KeyError(f"{cls.__name__} has no field {name!r}")


@dataclasses.dataclass(frozen=True)
class Config:
    """Base class of stage configs: validation, (de)serialisation, CLI mapping."""

    def __post_init__(self) -> None:
        problems, typed = declaration_problems(self)
        if typed:  # the cross-field rules compare values: only numbers can be compared
            problems += self.problems()
        if problems:
            name = type(self).__name__
            lines = "\n".join(f"  - {p}" for p in problems)
            raise ConfigError(f"invalid {name}:\n{lines}")

    def problems(self) -> list[str]:
        """Problems the declarations cannot express (rules across fields), as messages
        naming the flags. Override; bounds and choices belong in ``option(...)``."""
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


def declaration_problems(config: Config) -> tuple[list[str], bool]:
    """What breaks the bounds and choices declared on ``config``'s fields, or the rule
    that numbers are finite, as messages naming the flag and the value; and whether every
    number field holds a number (so that rules comparing values can run)."""
    out: list[str] = []
    typed = True
    for check in _field_checks(type(config)):
        value = getattr(config, check.name)
        if value is None:
            continue
        sequence = check.sequence and isinstance(value, tuple | list)
        for v in value if sequence else (value,):
            need, type_error = _requirement(check.tp, check.bounds, v)
            if need:
                typed = typed and not type_error
                got = list(value) if sequence else (repr(v) if isinstance(v, str) else v)
                each = ": every value" if sequence else ""
                out.append(f"{check.flag}{each} must be {need}, got {got}")
                break
    return out, typed


@dataclasses.dataclass(frozen=True)
class _FieldCheck:
    name: str
    flag: str
    tp: Any  # the element type of a tuple or list field
    sequence: bool
    bounds: Bounds


@functools.cache
def _field_checks(cls: type[Config]) -> tuple[_FieldCheck, ...]:
    """The fields of ``cls`` that have something to check (numbers, bounds, choices),
    worked out once per class: configs are built per request in the servers."""
    hints = typing.get_type_hints(cls)
    checks = []
    for f in dataclasses.fields(cls):
        tp, _ = _strip_optional(hints[f.name])
        sequence = get_origin(tp) in (tuple, list)
        if sequence:
            tp = (get_args(tp) or (Any,))[0]
        bounds = Bounds.of(f)
        if tp in (int, float) or bounds != Bounds():
            checks.append(_FieldCheck(f.name, flag_name(f), tp, sequence, bounds))
    return tuple(checks)


def _requirement(tp: Any, bounds: Bounds, value: Any) -> tuple[str, bool]:
    """What ``value`` fails to be (``""``: nothing), and whether that is its type."""
    if tp in (int, float):
        if tp is int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            return "an integer", True
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return "a number", True
        if not math.isfinite(value):
            return "a finite number", False
    if bounds == Bounds() or bounds.admits(value):
        return "", False
    return bounds.describe(integer=tp is int), False


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
    required: typing.Iterable[str] = (),
) -> None:
    """Add one flag per field of ``cls`` (help from the field's metadata).

    Defaults are suppressed on the parser so that :func:`config_from_args` only
    overrides what the user typed; ``--help`` still shows the dataclass default.
    ``positional`` names fields given as positional arguments (a tuple field takes ``*``);
    ``required`` names fields the command line must give although the config has a default
    (one a library caller may leave unset, such as a checkpoint its rules then ask for).

    A boolean that defaults to False is one flag, ``--name``; one that defaults to True is
    ``--name``/``--no-name``. ``--no-name`` of the first kind is still accepted (hidden).
    """
    skip, positional, required = set(skip), set(positional), set(required)
    hints = typing.get_type_hints(cls)  # once: it evaluates every annotation of the class
    for f in dataclasses.fields(cls):
        if f.name in skip or f.metadata.get("cli", True) is False:
            continue
        tp, default, needed = _field_facts(hints, f)
        needed = needed or f.name in required
        if tp is bool and f.name not in positional:
            _add_bool_flag(parser, f, default is True, _help_text(f, tp, default, needed))
            continue
        kwargs = _argument_kwargs(f, tp, default, needed, f.name in positional)
        if f.name in positional:
            parser.add_argument(f.name, **kwargs)
        else:
            parser.add_argument(flag_name(f), dest=f.name, required=needed, **kwargs)


def add_either_form(
    parser: argparse.ArgumentParser, cls: type[Config], name: str, *, positional: bool
) -> None:
    """Field ``name`` of ``cls``, which the command line must give: shown as a positional
    argument or as its flag as ``positional`` says, the other form accepted too (hidden), so
    that command lines written for an argument's earlier form keep working. A tuple field
    collects the values of both forms."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    tp, default, _needed = _field_facts(typing.get_type_hints(cls), f)
    sequence = get_origin(tp) in (tuple, list)
    group = parser.add_mutually_exclusive_group(required=True)
    for shown in (True, False):
        as_positional = positional == shown
        kwargs = _argument_kwargs(f, tp, default, True, as_positional)
        if sequence:  # values of both forms add up
            kwargs.update(nargs="*" if as_positional else "+", action="extend")
        elif as_positional:  # absent when the flag is given: "*" (argparse converts a "?"
            kwargs.update(nargs="*", action=_StoreOne)  # positional's absent default)
        if not shown:
            kwargs["help"] = argparse.SUPPRESS
        if as_positional:
            group.add_argument(name, **kwargs)
        else:
            group.add_argument(flag_name(f), dest=name, **kwargs)


class _StoreOne(argparse.Action):
    """A positional argument of one value that may be absent (``nargs="*"``, at most one)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, *_: Any):
        if len(values) > 1:
            parser.error(f"give one {self.metavar or self.dest}, got {len(values)}")
        if values:
            setattr(namespace, self.dest, values[0])


def _field_facts(hints: dict[str, Any], f: dataclasses.Field) -> tuple[Any, Any, bool]:
    """The field's type (``Optional`` removed; ``hints``: its class's type hints), its
    default (``None``: none) and whether it has none, so that a command line must give it."""
    tp, _optional = _strip_optional(hints[f.name])
    if f.default is not dataclasses.MISSING:
        return tp, f.default, False
    if f.default_factory is not dataclasses.MISSING:
        return tp, f.default_factory(), False
    return tp, None, True


def _argument_kwargs(
    f: dataclasses.Field, tp: Any, default: Any, required: bool, positional: bool
) -> dict[str, Any]:
    """argparse's keywords for a field that takes a value (the flag or name aside)."""
    help_text = _help_text(f, tp, default, required, option=not positional)
    # argparse %-formats help texts: a literal "%" must reach it doubled
    kwargs: dict[str, Any] = {"help": help_text.replace("%", "%%"), "default": argparse.SUPPRESS}
    if "choices" in f.metadata:
        kwargs["choices"] = f.metadata["choices"]
    if "metavar" in f.metadata:
        kwargs["metavar"] = f.metadata["metavar"]
    if get_origin(tp) in (tuple, list):
        inner = get_args(tp)[0] if get_args(tp) else str
        kwargs["type"] = _scalar_type(inner)
        kwargs["nargs"] = "*" if positional or not required else "+"
    else:
        kwargs["type"] = _scalar_type(tp)
        if positional and not required:
            kwargs["nargs"] = "?"
    return kwargs


def _add_bool_flag(
    parser: argparse.ArgumentParser, f: dataclasses.Field, on: bool, help_text: str
) -> None:
    """``--name`` for a setting that is off by default (``--no-name`` accepted, hidden), or
    ``--name``/``--no-name`` for one that is on by default."""
    flag = flag_name(f)
    negative = "--no-" + flag.removeprefix("--")
    common = {"dest": f.name, "default": argparse.SUPPRESS}
    if on:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=help_text, **common)
        return
    parser.add_argument(flag, action="store_true", help=help_text, **common)
    parser.add_argument(negative, action="store_false", help=argparse.SUPPRESS, **common)


def _help_text(
    f: dataclasses.Field, tp: Any, default: Any, required: bool, option: bool = True
) -> str:
    """The field's help, then its declared range and its default: ``"... (in 1..64;
    default: 8)"`` (choices argparse shows itself). A flag with no default says
    ``default: none`` unless its help already tells what happens without it; a boolean
    says ``on`` when it is on by default, and nothing when off (its flag turns it on)."""
    notes = []
    bounds = dataclasses.replace(Bounds.of(f), choices=None)
    if bounds != Bounds():
        origin = get_origin(tp)
        inner = (get_args(tp) or (str,))[0] if origin in (tuple, list) else tp
        each = "each " if origin in (tuple, list) else ""
        notes.append(each + bounds.describe(integer=inner is int))
    text = f.metadata.get("help", "")
    if required or (tp is bool and default is not True):
        pass
    elif default is True:
        notes.append("default: on")
    elif default not in (None, (), []):
        shown = _to_jsonable(default)
        if isinstance(shown, list):
            shown = " ".join(map(str, shown))
        notes.append(f"default: {shown}")
    elif option and "default" not in text:
        notes.append("default: none")
    return f"{text} ({'; '.join(notes)})" if notes else text


def _scalar_type(tp: Any) -> Any:
    if tp in (int, float, str):
        return tp
    if tp is Path:
        return Path
    return str


def config_from_args(
    cls: type[C],
    args: argparse.Namespace,
    *,
    defaults: typing.Mapping[str, Any] | None = None,
    **overrides: Any,
) -> C:
    """Build ``cls`` from parsed arguments; fields the user did not give take their value
    from ``defaults`` (a preset's), else keep the dataclass default; ``overrides`` win."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = dict(defaults or {})
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
