"""bf16 prompts of the lean decoders on packed bf16 copies of the matrices (oneDNN's
kernel, GELU on its accumulators): the logits and keys/values that autocast's products
give, whole or in chunks; the engine keeps the copies only where its prompts read them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from torch.profiler import profile

from codeparrot.generation.bf16_prompts import pack_bf16, packed_bf16_supported, packed_linear
from codeparrot.generation.decoder import Decoder
from codeparrot.generation.lean import lean_decoder

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import sharp_random_model

pytestmark = pytest.mark.skipif(
    not packed_bf16_supported(), reason="this torch build lacks oneDNN's packed bf16 product"
)

V = 96
T = 70  # a prompt as long as the engine reads in bf16 (BF16_PREFILL_MIN_TOKENS is 64)


def _model(kind: str) -> torch.nn.Module:
    """A two-layer random model, matrices scaled so that its logits are peaked."""
    small = dict(n_embd=64, n_layer=2, n_head=4, n_positions=128, vocab_size=V)
    llama = dict(
        hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=2,
        max_position_embeddings=128, vocab_size=V,
    )  # fmt: skip
    configs = {
        "gpt2": tf.GPT2Config(**small),  # GELU's tanh approximation: fused
        "gpt2-relu": tf.GPT2Config(**small, activation_function="relu"),  # not fused
        "bigcode-mq": tf.GPTBigCodeConfig(**small, multi_query=True),
        "bigcode": tf.GPTBigCodeConfig(**small, multi_query=False),
        "qwen2": tf.Qwen2Config(**llama, num_key_value_heads=2),  # biased q/k/v, SwiGLU
        "starcoder2": tf.Starcoder2Config(  # LayerNorm, plain MLP, biases everywhere
            **llama, num_key_value_heads=2, hidden_act="gelu_pytorch_tanh"
        ),
        "qwen3": tf.Qwen3Config(**llama, num_key_value_heads=2, head_dim=16),  # q/k norms
        "mistral": tf.MistralConfig(**llama, num_key_value_heads=1, sliding_window=24),
    }
    return sharp_random_model(configs[kind])


def _prefill(decoder, ids: torch.Tensor, splits: tuple[int, ...] = ()):
    """Logits after ``ids`` read in bf16 (in chunks ending at ``splits``), and the cache."""
    cache = decoder.new_cache(1, ids.size(1))
    with torch.inference_mode():
        start = 0
        for end in (*splits, ids.size(1)):
            logits = decoder.forward(ids[:, start:end], cache, bf16=True)
            start = end
    return logits, cache


KINDS = ["gpt2", "gpt2-relu", "bigcode-mq", "bigcode", "qwen2", "starcoder2", "qwen3", "mistral"]


@pytest.mark.parametrize("kind", KINDS)
def test_packed_prompts_give_autocasts_logits_and_keys(kind: str) -> None:
    decoder = lean_decoder(_model(kind))
    ids = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(1))
    autocast, autocast_cache = _prefill(decoder, ids)
    with torch.inference_mode():
        exact = decoder.forward(ids, decoder.new_cache(1, T))
    assert decoder.use_bf16_prompt_weights()
    with torch.inference_mode(), profile() as prof:
        _prefill(decoder, ids)
    ops = [e.name for e in prof.events()]
    assert ops.count("mkldnn::_linear_pointwise") == 4 * 2  # the blocks' products, packed
    assert ops.count("aten::addmm") + ops.count("aten::linear") == 1  # the output's alone
    packed, packed_cache = _prefill(decoder, ids)
    spread = (exact.max() - exact.min()).item()
    assert packed.dtype == torch.float32
    assert (packed - autocast).abs().max().item() < 0.02 * spread
    assert (packed - exact).abs().max().item() < 0.05 * spread
    assert packed.argmax() == autocast.argmax()
    for ours, theirs in zip(packed_cache.keys + packed_cache.values,
                            autocast_cache.keys + autocast_cache.values, strict=True):  # fmt: skip
        assert torch.allclose(ours, theirs, atol=0.05 * theirs.abs().max().item())
    # a prompt read in two chunks (the second after cached positions) ends alike
    chunked, _ = _prefill(decoder, ids, splits=(T - 66,))
    assert (chunked - packed).abs().max().item() < 0.02 * spread


@pytest.mark.parametrize(("bf16", "quantize", "packed"), [
    (True, "none", True), (False, "none", False), (True, "int8", False),
])  # fmt: skip
def test_the_decoder_packs_only_for_its_bf16_prompts(bf16: bool, quantize: str, packed: bool):
    from codeparrot.generation.gpt2 import int8_supported

    if quantize == "int8" and not int8_supported():
        pytest.skip("no int8 kernel in this torch build")
    decoder = Decoder(_model("gpt2"), vocab_size=V, bf16_prefill=bf16, quantize=quantize)
    assert (decoder.lean.bf16_prompt is not None) == packed


def test_packed_gelu_is_gelu_of_the_product() -> None:
    g = torch.Generator().manual_seed(0)
    weight, bias, x = (
        torch.randn(40, 24, generator=g),
        torch.randn(40, generator=g),
        torch.randn(9, 24, generator=g),
    )
    matrix = pack_bf16(weight, bias)
    product = torch.nn.functional.linear(x.bfloat16(), weight.bfloat16(), bias.bfloat16()).float()
    assert torch.allclose(packed_linear(x, matrix).float(), product, rtol=1e-2, atol=1e-2)
    gelu = torch.nn.functional.gelu(product, approximate="tanh")
    assert torch.allclose(
        packed_linear(x, matrix, gelu_tanh=True).float(), gelu, rtol=1e-2, atol=2e-2
    )
    assert packed_linear(x, matrix).shape == (9, 40)
