"""The MFU a run reports: the FLOP count, the peak it is measured against, and the steady
rate apart from compilation."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from codeparrot.training import train
from codeparrot.training.flops import (
    CUDA_PEAK_N,
    datasheet_peak_flops,
    flops_per_token,
    measure_peaks,
    mfu,
    peak_flops,
)

from .test_training_loop import tiny_config, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989),
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA H100 NVL", 835),
        ("NVIDIA H200", 989),
        ("NVIDIA A100-SXM4-80GB", 312),
        ("NVIDIA A100-PCIE-40GB", 312),
        ("NVIDIA L4", 121),
        ("NVIDIA L40S", 362),
        ("NVIDIA L40", 181),
        ("NVIDIA GeForce RTX 4090", 165),
    ],
)
def test_datasheet_peak_by_device_name(name, tflops):
    assert datasheet_peak_flops(name) == tflops * 1e12


def test_an_unknown_device_has_no_datasheet_peak():
    assert datasheet_peak_flops("AMD EPYC 9R14") is None
    assert datasheet_peak_flops(None) is None


def test_mfu_is_a_fraction_never_above_one():
    assert mfu(422e12, 782e12) == pytest.approx(0.54, abs=0.01)
    assert mfu(3e15, 782e12) == 1.0  # a peak measured too small cannot report 300%


def test_the_cuda_peak_is_measured_in_a_product_that_fills_the_device(monkeypatch):
    import codeparrot.training.flops as flops

    sizes = []

    def fake(seconds=1.0, n=1024, dtype="bfloat16", device="cpu"):
        sizes.append((n, dtype, device))
        return {"bfloat16": 7.8e14, "float32": 5e13}[dtype]

    monkeypatch.setattr(flops, "measure_peak_flops", fake)
    monkeypatch.setattr(flops, "device_name", lambda _type: "NVIDIA H200")
    choice = SimpleNamespace(device="cuda", mixed_precision="bf16", bf16_fast=True)
    assert measure_peaks(choice) == {"bfloat16": 7.8e14, "float32": 5e13}
    assert sizes[0] == (CUDA_PEAK_N, "bfloat16", "cuda") and CUDA_PEAK_N >= 8192
    assert sizes[1] == (CUDA_PEAK_N, "float32", "cuda")
    said = []
    peaks = peak_flops(choice, said.append, None)
    # a bf16 run's MFU is over the bf16 product's peak, not fp32's (which would read 15x)
    assert peaks.measured == 7.8e14 and peaks.datasheet == 989e12
    assert "NVIDIA H200" in said[0] and "datasheet dense bf16 989.0 TFLOP/s" in said[0]
    assert "MFU is measured against the bf16 peak" in said[0]
    fp32 = peak_flops(SimpleNamespace(device="cuda", mixed_precision="no", bf16_fast=True),
                      said.append, None)  # fmt: skip
    assert fp32.measured == 5e13 and "against the fp32 peak" in said[-1]
    # on a CPU the product stays small (an emulated bf16 takes seconds)
    sizes.clear()
    measure_peaks(SimpleNamespace(device="cpu", mixed_precision="no", bf16_fast=False))
    assert [n for n, _, _ in sizes] == [1024, 256]


def test_a_run_reports_its_steady_rate_and_mfu_apart_from_warm_up(
    tmp_path,
    corpus,
    tiny_checkpoint,
):
    result = train(tiny_config(corpus, tiny_checkpoint, tmp_path / "run", eval_every=0))
    assert result.step == 6
    assert result.steady_tokens_per_s is not None and result.steady_tokens_per_s > 0
    assert result.compile_seconds is not None and result.compile_seconds >= 0
    assert result.peak_flops == 1e12  # --peak-tflops 1 in tiny_config
    from transformers import AutoModelForCausalLM

    fpt = flops_per_token(AutoModelForCausalLM.from_pretrained(tmp_path / "run"), 64)
    assert result.flops_per_s == pytest.approx(result.steady_tokens_per_s * fpt)
    assert 0 < result.mfu <= 1 and math.isclose(
        result.mfu, min(1.0, result.flops_per_s / 1e12), rel_tol=1e-9
    )
    assert result.device_name and result.datasheet_peak_flops is None  # a CPU


def test_the_train_step_reads_nothing_back_from_the_device(
    tmp_path,
    corpus,
    tiny_checkpoint,
    monkeypatch,
):
    """Between --log-every steps the step and the budget check queue work and return: no
    .item() or float() of a tensor (each waits for the device), also under --max-minutes."""
    import torch

    import codeparrot.training.loop as loop

    inside, reads = [False], []
    real_step, real_item, real_float = loop.train_step, torch.Tensor.item, torch.Tensor.__float__

    def watched(function):
        def call(*args):
            inside[0] = True
            try:
                return function(*args)
            finally:
                inside[0] = False

        return call

    def item(self):
        reads.append(inside[0])
        return real_item(self)

    def as_float(self):
        reads.append(inside[0])
        return real_float(self)

    monkeypatch.setattr(loop, "train_step", watched(real_step))
    monkeypatch.setattr(loop, "stop_reason", watched(loop.stop_reason))
    monkeypatch.setattr(torch.Tensor, "item", item)
    monkeypatch.setattr(torch.Tensor, "__float__", as_float)
    config = tiny_config(
        corpus,
        tiny_checkpoint,
        tmp_path / "run",
        eval_every=0,
        log_every=100,
        max_minutes=10,
        plan=False,
    )
    train(config)
    assert not any(reads)


def test_a_batch_reaches_a_cuda_device_without_making_the_host_wait(monkeypatch):
    """On CUDA a batch is copied from pinned memory with non_blocking (a pageable copy
    synchronises the stream each step); on a CPU it is the host array's tensor."""
    import numpy as np
    import torch

    from codeparrot.training.steps import batch_to_device

    calls = []
    real_to = torch.Tensor.to

    def pin_memory(self):
        calls.append("pin")
        return self.clone()

    def to(self, *args, **kwargs):
        if args and getattr(args[0], "type", None) == "cuda":
            calls.append(("to", args[0].type, kwargs.get("non_blocking", False)))
            return self
        return real_to(self, *args, **kwargs)

    batch = np.arange(12, dtype=np.int64).reshape(3, 4)
    on_cpu = batch_to_device(batch, torch.device("cpu"))
    assert on_cpu.dtype == torch.int64 and on_cpu.tolist() == batch.tolist() and not calls
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    on_gpu = batch_to_device(batch, torch.device("cuda"))
    assert calls == ["pin", ("to", "cuda", True)]
    assert on_gpu.tolist() == batch.tolist()


