"""The one checkpoint loader: every check, and a checkpoint never runs code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.models.checkpoint import load_checkpoint, load_tokenizer, validate_checkpoint

EVIL_MODULE = """
from pathlib import Path
Path({canary!r}).write_text("the checkpoint's code ran")
from transformers import GPT2Config, GPT2LMHeadModel
class EvilConfig(GPT2Config):
    model_type = "evil-gpt"
class EvilModel(GPT2LMHeadModel):
    config_class = EvilConfig
"""


def _custom_code_checkpoint(tmp_path: Path, tiny_checkpoint: Path) -> tuple[Path, Path]:
    """A copy of the tiny checkpoint whose config asks transformers to import evil.py."""
    ckpt = tmp_path / "custom-code"
    shutil.copytree(tiny_checkpoint, ckpt)
    canary = tmp_path / "canary.txt"
    (ckpt / "evil.py").write_text(EVIL_MODULE.format(canary=str(canary)))
    config = json.loads((ckpt / "config.json").read_text())
    config.update(
        model_type="evil-gpt",
        architectures=["EvilModel"],
        auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"},
    )
    (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt, canary


def test_complete_refuses_custom_code_even_when_told_yes(tmp_path, tiny_checkpoint):
    ckpt, canary = _custom_code_checkpoint(tmp_path, tiny_checkpoint)
    proc = subprocess.run(
        [sys.executable, "-m", "codeparrot", "complete", "--checkpoint", str(ckpt), "x = "],
        input="y\ny\ny\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert not canary.exists()
    assert "config.json" in proc.stderr and "auto_map" in proc.stderr
    assert "Traceback" not in proc.stderr and "[y/N]" not in proc.stdout + proc.stderr


def test_engine_refuses_custom_code_and_unknown_model_types(tmp_path, tiny_checkpoint):
    ckpt, canary = _custom_code_checkpoint(tmp_path, tiny_checkpoint)
    with pytest.raises(CheckpointError, match=r"config\.json: asks to run the checkpoint's own"):
        Engine.load(ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    del config["auto_map"]  # an unknown model_type alone would need the same code
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="model_type 'evil-gpt' is not an architecture"):
        Engine.load(ckpt)
    assert not canary.exists()

    tok_code = tmp_path / "tokenizer-code"
    shutil.copytree(tiny_checkpoint, tok_code)
    tok_config = json.loads((tok_code / "tokenizer_config.json").read_text())
    tok_config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (tok_code / "tokenizer_config.json").write_text(json.dumps(tok_config))
    with pytest.raises(CheckpointError, match=r"tokenizer_config\.json: asks to run"):
        load_tokenizer(tok_code)


def test_every_loader_checks_eos_missing_weights_and_sequence_length(tmp_path, tiny_checkpoint):
    with pytest.raises(CheckpointError, match="--seq-length 512 is above the model's 256"):
        validate_checkpoint(tiny_checkpoint, seq_length=512)
    assert validate_checkpoint(tiny_checkpoint, seq_length=256)["n_positions"] == 256

    no_eos = tmp_path / "no-eos"
    shutil.copytree(tiny_checkpoint, no_eos)
    tok_config = json.loads((no_eos / "tokenizer_config.json").read_text())
    for key in ("eos_token", "bos_token", "unk_token"):
        tok_config.pop(key, None)
    (no_eos / "tokenizer_config.json").write_text(json.dumps(tok_config))
    special = no_eos / "special_tokens_map.json"
    if special.exists():
        special.unlink()
    with pytest.raises(CheckpointError, match=r"no end-of-text \(eos\) token"):
        Engine.load(no_eos)

    # a layer the weights lack: transformers would fill it with random numbers
    deeper = tmp_path / "deeper"
    shutil.copytree(tiny_checkpoint, deeper)
    config = json.loads((deeper / "config.json").read_text())
    config["n_layer"] = 3
    (deeper / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"do not fit a gpt2 causal LM .*transformer\.h\.2"):
        load_checkpoint(deeper)


def test_tokenizer_max_length_is_the_model_context(tmp_path, tiny_checkpoint, capfd):
    old = tmp_path / "old-export"
    shutil.copytree(tiny_checkpoint, old)
    tok_config = json.loads((old / "tokenizer_config.json").read_text())
    tok_config["model_max_length"] = 1024  # what exports wrote before
    (old / "tokenizer_config.json").write_text(json.dumps(tok_config))
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(old).model_max_length == 1024
    assert load_tokenizer(old).model_max_length == 256
    assert load_checkpoint(old)[1].model_max_length == 256
    engine = Engine.load(old)
    assert engine.tokenizer.model_max_length == engine.context_length == 256
    capfd.readouterr()
    (c,) = engine.generate("x = 1\n" * 400, GenerationConfig(max_new_tokens=2))
    assert c.prompt_truncated
    assert "longer than the specified maximum" not in capfd.readouterr().err


def test_an_architecture_without_sdpa_loads_with_its_own_attention():
    """transformers 5.18 refuses SDPA for CodeGen at construction; the loader then asks
    for the architecture's own attention instead of failing (later 5.x fall back alone)."""
    from codeparrot.models.checkpoint import _from_pretrained

    calls = []

    class Auto:
        @staticmethod
        def from_pretrained(path, **kwargs):
            calls.append(kwargs)
            if kwargs.get("attn_implementation") == "sdpa":
                raise ValueError(
                    "CodeGenForCausalLM does not support an attention implementation "
                    "through torch.nn.functional.scaled_dot_product_attention yet."
                )
            return "model", {}

    assert _from_pretrained(Auto, Path("m"), {"attn_implementation": "sdpa", "x": 1}) == (
        "model",
        {},
    )
    assert calls == [{"attn_implementation": "sdpa", "x": 1}, {"x": 1}]

    class Broken:
        @staticmethod
        def from_pretrained(path, **kwargs):
            raise ValueError("a truncated file")

    with pytest.raises(ValueError, match="truncated"):  # other errors are not retried
        _from_pretrained(Broken, Path("m"), {"attn_implementation": "sdpa"})
