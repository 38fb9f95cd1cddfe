"""``train --init-from``: the tokenizer comes from the checkpoint; a foreign one is refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.training.config import TrainConfig


def write_corpus(root: Path) -> Path:
    for split in ("train", "valid"):
        (root / split).mkdir(parents=True)
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            for i in range(4):
                record = {
                    "repo_name": "r",
                    "path": f"{split}{i}.py",
                    "content": f"x{i} = {i}\n" * 40,
                }
                fh.write(json.dumps(record) + "\n")
    return root


def test_tokenizer_or_init_from_is_required(tmp_path):
    with pytest.raises(ConfigError, match="--tokenizer is required unless --init-from"):
        TrainConfig(data=tmp_path, output=tmp_path / "run")
    config = TrainConfig(data=tmp_path, output=tmp_path / "run", init_from=tmp_path / "ckpt")
    assert config.tokenizer is None


def test_another_tokenizer_than_the_checkpoints_is_refused(tmp_path, tiny_checkpoint):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from codeparrot.training import train

    # Same size (512) as the checkpoint's, so only the ids differ: the size check alone
    # would let it through and the embeddings would be read with the wrong ids.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["SELECT name FROM users WHERE id = 1;\n" * 200], trainer=trainer)
    other = tmp_path / "other_tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(other)

    out = tmp_path / "run"
    config = TrainConfig(
        data=write_corpus(tmp_path / "corpus"),
        output=out,
        init_from=tiny_checkpoint,
        tokenizer=other,
        log_with="none",
        progress=False,
    )
    with pytest.raises(CheckpointError, match="is not the tokenizer of --init-from"):
        train(config)
    assert not out.exists()


def test_init_from_a_directory_that_is_not_a_causal_lm(tmp_path, tiny_checkpoint):
    import shutil

    from codeparrot.training import train

    bad = tmp_path / "classifier"
    shutil.copytree(tiny_checkpoint, bad)
    meta = json.loads((bad / "config.json").read_text())
    meta["architectures"] = ["GPT2ForSequenceClassification"]
    (bad / "config.json").write_text(json.dumps(meta))
    out = tmp_path / "run"
    config = TrainConfig(data=tmp_path, output=out, init_from=bad, log_with="none")
    with pytest.raises(CheckpointError, match="not a causal language model"):
        train(config)
    assert not out.exists()
