"""Shared fixtures: tiny artefacts built inside the test session, never downloaded.

``tiny_checkpoint`` is a checkpoint directory in the project's layout (a GPT-2
model and a byte-level BPE tokenizer side by side) small enough to build in a few
seconds: a 512-token vocabulary trained on a handful of stdlib files and a 2-layer,
64-wide GPT-2. Its weights are random unless a test trains it.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _caches_of_the_session(tmp_path_factory: pytest.TempPathFactory):
    """What loads keep for the next start (the int8 rows of
    codeparrot.generation.int8_cache, transformers' facts of codeparrot.models.start_cache)
    and the tests' recordings an evaluation keeps (codeparrot.eval.recordings: every run
    that executes HumanEval samples records by default, the quickstart's too) go to the
    session's temporary folder, never to the user's cache. The speeds a start
    measured (codeparrot.generation.speeds_cache) are not kept: tests that fix a probe's
    answer must see the probe run; tests/generation/test_speeds_cache.py turns them on."""
    import os

    from codeparrot.eval import recordings
    from codeparrot.generation import int8_cache, speeds_cache
    from codeparrot.models import start_cache

    envs = (int8_cache.ENV, start_cache.ENV, speeds_cache.ENV, recordings.ENV)
    before = {env: os.environ.get(env) for env in envs}
    for env in (int8_cache.ENV, start_cache.ENV, recordings.ENV):
        os.environ[env] = str(tmp_path_factory.mktemp(env.lower()))
    os.environ[speeds_cache.ENV] = "0"
    yield
    for env, value in before.items():
        if value is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = value


STDLIB_SAMPLE = ("textwrap.py", "heapq.py", "bisect.py", "fnmatch.py", "glob.py", "shlex.py")


def stdlib_sources() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(root / name).read_text(encoding="utf-8") for name in STDLIB_SAMPLE]


def build_tiny_tokenizer(texts: list[str], vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=256,
    )


def build_tiny_checkpoint(out: Path, n_positions: int = 256, seed: int = 0) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config

    tokenizer = build_tiny_tokenizer(stdlib_sources())
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer GPT-2 with a 512-token BPE; read-only for tests (copy to modify)."""
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "checkpoint")


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tiny_checkpoint: Path) -> Path:
    """The tokenizer of ``tiny_checkpoint`` (same directory)."""
    return tiny_checkpoint
