"""``bench/train.py``'s diagnostics for a device run: graph breaks and where a step's time goes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_train():
    import sys

    sys.path.insert(0, str(ROOT / "bench"))  # as when run as a script: its peers beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_train", ROOT / "bench" / "train.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    yield module


@pytest.fixture(scope="module")
def train_profile(bench_train):
    import sys

    return sys.modules["train_profile"]  # imported by bench/train.py, beside it


def test_a_step_that_splits_its_compiled_graph_is_named(bench_train):
    import torch

    def whole(x):
        return (x * 2).sum()

    def split(x):
        y = x * 2
        print("", end="")  # dynamo cannot trace print: the graph breaks here
        return y.sum()

    before = bench_train._graph_breaks()
    torch.compile(whole)(torch.ones(3))
    assert bench_train._breaks_since(before) == "; no graph break"
    before = bench_train._graph_breaks()
    torch.compile(split)(torch.ones(3))
    said = bench_train._breaks_since(before)
    assert said.startswith("; 1 graph breaks (first: ") and "print" in said


def test_profiling_names_each_steps_heaviest_operators(bench_train, capsys):
    import torch

    a = torch.randn(64, 64)

    def matmuls():
        for _ in range(4):
            a @ a

    sides = bench_train.profile_steps({"ours": matmuls, "peer": lambda: a + a}, cuda=False, n=2,
                                      top=3)  # fmt: skip
    out = capsys.readouterr().out
    ours, peer = out.split("peer: 2 steps profiled")
    assert "ours: 2 steps profiled; the host queued them in" in ours and "aten::mm" in ours
    assert "aten::add" in peer.split("CPU time a step by kind")[0] and "aten::mm" not in peer
    # then one table of both sides by kind: the products are ours only
    assert "CPU time a step by kind (ms) | ours | peer" in peer
    assert sides["ours"]["matrix products"] > 0 and sides["peer"]["matrix products"] == 0
    assert sides["peer"]["other"] > 0 and sides["ours"]["kernels"] >= 4 > sides["peer"]["kernels"]


def test_kernels_are_told_apart_by_kind(train_profile):
    """Kernel names as an H200 profile prints them (cuBLAS, cuDNN's attention, inductor's
    Triton kernels, fused AdamW) and a CPU's operators."""
    kind = train_profile.kind_of
    assert kind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas") == (
        "matrix products"
    )
    assert kind("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT") == "matrix products"
    assert kind("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7") == (
        "attention"
    )
    assert kind("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>") == (
        "attention"
    )
    assert kind("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_3") == "fused by the compiler"
    assert kind("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
                "FusedAdamMathFunctor>") == "optimizer and clipping"  # fmt: skip
    assert kind("Memcpy HtoD (Pinned -> Device)") == "copies and casts"
    assert kind("aten::mm") == "matrix products" and kind("aten::addmm") == "matrix products"
    assert kind("aten::add") == "other" and kind("aten::mean") == "other"


def test_device_time_is_counted_once_a_kernel(train_profile):
    """On CUDA a host operator carries its kernels' device time again, and an annotation
    spans many kernels: only the kernels count, per step."""
    from types import SimpleNamespace as Event

    import torch

    cpu, gpu = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA

    def event(key, device, us, count=1, note=False):
        return Event(key=key, device_type=device, self_device_time_total=us,
                     self_cpu_time_total=5.0, count=count, is_user_annotation=note)  # fmt: skip

    events = [
        event("aten::mm", cpu, 3000.0, count=2),  # launched the gemm below
        event("sm90_xmma_gemm_bf16bf16_bf16f32", gpu, 3000.0, count=2),
        event("triton_poi_fused_add_0", gpu, 1000.0, count=4),
        event("## Call CompiledFxGraph ##", gpu, 9000.0, note=True),
        event("Optimizer.step#AdamW.step", gpu, 7000.0),  # a span a trace may not mark
    ]
    kinds = train_profile.time_by_kind(events, cuda=True, steps=2)
    assert kinds["matrix products"] == 1.5 and kinds["fused by the compiler"] == 0.5
    assert kinds["kernels"] == 3 and sum(v for k, v in kinds.items() if k != "kernels") == 2.0


@pytest.mark.parametrize(
    "preset,peers", [("small", ["peer"]), ("small-qwen", ["peer", "same-model peer"])]
)
def test_the_same_model_peer_is_built_for_qwen3_presets_only(
    bench_train, monkeypatch, preset, peers
):
    from argparse import Namespace

    monkeypatch.setattr(bench_train, "peer_step_fn", lambda preset: lambda: None)
    monkeypatch.setattr(bench_train, "same_model_peer_step_fn", lambda preset, opt: lambda: None)
    args = Namespace(optimizers=["adamw"], precisions=[], fused_kernels=[None], baseline=False,
                     peer=True, preset=preset, warmup=1, compile=False)  # fmt: skip
    steps, runs = bench_train._build_steps(args, None)
    assert sorted(steps) == peers and runs == {}


