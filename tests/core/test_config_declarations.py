"""Bounds and choices declared once, on the field: checks, errors and --help all from it."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from codeparrot.config import (
    Config,
    Declaration,
    add_config_arguments,
    config_from_args,
    field_bounds,
    field_default,
    option,
)
from codeparrot.errors import ConfigError

SHARED = Declaration(0.5, "a shared fraction", ge=0, le=1)


@dataclass(frozen=True)
class Small(Config):
    size: int = option(8, "how many", ge=1, le=64)
    rate: float = option(0.5, "a rate", gt=0, lt=1)
    floor: float = option(0.0, "a floor", ge=0)
    mode: str = option("fast", "how", choices=("fast", "slow"))
    ks: tuple[int, ...] = option((1, 10), "some k", ge=1)
    limit: int | None = option(None, "an optional cap", ge=1)
    shared: float = SHARED.field()
    narrowed: float = SHARED.field(0.1, "a stage's own default", le=0.5)
    path: Path | None = option(None, "a file")


def error_of(**values) -> str:
    with pytest.raises(ConfigError) as info:
        Small(**values)
    return str(info.value)


def test_good_values_and_none_pass():
    cfg = Small(size=64, rate=0.99, floor=0, mode="slow", ks=(1,), limit=None, narrowed=0.5)
    assert cfg.size == 64 and cfg.limit is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"size": 0}, "--size must be in 1..64, got 0"),
        ({"size": 65}, "--size must be in 1..64, got 65"),
        ({"rate": 1.0}, "--rate must be in (0, 1), got 1.0"),
        ({"rate": 0}, "--rate must be in (0, 1), got 0"),
        ({"floor": -0.5}, "--floor must be >= 0, got -0.5"),
        ({"mode": "warp"}, "--mode must be one of fast, slow, got 'warp'"),
        ({"ks": (1, 0)}, "--ks: every value must be at least 1, got [1, 0]"),
        ({"limit": 0}, "--limit must be at least 1, got 0"),
        ({"shared": 1.5}, "--shared must be in [0, 1], got 1.5"),
        ({"narrowed": 0.75}, "--narrowed must be in [0, 0.5], got 0.75"),
        ({"size": "8"}, "--size must be an integer, got '8'"),
        ({"size": True}, "--size must be an integer, got True"),
        ({"floor": "x"}, "--floor must be a number, got 'x'"),
    ],
)
def test_each_bound_is_checked_and_named(values, message):
    assert message in error_of(**values)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused_naming_the_flag(bad):
    assert f"--floor must be a finite number, got {bad}" in error_of(floor=bad)


def test_one_error_lists_every_bad_flag():
    message = error_of(size=0, rate=2.0, mode="warp", floor=math.nan, ks=(0,))
    for flag in ("--size", "--rate", "--mode", "--floor", "--ks"):
        assert flag in message
    assert message.count("\n  - ") == 5


def test_cross_field_rules_run_after_the_declarations():
    @dataclass(frozen=True)
    class Pair(Config):
        low: int = option(0, "low", ge=0)
        high: int = option(1, "high", ge=0)

        def problems(self) -> list[str]:
            return [] if self.low < self.high else ["--low must be below --high"]

    with pytest.raises(ConfigError) as info:
        Pair(low=-1, high=-2)
    message = str(info.value)
    assert "--low must be at least 0" in message and "--high must be at least 0" in message
    assert "--low must be below --high" in message  # numbers, so the rule ran too
    # a value of the wrong type stops the rules that would compare it
    with pytest.raises(ConfigError) as info:
        Pair(low="a")
    message = str(info.value)
    assert "--low must be an integer" in message and "below" not in message


def test_from_dict_goes_through_the_same_checks():
    with pytest.raises(ConfigError, match=r"--size must be in 1\.\.64, got 100"):
        Small.from_dict({"size": 100})
    with pytest.raises(ConfigError, match="--floor must be a number, got 'cold'"):
        Small.from_dict({"floor": "cold"})
    assert Small.from_dict(Small(size=3).to_dict()) == Small(size=3)


def test_help_shows_the_bounds_and_argparse_refuses_a_bad_choice(capsys):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Small)
    text = " ".join(parser.format_help().split())
    assert "how many; in 1..64 (default: 8)" in text
    assert "a rate; in (0, 1) (default: 0.5)" in text
    assert "a floor; >= 0" in text
    assert "some k; each at least 1 (default: 1 10)" in text
    assert "a stage's own default; in [0, 0.5] (default: 0.1)" in text
    assert "{fast,slow}" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "warp"])
    assert "invalid choice: 'warp'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"--size must be in 1\.\.64, got 0"):
        config_from_args(Small, parser.parse_args(["--size", "0"]))
    with pytest.raises(ConfigError, match="--rate must be a finite number, got nan"):
        config_from_args(Small, parser.parse_args(["--rate", "nan"]))


def test_a_stage_cannot_widen_a_shared_declaration():
    with pytest.raises(ValueError, match="widens"):
        SHARED.field(le=2)
    with pytest.raises(ValueError, match="widens"):
        Declaration("a", "mode", choices=("a", "b")).field(choices=("a", "c"))


def test_bounds_and_defaults_can_be_read_for_a_ui():
    bounds = field_bounds(Small, "narrowed")
    assert (bounds.minimum, bounds.maximum) == (0, 0.5)
    assert field_bounds(Small, "mode").choices == ("fast", "slow")
    assert field_default(Small, "narrowed") == 0.1
    with pytest.raises(KeyError):
        field_bounds(Small, "nope")
