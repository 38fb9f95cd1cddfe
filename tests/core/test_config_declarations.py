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
    assert "how many (in 1..64; default: 8)" in text
    assert "a rate (in (0, 1); default: 0.5)" in text
    assert "a floor (>= 0; default: 0.0)" in text
    assert "some k (each at least 1; default: 1 10)" in text
    assert "a stage's own default (in [0, 0.5]; default: 0.1)" in text
    assert "{fast,slow}" in text
    assert "an optional cap (at least 1; default: none)" in text
    assert "a file (default: none)" in text
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


# -- every stage config agrees with the shared declarations --------------------------------

# Fields whose name means one shared setting wherever it appears, and its declaration.
SHARED_BY_NAME = {
    "temperature": "TEMPERATURE",
    "top_p": "TOP_P",
    "top_k": "TOP_K",
    "quantize": "QUANTIZE_WEIGHTS",
    "dtype": "DTYPE",
    "device": "DEVICE",
    "cuda_graphs": "CUDA_GRAPHS",
    "preset": "PRESET",
    "n_positions": "N_POSITIONS",
    "vocab_size": "VOCAB_SIZE",
    "log_with": "TRACKER",
    "mixed_precision": "MIXED_PRECISION",
    "learning_rate": "LEARNING_RATE",
    "min_lr_ratio": "MIN_LR_RATIO",
    "weight_decay": "WEIGHT_DECAY",
    "dropout": "DROPOUT",
    "seq_length": "SEQ_LENGTH",
    "context_tokens": "CONTEXT_TOKENS",
    "fim_suffix_share": "FIM_SUFFIX_SHARE",
    "fim_order": "FIM_ORDER",
    "fim_tokens": "FIM_TOKENS",
    "workspace_share": "WORKSPACE_SHARE",
}
# Of those, the ones no stage may narrow: a value valid in one stage is valid in all.
SAME_EVERYWHERE = {
    "temperature",
    "top_p",
    "top_k",
    "quantize",
    "dtype",
    "preset",
    "log_with",
    "mixed_precision",
}


def stage_configs() -> list[type]:
    from codeparrot.app.config import AppConfig
    from codeparrot.data.config import DataConfig, StatsConfig
    from codeparrot.eval.config import (
        ExecuteConfig,
        ExecutionOptions,
        GenerateConfig,
        GenerationOptions,
        HumanEvalConfig,
        InfillConfig,
        TaskOptions,
    )
    from codeparrot.eval.lines import LinesConfig
    from codeparrot.eval.loss import LossConfig
    from codeparrot.generation.config import CompleteConfig, FimSettings, GenerationConfig
    from codeparrot.lsp.config import LspConfig
    from codeparrot.models.gguf_export import ExportConfig
    from codeparrot.models.presets import InitConfig
    from codeparrot.quickstart import QuickstartConfig
    from codeparrot.serve.config import ServeConfig
    from codeparrot.tokenizer.config import TokenizerConfig, TokenizerReportConfig
    from codeparrot.training.config import TrainConfig
    from codeparrot.training.finetune import FinetuneConfig

    return [
        AppConfig,
        CompleteConfig,
        DataConfig,
        ExecuteConfig,
        ExecutionOptions,
        ExportConfig,
        FimSettings,
        FinetuneConfig,
        GenerateConfig,
        GenerationConfig,
        GenerationOptions,
        HumanEvalConfig,
        InfillConfig,
        InitConfig,
        LinesConfig,
        LossConfig,
        LspConfig,
        QuickstartConfig,
        ServeConfig,
        StatsConfig,
        TaskOptions,
        TokenizerConfig,
        TokenizerReportConfig,
        TrainConfig,
    ]


def test_the_walk_covers_every_config_class_in_the_project():
    """A new stage config must join the walk below (so that it is checked for drift)."""
    import ast

    import codeparrot

    roots = [Path(p) for p in codeparrot.__path__]
    for sub in ("training", "eval", "app", "lsp", "quickstart"):
        module = __import__(f"codeparrot.{sub}", fromlist=["_"])
        roots += [Path(p) for p in module.__path__]
    defined = set()
    for root in roots:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Config", "Options"))
                    for b in node.bases
                ):
                    defined.add(node.name)
    walked = {cls.__name__ for cls in stage_configs()}
    missing = defined - walked
    assert not missing, f"add {sorted(missing)} to stage_configs() in this test"


def test_shared_settings_keep_their_single_declaration_in_every_stage():
    import dataclasses

    from codeparrot import options
    from codeparrot.config import Bounds

    seen = set()
    for cls in stage_configs():
        for f in dataclasses.fields(cls):
            where = f"{cls.__name__}.{f.name}"
            declared = f.metadata.get("declaration")
            name = SHARED_BY_NAME.get(f.name)
            if f.name.endswith("max_new_tokens") or f.name == "max_new_tokens_limit":
                name = "MAX_NEW_TOKENS"
            if name is not None:
                assert declared is getattr(options, name), f"{where} is not {name}.field()"
                seen.add(name)
            if declared is None:
                continue
            bounds = Bounds.of(f)
            assert bounds.within(declared.bounds), f"{where} widens {declared}"
            if f.name in SAME_EVERYWHERE:
                assert bounds == declared.bounds, f"{where} narrows a setting shared as is"
    assert seen >= {"TEMPERATURE", "TOP_P", "QUANTIZE_WEIGHTS", "DTYPE", "PRESET"}
    assert seen >= {"CONTEXT_TOKENS", "FIM_SUFFIX_SHARE", "WORKSPACE_SHARE"}


def test_the_sampling_bounds_are_the_engines_everywhere():
    from codeparrot.config import field_bounds
    from codeparrot.eval.config import HumanEvalConfig
    from codeparrot.generation.config import GenerationConfig
    from codeparrot.lsp.config import LspConfig

    for name in ("temperature", "top_p"):
        expected = field_bounds(GenerationConfig, name)
        assert field_bounds(HumanEvalConfig, name) == expected
        assert field_bounds(LspConfig, name) == expected
    # the editor's greedy default is its own; a bad value is refused the same way
    for cls in (GenerationConfig, HumanEvalConfig, LspConfig):
        with pytest.raises(ConfigError, match=r"--temperature must be >= 0, got -0\.5"):
            cls.from_dict({"temperature": -0.5})
    assert field_default(LspConfig, "temperature") == 0.0
    assert field_default(GenerationConfig, "temperature") == 0.2


def test_preset_names_are_the_models_presets():
    from codeparrot.models.presets import PRESETS
    from codeparrot.options import PRESET_NAMES

    assert tuple(PRESETS) == PRESET_NAMES
