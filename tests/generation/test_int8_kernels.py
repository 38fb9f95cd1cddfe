"""The int8 kernels of the lean decoders' one-token steps: the dynamic one (torch's
``quantized::linear_dynamic``, fbgemm on x86) where it is chosen, the weight-only one
(``aten._weight_int8pack_mm``) where it is not or the dynamic one is missing, and either
keeping every family's logits close for batches of up to ``INT8_MAX_ROWS`` rows that
share a prompt."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from torch.profiler import profile

from codeparrot.generation import int8
from codeparrot.generation.int8 import INT8_MAX_ROWS, KERNELS, kernel_supported
from codeparrot.generation.lean import lean_decoder

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import sharp_random_model

V = 96  # vocabulary of the tiny models
SMALL = {"num_hidden_layers": 2, "max_position_embeddings": 64, "vocab_size": V}


def _model(family: str) -> torch.nn.Module:
    """A two-layer random model of ``family``, its matrices scaled so that its logits
    are peaked (a random init's are near-uniform)."""
    llama = dict(SMALL, hidden_size=64, intermediate_size=96, num_attention_heads=4)
    configs = {
        "gpt2": tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=V),
        "gpt_bigcode": tf.GPTBigCodeConfig(
            n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=V, multi_query=True
        ),
        "qwen2": tf.Qwen2Config(**llama, num_key_value_heads=2),  # biased q/k/v, SwiGLU
        "starcoder2": tf.Starcoder2Config(  # LayerNorm, plain MLP, biases everywhere
            **llama, num_key_value_heads=2, hidden_act="gelu_pytorch_tanh"
        ),
        "qwen3": tf.Qwen3Config(**llama, num_key_value_heads=2, head_dim=16),
    }
    return sharp_random_model(configs[family])


def _ops(decoder, ids: torch.Tensor, cache) -> set[str]:
    """The operator names one int8 step of ``ids`` runs."""
    with torch.inference_mode(), profile() as prof:
        decoder.forward(ids, cache, int8=True)
    return {e.name for e in prof.events()}


def _prompt(decoder, rows: int):
    """A shared 9-token prompt prefilled once, and a cache of ``rows`` rows after it."""
    prompt = decoder.new_cache(1, 9)
    with torch.inference_mode():
        decoder.forward(torch.arange(3, 12)[None], prompt)
    return decoder.new_cache(rows, 3, prefix=prompt.view(9))


@pytest.mark.skipif(not kernel_supported("dynamic"), reason="no dynamic int8 kernel here")
def test_the_dynamic_kernel_is_the_one_taken_where_the_probe_chooses_it(monkeypatch, caplog):
    monkeypatch.setattr(int8, "measure_kernels", lambda m: {"dynamic": 1.0, "weight-only": 3.0})
    decoder = lean_decoder(_model("gpt_bigcode"))
    with caplog.at_level(logging.INFO, logger="codeparrot.generation.int8"):
        decoder.quantize_int8()
    assert decoder.int8_kernel == "dynamic"
    assert any("the dynamic kernel" in r.getMessage() for r in caplog.records)
    ops = _ops(decoder, torch.tensor([[5], [7]]), _prompt(decoder, 2))
    assert "quantized::linear_dynamic" in ops and "aten::_weight_int8pack_mm" not in ops


@pytest.mark.skipif(not kernel_supported("weight-only"), reason="no weight-only int8 kernel")
@pytest.mark.parametrize("why", ["probe", "missing"])
def test_the_weight_only_kernel_where_it_is_faster_or_the_dynamic_one_is_missing(
    monkeypatch, why: str
) -> None:
    if why == "probe":  # both exist; the weight-only one measured faster
        monkeypatch.setattr(int8, "kernel_supported", lambda k: True)
        monkeypatch.setattr(int8, "measure_kernels", lambda m: {"dynamic": 3.0, "weight-only": 1.0})
    else:  # a torch build without quantized::linear_dynamic
        monkeypatch.setattr(int8, "kernel_supported", lambda k: k == "weight-only")
        monkeypatch.setattr(int8, "measure_kernels", lambda m: pytest.fail("nothing to measure"))
    decoder = lean_decoder(_model("qwen2"))
    decoder.quantize_int8()
    assert decoder.int8_kernel == "weight-only"
    ops = _ops(decoder, torch.tensor([[5]]), _prompt(decoder, 1))
    assert "aten::_weight_int8pack_mm" in ops and "quantized::linear_dynamic" not in ops
    if why == "missing":
        with pytest.raises(RuntimeError, match="no dynamic int8 CPU kernel"):
            lean_decoder(_model("qwen2")).quantize_int8("dynamic")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("family", ["gpt2", "gpt_bigcode", "qwen2", "starcoder2", "qwen3"])
