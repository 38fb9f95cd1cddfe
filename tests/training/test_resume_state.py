"""`train --resume` reads only what it wrote, and no file in a run directory runs code."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from codeparrot.errors import CheckpointError
from codeparrot.training import TrainConfig, train
from codeparrot.training.resume_state import load_tree, save_tree


def write_corpus(root: Path) -> Path:
    import gzip
    import json

    docs = [f"def g{i}(n):\n    return [k * {i} for k in range(n)]\n" for i in range(40)]
    for split, part in (("train", docs[:32]), ("valid", docs[32:])):
        (root / split).mkdir(parents=True)
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"content": d}) + "\n" for d in part)
    return root


def tiny_config(corpus: Path, checkpoint: Path, output: Path, **changes) -> TrainConfig:
    settings = dict(
        data=corpus, tokenizer=checkpoint, init_from=checkpoint, output=output,
        seq_length=32, batch_size=2, warmup_steps=1, eval_batches=1, shuffle_buffer=8,
        max_steps=4, eval_every=0, mixed_precision="no", log_with="none", peak_tflops=1.0,
        progress=False,
    )  # fmt: skip
    return TrainConfig.from_recipe("codeparrot", **{**settings, **changes})


class Canary:
    """Unpickling this writes a file: what an attacker's pickle would do instead."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "pwned"))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_checkpoint) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("resume")
    corpus = write_corpus(root / "corpus")
    train(tiny_config(corpus, tiny_checkpoint, root / "run", max_tokens=2 * 2 * 32))
    return corpus, root / "run"


def state_dir(run: Path) -> Path:
    return next((run / "checkpoints").glob("step-*")) / "state"


def copy_of(run: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run, tmp_path / "copy"))


def test_the_state_holds_no_pickle(finished_run):
    _corpus, run = finished_run
    names = sorted(p.name for p in state_dir(run).iterdir())
    assert names == [
        "model.safetensors", "optimizer.bin", "rng-0.json", "rng-0.safetensors",
        "scheduler.bin", "train_state.json", "train_state.safetensors",
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["custom_checkpoint_0.pkl", "random_states_0.pkl", "extra.pt"])
def test_an_unexpected_pickle_is_refused_by_name(finished_run, tiny_checkpoint, tmp_path, name):
    corpus, run = finished_run
    run = copy_of(run, tmp_path)
    canary = tmp_path / "canary"
    planted = state_dir(run) / name
    planted.write_bytes(pickle.dumps(Canary(canary)))
    config = tiny_config(corpus, tiny_checkpoint, run, resume=True)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        train(config)
    assert not canary.exists()
    pickle.loads(planted.read_bytes())  # the planted file is live: unpickled, it writes
    assert canary.read_text() == "pwned"
    planted.unlink()  # without it, the same directory resumes
    assert train(config).step == 4


@pytest.mark.parametrize("name", ["optimizer.bin", "scheduler.bin"])
def test_a_pickle_in_place_of_a_state_file_does_not_run(
    finished_run, tiny_checkpoint, tmp_path, name
):
    corpus, run = finished_run
    run = copy_of(run, tmp_path)
    canary = tmp_path / "canary"
    import torch

    torch.save({"state": Canary(canary)}, state_dir(run) / name)  # what torch.load reads
    config = tiny_config(corpus, tiny_checkpoint, run, resume=True)
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        train(config)
    assert not canary.exists()


def test_the_tree_comes_back_with_its_types():
    import torch

    rng = random.Random(3)
    tree = {
        "step": 7,
        "loss": float("inf"),
        "rng": rng.getstate(),
        "numpy": np.random.default_rng(0).integers(0, 9, (3, 4)).astype(np.int32),
        "tensor": torch.arange(5, dtype=torch.uint8),
        "groups": [{"betas": (0.9, 0.95), "params": [0, 1]}, None],
        0: "an int key",
    }
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        save_tree(tree, Path(d), "t")
        back = load_tree(Path(d), "t")
    assert back["rng"] == tree["rng"] and isinstance(back["rng"], tuple)
    assert back["numpy"].dtype == np.int32 and np.array_equal(back["numpy"], tree["numpy"])
    assert back["tensor"].equal(tree["tensor"])
    assert back["groups"] == tree["groups"] and back[0] == "an int key"
    assert back["step"] == 7 and back["loss"] == float("inf")
