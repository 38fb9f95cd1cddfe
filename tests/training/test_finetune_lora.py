"""``finetune --peft lora``: an adapter trains, saves, loads everywhere and merges.

Two families built here: the tiny GPT-2 of the shared fixtures (Conv1D projections) and a
tiny Llama (q/k/v/o projections) on the same tokenizer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.models.checkpoint import load_checkpoint
from codeparrot.training.finetune import FinetuneConfig, default_seq_length, finetune
from codeparrot.training.lora import (
    LoraSettings,
    attach_lora,
    save_merged,
    target_modules,
    typical_step_seconds,
    would_overrun,
)
from tests.training.test_finetune import make_repository, tiny_finetune

PROMPT = [[5, 17, 42, 99, 3, 250, 7, 31]]


def build_tiny_llama(out: Path, tokenizer_dir: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def logits(path: Path):
    import torch

    model, _tok, _meta = load_checkpoint(path)
    with torch.no_grad():
        return model(input_ids=torch.tensor(PROMPT)).logits


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repository(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="module")
def tiny_llama(tiny_checkpoint, tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llama") / "checkpoint", tiny_checkpoint)


def lora_run(repository: Path, base: Path, out: Path, **changes):
    config = tiny_finetune(
        repository, base, out, peft="lora", lora_rank=4, max_steps=6, learning_rate=2e-2,
        **changes,
    )  # fmt: skip
    return config, finetune(config)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def adapter_run(request, repository, tiny_checkpoint, tiny_llama, tmp_path_factory):
    import torch

    import codeparrot.training.lora as lora

    base = tiny_checkpoint if request.param == "gpt2" else tiny_llama
    trained = []  # the trained model's own logits, taken as it is saved

    def save_adapter(model, *args, **kwargs):
        with torch.no_grad():
            trained.append(model(input_ids=torch.tensor(PROMPT)).logits.float())
        return real(model, *args, **kwargs)

    real = lora.save_adapter
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lora, "save_adapter", save_adapter)
        # GPT-2 recomputes activations in the backward pass (the default), Llama keeps them
        config, result = lora_run(
            repository,
            base,
            tmp_path_factory.mktemp("lora") / "run",
            activation_checkpointing=request.param == "gpt2",
        )
    assert len(trained) == 1
    result.trained_logits = trained[0]  # what the loaded adapter must give again
    return base, config, result


def test_an_adapter_trains_saves_and_loads_in_the_engine(adapter_run):
    import torch

    from codeparrot.generation import Engine, GenerationConfig

    base, _config, result = adapter_run
    adapter = result.model
    assert (adapter / "adapter_config.json").is_file()
    assert (adapter / "adapter_model.safetensors").is_file()
    assert not (adapter / "config.json").exists()
    assert not list(adapter.glob("*.bin"))  # no pickles written
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert Path(saved["base_model_name_or_path"]) == base.resolve()
    assert result.steps == 6 and result.train_loss_after < result.train_loss_before
    # the adapter changes the model: base + adapter is not the base, but the trained model
    assert not torch.allclose(logits(adapter), logits(base), atol=1e-4)
    assert torch.allclose(logits(adapter), result.trained_logits, atol=1e-4)
    engine = Engine.load(adapter)
    out = engine.generate("def f(x):", GenerationConfig(max_new_tokens=5, temperature=0))
    assert out[0].new_tokens > 0 and isinstance(out[0].text, str)


def test_complete_takes_an_adapter(adapter_run):
    _base, _config, result = adapter_run
    proc = subprocess.run(
        [sys.executable, "-m", "codeparrot", "complete", "--checkpoint", str(result.model),
         "--max-new-tokens", "3", "def f(x):"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_merging_gives_the_logits_of_base_plus_adapter(adapter_run, tmp_path):
    import torch

    _base, _config, result = adapter_run
    peft_model, tokenizer, meta = load_checkpoint(result.model, merge_adapter=False)
    merged = save_merged(peft_model, tokenizer, tmp_path / "merged", meta)
    assert (merged / "config.json").is_file() and not (merged / "adapter_config.json").exists()
    assert torch.allclose(logits(merged), logits(result.model), atol=1e-5)
    assert torch.allclose(logits(merged), result.trained_logits, atol=1e-4)  # as trained


def test_finetune_merge_writes_a_plain_checkpoint(repository, tiny_checkpoint, tmp_path):
    _config, result = lora_run(repository, tiny_checkpoint, tmp_path / "run", merge=True)
    assert (result.model / "config.json").is_file()
    assert not (result.model / "adapter_config.json").exists()
    meta = json.loads((result.model / "codeparrot_checkpoint.json").read_text())
    assert meta["peft"]["method"] == "lora" and meta["step"] == 6


def test_an_adapter_whose_base_is_gone_names_the_base(adapter_run, tmp_path):
    _base, _config, result = adapter_run
    moved = tmp_path / "adapter"
    shutil.copytree(result.model, moved)
    gone = tmp_path / "deleted-base"
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(gone)
    (moved / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="base model") as info:
        load_checkpoint(moved)
    assert str(gone) in str(info.value)


def test_an_adapter_that_asks_for_remote_code_is_refused(adapter_run, tmp_path):
    _base, _config, result = adapter_run
    moved = tmp_path / "adapter"
    shutil.copytree(result.model, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "custom.Model"}
    (moved / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="auto_map"):
        load_checkpoint(moved)


def test_seq_length_defaults_to_the_context_up_to_1024():
    assert default_seq_length({"n_positions": 8192}) == 1024
    assert default_seq_length({"max_position_embeddings": 32768}) == 1024
    assert default_seq_length({"n_positions": 256}) == 256


def test_family_default_targets_and_unknown_ones(tiny_checkpoint, tiny_llama):
    gpt2, _tok, _meta = load_checkpoint(tiny_checkpoint)
    llama, _tok, _meta = load_checkpoint(tiny_llama)
    assert target_modules(gpt2) == ["c_attn", "c_proj"]
    assert target_modules(llama) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    with pytest.raises(ConfigError, match=r"--lora-targets.*no module named qkv"):
        attach_lora(llama, LoraSettings(targets=("qkv",)))


def test_a_step_that_would_overrun_the_budget_is_not_started():
    assert not would_overrun(0.0, [], 60.0)  # nothing measured yet: take the first step
    assert not would_overrun(50.0, [4.0, 5.0], 60.0)
    assert would_overrun(56.0, [4.0, 5.0], 60.0)  # 56 + 5 > 60
    assert would_overrun(50.0, [1.0, 1.0, 12.0], 60.0)  # the machine slowed: the last step
    assert not would_overrun(1e9, [1.0], None)
    assert typical_step_seconds([9.0, 1.0, 2.0, 3.0]) == 2.0  # the first step's warm-up left out


def test_an_adapter_cut_short_by_the_clock_warns_as_train_does(
    repository, tiny_checkpoint, tmp_path, capsys
):
    """--max-minutes so small that only the first step starts (the loop takes one before it
    can estimate a step): 1 of 16 planned steps, and the full fine-tune's warning."""
    from codeparrot.cli import main

    out = tmp_path / "slow"
    argv = ["finetune", str(repository), "--checkpoint", str(tiny_checkpoint), "--peft", "lora"]
    argv += ["--output", str(out), "--max-steps", "16", "--max-minutes", "1e-9"]
    argv += ["--seq-length", "32", "--batch-size", "2", "--eval-tokens", "500"]
    argv += ["--valid-fraction", "0.25", "--mixed-precision", "no", "--log-with", "none"]
    argv += ["--workers", "1", "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "1 steps (max_minutes)" in printed
    assert "WARNING: this machine trained the model on only" in printed
    assert "--max-steps 16 is designed for (6%)" in printed and "--max-minutes" in printed
    saved = json.loads((out / "finetune.json").read_text())
    assert saved["warning"].startswith("WARNING") and saved["stopped_by"] == "max_minutes"


def test_an_adapter_that_took_its_steps_does_not_warn(adapter_run):
    _base, _config, result = adapter_run
    assert result.stopped_by == "max_steps" and result.warning is None


def test_lora_settings_without_peft_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="--merge needs --peft lora"):
        FinetuneConfig(repository=tmp_path, checkpoint=tmp_path, output=tmp_path, merge=True)


