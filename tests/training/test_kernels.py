"""Fused kernels: applied only on CUDA with liger-kernel installed, for Qwen3 and Llama;
otherwise nothing changes and the reason is given. A fake Liger module stands in for the
real one (which needs Triton and a GPU)."""

from __future__ import annotations

import sys
import types

import pytest

from codeparrot.training.kernels import KERNELS, apply_fused_kernels


class Device:
    def __init__(self, type: str) -> None:
        self.type = type


def model_of(model_type: str):
    return types.SimpleNamespace(config=types.SimpleNamespace(model_type=model_type))


@pytest.fixture
def fake_liger(monkeypatch):
    calls: list[tuple[str, dict]] = []
    package = types.ModuleType("liger_kernel")
    module = types.ModuleType("liger_kernel.transformers")
    for name in ("qwen3", "llama"):

        def patch(model=None, _name=name, **kernels):
            calls.append((_name, {"model": model, **kernels}))

        setattr(module, f"apply_liger_kernel_to_{name}", patch)
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", module)
    return calls


def test_without_liger_nothing_is_applied_and_the_reason_is_said(monkeypatch):
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # import fails
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", None)
    said: list[str] = []
    assert apply_fused_kernels(model_of("qwen3"), Device("cuda"), log=said.append) == []
    assert "liger-kernel is not installed" in said[0] and "codeparrot[gpu]" in said[0]


def test_with_liger_qwen3_and_llama_get_every_kernel_on_cuda(fake_liger):
    model = model_of("qwen3")
    assert apply_fused_kernels(model, Device("cuda")) == list(KERNELS)
    assert apply_fused_kernels(model_of("llama"), "cuda") == list(KERNELS)
    (name, kwargs), (other, _) = fake_liger
    assert (name, other) == ("qwen3", "llama") and kwargs["model"] is model
    assert all(kwargs[k] is True for k in KERNELS)


def test_not_on_a_cpu_nor_for_gpt2(fake_liger):
    said: list[str] = []
    assert apply_fused_kernels(model_of("qwen3"), Device("cpu"), log=said.append) == []
    assert apply_fused_kernels(model_of("gpt2"), Device("cuda"), log=said.append) == []
    assert "CUDA only (the device is cpu)" in said[0] and "gpt2 architecture" in said[1]
    assert fake_liger == []


def test_a_chosen_subset_is_applied_and_the_rest_left_alone(fake_liger):
    said: list[str] = []
    chosen = ["rms_norm", "swiglu"]
    assert apply_fused_kernels(model_of("qwen3"), Device("cuda"), said.append, chosen) == chosen
    ((_, kwargs),) = fake_liger
    assert {k for k in KERNELS if kwargs[k]} == set(chosen)
    assert kwargs["fused_linear_cross_entropy"] is False and kwargs["rope"] is False
    assert said == ["fused kernels (Liger): rms_norm, swiglu"]
    assert apply_fused_kernels(model_of("qwen3"), Device("cuda"), said.append, ["none"]) == []
    assert said[-1] == "fused kernels: none (--fused-kernels none)" and len(fake_liger) == 1


def test_the_flag_names_known_kernels_and_none_alone(tmp_path):
    from codeparrot.errors import ConfigError
    from codeparrot.training import TrainConfig

    common = {"data": tmp_path, "tokenizer": tmp_path, "output": tmp_path / "run"}
    config = TrainConfig(**common, fused_kernels=("rope", "swiglu"))
    assert config.fused_kernels == ("rope", "swiglu")
    with pytest.raises(ConfigError, match="--fused-kernels: every value must be one of"):
        TrainConfig(**common, fused_kernels=("rope", "flash"))
    with pytest.raises(ConfigError, match="'none' goes alone"):
        TrainConfig(**common, fused_kernels=("none", "rope"))


def test_models_built_later_in_the_process_stay_stock(monkeypatch):
    """Liger swaps the modeling module's classes (for models built afterwards) as well as
    patching the model it is given; the classes are put back, its rotary embedding kept."""
    from transformers.models.qwen3 import modeling_qwen3

    stock = {n: getattr(modeling_qwen3, n) for n in ("Qwen3RMSNorm", "Qwen3MLP")}
    stock_rope = modeling_qwen3.apply_rotary_pos_emb
    for name, value in {**stock, "apply_rotary_pos_emb": stock_rope}.items():
        monkeypatch.setattr(modeling_qwen3, name, value)  # restored after the test

    def patch(model=None, **kernels):  # what apply_liger_kernel_to_qwen3 does to the module
        modeling_qwen3.Qwen3RMSNorm = modeling_qwen3.Qwen3MLP = object
        modeling_qwen3.apply_rotary_pos_emb = len

    module = types.ModuleType("liger_kernel.transformers")
    module.apply_liger_kernel_to_qwen3 = patch
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", module)
    assert apply_fused_kernels(model_of("qwen3"), Device("cuda")) == list(KERNELS)
    assert {n: getattr(modeling_qwen3, n) for n in stock} == stock
    assert modeling_qwen3.apply_rotary_pos_emb is len  # attention reads it at every call
