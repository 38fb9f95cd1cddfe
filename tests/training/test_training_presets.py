"""Model presets, `codeparrot init` and checkpoint validation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from codeparrot.errors import CheckpointError
from codeparrot.models import (
    PRESETS,
    InitConfig,
    build_model_config,
    count_parameters,
    init_checkpoint,
    load_checkpoint,
    padded_vocab_size,
    validate_checkpoint,
)


class FakeTokenizer:
    """Just what a preset needs from a tokenizer: its size and EOS id."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.eos_token_id = 0

    def __len__(self) -> int:
        return self.size


def parameters_of(preset: str, vocab: int, n_positions: int | None = None) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    config = build_model_config(preset, FakeTokenizer(vocab), n_positions=n_positions)
    with torch.device("meta"):  # shapes only: the 1.5B model allocates nothing
        model = AutoModelForCausalLM.from_config(config)
    return count_parameters(model)


def test_vocab_is_padded_to_a_multiple_of_64():
    assert padded_vocab_size(512) == 512
    assert padded_vocab_size(513) == 576
    assert padded_vocab_size(32_768) == 32_768
    assert padded_vocab_size(50_257) == 50_304
    assert build_model_config("tiny", FakeTokenizer(8001)).vocab_size == 8064


def test_presets_have_the_reference_sizes():
    # tiny: ~5M with an 8k vocabulary (ANCHORS: 5.3M, 4 layers, 256 wide, context 256)
    assert 5.0e6 < parameters_of("tiny", 8192) < 5.6e6
    assert PRESETS["tiny"].n_positions == 256
    # small: the gpt2 shape; with GPT-2's own vocabulary it is GPT-2 (124.4M)
    assert parameters_of("small", 50_257) == 124_439_808 + (50_304 - 50_257) * 768
    # codeparrot-small (~111M) and codeparrot (~1.5B) with the 32k code vocabulary
    assert 110e6 < parameters_of("small", 32_768) < 112e6
    assert 1.50e9 < parameters_of("large", 32_768) < 1.54e9


def test_init_writes_a_loadable_checkpoint(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "init"
    result = init_checkpoint(InitConfig(tokenizer=tiny_tokenizer_dir, output=out, seed=3))
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.n_layer == 4 and model.config.n_embd == 256
    assert model.config.vocab_size == 512 == len(tokenizer)
    assert result.parameters == count_parameters(model)
    meta = json.loads((out / "codeparrot_checkpoint.json").read_text())
    assert (
        meta["step"] == 0 and meta["preset"] == "tiny" and meta["parameters"] == result.parameters
    )
    assert meta["provenance"]["config"]["seed"] == 3
    # the same seed gives the same weights
    again = init_checkpoint(InitConfig(tokenizer=tiny_tokenizer_dir, output=tmp_path / "b", seed=3))
    assert again.parameters == result.parameters
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "b").state_dict()
    assert all(v.equal(a[k]) for k, v in model.state_dict().items())
    # and another seed other weights (the seed given is the one used)
    init_checkpoint(InitConfig(tokenizer=tiny_tokenizer_dir, output=tmp_path / "c", seed=4))
    c = AutoModelForCausalLM.from_pretrained(tmp_path / "c").state_dict()
    assert any(not v.equal(c[k]) for k, v in model.state_dict().items())
    with pytest.raises(CheckpointError, match="already exists"):
        init_checkpoint(InitConfig(tokenizer=tiny_tokenizer_dir, output=out))


