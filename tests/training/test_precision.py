"""``--mixed-precision auto`` and every bf16 decision, with the CPU measurement faked."""

from __future__ import annotations

import json

import pytest

from codeparrot import precision
from codeparrot.errors import ConfigError
from codeparrot.precision import Bf16Probe, choose_mixed_precision
from codeparrot.training import train

from .test_training_loop import tiny_config, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


SLOW = Bf16Probe(fast=False, source="measured", fp32_gflops=150.0, bf16_gflops=1.5)
FAST = Bf16Probe(fast=True, source="measured", fp32_gflops=150.0, bf16_gflops=400.0)


@pytest.fixture
def cpu(monkeypatch):
    """Fake the CPU measurement: ``cpu(SLOW)`` or ``cpu(FAST)``; no forced answer."""
    monkeypatch.delenv(precision.ENV, raising=False)

    def use(probe: Bf16Probe) -> None:
        monkeypatch.setattr(precision, "measure_cpu_bf16", lambda shapes, seconds=0.05: probe)

    return use


def test_a_cpu_without_fast_bf16_trains_in_fp32(cpu):
    cpu(SLOW)
    choice = choose_mixed_precision("auto", "cpu")
    assert choice.mixed_precision == "no" and not choice.bf16_fast
    assert "150.0 GFLOP/s in fp32, 1.5 in bf16" in choice.describe()
    assert precision.newton_schulz_dtype(choice) == "float32"


def test_a_cpu_with_fast_bf16_trains_in_bf16(cpu):
    cpu(FAST)
    choice = choose_mixed_precision("auto", "cpu")
    assert choice.mixed_precision == "bf16" and choice.bf16_fast
    assert precision.newton_schulz_dtype(choice) == "bfloat16"


def test_explicit_values_keep_working(cpu):
    cpu(FAST)
    assert choose_mixed_precision("no", "cpu").mixed_precision == "no"
    cpu(SLOW)
    assert choose_mixed_precision("bf16", "cpu").mixed_precision == "bf16"


@pytest.mark.parametrize(("supported", "expected"), [(True, "bf16"), (False, "no")])
def test_cuda_uses_bf16_where_the_device_supports_it(monkeypatch, supported, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
    choice = choose_mixed_precision("auto", "cuda")
    assert (choice.mixed_precision, choice.device) == (expected, "cuda")
    # fp16 only where asked for, and then as asked
    assert choose_mixed_precision("fp16", "cuda").mixed_precision == "fp16"


def test_fp16_on_a_cpu_is_refused(cpu):
    cpu(FAST)
    with pytest.raises(ConfigError, match="--mixed-precision fp16"):
        choose_mixed_precision("fp16", "cpu")


def test_the_environment_forces_the_answer(monkeypatch):
    def measured(shapes, seconds=0.05):
        raise AssertionError("forced: no measurement")

    monkeypatch.setattr(precision, "measure_cpu_bf16", measured)
    monkeypatch.setenv(precision.ENV, "0")
    assert choose_mixed_precision("auto", "cpu").mixed_precision == "no"
    assert not precision.cpu_has_fast_bf16()
    monkeypatch.setenv(precision.ENV, "1")
    assert choose_mixed_precision("auto", "cpu").mixed_precision == "bf16"
    assert precision.cpu_has_fast_bf16()
    monkeypatch.setenv(precision.ENV, "yes")
    with pytest.raises(ConfigError, match=precision.ENV):
        precision.cpu_has_fast_bf16()


def test_bf16_asked_on_a_slow_cpu_warns_once_with_the_slowdown(cpu):
    cpu(SLOW)
    warning = precision.slow_bf16_warning(choose_mixed_precision("bf16", "cpu"))
    assert warning is not None and "100x slower" in warning and "auto" in warning
    cpu(FAST)
    assert precision.slow_bf16_warning(choose_mixed_precision("bf16", "cpu")) is None


def test_the_measurement_is_real_and_short():
    probe = precision.measure_cpu_bf16(precision.model_shapes(64, 128, 512, 64), seconds=0.01)
    assert probe.source == "measured" and probe.fp32_gflops > 0 and probe.bf16_gflops > 0
    assert probe.fast == (probe.bf16_gflops >= precision.MIN_SPEEDUP * probe.fp32_gflops)


def test_newton_schulz_in_fp32_orthogonalises_like_bf16():
    import torch

    from codeparrot.training.muon import _orthogonalize

    updates = torch.randn(3, 16, 48, generator=torch.Generator().manual_seed(0))
    coefficients = (3.4445, -4.775, 2.0315)
    fp32 = _orthogonalize(updates, coefficients, 5, 1e-7, torch.float32)
    bf16 = _orthogonalize(updates, coefficients, 5, 1e-7, torch.bfloat16)
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    # five iterations in either precision end within bf16's rounding of each other (0.01
    # here); three iterations in fp32 would be 0.035 or more away
    assert torch.allclose(fp32, bf16.float(), atol=0.025)


def test_the_choice_is_recorded_in_the_run(tmp_path, corpus, tiny_checkpoint, cpu):
    cpu(SLOW)
    lines: list[str] = []
    run = tmp_path / "run"
    config = tiny_config(corpus, tiny_checkpoint, run, mixed_precision="auto", max_steps=2)
    result = train(config, log=lines.append)
    assert result.precision["mixed_precision"] == "no"
    meta = json.loads((run / "codeparrot_checkpoint.json").read_text())
    assert meta["precision"]["requested"] == "auto" and meta["precision"]["mixed_precision"] == "no"
    assert meta["precision"]["fp32_gflops"] == 150.0
    assert sum("precision: fp32 on cpu" in line for line in lines) == 1


def test_bf16_on_a_slow_cpu_runs_as_asked_with_one_warning(tmp_path, corpus, tiny_checkpoint, cpu):
    cpu(SLOW)
    config = tiny_config(corpus, tiny_checkpoint, tmp_path / "run", mixed_precision="bf16",
                         max_steps=1)  # fmt: skip
    with pytest.warns(UserWarning, match="runs bf16 slowly") as caught:
        result = train(config)
    assert result.precision["mixed_precision"] == "bf16" and result.step == 1
    assert sum("bf16 slowly" in str(w.message) for w in caught) == 1


def test_fp16_training_on_a_cpu_fails_before_any_work(tmp_path, corpus, tiny_checkpoint, cpu):
    cpu(FAST)
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="--mixed-precision fp16"):
        train(tiny_config(corpus, tiny_checkpoint, run, mixed_precision="fp16"))
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


@pytest.mark.parametrize(("fast", "expected"), [("0", "float32"), ("1", "bfloat16")])
def test_a_bf16_checkpoint_runs_in_fp32_on_a_cpu_without_fast_bf16(
    tmp_path, tiny_checkpoint, monkeypatch, fast, expected
):
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from codeparrot.models.checkpoint import load_checkpoint

    saved = tmp_path / "bf16"
    shutil.copytree(tiny_checkpoint, saved)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    model.to(torch.bfloat16).save_pretrained(saved)
    monkeypatch.setenv(precision.ENV, fast)
    loaded, _tokenizer, _meta = load_checkpoint(saved)
    assert str(loaded.dtype) == f"torch.{expected}"