def test_output_inside_the_hub_cache_is_refused(repository, tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    config = tiny_finetune(repository, tiny_checkpoint, tmp_path / "cache" / "models--a--b" / "ft")
    with pytest.raises(CheckpointError, match="inside the Hugging Face cache"):
        finetune(config)


# -- what an adapter_config.json may ask of peft ------------------------------------------


def edited_adapter(result, tmp_path: Path, **changes) -> Path:
    moved = tmp_path / "adapter"
    shutil.copytree(result.model, moved, dirs_exist_ok=True)
    config = json.loads((moved / "adapter_config.json").read_text())
    config.update(changes)
    (moved / "adapter_config.json").write_text(json.dumps(config))
    return moved


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"target_modules": "(.*)*(attn|proj)"}, "target_modules"),
        ({"target_modules": ["c_attn", "(a+)+$"]}, "target_modules"),
        ({"rank_pattern": {"(.*)*(.*)*(.*)*x": 2}}, "rank_pattern"),
        ({"alpha_pattern": {".*": 2}}, "alpha_pattern"),
        ({"r": 262144}, "r"),
        ({"r": 0}, "r"),
        ({"rank_pattern": {"TARGET": 10**6}}, "rank_pattern"),
        ({"layer_replication": [[0, 2], [0, 2]]}, "layer_replication"),
        ({"peft_type": "BOFT"}, "peft_type"),
        ({"target_modules": ["no_such_layer"]}, "target_modules"),
    ],
)
def test_a_hostile_adapter_config_is_refused_naming_the_field(
    adapter_run, tmp_path, changes, field
):
    """Regexes hung peft's load, a huge r allocated GiBs: refused before peft builds."""
    import time

    _base, _config, result = adapter_run
    if "TARGET" in changes.get("rank_pattern", {}):  # a huge rank on one of the targets
        saved = json.loads((result.model / "adapter_config.json").read_text())
        changes = {"rank_pattern": {saved["target_modules"][0]: 10**6}}
    adapter = edited_adapter(result, tmp_path, **changes)
    start = time.monotonic()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(adapter)
    assert time.monotonic() - start < 30
    assert f"adapter_config.json: {field}" in str(info.value)


def test_an_adapter_asking_for_pissa_init_leaves_the_base_weights_alone(adapter_run, tmp_path):
    """peft's PiSSA init rewrote the base weights and silently changed the output."""
    import torch

    _base, _config, result = adapter_run
    honest = logits(result.model)
    for init in ("pissa", "olora", "gaussian"):
        pissa = edited_adapter(result, tmp_path / init, init_lora_weights=init)
        assert torch.equal(logits(pissa), honest), init
