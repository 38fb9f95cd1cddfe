"""``bench/muon.py``: Muon's step alone, ours against torch's, on a preset's matrices."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_muon():
    spec = importlib.util.spec_from_file_location("bench_muon", ROOT / "bench" / "muon.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_matrices_are_those_muon_gets_in_training(bench_muon):
    shapes = bench_muon.hidden_shapes("small")
    assert len(shapes) == 48  # per block: attention in and out, MLP up and down
    assert sorted(set(shapes)) == [(768, 768), (768, 2304), (768, 3072), (3072, 768)]
    qwen = bench_muon.hidden_shapes("tiny-qwen")
    assert len(qwen) == 28 and (256, 256) in qwen  # 4 blocks of q, k, v, o, gate, up, down


def test_the_timed_sides_step_alike_and_a_different_one_is_caught(bench_muon):
    import torch

    sides = bench_muon.muon_pair([(8, 24), (24, 8), (8, 8)], "cpu")
    assert bench_muon.steps_apart(sides) == 0.0  # bit for bit on a CPU
    sides = bench_muon.muon_pair([(8, 24), (24, 8)], "cpu")
    sides["torch"].param_groups[0]["lr"] *= 2  # a different update
    assert bench_muon.steps_apart(sides) > 1e-2
    assert isinstance(sides["batched"], torch.optim.Muon)
