"""The engine's lean decode path on a (tiny, random) Qwen3 checkpoint of the ``*-qwen``
presets' architecture, against ``transformers``' own forward and ``generate``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.qwen3 import Qwen3Decoder
from codeparrot.models.presets import ModelPreset, build_model

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"
TWO_LAYER_QWEN = ModelPreset(
    "test-qwen", 2, 2, 64, 128, 0.0, "test", 3e-3, architecture="qwen3", intermediate_size=176
)


@pytest.fixture(scope="module")
def qwen_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    from codeparrot.models.checkpoint import load_tokenizer, save_checkpoint

    tokenizer = load_tokenizer(tiny_checkpoint)
    model = build_model(TWO_LAYER_QWEN, tokenizer, seed=2)
    with torch.no_grad():  # weights far from the initialisation: peaked, distinct logits
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    out = tmp_path_factory.mktemp("qwen") / "checkpoint"
    save_checkpoint(model, tokenizer, out, {"step": 0, "tokens_seen": 0, "preset": "test-qwen"})
    return out


@pytest.fixture(scope="module")
def engine(qwen_checkpoint: Path) -> Engine:
    return Engine.load(qwen_checkpoint, dtype="float32", quantize="none", lean_load=False)


def test_lean_forward_matches_transformers(engine):
    model, decoder = engine.model, engine.decoder.lean
    assert isinstance(decoder, Qwen3Decoder)
    ids = torch.tensor([engine.tokenizer(PROMPT * 2)["input_ids"]])  # (1, T)
    T = ids.size(1)
    with torch.inference_mode():
        reference = model(ids).logits  # (1, T, V)
        whole = decoder.new_cache(1, T + 4)
        assert torch.allclose(decoder.forward(ids, whole), reference[:, -1], atol=1e-4)
        # a cached start, then a chunk of 7 positions, then one token at a time
        split = decoder.new_cache(1, T + 4)
        decoder.forward(ids[:, : T - 10], split)
        assert torch.allclose(
            decoder.forward(ids[:, T - 10 : T - 3], split), reference[:, T - 4], atol=1e-4
        )
        for t in range(T - 3, T):
            assert torch.allclose(
                decoder.forward(ids[:, t : t + 1], split), reference[:, t], atol=1e-4
            )
        # three rows sharing the prompt's keys/values, each with its own next token
        shared = decoder.new_cache(3, 2, prefix=whole.view(T))
        nexts = torch.tensor([[5], [17], [5]])
        rows = decoder.forward(nexts, shared)  # (3, V)
        for row, nxt in enumerate(nexts[:, 0].tolist()):
            alone = model(torch.cat([ids, torch.tensor([[nxt]])], dim=1)).logits[:, -1]
            assert torch.allclose(rows[row], alone[0], atol=1e-4)


def greedy_reference(engine: Engine, n: int) -> str:
    ids = torch.tensor([engine.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    with torch.inference_mode():
        out = engine.model.generate(
            ids, do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=0
        )
    return engine.tokenizer.decode(out[0, ids.size(1) :], skip_special_tokens=False)


def test_greedy_matches_transformers_generate(engine):
    config = GenerationConfig(temperature=0, max_new_tokens=24, stop_at_eos=False, heal=False)
    (ours,) = engine.generate(PROMPT, config)
    assert ours.text == greedy_reference(engine, 24).rstrip("\ufffd")
    assert ours.new_tokens == 24 and ours.finish_reason == "length"
    # sampled candidates: the lean path and transformers' forward draw the same tokens
    slow = Engine(engine.model, engine.tokenizer, lean_gpt2=False)
    assert slow.decoder.lean is None
    sampled = GenerationConfig(n=3, seed=5, temperature=0.7, max_new_tokens=16, stop=("\n",))
    assert [c.text for c in slow.generate(PROMPT, sampled)] == [
        c.text for c in engine.generate(PROMPT, sampled)
    ]


def test_int8_steps_stay_close_and_keep_the_greedy_text(qwen_checkpoint, engine, monkeypatch):
    from codeparrot.generation import gpt2
    from codeparrot.generation.gpt2 import int8_supported

    if not int8_supported():
        pytest.skip("this torch build has no int8 weight-only CPU kernel")
    # prompts on the full-precision weights, whatever the timing probe would answer on a
    # loaded machine (it decides whether prompts read the int8 copies)
    monkeypatch.setattr(gpt2, "int8_prompts_faster", lambda *args: False)
    quick = Engine.load(qwen_checkpoint, dtype="float32", quantize="int8")
    assert Engine.load(qwen_checkpoint, quantize="auto").quantize == "int8"  # on a CPU
    exact_dec, int8_dec = engine.decoder.lean, quick.decoder.lean
    assert exact_dec.int8 is None and int8_dec.int8 is not None
    ids = torch.tensor([engine.tokenizer(PROMPT * 2)["input_ids"]])
    T = ids.size(1)
    with torch.inference_mode():
        a, b = exact_dec.new_cache(2, T + 4), int8_dec.new_cache(2, T + 4)
        prompt = ids.expand(2, -1)
        # prompts run on the full-precision weights in both
        assert torch.equal(exact_dec.forward(prompt, a), int8_dec.forward(prompt, b, int8=True))
        for nxt in ([[5], [9]], [[17], [3]]):
            exact = exact_dec.forward(torch.tensor(nxt), a)
            approx = int8_dec.forward(torch.tensor(nxt), b, int8=True)
            spread = exact.amax(dim=-1) - exact.amin(dim=-1)
            error = (exact - approx).abs().amax(dim=-1)
            assert torch.all(error < 0.02 * spread), (error, spread)
            assert not torch.equal(exact, approx)  # the int8 weights were really used
    config = GenerationConfig(temperature=0, max_new_tokens=12, stop_at_eos=False, heal=False)
    (fast,) = quick.generate(PROMPT, config)
    (full,) = engine.generate(PROMPT, config)
    assert fast.new_tokens == 12 and fast.text == full.text


def test_bf16_prefill_stays_close(engine):
    decoder = engine.decoder.lean
    ids = torch.tensor([engine.tokenizer(PROMPT * 2)["input_ids"]])
    with torch.inference_mode():
        exact = decoder.forward(ids, decoder.new_cache(1, ids.size(1)))
        approx = decoder.forward(ids, decoder.new_cache(1, ids.size(1)), bf16=True)
    assert approx.dtype == torch.float32
    assert not torch.equal(approx, exact)  # bf16 products ran (they round)
    spread = exact.amax() - exact.amin()
    assert (approx - exact).abs().amax() < 0.02 * spread
    assert approx.argmax() == exact.argmax()
