"""The lean load (codeparrot.models.lean_load): the lean decoder's families load straight
from safetensors, with the same parameters, logits and text as through transformers'
model classes, every check of the loader, and the transformers model where the lean
decoder does not apply (an adapter, another architecture, lean_load=False)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from codeparrot.errors import CheckpointError
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.models.lean_load import LeanModel

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family

PROMPT = "import os\n\n\ndef join(parts, sep):\n    out = []\n    for part in parts:\n"
GREEDY = GenerationConfig(temperature=0, max_new_tokens=12, stop_at_eos=False, heal=False)
FAMILIES = ("codeparrot-small", "tiny_starcoder_py", "santacoder", "starcoder2", "qwen2.5-coder")


def _variant(out: Path, like: Path, make) -> Path:
    """A tiny model of another configuration with ``like``'s tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(like)
    small = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(1)
    make(small).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import transformers as tf

    root = tmp_path_factory.mktemp("lean-load")
    dirs = {name: build_family(name, root / name) for name in FAMILIES}
    like = dirs["qwen2.5-coder"]
    dirs["llama-biases"] = _variant(
        root / "llama-biases",
        like,
        lambda c: tf.LlamaForCausalLM(tf.LlamaConfig(**c, attention_bias=True, mlp_bias=True)),
    )
    dirs["qwen3-tied"] = _variant(
        root / "qwen3-tied",
        like,
        lambda c: tf.Qwen3ForCausalLM(tf.Qwen3Config(**c, head_dim=16, tie_word_embeddings=True)),
    )
    dirs["llama-linear-rope"] = _variant(
        root / "llama-linear-rope",
        like,
        lambda c: tf.LlamaForCausalLM(
            tf.LlamaConfig(
                **c, rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 4.0}
            )
        ),
    )
    dirs["gpt2-exact-gelu"] = _variant(  # the MLP's own activation, not the fused tanh
        root / "gpt2-exact-gelu",
        like,
        lambda c: tf.GPT2LMHeadModel(
            tf.GPT2Config(
                vocab_size=c["vocab_size"],
                n_embd=32,
                n_layer=2,
                n_head=4,
                n_positions=256,
                activation_function="gelu",
                eos_token_id=c["eos_token_id"],
            )
        ),
    )
    dirs["qwen2-bf16"] = _variant(  # loaded in float32 on a CPU, as transformers' is
        root / "qwen2-bf16",
        like,
        lambda c: tf.Qwen2ForCausalLM(tf.Qwen2Config(**c)).to(torch.bfloat16),
    )
    dirs["mistral-window"] = _variant(
        root / "mistral-window",
        like,
        lambda c: tf.MistralForCausalLM(tf.MistralConfig(**c, sliding_window=6)),
    )
    return dirs


def peaked(engine: Engine) -> Engine:
    """Matrices scaled up so that a random model's greedy choices are clear-cut."""
    with torch.no_grad():
        for p in engine.model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return engine


VARIANTS = (
    "llama-biases", "llama-linear-rope", "gpt2-exact-gelu", "qwen3-tied", "qwen2-bf16",
    "mistral-window",
)  # fmt: skip


@pytest.mark.parametrize("name", [*FAMILIES, *VARIANTS])
def test_lean_load_equals_the_transformers_load(family_dirs, name: str) -> None:
    lean = Engine.load(family_dirs[name], quantize="none")
    full = Engine.load(family_dirs[name], quantize="none", lean_load=False)
    assert isinstance(lean.model, LeanModel) and not isinstance(full.model, LeanModel)
    assert type(lean.model).__name__ == type(full.model).__name__
    assert type(lean.decoder.lean) is type(full.decoder.lean)
    # the same parameters under the same names (tied heads once), the same values
    mine, theirs = dict(lean.model.named_parameters()), dict(full.model.named_parameters())
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        assert mine[key].dtype == value.dtype == torch.float32, key
        assert torch.equal(mine[key], value), key
    assert lean.end_ids == full.end_ids and lean.context_length == full.context_length
    # decoders made again over peaked weights (they keep some matrices transposed)
    lean = Engine(peaked(lean).model, lean.tokenizer, infills=False)
    full = Engine(peaked(full).model, full.tokenizer, infills=False)
    ids = torch.tensor([lean.encode_prompt(PROMPT, 12)[0]])
    with torch.no_grad():
        logits = lean.decoder.lean.forward(ids, lean.decoder.lean.new_cache(1, ids.size(1)))
        reference = full.model(input_ids=ids).logits[:, -1]
    torch.testing.assert_close(logits.float(), reference.float(), rtol=1e-4, atol=1e-4)
    text = lean.generate(PROMPT, GREEDY)[0].text
    assert text == full.generate(PROMPT, GREEDY)[0].text
    quick = Engine.load(family_dirs[name], quantize="int8")  # int8 steps load too
    assert quick.quantize == "int8" and isinstance(quick.model, LeanModel)


