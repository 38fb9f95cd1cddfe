"""The Qwen3-architecture presets: training, exact resume, export and loading with
transformers' Auto classes (no custom code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeparrot.models.presets import (
    ModelPreset,
    build_model,
    count_parameters,
    flops_per_token,
    model_context,
    model_shape,
)
from codeparrot.training import train
from tests.training.test_training_loop import read_weights, tiny_config, write_corpus

# two Qwen3 blocks, 64 wide: the shape of the tests' GPT-2 checkpoint
TWO_LAYER_QWEN = ModelPreset(
    "test-qwen", 2, 2, 64, 128, 0.0, "test", 3e-3, architecture="qwen3", intermediate_size=176
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def qwen_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    from codeparrot.models.checkpoint import load_tokenizer, save_checkpoint

    tokenizer = load_tokenizer(tiny_checkpoint)
    model = build_model(TWO_LAYER_QWEN, tokenizer, seed=1)
    out = tmp_path_factory.mktemp("qwen") / "checkpoint"
    save_checkpoint(model, tokenizer, out, {"step": 0, "tokens_seen": 0, "preset": "test-qwen"})
    return out


def test_model_shape_reads_both_architectures(tiny_checkpoint, qwen_checkpoint):
    from transformers import AutoConfig

    gpt2, qwen = (
        AutoConfig.from_pretrained(tiny_checkpoint),
        AutoConfig.from_pretrained(qwen_checkpoint),
    )
    assert (model_shape(gpt2).n_layer, model_shape(gpt2).width, model_context(gpt2)) == (2, 64, 256)
    shape = model_shape(qwen)
    assert (shape.n_layer, shape.n_head, shape.head_dim, shape.context) == (2, 2, 32, 128)
    assert qwen.model_type == "qwen3" and qwen.tie_word_embeddings
    # 6N + 12 L H Q T with N the parameters (no position table to leave out)
    assert flops_per_token(qwen, 1000, 64) == 6 * 1000 + 12 * 2 * 2 * 32 * 64


def test_tiny_qwen_trains_exports_and_loads_with_auto_classes(tmp_path, corpus, tiny_checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "run"
    config = tiny_config(
        corpus, tiny_checkpoint, run, init_from=None, preset="tiny-qwen", max_steps=2,
        eval_every=2, batch_size=2,
    )  # fmt: skip
    result = train(config)
    assert result.step == 2 and result.eval_loss is not None
    model = AutoModelForCausalLM.from_pretrained(run)  # no trust_remote_code
    tokenizer = AutoTokenizer.from_pretrained(run)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 256
    assert model.config.intermediate_size == 704 and model.config.max_position_embeddings == 256
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied head
    assert model.config.vocab_size >= len(tokenizer)
    meta = json.loads((run / "codeparrot_checkpoint.json").read_text())
    assert meta["train_config"]["preset"] == "tiny-qwen"
    assert meta["parameters"] == count_parameters(model)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["mfu"] > 0 for r in records if "loss" in r)


def test_qwen_resume_continues_exactly(tmp_path, corpus, qwen_checkpoint):
    """Stopped by a token budget at step 3, then resumed: the same weights as one run."""
    full = train(tiny_config(corpus, qwen_checkpoint, tmp_path / "full"))
    stopped = train(tiny_config(corpus, qwen_checkpoint, tmp_path / "split", max_tokens=3 * 4 * 64))
    assert stopped.step == 3 and stopped.stopped_by == "max_tokens"
    resumed = train(tiny_config(corpus, qwen_checkpoint, tmp_path / "split", resume=True))
    assert resumed.resumed_from == 3 and resumed.step == 6
    a, b = read_weights(tmp_path / "full"), read_weights(tmp_path / "split")
    assert a.keys() == b.keys() and any("q_norm" in k for k in a)
    assert all(a[k].equal(b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert resumed.eval_loss == full.eval_loss
    before = read_weights(qwen_checkpoint)
    assert any(not before[k].equal(a[k]) for k in a), "training did not move the weights"


def test_dropout_reaches_qwen_attention(tmp_path, corpus, qwen_checkpoint):
    from codeparrot.models.checkpoint import load_tokenizer
    from codeparrot.training.setup_run import _build_model

    config = tiny_config(corpus, qwen_checkpoint, tmp_path / "run", dropout=0.25)
    model = _build_model(config, load_tokenizer(qwen_checkpoint))
    rates = [m.attention_dropout for m in model.modules() if hasattr(m, "attention_dropout")]
    assert len(rates) == 2 and set(rates) == {0.25}
    assert model.config.attention_dropout == 0.25  # and the export records it