def test_int8_steps_of_every_family_stay_close_for_up_to_the_most_rows(family, kernel):
    """n samples of one prompt (up to INT8_MAX_ROWS rows): each row's int8 logits stay
    close to the exact ones, from the kernel asked for. Weight-only: within 2% of their
    spread (measured up to 1.5% here). Dynamic: within 4%, as it also rounds the
    activations, with one scale over all the rows (measured up to 2.3% with 8-bit
    activations, 3.8% with 7-bit ones)."""
    bound = 0.02 if kernel == "weight-only" else 0.04
    if not kernel_supported(kernel):
        pytest.skip(f"no {kernel} int8 kernel in this torch build")
    model = _model(family)
    exact, quick = lean_decoder(model), lean_decoder(model)
    quick.quantize_int8(kernel)
    assert quick.int8_kernel == kernel
    for rows in (1, 5, INT8_MAX_ROWS):
        a, b = _prompt(exact, rows), _prompt(quick, rows)
        tokens = torch.randint(0, V, (rows, 1), generator=torch.Generator().manual_seed(rows))
        with torch.inference_mode():
            for _ in range(2):  # the second step reads the first's keys/values too
                full = exact.forward(tokens, a)
                approx = quick.forward(tokens, b, int8=True)
                spread = full.amax(dim=-1) - full.amin(dim=-1)
                error = (full - approx).abs().amax(dim=-1)
                assert torch.all(error < bound * spread), (rows, error / spread)
                assert not torch.equal(full, approx)  # the int8 weights were really used
                tokens = full.argmax(dim=-1, keepdim=True)


@pytest.mark.skipif(not kernel_supported("dynamic"), reason="no dynamic int8 kernel here")
def test_compiling_leaves_the_dynamic_kernels_steps_eager(monkeypatch, caplog) -> None:
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled"))
    decoder = lean_decoder(_model("gpt2"))
    decoder.quantize_int8("dynamic")
    with caplog.at_level(logging.INFO, logger="codeparrot.generation.gpt2"):
        decoder.compile_steps()
    assert decoder._compiled is None
    assert any("compiled steps skipped" in r.getMessage() for r in caplog.records)


def test_an_unknown_kernel_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="int8 kernel 'int4'"):
        lean_decoder(_model("gpt2")).quantize_int8("int4")


@pytest.mark.skipif(not kernel_supported("dynamic"), reason="no dynamic int8 kernel here")
def test_dynamic_products_round_each_row_alike_whatever_rows_come_with_it() -> None:
    """A prompt read in two pieces (the prompt cache's reuse) gets the same products as
    read whole: a row's rounding does not depend on the other rows'."""
    gen = torch.Generator().manual_seed(0)
    m = int8.quantize_matrix(torch.randn(48, 64, generator=gen), torch.randn(48), "dynamic")
    x = torch.randn(9, 64, generator=gen) * torch.logspace(-2, 1, 9)[:, None]
    x[:4] = x[:4].abs()  # the first piece has no negative value at all
    whole = int8.int8_linear(x, m)
    pieces = torch.cat([int8.int8_linear(x[:4], m), int8.int8_linear(x[4:], m)])
    assert torch.equal(whole, pieces)


def _prompt_logits(decoder, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return decoder.forward(ids, decoder.new_cache(1, ids.size(1)))


@pytest.mark.skipif(not kernel_supported("dynamic"), reason="no dynamic int8 kernel here")
@pytest.mark.parametrize("family", ["gpt2", "gpt_bigcode", "qwen2", "starcoder2", "qwen3"])
def test_prompts_read_the_int8_copies_where_the_probe_finds_them_faster(
    family, monkeypatch, caplog
) -> None:
    model = _model(family)
    exact, quick = lean_decoder(model), lean_decoder(model)
    quick.quantize_int8("dynamic")
    monkeypatch.setattr(int8, "measure_prompt_products", lambda *a: {"dense": 9.0, "int8": 6.0})
    with caplog.at_level(logging.INFO, logger="codeparrot.generation.int8"):
        quick.choose_int8_prompts(bf16=False)
    assert quick.int8_prompts
    assert any("int8 prompts: yes" in r.getMessage() for r in caplog.records)
    ids = torch.randint(0, V, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), profile() as prof:
        quick.forward(ids, quick.new_cache(1, 24))
    assert "quantized::linear_dynamic" in {e.name for e in prof.events()}
    full, approx = _prompt_logits(exact, ids), _prompt_logits(quick, ids)
    spread = full.amax(dim=-1) - full.amin(dim=-1)
    assert torch.all((full - approx).abs().amax(dim=-1) < 0.04 * spread)
    assert not torch.equal(full, approx)


@pytest.mark.skipif(not kernel_supported("dynamic"), reason="no dynamic int8 kernel here")
def test_prompts_keep_the_models_weights_where_int8_is_not_faster(monkeypatch) -> None:
    model = _model("qwen2")
    exact, quick = lean_decoder(model), lean_decoder(model)
    quick.quantize_int8("dynamic")
    monkeypatch.setattr(int8, "measure_prompt_products", lambda *a: {"dense": 9.0, "int8": 8.5})
    quick.choose_int8_prompts(bf16=True)
    assert not quick.int8_prompts
    ids = torch.randint(0, V, (1, 24), generator=torch.Generator().manual_seed(1))
    assert torch.equal(_prompt_logits(exact, ids), _prompt_logits(quick, ids))


@pytest.mark.parametrize("bf16", [False, True])
def test_the_prompt_probe_times_both_sides(bf16: bool) -> None:
    decoder = lean_decoder(_model("gpt2"))
    decoder.quantize_int8()
    timings = int8.measure_prompt_products(decoder._int8_sources(0), decoder.int8[0], bf16)
    assert set(timings) == {"dense", "int8"} and all(0 < t < 1e6 for t in timings.values())
    with pytest.raises(RuntimeError, match="quantize_int8 first"):
        lean_decoder(_model("gpt2")).choose_int8_prompts(bf16)
