"""Packing, shuffling, resumable positions and pretokenized shards of the training data."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from codeparrot.errors import DataError
from codeparrot.training.data import (
    Batches,
    PackedStream,
    TokenShardStream,
    encode_batch,
    pretokenize,
    shard_files,
)

DOCS = [f"def f{i}(x):\n    return x * {i} + {i % 3}\n" * (1 + i % 4) for i in range(30)]


def write_split(root: Path, split: str, docs: list[str], shards: int = 2) -> Path:
    (root / split).mkdir(parents=True, exist_ok=True)
    per = -(-len(docs) // shards)
    for s in range(shards):
        with gzip.open(root / split / f"shard-{s:05d}.jsonl.gz", "wt", encoding="utf-8") as fh:
            for d in docs[s * per : (s + 1) * per]:
                fh.write(json.dumps({"content": d, "path": "x.py"}) + "\n")
    return root


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture
def files(tmp_path) -> list[Path]:
    return shard_files(write_split(tmp_path / "corpus", "train", DOCS), "train")


def expected_stream(tokenizer, docs: list[str]) -> list[int]:
    out: list[int] = []
    for ids in encode_batch(tokenizer, docs):
        out += [*ids, tokenizer.eos_token_id]
    return out


def test_packing_concatenates_documents_with_eos(files, tokenizer):
    stream = PackedStream(files, tokenizer, 32, shuffle_buffer=0, loop=False)
    seqs = []
    while True:
        try:
            seqs.append(stream.next_sequence())
        except StopIteration:
            break
    assert all(s.shape == (32,) for s in seqs)
    flat = np.concatenate(seqs).tolist()
    want = expected_stream(tokenizer, DOCS)
    assert flat == want[: len(flat)] and len(want) - len(flat) < 32  # only the tail is left
    assert flat.count(tokenizer.eos_token_id) >= len(DOCS) - 1


def test_shuffle_buffer_is_seeded_and_loops_over_epochs(files, tokenizer):
    def first(seed: int, n: int = 60) -> list[list[int]]:
        s = PackedStream(files, tokenizer, 16, shuffle_buffer=8, seed=seed)
        return [s.next_sequence().tolist() for _ in range(n)]

    assert first(1) == first(1)
    assert first(1) != first(2)
    in_order = PackedStream(files, tokenizer, 16, shuffle_buffer=0)
    assert first(1) != [in_order.next_sequence().tolist() for _ in range(60)]
    many = PackedStream(files, tokenizer, 16, shuffle_buffer=8, seed=0)
    n_tokens = len(expected_stream(tokenizer, DOCS))
    for _ in range(3 * n_tokens // 16):  # three passes over the corpus
        many.next_sequence()
    assert many.epoch >= 2


def drain(stream: PackedStream) -> list[list[int]]:
    out = []
    while True:
        try:
            out.append(stream.next_sequence().tolist())
        except StopIteration:
            return out


def test_sequence_buffer_spreads_the_windows_of_a_long_document(tmp_path, tokenizer):
    docs = ["def long(x):\n" + "    x = x * 3 + 1\n" * 40, *DOCS]
    files = shard_files(write_split(tmp_path / "c", "train", docs, shards=1), "train")
    packed = drain(PackedStream(files, tokenizer, 16, shuffle_buffer=0, loop=False))

    def shuffled_stream() -> PackedStream:
        return PackedStream(
            files, tokenizer, 16, shuffle_buffer=0, sequence_buffer=64, seed=1, loop=False
        )

    shuffled = drain(shuffled_stream())
    assert sorted(shuffled) == sorted(packed)  # every window once, none lost or made up
    n_long = len(expected_stream(tokenizer, docs[:1])) // 16
    assert 16 <= n_long < 32 < len(packed)  # without the buffer, a batch of 16 is all `long`
    long_windows = {tuple(w) for w in packed[:n_long]}
    assert sum(tuple(w) in long_windows for w in shuffled[:16]) < 12  # ~16 x 20/64 expected
    assert drain(shuffled_stream()) == shuffled  # seeded


@pytest.mark.parametrize("sequence_buffer", [0, 12])
@pytest.mark.parametrize("consumed", [0, 5, 37, 200])
def test_packed_stream_resumes_from_its_state(files, tokenizer, consumed, sequence_buffer):
    def stream(seed: int) -> PackedStream:
        return PackedStream(
            files, tokenizer, 24, shuffle_buffer=8, sequence_buffer=sequence_buffer, seed=seed
        )

    a = stream(7)
    for _ in range(consumed):
        a.next_sequence()
    state = pickle.loads(pickle.dumps(a.state_dict()))  # as stored by save_state
    b = stream(999)  # the seed comes from the state
    b.load_state_dict(state)
    for _ in range(60):
        assert a.next_sequence().tolist() == b.next_sequence().tolist()


def test_resume_refuses_changed_shards(files, tokenizer, tmp_path):
    state = PackedStream(files, tokenizer, 24).state_dict()
    other = shard_files(write_split(tmp_path / "other", "train", DOCS, shards=3), "train")
    with pytest.raises(DataError, match="shards changed"):
        PackedStream(other, tokenizer, 24).load_state_dict(state)


def test_pretokenized_shards_hold_the_same_tokens(files, tokenizer, tmp_path):
    out = tmp_path / "tokens" / "train.bin"
    meta = pretokenize(files, tokenizer, out)
    assert meta["dtype"] == "uint16"  # a 512-token vocabulary fits
    tokens = np.fromfile(out, dtype=np.uint16).tolist()
    assert tokens == expected_stream(tokenizer, DOCS) and meta["tokens"] == len(tokens)
    mtime = out.stat().st_mtime_ns
    assert pretokenize(files, tokenizer, out) == meta and out.stat().st_mtime_ns == mtime  # reused

    stream = TokenShardStream(out, 16, seed=3)
    visited = sorted(stream.next_sequence().tolist() for _ in range(stream.n_windows))
    every = sorted(tokens[i * 16 : (i + 1) * 16] for i in range(stream.n_windows))
    assert visited == every  # one epoch visits every window once
    assert stream.index == stream.n_windows and stream.epoch == 0
    for _ in range(5):
        stream.next_sequence()
    again = TokenShardStream(out, 16, seed=3)
    again.load_state_dict(pickle.loads(pickle.dumps(stream.state_dict())))
    assert stream.epoch == 1
    for _ in range(40):
        assert stream.next_sequence().tolist() == again.next_sequence().tolist()


def test_process_slices_make_up_the_global_batch(files, tokenizer):
    def source():
        return PackedStream(files, tokenizer, 16, shuffle_buffer=8, seed=5)

    single = Batches(source(), 4)
    ranks = [Batches(source(), 2, rank=r, world_size=2) for r in range(2)]
    for _ in range(5):
        assert np.array_equal(single.next_batch(), np.concatenate([b.next_batch() for b in ranks]))


def test_bad_corpora_are_reported(tmp_path, tokenizer):
    with pytest.raises(DataError, match="no such directory"):
        shard_files(tmp_path / "missing", "train")
    write_split(tmp_path / "c", "train", DOCS)
    with pytest.raises(DataError, match=r"no valid/\*\.jsonl\.gz"):
        shard_files(tmp_path / "c", "valid")

    bad = tmp_path / "bad" / "train"
    bad.mkdir(parents=True)
    with gzip.open(bad / "shard-00000.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"content": "x = 1\n"}) + "\n{truncated\n")
    stream = PackedStream(shard_files(tmp_path / "bad", "train"), tokenizer, 8, shuffle_buffer=0)
    with pytest.raises(DataError, match=r"shard-00000\.jsonl\.gz:2"):
        for _ in range(10):
            stream.next_sequence()

    empty = tmp_path / "empty" / "train"
    empty.mkdir(parents=True)
    with gzip.open(empty / "shard-00000.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"content": ""}) + "\n")
    stream = PackedStream(shard_files(tmp_path / "empty", "train"), tokenizer, 8)
    with pytest.raises(DataError, match="no non-empty documents"):
        stream.next_sequence()


def test_training_from_pretokenized_shards(tmp_path, tiny_checkpoint):
    from codeparrot.training import TrainConfig, train

    corpus = write_split(write_split(tmp_path / "corpus", "train", DOCS), "valid", DOCS[:6], 1)
    config = TrainConfig.from_recipe(
        "codeparrot",
        data=corpus, tokenizer=tiny_checkpoint, init_from=tiny_checkpoint,
        output=tmp_path / "run", pretokenized=True, seq_length=32, batch_size=2,
        max_steps=2, warmup_steps=1, eval_batches=1, log_with="none", mixed_precision="no",
        peak_tflops=1.0, progress=False, gradient_checkpointing=True,
        gradient_accumulation_steps=2, dropout=0.0,
    )  # fmt: skip
    result = train(config)
    assert result.step == 2 and result.eval_loss is not None
    assert result.tokens_seen == 2 * 2 * 2 * 32  # steps x micro-batches x batch x length
    assert (tmp_path / "run" / "tokens" / "train.bin").exists()
    assert (tmp_path / "run" / "tokens" / "valid.json").exists()
    # both micro-batches reach each step: the same rows as one batch of 4, the same weights
    import torch

    from .test_training_loop import read_weights

    whole = train(config.replace(output=tmp_path / "whole", batch_size=4,
                                 gradient_accumulation_steps=1))  # fmt: skip
    assert whole.tokens_seen == result.tokens_seen
    a, b = read_weights(tmp_path / "run"), read_weights(tmp_path / "whole")
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
