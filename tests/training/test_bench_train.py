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

    bench_train.profile_steps({"ours": matmuls, "peer": lambda: a + a}, n=2, top=3)
    out = capsys.readouterr().out
    ours, peer = out.split("peer: 2 steps profiled")
    assert "ours: 2 steps profiled; the host queued them in" in ours and "aten::mm" in ours
    assert "aten::add" in peer and "aten::mm" not in peer


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


def test_a_synchronising_call_is_placed_in_the_code_that_made_it(bench_train):
    """A device run names where a step waits for the device, not only how often."""
    import warnings

    def optimizer_step():
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)

    def step():
        warnings.warn("something else", stacklevel=1)
        optimizer_step()

    places = bench_train.warned_at(step, "synchroniz")
    assert len(places) == 1
    assert places[0].startswith("test_bench_train.py:") and "optimizer_step <- " in places[0]
    assert places[0].split(" <- ")[1].endswith(" step")
