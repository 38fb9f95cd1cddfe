"""The quickstart's plan for its device: on a CPU the recipe, its steps filling the budget;
on CUDA a model, batch and context sized to the device (a faked one here: name, memory,
step time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codeparrot.errors import ConfigError
from codeparrot.quickstart import cli as quickstart
from codeparrot.quickstart.cli import QuickstartConfig, format_summary
from codeparrot.quickstart.plan import (
    Device,
    Measurement,
    batch_for_memory,
    choose_preset,
    cpu_plan,
    gpu_plan,
    preset_parameters,
    steady_tokens_per_s,
)

H100 = Device("cuda", "NVIDIA H100 80GB HBM3", 80 * 2**30)
CPU = Device("cpu", "AMD EPYC")
VOCAB = 8192


def fake_measure(tokens_per_s: dict[str, float]):
    """A device that runs each preset at the given tokens/s, at any batch."""
    calls: list[tuple[str, int]] = []

    def measure(preset: str, batch: int) -> Measurement:
        calls.append((preset, batch))
        params = preset_parameters(preset, VOCAB)
        step_s = batch * 1024 / tokens_per_s[preset]
        return Measurement(preset, batch, step_s, params, 6.0 * params)

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


def test_mini_qwen_is_a_real_size_and_the_counted_parameters_are_the_built_models():
    from codeparrot.models.presets import build_model, count_parameters

    class Tok:
        eos_token_id = 0

        def __len__(self) -> int:
            return VOCAB

    for preset in ("mini-qwen", "tiny", "tiny-qwen-untied"):
        built = count_parameters(build_model(preset, Tok()))
        assert preset_parameters(preset, VOCAB) == built, preset
    assert 30e6 <= preset_parameters("mini-qwen", VOCAB) <= 50e6


def test_the_batch_fills_the_memory_and_a_device_too_small_is_refused():
    big, small = (batch_for_memory("mini-qwen", VOCAB, gib * 2**30, 1024) for gib in (80, 24))
    # ~0.4 GB a sequence of 1,024 tokens: powers of two within 60% of the memory
    assert big == 64 and small == 32
    assert batch_for_memory("mini-qwen", VOCAB, 141 * 2**30, 1024) == 128  # the cap
    assert batch_for_memory("small-qwen", VOCAB, 24 * 2**30, 1024) < small
    with pytest.raises(ConfigError, match="--no-gpu-plan"):
        batch_for_memory("small-qwen", VOCAB, 2 * 2**30, 1024)


def test_the_preset_follows_the_measured_pace_and_the_budget():
    measure = fake_measure({"mini-qwen": 800_000, "small-qwen": 300_000})
    short = gpu_plan(H100, minutes=2, vocab_size=VOCAB, given_steps=None,
                     corpus_tokens=20e6, measure=measure)  # fmt: skip
    assert short.preset == "mini-qwen" and short.seq_length == short.n_positions == 1024
    assert short.batch_size == 64 and [p for p, _ in measure.calls] == ["mini-qwen", "small-qwen"]
    # 4 epochs of 20M tokens at 64 x 1024 a step: the planner's ceiling
    assert short.max_steps == int(4 * 20e6 / (64 * 1024))
    text = "\n".join(short.describe())
    assert "NVIDIA H100 80GB HBM3 (80 GiB)" in text and "epochs of this corpus" in text
    assert "codeparrot train --data corpus" in text
    # a slow device at a long budget: the compute-optimal size is past mini-qwen's
    fast = fake_measure({"mini-qwen": 8_000_000, "small-qwen": 3_000_000})
    long = gpu_plan(H100, minutes=120, vocab_size=VOCAB, given_steps=500, corpus_tokens=None,
                    measure=fast)  # fmt: skip
    assert long.preset == "small-qwen" and long.max_steps == 500 and not long.fills


def test_choose_preset_takes_the_larger_only_past_the_geometric_mean():
    small = Measurement("mini-qwen", 8, 1.0, 36_000_000, 6 * 36e6)
    large = Measurement("small-qwen", 8, 1.0, 100_000_000, 6 * 100e6)
    # compute-optimal N = sqrt(C / 120); the middle is 60M: C = 120 * 60M^2
    seconds = 120 * 60e6**2 / (large.tokens_per_s * large.flops_per_token)
    assert choose_preset([small, large], seconds * 0.9).preset == "mini-qwen"
    assert choose_preset([small, large], seconds * 1.1).preset == "small-qwen"


def test_the_cpu_plan_is_the_recipe_with_room_to_fill_the_budget():
    plan = cpu_plan(CPU, preset="tiny-qwen", batch_size=16, n_positions=None, given_steps=None,
                    corpus_tokens=None)  # fmt: skip
    assert plan.max_steps == 10_000 and plan.fills and plan.recipe_tokens == 4_096_000
    assert "the recipe is 1,000 steps (4.1M tokens)" in plan.describe()[0]
    capped = cpu_plan(CPU, preset="tiny-qwen", batch_size=16, n_positions=None,
                      given_steps=1000, corpus_tokens=None)  # fmt: skip
    assert capped.max_steps == 1000 and not capped.fills


def test_steady_tokens_per_s_leaves_out_the_compiled_first_window(tmp_path: Path):
    metrics = tmp_path / "metrics.jsonl"
    rates = [1000.0, 90_000.0, 100_000.0, 110_000.0]
    metrics.write_text("".join(json.dumps({"tokens_per_s": r}) + "\n" for r in rates))
    assert steady_tokens_per_s(metrics) == 100_000.0
    assert steady_tokens_per_s(tmp_path / "none.jsonl") is None


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def run_faked(tmp_path: Path, monkeypatch, device: Device, **settings: Any):
    """The quickstart with every step faked: what the train step was given."""
    clock = FakeClock(1000.0)
    seen: dict[str, Any] = {}

    def step(name: str):
        def run(cfg, interrupted=False, log=None, max_minutes=None, plan=None):
            if name == "train":
                seen.update(minutes=max_minutes, plan=plan)
                clock.now += max_minutes * 60
            else:
                clock.now += 10
            return {"corpus": {"output_bytes": 30e6, "train_files": 95, "valid_files": 5},
                    "tokenizer": {"chars_per_token": 3.0, "seconds": 10}}.get(name, {})  # fmt: skip

        return run

    steps = tuple((n, t, step(n), c) for n, t, _f, c in quickstart.STEPS)
    monkeypatch.setattr(quickstart, "STEPS", steps)
    monkeypatch.setattr(quickstart, "step_train", step("train"))
    measure = fake_measure({"mini-qwen": 800_000, "small-qwen": 300_000})

    def slow_measure(preset: str, batch: int) -> Measurement:
        clock.now += 15  # each preset's measurement takes 15 s of the budget
        return measure(preset, batch)

    cfg = QuickstartConfig(output=tmp_path / "qs", total_minutes=4, **settings)
    lines: list[str] = []
    quickstart.run_quickstart(cfg, log=lines.append, clock=clock, device=device,
                              measure=slow_measure, peak=lambda: 800e12)  # fmt: skip
    return seen, lines


def test_on_cuda_the_quickstart_trains_the_gpu_plan_within_its_minutes(tmp_path, monkeypatch):
    seen, lines = run_faked(tmp_path, monkeypatch, H100)
    plan = seen["plan"]
    assert plan.gpu and plan.preset == "mini-qwen" and plan.batch_size == 64
    assert plan.peak_flops == 800e12
    # 240 s less 20 s of corpus and tokenizer, 55 + 60 s kept: 1.75 min; less 30 s measuring
    assert seen["minutes"] == pytest.approx(1.25)
    assert any(line.startswith("GPU plan on NVIDIA H100") for line in lines)
    assert any("epochs of this corpus" in line for line in lines)
    # --no-gpu-plan: the CPU recipe on the same device
    seen, _ = run_faked(tmp_path, monkeypatch, H100, gpu_plan=False, force=True)
    assert seen["plan"].preset == "tiny-qwen" and not seen["plan"].gpu


def test_on_a_cpu_the_budget_decides_the_steps_unless_max_steps_caps_them(tmp_path, monkeypatch):
    seen, _ = run_faked(tmp_path, monkeypatch, CPU)
    # 4 epochs of 28.5M bytes at 3 chars a token, 4,096 tokens a step
    assert seen["plan"].max_steps == int(4 * 30e6 * 0.95 / 3 / 4096) and seen["plan"].fills
    # the training run is told the recipe's steps, so its plan line counts against them
    config = quickstart._train_config(QuickstartConfig(output=tmp_path / "qs"), plan=seen["plan"])
    assert config.max_steps == seen["plan"].max_steps and config.recipe_steps == 1000
    seen, _ = run_faked(tmp_path, monkeypatch, CPU, max_steps=1000, force=True)
    assert seen["plan"].max_steps == 1000 and not seen["plan"].fills
    capped = quickstart._train_config(QuickstartConfig(output=tmp_path / "qs"), plan=seen["plan"])
    assert capped.max_steps == 1000 and capped.recipe_steps is None


def _trained(**facts: Any) -> dict:
    base = {
        "step": 2000, "planned_steps": 2000, "max_steps": None, "recipe_steps": 1000,
        "recipe_tokens": 4_096_000, "designed_tokens": 4_096_000, "tokens_seen": 8_192_000,
        "tokens_per_s": 15_000.0, "minutes": 9.1, "parameters": 5_000_000, "eval_loss": 3.0,
        "perplexity": 20.0, "precision": {"mixed_precision": "bf16"},
    }  # fmt: skip
    return {"steps": {"train": {"status": "done", "facts": base | facts}}}


def test_the_summary_says_the_tokens_against_the_recipes_and_the_device():
    text = format_summary(QuickstartConfig(), _trained())
    assert (
        "2,000 of 2,000 planned steps (the recipe's 1,000, lengthened to fill the budget)" in text
    )
    assert "8.19M tokens (2.0x the recipe's 4.10M)" in text and "WARNING" not in text
    gpu = format_summary(QuickstartConfig(), _trained(
        preset="mini-qwen", device="NVIDIA H100 80GB HBM3 (80 GiB)", steady_tokens_per_s=9e5,
        flops_per_s=2e14, peak_flops=8e14, mfu=0.25))  # fmt: skip
    assert "model       mini-qwen:" in gpu
    assert "device NVIDIA H100 80GB HBM3 (80 GiB): 900,000 tokens/s steady" in gpu
    assert "200.0 TFLOP/s, MFU 25.0% of 800 TFLOP/s" in gpu


def test_the_summary_mfu_is_the_steady_rate_of_the_documented_flops_over_the_peak(tmp_path):
    """The GPU summary's MFU, from the run's own metrics: its steady tokens/s (the first
    window, which holds the compilation, left out) times 6N + 12·L·d·T over the product
    peak measured before training."""
    from types import SimpleNamespace

    from codeparrot.models.presets import get_preset
    from codeparrot.quickstart.plan import TrainingPlan

    rates = [9_000.0, 400_000.0, 420_000.0, 410_000.0]  # the first window compiles
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": 10 * i, "tokens_per_s": r}) + "\n" for i, r in enumerate(rates))
    )
    plan = TrainingPlan(device=Device("cuda", "NVIDIA H100 80GB HBM3", 80 * 2**30),
                        preset="mini-qwen", batch_size=64, n_positions=1024, max_steps=500,
                        recipe_steps=1000, fills=True, seq_length=1024, peak_flops=8e14)  # fmt: skip
    facts = quickstart._device_facts(plan, SimpleNamespace(parameters=36_000_000), tmp_path)
    shape = get_preset("mini-qwen")
    per_token = 6 * 36_000_000 + 12 * shape.n_layer * shape.n_embd * 1024
    assert facts["device"] == "NVIDIA H100 80GB HBM3 (80 GiB)"
    assert facts["steady_tokens_per_s"] == 410_000.0
    assert facts["flops_per_s"] == pytest.approx(410_000.0 * per_token)
    assert facts["mfu"] == pytest.approx(410_000.0 * per_token / 8e14) and facts["mfu"] < 1
    assert quickstart._device_facts(None, None, tmp_path) == {}  # no plan: nothing to say