def test_several_processes_compare_clocks_only_every_few_steps():
    """With --max-minutes, processes agree on stopping through a reduce that waits for the
    device: made on the same steps everywhere, every CLOCK_EVERY steps, not every step."""
    import torch

    from codeparrot.training.steps import CLOCK_EVERY, stop_reason

    reduced = []

    def reduce(tensor, how):
        reduced.append(run.state.step)
        return tensor

    run = SimpleNamespace(
        config=SimpleNamespace(max_tokens=None, max_minutes=1.0),
        state=SimpleNamespace(step=0, tokens_seen=0, plan=SimpleNamespace(steps=1000)),
        accelerator=SimpleNamespace(num_processes=2, device=torch.device("cpu"), reduce=reduce),
    )
    said = {}
    for step in range(1, 3 * CLOCK_EVERY + 1):
        run.state.step = step
        said[step] = stop_reason(run, seconds=61.0 if step > CLOCK_EVERY + 2 else 1.0)
    assert reduced == [CLOCK_EVERY, 2 * CLOCK_EVERY, 3 * CLOCK_EVERY]
    stopped = [step for step, why in said.items() if why == "max_minutes"]
    assert stopped == [2 * CLOCK_EVERY, 3 * CLOCK_EVERY]  # the first compared step past it
    run.accelerator.num_processes = 1
    run.state.step = CLOCK_EVERY + 3
    assert stop_reason(run, seconds=61.0) == "max_minutes"  # one process: every step


def test_the_end_of_run_line_gives_the_steady_rate_and_compile_time_apart():
    from codeparrot.training.cli import speed_line

    result = SimpleNamespace(
        device_name="NVIDIA H200", steady_tokens_per_s=281_198.0, compile_seconds=52.5,
        tokens_per_s=43_889.0, flops_per_s=2.0e14, mfu=0.256, peak_flops=7.82e14,
        datasheet_peak_flops=989e12,
    )  # fmt: skip
    line = speed_line(result)
    assert line.startswith("NVIDIA H200: 281,198 tokens/s steady")
    assert "52.5 s longer (compilation, warm-up)" in line and "43,889 tokens/s over" in line
    assert "MFU 25.6% of the measured 782.0 TFLOP/s (datasheet 989.0 TFLOP/s)" in line
