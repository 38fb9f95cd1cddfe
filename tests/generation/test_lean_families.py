"""The lean decoder on the families people run on a CPU (tiny random models in their
exact Hub layout, tests/families.py): greedy and sampled text equal the transformers
forward's, with and without a reused prompt cache; int8 steps stay close; variants the
blocks do not compute fall back with one log line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.bigcode import GPTBigCodeDecoder
from codeparrot.generation.gpt2 import int8_supported
from codeparrot.generation.lean import lean_decoder
from codeparrot.generation.llama import LlamaDecoder
from codeparrot.generation.qwen3 import Qwen3Decoder

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family

PROMPT = "import os\n\n\ndef join(parts, sep):\n    out = []\n    for part in parts:\n"
LONGER = PROMPT + "        out.append(part)\n"
DECODERS = {
    "tiny_starcoder_py": GPTBigCodeDecoder,  # multi-query
    "santacoder": GPTBigCodeDecoder,
    "starcoder2": LlamaDecoder,  # LayerNorm with biases, plain MLP
    "qwen2.5-coder": LlamaDecoder,  # query/key/value biases
    "codellama": LlamaDecoder,  # byte-fallback tokenizer, BOS
    "deepseek-coder": LlamaDecoder,
    "mistral": LlamaDecoder,  # no biases
    "codeparrot-qwen3": Qwen3Decoder,  # RMS-normed queries and keys
    "qwen3": Qwen3Decoder,  # the Hub's Qwen3: Qwen's tokens
}


def peaked(engine: Engine) -> Engine:
    """Scale a random model's matrices so its logits are peaked and distinct (a random
    init is near-uniform: its greedy choices would hinge on the last bits)."""
    with torch.no_grad():
        for p in engine.model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return engine


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lean-families")
    dirs = {name: build_family(name, root / name) for name in DECODERS}
    dirs["mistral-window"] = _mistral(root / "mistral-window", dirs["codellama"])
    return dirs


def _mistral(out: Path, like: Path) -> Path:
    """A Mistral with a sliding window of 6 positions: shorter than every prompt here."""
    from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(like)
    config = MistralConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
        sliding_window=6, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    MistralForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def engines(path: Path) -> tuple[Engine, Engine]:
    """(lean, transformers forward) engines over one peaked model, in float32."""
    lean = peaked(Engine.load(path, dtype="float32", quantize="none", lean_load=False))
    return lean, Engine(lean.model, lean.tokenizer, path=path, lean_gpt2=False)


@pytest.mark.parametrize("name", [*DECODERS, "mistral-window"])
def test_lean_text_equals_the_transformers_forward(family_dirs, name: str) -> None:
    lean, reference = engines(family_dirs[name])
    assert (
        isinstance(lean.decoder.lean, DECODERS.get(name, LlamaDecoder))
        and reference.decoder.lean is None
    )
    greedy = GenerationConfig(temperature=0, max_new_tokens=16, stop_at_eos=False, heal=False)
    sampled = GenerationConfig(n=3, seed=7, temperature=0.8, max_new_tokens=16, stop_at_eos=False)
    for prompt in (PROMPT, PROMPT, LONGER):  # cold, the same prompt again, a longer one
        for config in (greedy, sampled):
            ours = lean.generate(prompt, config)
            theirs = reference.generate(prompt, config)
            assert [c.text for c in ours] == [c.text for c in theirs], (prompt, config)
            assert [c.new_tokens for c in ours] == [c.new_tokens for c in theirs]
    # the lean engine's prompt cache served the repeats and (the editor's setting) the
    # longer prompt's start
    lean.reuse_prompt_starts = True
    lean.prompt_cache.clear()
    lean.generate(PROMPT, greedy)
    (again,) = lean.generate(LONGER, greedy)
    assert 0 < again.prompt_cached_tokens < again.prompt_tokens  # a start, not a repeat
    lean.prompt_cache.clear()
    assert lean.generate(LONGER, greedy)[0].text == again.text


@pytest.mark.parametrize("name", ["tiny_starcoder_py", "qwen2.5-coder", "starcoder2"])
def test_one_token_steps_match_the_transformers_logits(family_dirs, name: str) -> None:
    """Every position's logits, through a prompt chunk, one-token steps and rows sharing
    the prompt, against transformers' forward over the whole sequence."""
    lean, _ = engines(family_dirs[name])
    model, decoder = lean.model, lean.decoder.lean
    ids = torch.tensor([lean.tokenizer(LONGER)["input_ids"]])  # (1, T)
    T = ids.size(1)
    with torch.inference_mode():
        reference = model(ids).logits  # (1, T, V)
        cache = decoder.new_cache(1, T + 2)
        decoder.forward(ids[:, : T - 4], cache)
        for t in range(T - 4, T):
            got = decoder.forward(ids[:, t : t + 1], cache)
            assert torch.allclose(got, reference[:, t], atol=1e-4), t
        shared = decoder.new_cache(3, 2, prefix=cache.view(T))
        nexts = torch.tensor([[5], [17], [5]])
        rows = decoder.forward(nexts, shared)  # (3, V)
        for row, nxt in enumerate(nexts[:, 0].tolist()):
            alone = model(torch.cat([ids, torch.tensor([[nxt]])], dim=1)).logits[0, -1]
            assert torch.allclose(rows[row], alone, atol=1e-4)