def test_the_end_ids_of_generation_config_are_read(family_dirs) -> None:
    engine = Engine.load(family_dirs["qwen2.5-coder"])
    ends = json.loads((family_dirs["qwen2.5-coder"] / "generation_config.json").read_text())
    assert isinstance(engine.model, LeanModel)
    assert engine.model.generation_config.eos_token_id == ends["eos_token_id"]
    assert set(ends["eos_token_id"]) <= engine.end_ids


def test_the_lean_load_imports_no_transformers_model_class(family_dirs) -> None:
    code = (
        "import sys; from codeparrot.generation import Engine; "
        f"e = Engine.load({str(family_dirs['tiny_starcoder_py'])!r}, quantize='int8'); "
        "print(type(e.decoder.lean).__name__, sorted(m for m in sys.modules if "
        "m == 'transformers.modeling_utils' or '.models.' in m and '.modeling_' in m "
        "and not m.endswith('modeling_auto')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["GPTBigCodeDecoder", "[]"]


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_the_model_type_names_the_class_as_in_transformers(family_dirs, tmp_path) -> None:
    odd = _copy(family_dirs["tiny_starcoder_py"], tmp_path / "odd")
    config = json.loads((odd / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]  # AutoModelForCausalLM goes by model_type
    (odd / "config.json").write_text(json.dumps(config))
    lean, full = Engine.load(odd), Engine.load(odd, lean_load=False)
    assert type(lean.model).__name__ == type(full.model).__name__ == "GPTBigCodeForCausalLM"


def test_remote_code_is_refused_as_before(family_dirs, tmp_path) -> None:
    bad = _copy(family_dirs["tiny_starcoder_py"], tmp_path / "remote")
    config = json.loads((bad / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Evil"}
    (bad / "config.json").write_text(json.dumps(config))
    for lean in (True, False):
        with pytest.raises(CheckpointError, match="auto_map"):
            Engine.load(bad, lean_load=lean)


def test_truncated_weights_get_the_loader_error(family_dirs, tmp_path) -> None:
    bad = _copy(family_dirs["tiny_starcoder_py"], tmp_path / "truncated")
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    for lean in (True, False):
        with pytest.raises(CheckpointError, match="weights cannot be loaded"):
            Engine.load(bad, lean_load=lean)


@pytest.mark.parametrize("change", ["missing", "shape"])
def test_incomplete_weights_get_the_loader_error(family_dirs, tmp_path, change: str) -> None:
    from safetensors.torch import load_file, save_file

    bad = _copy(family_dirs["qwen2.5-coder"], tmp_path / change)
    tensors = load_file(bad / "model.safetensors")
    key = "model.layers.1.self_attn.k_proj.bias"
    if change == "missing":
        del tensors[key]
    else:
        tensors[key] = torch.zeros(3)
    save_file(tensors, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"do not fit a qwen2 causal LM \(1 .*{key}"):
        Engine.load(bad)
    # transformers' own message for a wrong shape differs; both are the loader's error
    missing = "do not fit a qwen2 causal LM" if change == "missing" else "cannot be loaded"
    with pytest.raises(CheckpointError, match=missing):
        Engine.load(bad, lean_load=False)


def test_other_loads_take_the_transformers_model(family_dirs, tmp_path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = family_dirs["tiny_starcoder_py"]
    assert not isinstance(Engine.load(base, lean_load=False).model, LeanModel)
    codegen = build_family("codegen", tmp_path / "codegen")  # no lean decoder
    assert not isinstance(Engine.load(codegen).model, LeanModel)
    model = AutoModelForCausalLM.from_pretrained(base)
    lora = get_peft_model(
        model, LoraConfig(r=2, target_modules=["c_attn"], init_lora_weights=False)
    )
    lora.save_pretrained(tmp_path / "adapter")
    adapted = Engine.load(tmp_path / "adapter", quantize="int8")  # merged onto its base
    assert not isinstance(adapted.model, LeanModel) and adapted.quantize == "int8"
    plain = Engine.load(base, quantize="none")
    ids = torch.tensor([plain.encode_prompt(PROMPT, 12)[0]])
    with torch.no_grad():
        a = adapted.model(input_ids=ids).logits[0, -1]
        b = plain.decoder.lean.forward(ids, plain.decoder.lean.new_cache(1, ids.size(1)))[0]
    assert not torch.allclose(a, b, atol=1e-4)  # the adapter's weights are in


def test_a_lean_model_has_no_transformers_forward(family_dirs) -> None:
    engine = Engine.load(family_dirs["tiny_starcoder_py"])
    with pytest.raises(CheckpointError, match="lean_load=False"):
        engine.model(input_ids=torch.tensor([[1, 2]]))
