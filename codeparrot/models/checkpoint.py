"""Checkpoint directories: save, validate and load (layout in docs/artefacts.md).

A checkpoint is a directory that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` both load, plus ``codeparrot_checkpoint.json``
(step, tokens seen, parameters, preset, eval loss, perplexity, train config,
provenance). Every check here runs before any weights are loaded so that a bad
directory fails in a second with a message that says what is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError
from codeparrot.io import atomic_directory, read_json, write_json

CHECKPOINT_META = "codeparrot_checkpoint.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")


def load_tokenizer(path: str | Path) -> Any:
    """``AutoTokenizer.from_pretrained(path)`` with errors that name the directory."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"tokenizer {path}: no such directory")
    if not any((path / name).exists() for name in TOKENIZER_FILES):
        raise CheckpointError(
            f"tokenizer {path}: no tokenizer.json; expected a directory written by "
            "`codeparrot tokenizer train` or tokenizer.save_pretrained"
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # transformers raises many types for a broken directory
        raise CheckpointError(f"tokenizer {path}: cannot be loaded ({e})") from e
    if tokenizer.eos_token_id is None:
        raise CheckpointError(f"tokenizer {path}: has no end-of-text (eos) token")
    return tokenizer


def read_model_config(path: str | Path) -> dict[str, Any]:
    """The checkpoint's ``config.json`` after checking that it describes a causal LM."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: no such directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(
            f"checkpoint {path}: no config.json; expected a directory written by "
            "`codeparrot init`, `codeparrot train` or save_pretrained"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {path}: config.json is not valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint {path}: config.json is not a JSON object")
    architectures = config.get("architectures") or []
    if architectures and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        raise CheckpointError(
            f"checkpoint {path}: architectures {architectures} is not a causal language model"
        )
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise CheckpointError(
            f"checkpoint {path}: no weights (model.safetensors) next to config.json"
        )
    return config


def check_vocab(tokenizer: Any, model_vocab_size: int, *, where: str) -> None:
    """Every token id the tokenizer can produce must have a row in the embedding."""
    needed = len(tokenizer)
    if needed > model_vocab_size:
        raise CheckpointError(
            f"{where}: the tokenizer has {needed} tokens but the model's vocabulary has "
            f"{model_vocab_size} rows; ids >= {model_vocab_size} would crash the embedding. "
            "Use the tokenizer the model was built with."
        )


def check_sequence_length(seq_length: int, n_positions: int, *, where: str) -> None:
    if seq_length > n_positions:
        raise CheckpointError(
            f"{where}: --seq-length {seq_length} is above the model's {n_positions} positions"
        )


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """``codeparrot_checkpoint.json`` ({} for a foreign checkpoint without one)."""
    meta_file = Path(path) / CHECKPOINT_META
    if not meta_file.exists():
        return {}
    try:
        meta = read_json(meta_file)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {path}: {CHECKPOINT_META} is corrupted ({e})") from e
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {path}: {CHECKPOINT_META} is not a JSON object")
    return meta


def validate_checkpoint(path: str | Path, tokenizer: Any | None = None) -> dict[str, Any]:
    """Check a checkpoint directory without loading weights; returns its config.json.

    With ``tokenizer`` (else the directory's own), the vocabulary must fit the model.
    """
    path = Path(path)
    config = read_model_config(path)
    read_checkpoint_meta(path)
    if tokenizer is None:
        tokenizer = load_tokenizer(path)
    vocab = config.get("vocab_size")
    if isinstance(vocab, int):
        check_vocab(tokenizer, vocab, where=f"checkpoint {path}")
    return config


def load_checkpoint(
    path: str | Path, *, tokenizer: Any | None = None, attn_implementation: str = "sdpa"
) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, meta) of a checkpoint directory, validated first."""
    path = Path(path)
    if tokenizer is None:
        tokenizer = load_tokenizer(path)
    validate_checkpoint(path, tokenizer)
    meta = read_checkpoint_meta(path)
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn_implementation)
    except Exception as e:  # a truncated safetensors file raises from deep inside
        raise CheckpointError(f"checkpoint {path}: weights cannot be loaded ({e})") from e
    return model, tokenizer, meta


def write_checkpoint_files(
    model: Any, tokenizer: Any, directory: Path, meta: dict[str, Any]
) -> None:
    """Write model, tokenizer and metadata into an existing (temporary) directory."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    write_json(directory / CHECKPOINT_META, meta)


def save_checkpoint(
    model: Any, tokenizer: Any, path: str | Path, meta: dict[str, Any], *, overwrite: bool = False
) -> Path:
    """Save a complete checkpoint directory atomically (it appears whole or not at all)."""
    path = Path(path)
    try:
        with atomic_directory(path, overwrite=overwrite) as tmp:
            write_checkpoint_files(model, tokenizer, tmp, meta)
    except FileExistsError as e:
        raise CheckpointError(f"checkpoint {path}: already exists; choose another --output") from e
    return path


def export_into(source: Path, target: Path, *, skip: tuple[str, ...] = ("state",)) -> None:
    """Copy a checkpoint's files into ``target`` (a run directory), one atomic rename each.

    ``codeparrot_checkpoint.json`` goes last: once it names a step, the weights next to it
    are that step's.
    """
    target.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in source.iterdir() if p.is_file() and p.name not in skip)
    names.sort(key=lambda n: n == CHECKPOINT_META)
    for name in names:
        tmp = target / f".{name}.export-{os.getpid()}"
        shutil.copyfile(source / name, tmp)
        os.replace(tmp, target / name)
