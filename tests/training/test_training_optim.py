"""Muon with AdamW, and the warmup-stable-decay schedule, in the real training loop."""

from __future__ import annotations

import itertools

import pytest
import torch

from codeparrot.training import train
from codeparrot.training.optim import build_optimizer, lr_factor
from tests.training.test_training_loop import corpus, read_weights, tiny_config  # noqa: F401


def test_wsd_holds_the_peak_then_decays_linearly_to_the_floor():
    f = [
        lr_factor(s, warmup_steps=10, max_steps=110, min_lr_ratio=0.1, schedule="wsd",
                  decay_fraction=0.2)
        for s in range(120)
    ]  # fmt: skip
    assert f[0] < f[9] < 1.0  # warmup
    assert all(x == 1.0 for x in f[10:88])  # stable until the last 20% (22 steps)
    assert f[88] == 1.0 and f[89] < 1.0 and f[109] == pytest.approx(0.1 + 0.9 / 22)
    assert all(a > b for a, b in itertools.pairwise(f[88:110]))
    assert f[110:] == [0.1] * 10


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    opt = build_optimizer(model, name="muon", lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    muon = {id(p) for g in opt.inner["muon"].param_groups for p in g["params"]}
    adamw = {id(p) for g in opt.inner["adamw"].param_groups for p in g["params"]}
    assert not muon & adamw
    assert muon | adamw == {id(p) for p in model.parameters()}
    assert id(model.transformer.h[0].attn.c_attn.weight) in muon
    for embedding in (model.transformer.wte.weight, model.transformer.wpe.weight):
        assert id(embedding) in adamw
    assert all(p.ndim == 2 for g in opt.inner["muon"].param_groups for p in g["params"])
    assert opt.param_groups[0] is opt.inner["adamw"].param_groups[0]  # a scheduler reaches both


def test_muon_trains_and_resumes_bitwise(tmp_path, corpus, tiny_checkpoint):  # noqa: F811
    settings = dict(optimizer="muon", schedule="wsd")
    full = train(tiny_config(corpus, tiny_checkpoint, tmp_path / "full", **settings))
    stopped = train(
        tiny_config(corpus, tiny_checkpoint, tmp_path / "split", max_tokens=3 * 4 * 64, **settings)
    )
    assert stopped.step == 3
    resumed = train(
        tiny_config(corpus, tiny_checkpoint, tmp_path / "split", resume=True, **settings)
    )
    assert resumed.resumed_from == 3 and resumed.step == 6
    a, b = read_weights(tmp_path / "full"), read_weights(tmp_path / "split")
    assert all(a[k].equal(b[k]) for k in a), "Muon's state did not survive the resume"
    assert full.eval_loss == resumed.eval_loss
    # the same run with AdamW (the schedule too: only the optimizer differs) ends elsewhere
    train(tiny_config(corpus, tiny_checkpoint, tmp_path / "adamw", optimizer="adamw",
                      schedule="wsd"))  # fmt: skip
    c = read_weights(tmp_path / "adamw")
    assert any(not a[k].equal(c[k]) for k in a)  # the optimizer really changed the run


@pytest.mark.parametrize("nesterov", [True, False])
def test_batched_muon_steps_exactly_as_torch_muon(nesterov):
    """The batched step is torch's Muon, bit for bit, and their checkpoints load in either."""
    from codeparrot.training.muon import BatchedMuon

    shapes = [(16, 48), (48, 16), (16, 48), (16, 16), (48, 16)]

    def make(cls):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(*s) * 0.02) for s in shapes]
        kwargs = dict(lr=1e-2, weight_decay=0.1, nesterov=nesterov, adjust_lr_fn="match_rms_adamw")
        return params, cls(params, **kwargs)

    ours, batched = make(BatchedMuon)
    ref, reference = make(torch.optim.Muon)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        for a, b in zip(ours, ref, strict=True):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        batched.step()
        reference.step()
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a, b)
    reloaded = BatchedMuon(ref, lr=1e-2)
    reloaded.load_state_dict(reference.state_dict())
    assert torch.equal(
        reloaded.state[ref[0]]["momentum_buffer"], reference.state[ref[0]]["momentum_buffer"]
    )


def test_newton_schulz_flops_count_what_the_orthogonalisation_multiplies():
    """The FLOP count behind bench/train.py's Muon floor is the products' own, for wide,
    tall and square matrices (a tall one is orthogonalised as its transpose)."""
    from torch.utils.flop_counter import FlopCounterMode

    from codeparrot.training.muon import _orthogonalize, newton_schulz_flops

    coefficients = (3.4445, -4.7750, 2.0315)
    for shape in [(16, 48), (48, 16), (32, 32)]:
        with FlopCounterMode(display=False) as counter:
            _orthogonalize(torch.randn(3, *shape), coefficients, 5, 1e-7, torch.float32)
        assert counter.get_total_flops() == newton_schulz_flops([shape] * 3, steps=5)


def test_batched_muon_is_torch_muon_at_gpt2_small_shapes():
    """At real widths a different memory layout of the stacked matrices changes which bf16
    kernels run, and the orthogonalisation amplifies their rounding: the batched step must
    keep torch's layouts (a tall matrix transposed as a view, not as a copy)."""
    from codeparrot.training.muon import BatchedMuon

    shapes = [(768, 3072), (3072, 768), (768, 3072), (3072, 768)]

    def stepped(cls):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(*s) * 0.02) for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        cls(params, lr=2e-3, weight_decay=0.1, adjust_lr_fn="match_rms_adamw").step()
        return params

    for a, b in zip(stepped(BatchedMuon), stepped(torch.optim.Muon), strict=True):
        assert torch.equal(a, b)
