"""The pretraining loop end to end on a 2-layer model and a corpus written in the test."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError, ConfigError, DataError
from codeparrot.training import TrainConfig, train
from codeparrot.training.loop import lr_factor, parameter_groups


def write_corpus(root: Path, n_train: int = 40, n_valid: int = 12) -> Path:
    """A small corpus in the documented layout: two train shards, one valid shard."""
    docs = [
        f"def function_{i}(x, y={i}):\n    '''Return x plus {i}.'''\n"
        f"    total = x + y * {i % 7}\n    for k in range({i % 5}):\n        total += k\n"
        f"    return total\n\n\nclass Thing{i}:\n    value = {i}\n"
        for i in range(n_train + n_valid)
    ]
    shards = {
        "train/shard-00000.jsonl.gz": docs[: n_train // 2],
        "train/shard-00001.jsonl.gz": docs[n_train // 2 : n_train],
        "valid/shard-00000.jsonl.gz": docs[n_train:],
    }
    for name, contents in shards.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            for i, content in enumerate(contents):
                fh.write(
                    json.dumps({"repo_name": "r", "path": f"f{i}.py", "content": content}) + "\n"
                )
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def tiny_config(corpus: Path, checkpoint: Path, output: Path, **changes) -> TrainConfig:
    settings = dict(
        data=corpus,
        tokenizer=checkpoint,
        init_from=checkpoint,
        output=output,
        seq_length=64,
        batch_size=4,
        max_steps=6,
        warmup_steps=2,
        learning_rate=3e-3,
        eval_every=3,
        eval_batches=2,
        log_every=1,
        shuffle_buffer=16,
        mixed_precision="no",
        log_with="none",
        peak_tflops=1.0,
        progress=False,
    )
    settings.update(changes)
    return TrainConfig.from_recipe("codeparrot", **settings)  # AdamW, cosine, streamed


def read_weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_lr_schedule_warms_up_linearly_then_decays_to_the_floor():
    factors = [lr_factor(s, warmup_steps=10, max_steps=110, min_lr_ratio=0.1) for s in range(120)]
    assert factors[0] == pytest.approx(1 / 11)
    assert all(a < b for a, b in itertools.pairwise(factors[:11]))
    assert factors[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[10:111]))
    assert factors[60] == pytest.approx(0.1 + 0.9 * 0.5)
    assert factors[119] == pytest.approx(0.1)


def test_weight_decay_applies_to_matrices_only(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    decay, no_decay = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"])
    assert {names[id(p)].rsplit(".", 1)[-1] for p in no_decay["params"]} == {"weight", "bias"}
    assert all("ln" in names[id(p)] or names[id(p)].endswith("bias") for p in no_decay["params"])
    assert any(names[id(p)].endswith("wte.weight") for p in decay["params"])


def test_train_writes_a_loadable_run_directory(tmp_path, corpus, tiny_checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "run"
    result = train(
        tiny_config(corpus, tiny_checkpoint, run, keep_checkpoints=1, log_with="tensorboard")
    )
    assert result.step == 6 and result.stopped_by == "max_steps"
    assert result.tokens_seen == 6 * 4 * 64
    assert result.eval_loss is not None and math.isfinite(result.eval_loss)
    assert result.perplexity == pytest.approx(math.exp(result.eval_loss))

    # the run directory itself is the latest export
    model = AutoModelForCausalLM.from_pretrained(run)
    tokenizer = AutoTokenizer.from_pretrained(run)
    assert model.config.vocab_size >= len(tokenizer)
    meta = json.loads((run / "codeparrot_checkpoint.json").read_text())
    assert meta["step"] == 6 and meta["eval_loss"] == pytest.approx(result.eval_loss)
    assert meta["train_config"]["seq_length"] == 64 and "provenance" in meta
    # retention: only the newest checkpoint is kept, with its state for --resume
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000006"]
    assert (run / "checkpoints" / "step-000006" / "state").is_dir()

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] > 0 for r in records if "loss" in r)
    assert [r["step"] for r in records if "eval_loss" in r] == [3, 6]
    assert (run / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert list((run / "logs").rglob("events.out.tfevents.*")), "no TensorBoard events"
    # training moved the weights away from the initial checkpoint
    before, after = read_weights(tiny_checkpoint), read_weights(run)
    assert any(not before[k].equal(after[k]) for k in after)


def test_resume_continues_exactly(tmp_path, corpus, tiny_checkpoint):
    """Stopped by a token budget at step 3, then resumed: the same weights as one run."""
    full = train(tiny_config(corpus, tiny_checkpoint, tmp_path / "full"))
    stopped = train(tiny_config(corpus, tiny_checkpoint, tmp_path / "split", max_tokens=3 * 4 * 64))
    assert stopped.step == 3 and stopped.stopped_by == "max_tokens"
    resumed = train(tiny_config(corpus, tiny_checkpoint, tmp_path / "split", resume=True))
    assert resumed.resumed_from == 3 and resumed.step == 6
    a, b = read_weights(tmp_path / "full"), read_weights(tmp_path / "split")
    assert a.keys() == b.keys()
    assert all(a[k].equal(b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert resumed.eval_loss == full.eval_loss
    records = [
        json.loads(x) for x in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_bad_inputs_fail_before_training(tmp_path, corpus, tiny_checkpoint):
    out = tmp_path / "run"
    with pytest.raises(CheckpointError, match="--tokenizer"):
        train(tiny_config(corpus, tmp_path / "missing", out))
    with pytest.raises(DataError, match="--data"):
        train(tiny_config(tmp_path / "nodata", tiny_checkpoint, out))
    with pytest.raises(CheckpointError, match="256 positions"):
        train(tiny_config(corpus, tiny_checkpoint, out, seq_length=512))
    with pytest.raises(CheckpointError, match="no checkpoint"):
        train(tiny_config(corpus, tiny_checkpoint, out, resume=True))
    assert not (out / "metrics.jsonl").exists()


def test_vocab_mismatch_is_reported(tmp_path, corpus, tiny_checkpoint):
    import shutil

    from transformers import AutoModelForCausalLM

    small = tmp_path / "small_vocab"
    shutil.copytree(tiny_checkpoint, small)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    model.resize_token_embeddings(100)
    model.save_pretrained(small)
    with pytest.raises(CheckpointError, match="tokenizer has 512 tokens"):
        train(tiny_config(corpus, tiny_checkpoint, tmp_path / "run", init_from=small))


def test_existing_run_needs_resume_and_same_settings(tmp_path, corpus, tiny_checkpoint):
    out = tmp_path / "run"
    train(tiny_config(corpus, tiny_checkpoint, out, max_steps=2, eval_every=0))
    with pytest.raises(CheckpointError, match="--resume"):
        train(tiny_config(corpus, tiny_checkpoint, out, max_steps=2, eval_every=0))
    state = next((out / "checkpoints").glob("step-*")) / "state" / "optimizer.bin"
    state.write_bytes(state.read_bytes()[:100])  # a corrupted checkpoint
    with pytest.raises(CheckpointError, match=r"optimizer\.bin"):
        train(tiny_config(corpus, tiny_checkpoint, out, max_steps=2, eval_every=0, resume=True))
    with pytest.raises(ConfigError, match="--batch-size 4 -> 2"):
        train(
            tiny_config(
                corpus, tiny_checkpoint, out, max_steps=2, eval_every=0, batch_size=2, resume=True
            )
        )


def test_single_process_cpu_launch_is_flagged(monkeypatch):
    """`accelerate launch --cpu --num_processes 2` without MPI silently starts one process."""
    from codeparrot.training.setup_run import _warn_single_cpu_process

    for key in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.warns(UserWarning, match="starts ONE process"):
        _warn_single_cpu_process()
    monkeypatch.setenv("WORLD_SIZE", "2")  # a real group: nothing to say
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_single_cpu_process()


def test_learning_rate_defaults_to_the_presets_and_is_recorded(tmp_path, corpus, tiny_checkpoint):
    from codeparrot.models.presets import PRESETS
    from codeparrot.training.rundir import load_run_summary, with_defaults

    fresh = tiny_config(corpus, tiny_checkpoint, tmp_path / "a", init_from=None, learning_rate=None)
    assert with_defaults(fresh).learning_rate == PRESETS["tiny"].learning_rate == 2e-3
    # with Muon the tiny preset's own peak (measured apart); a preset without one keeps its
    muon = fresh.replace(optimizer="muon")
    assert with_defaults(muon).learning_rate == PRESETS["tiny"].muon_learning_rate == 3e-3
    assert with_defaults(muon.replace(learning_rate=1e-3)).learning_rate == 1e-3
    small_muon = muon.replace(preset="small")
    assert with_defaults(small_muon).learning_rate == PRESETS["small"].learning_rate == 5e-4
    small = tiny_config(corpus, tiny_checkpoint, tmp_path / "b", init_from=None, preset="small")
    assert with_defaults(small.replace(learning_rate=None)).learning_rate == 5e-4
    continued = tiny_config(corpus, tiny_checkpoint, tmp_path / "c", learning_rate=None)
    assert with_defaults(continued).learning_rate == 5e-4
    assert with_defaults(tiny_config(corpus, tiny_checkpoint, tmp_path)).learning_rate == 3e-3

    # a fresh tiny preset with its own context; the resolved rate is what the run records
    run = tmp_path / "fresh"
    train(fresh.replace(output=run, n_positions=64, max_steps=1, eval_every=0))
    summary = load_run_summary(run)
    assert summary["train_config"]["learning_rate"] == 2e-3
    assert json.loads((run / "config.json").read_text())["n_positions"] == 64


def test_n_positions_is_refused_with_init_from(tmp_path, corpus, tiny_checkpoint):
    with pytest.raises(ConfigError, match="--n-positions"):
        tiny_config(corpus, tiny_checkpoint, tmp_path, n_positions=128)


@pytest.mark.slow
def test_compiled_training_learns_the_same_weights(tmp_path, corpus, tiny_checkpoint):
    """--compile (the loss function compiled, eager attention on CPU) changes speed only:
    the weights match an uncompiled run, and the export still loads with SDPA attention."""
    import torch

    from codeparrot.models.checkpoint import load_checkpoint

    # dropout off: inductor draws its dropout masks from its own generator
    settings = dict(max_steps=3, dropout=0.0)
    plain = train(tiny_config(corpus, tiny_checkpoint, tmp_path / "plain", **settings))
    compiled = train(
        tiny_config(corpus, tiny_checkpoint, tmp_path / "compiled", compile=True, **settings)
    )
    a, b = read_weights(tmp_path / "plain"), read_weights(tmp_path / "compiled")
    start = read_weights(tiny_checkpoint)
    assert max((a[k] - start[k]).abs().max().item() for k in a) > 1e-3  # it did train
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-4, rtol=1e-4), name
    assert compiled.eval_loss == pytest.approx(plain.eval_loss, abs=1e-4)
    model, _tok, _meta = load_checkpoint(tmp_path / "compiled")
    assert model.config._attn_implementation == "sdpa"
    assert "eager" not in (tmp_path / "compiled" / "config.json").read_text()