def test_each_kernel_variant_runs_with_its_own_rotary_embedding(bench_train, monkeypatch):
    """Liger's rotary embedding replaces transformers' for the whole process: a variant
    without it must not run with the one an earlier variant installed."""
    from transformers.models.qwen3 import modeling_qwen3

    monkeypatch.setattr(modeling_qwen3, "apply_rotary_pos_emb", modeling_qwen3.apply_rotary_pos_emb)
    stock, seen = bench_train._rope(), []
    liger = bench_train._with_rope(lambda: seen.append(modeling_qwen3.apply_rotary_pos_emb), len)
    plain = bench_train._with_rope(lambda: seen.append(modeling_qwen3.apply_rotary_pos_emb), stock)
    liger(), plain(), liger()
    assert seen == [len, stock, len]


def test_accumulated_micro_batches_all_reach_the_one_optimizer_step(
    bench_train, monkeypatch, tmp_path
):
    """``--accumulate 3``: our real training step reads three micro-batches for one optimizer
    step (so a fixed cost an optimizer step weighs as in training), and tokens/s counts all."""
    monkeypatch.setattr(bench_train, "ACCUMULATE", 3)
    monkeypatch.setattr(bench_train, "BATCH", 2)
    monkeypatch.setattr(bench_train, "BLOCK", 16)
    monkeypatch.setattr(bench_train, "VOCAB", 512)
    step, run = bench_train.ours_step_fn(tmp_path, compile=False, optimizer="muon", preset="tiny")
    optimizer_steps = []
    run.optimizer.optimizer.register_step_post_hook(lambda *a: optimizer_steps.append(1))
    reads = run.state.batches.source.i
    step()
    assert len(optimizer_steps) == 1 and run.state.batches.source.i - reads == 3 * 2
    clock = iter([0.0, 2.0])
    monkeypatch.setattr(bench_train.time, "perf_counter", lambda: next(clock))
    assert bench_train.tokens_per_s(lambda: None, steps=1) == 3 * 2 * 16 / 2.0
    floor = bench_train.muon_floor(run)
    assert "of the step's" in floor and "(96 tokens)" in floor


def test_a_synchronising_call_is_placed_in_the_code_that_made_it(train_profile):
    """A device run names where a step waits for the device, not only how often."""
    import warnings

    def optimizer_step():
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)

    def step():
        warnings.warn("something else", stacklevel=1)
        optimizer_step()

    places = train_profile.warned_at(step, "synchroniz")
    assert len(places) == 1
    assert places[0].startswith("test_bench_train.py:") and "optimizer_step <- " in places[0]
    assert places[0].split(" <- ")[1].endswith(" step")


def test_a_side_that_fails_before_timing_is_named_and_the_others_still_run(
    bench_train, monkeypatch, capsys
):
    """One side that cannot be built or compiled on the device (a kernel, an optimizer an
    older torch lacks, an out-of-memory) costs its own figures only: the others are timed
    and compared, and the report names what is missing."""
    from argparse import Namespace
    from types import SimpleNamespace

    def no_muon(preset, optimizer):
        raise RuntimeError("torch.optim.Muon: not in this torch")

    monkeypatch.setattr(bench_train, "peer_step_fn", lambda preset: lambda: None)
    monkeypatch.setattr(bench_train, "same_model_peer_step_fn", no_muon)
    args = Namespace(optimizers=["adamw"], precisions=[], fused_kernels=[None], baseline=False,
                     peer=True, preset="small-qwen", warmup=1, compile=False)  # fmt: skip
    steps, runs = bench_train._build_steps(args, None)
    assert sorted(steps) == ["peer"] and runs == {}
    assert "same-model peer FAILED before timing, left out: RuntimeError: torch.optim.Muon" in (
        capsys.readouterr().out
    )
    # the report over what ran: ours with AdamW, its Muon side failed, and the peer
    run = SimpleNamespace(flops_per_token=1e6, precision=SimpleNamespace(mixed_precision="bf16"))
    args = Namespace(optimizers=["adamw", "muon"], precisions=["bf16"], preset="small-qwen")
    rates = {"ours bf16 adamw": [2.0, 2.0], "peer": [4.0, 4.0]}
    bench_train._report(args, rates, {"no": [1e12], "bf16": [2e12]}, {"ours bf16 adamw": run},
                        {"peer": lambda: None})  # fmt: skip
    assert "ours bf16 adamw / peer: median of per-round ratios 0.50x" in capsys.readouterr().out