def test_init_cli_prints_the_parameter_count(tmp_path, tiny_tokenizer_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "codeparrot", "init", "--preset", "tiny", "--tokenizer",
         str(tiny_tokenizer_dir), "--output", str(tmp_path / "c"), "--n-positions", "128"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "parameters" in proc.stdout and "tiny preset" in proc.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "codeparrot", "init", "--tokenizer", str(tmp_path / "nope"),
         "--output", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert missing.returncode != 0 and "no such directory" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_bad_checkpoints_are_rejected_before_loading(tmp_path, tiny_checkpoint):
    assert validate_checkpoint(tiny_checkpoint)["n_layer"] == 2
    with pytest.raises(CheckpointError, match="no such directory"):
        validate_checkpoint(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        validate_checkpoint(empty)

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        validate_checkpoint(broken)

    not_lm = tmp_path / "not_lm"
    shutil.copytree(tiny_checkpoint, not_lm)
    config = json.loads((not_lm / "config.json").read_text())
    config["architectures"] = ["GPT2ForSequenceClassification"]
    (not_lm / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="not a causal language model"):
        validate_checkpoint(not_lm)

    truncated = tmp_path / "truncated"
    shutil.copytree(tiny_checkpoint, truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # inside the header
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a safetensors file"):
        load_checkpoint(truncated)
    cut = tmp_path / "cut_weights"
    shutil.copytree(tiny_checkpoint, cut)
    data = (cut / "model.safetensors").read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    (cut / "model.safetensors").write_bytes(data[: header + 100])  # whole header, weights cut
    with pytest.raises(CheckpointError, match="weights cannot be loaded"):
        load_checkpoint(cut)

    small_vocab = tmp_path / "small_vocab"
    shutil.copytree(tiny_checkpoint, small_vocab)
    config = json.loads((small_vocab / "config.json").read_text())
    config["vocab_size"] = 300
    (small_vocab / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="tokenizer has 512 tokens"):
        validate_checkpoint(small_vocab)


def test_model_package_import_is_cheap():
    code = "import sys, codeparrot.models, codeparrot.models.cli, training; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


def test_presets_match_the_train_config_choices():
    from codeparrot.training.config import PRESET_NAMES

    assert tuple(PRESETS) == PRESET_NAMES


@pytest.mark.parametrize("bad", [4, 1 << 17])
def test_every_command_refuses_an_n_positions_out_of_range(tmp_path, bad):
    from codeparrot.errors import ConfigError
    from codeparrot.models.presets import InitConfig
    from codeparrot.quickstart import QuickstartConfig
    from codeparrot.training import TrainConfig

    builders = [
        lambda: InitConfig(tokenizer=tmp_path, output=tmp_path / "o", n_positions=bad),
        lambda: TrainConfig(
            data=tmp_path, tokenizer=tmp_path, output=tmp_path / "o", n_positions=bad
        ),
        lambda: QuickstartConfig(n_positions=bad),
    ]
    for build in builders:
        with pytest.raises(ConfigError, match=f"--n-positions must be in 8..65536, got {bad}"):
            build()
    assert QuickstartConfig(n_positions=512).n_positions == 512


def test_qwen_presets_match_their_gpt2_sizes():
    # tiny-qwen: tiny's width, depth and context, SwiGLU width chosen to match its size
    tiny, qwen = parameters_of("tiny", 8192), parameters_of("tiny-qwen", 8192)
    assert abs(qwen - tiny) / tiny < 0.01
    config = build_model_config("tiny-qwen", FakeTokenizer(8001))
    assert config.model_type == "qwen3" and config.vocab_size == 8064
    assert (config.num_hidden_layers, config.hidden_size, config.head_dim) == (4, 256, 64)
    assert config.max_position_embeddings == 256 and config.tie_word_embeddings
    assert (
        build_model_config("tiny-qwen", FakeTokenizer(512), n_positions=128).max_position_embeddings
        == 128
    )
    # the untied head adds one vocabulary-by-width matrix
    assert parameters_of("tiny-qwen-untied", 8192) == qwen + 8192 * 256
    # small-qwen: the gpt2 shape (less its 1024 x 768 position table)
    small, small_qwen = parameters_of("small", 32_768), parameters_of("small-qwen", 32_768)
    assert abs(small_qwen - small) / small < 0.01