@pytest.mark.skipif(not int8_supported(), reason="this torch build has no int8 CPU kernel")
@pytest.mark.parametrize("name", ["tiny_starcoder_py", "qwen2.5-coder", "starcoder2"])
def test_int8_steps_stay_close(family_dirs, name: str) -> None:
    """int8 one-token steps move the logits by under 2% of their spread: weight-only int8
    with one scale per output row rounds each weight by at most 1/254 of its row's largest,
    and the errors of a product's terms mostly cancel (measured 0.4-0.7% here)."""
    exact, _ = engines(family_dirs[name])
    quick = Engine(exact.model, exact.tokenizer, quantize="int8")
    # prompts keep the weights, whatever the load's timing probe found on a busy machine
    quick.decoder.lean.int8_prompts = False
    ids = torch.tensor([exact.tokenizer(LONGER)["input_ids"]])
    T = ids.size(1)
    a, b = exact.decoder.lean.new_cache(2, T + 3), quick.decoder.lean.new_cache(2, T + 3)
    with torch.inference_mode():
        prompt = ids.expand(2, -1)
        assert torch.equal(
            exact.decoder.lean.forward(prompt, a), quick.decoder.lean.forward(prompt, b, int8=True)
        )
        for nxt in ([[5], [9]], [[17], [3]], [[4], [4]]):
            full = exact.decoder.lean.forward(torch.tensor(nxt), a)
            approx = quick.decoder.lean.forward(torch.tensor(nxt), b, int8=True)
            spread = full.amax(dim=-1) - full.amin(dim=-1)
            assert torch.all((full - approx).abs().amax(dim=-1) < 0.02 * spread)
            assert not torch.equal(full, approx)  # the int8 weights were really used
    config = GenerationConfig(temperature=0, max_new_tokens=12, stop_at_eos=False, heal=False)
    (out,) = quick.generate(PROMPT, config)  # the engine's int8 path runs end to end
    assert quick.quantize == "int8" and out.new_tokens >= 1


def _llama(**overrides) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **overrides,
    )  # fmt: skip
    return LlamaForCausalLM(config)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (
            {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}},
            "dynamic",
        ),
        ({"hidden_act": "gelu"}, "activation 'gelu'"),
    ],
)
def test_an_unsupported_variant_falls_back_with_one_log_line(overrides, said, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="codeparrot.generation.lean"):
        assert lean_decoder(_llama(**overrides)) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert "transformers forward" in line and said in line and "LlamaForCausalLM" in line
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="codeparrot.generation.lean"):
        assert isinstance(lean_decoder(_llama()), LlamaDecoder)
    assert not caplog.records


def test_linear_rope_scaling_is_computed(family_dirs) -> None:
    model = _llama(rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4})
    decoder = lean_decoder(model)
    ids = torch.randint(0, 64, (2, 40))
    with torch.inference_mode():
        got = decoder.forward(ids, decoder.new_cache(2, 40))
        assert torch.allclose(got, model(ids).logits[:, -1], atol=1e-5)


@pytest.mark.parametrize("name", ["codeparrot-qwen3", "qwen2.5-coder"])
def test_positions_past_the_rotary_table_are_the_same(family_dirs, name: str) -> None:
    """Steps read rotary angles from a table of the first positions and compute the rest;
    both give the very same logits (a long completion must not change past the table)."""
    lean, _ = engines(family_dirs[name])
    decoder = lean.decoder.lean
    ids = torch.tensor([lean.tokenizer(LONGER)["input_ids"]])  # (1, T)
    T = ids.size(1)
    full = decoder.rotary_table

    def logits() -> list[torch.Tensor]:
        cache = decoder.new_cache(1, T)
        out = [decoder.forward(ids[:, : T - 4], cache)]
        return out + [decoder.step(ids[:, t : t + 1], cache) for t in range(T - 4, T)]

    with torch.inference_mode():
        from_table = logits()
        decoder.rotary_table = tuple(t[:3] for t in full)  # every position computed
        try:
            computed = logits()
        finally:
            decoder.rotary_table = full
    assert full[0].size(0) >= T
    for a, b in zip(from_table, computed, strict=True):
        assert torch.equal(a, b)
