"""Checkpoint directories: save, validate and load (layout in docs/artefacts.md).

A checkpoint is a directory that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` both load, plus ``codeparrot_checkpoint.json``
(step, tokens seen, parameters, preset, eval loss, perplexity, train config,
provenance). Every check here runs before any weights are loaded so that a bad
directory fails in a second with a message that says what is wrong.

This is the one loader: the engine (and through it the playground, the language server
and the harness), ``train --init-from`` and ``finetune`` all call :func:`load_checkpoint`
or :func:`validate_checkpoint`. A checkpoint never runs code: a ``config.json`` or
``tokenizer_config.json`` that asks for custom code (``auto_map``), or a ``model_type``
transformers does not know, is refused before transformers reads it, and every
``from_pretrained`` call pins ``trust_remote_code=False`` (so transformers never asks on
standard input either).

Wherever a checkpoint is taken it may also be a Hub id, ``ORG/NAME`` or ``ORG/NAME@REV``
(:func:`resolve_checkpoint`: fetched through ``huggingface_hub`` into its cache, configs,
tokenizers and safetensors only; a local directory of the same spelling wins), or a
``peft`` adapter directory, loaded on top of its base (:mod:`codeparrot.models.adapter`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codeparrot.errors import CheckpointError
from codeparrot.families import always_shipped
from codeparrot.io import atomic_directory, read_json, write_json
from codeparrot.models.adapter import adapter_base, apply_adapter, is_adapter
from codeparrot.models.bounds import check_checkpoint_bounds, refuse_custom_code

if TYPE_CHECKING:
    from codeparrot.hub import ModelRef

CHECKPOINT_META = "codeparrot_checkpoint.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")
TOKENIZER_CONFIG = "tokenizer_config.json"

logger = logging.getLogger(__name__)
# model types that every transformers release pyproject allows ships (the families'
# records say which), so that refusing an unknown one needs no import of transformers
ALWAYS_SHIPPED = always_shipped()


def resolve_checkpoint(path: str | Path | ModelRef, revision: str | None = None) -> Path:
    """The local directory of a checkpoint as a command was given it.

    A directory that exists wins; ``ORG/NAME`` (``ORG/NAME@REV``, or ``revision``) is a
    Hub id, fetched into (or found in) the Hugging Face cache with configs, tokenizer files
    and safetensors weights only; anything else comes back as it was, for the checks to
    report. Every command that takes a checkpoint goes through here (the loader's
    functions call it), so every check below applies to downloaded files too.
    """
    from codeparrot.hub import resolve_model

    return resolve_model(path, revision).path


def load_tokenizer(path: str | Path, *, revision: str | None = None) -> Any:
    """``AutoTokenizer.from_pretrained(path)`` with errors that name the directory.

    It never runs code from the directory. In a checkpoint directory (one with a
    ``config.json``) the tokenizer's ``model_max_length`` is set to the model's context,
    also for checkpoints written before the export recorded it. An adapter directory
    without a tokenizer of its own gives its base model's.
    """
    path = resolve_checkpoint(path, revision)
    model_dir = path
    if path.is_dir() and is_adapter(path):
        model_dir = adapter_base(path)
        if not any((path / name).exists() for name in TOKENIZER_FILES):
            path = model_dir
    if not path.is_dir():
        raise CheckpointError(f"tokenizer {path}: no such directory")
    if not any((path / name).exists() for name in TOKENIZER_FILES):
        raise CheckpointError(
            f"tokenizer {path}: no tokenizer.json; expected a directory written by "
            "`codeparrot tokenizer train` or tokenizer.save_pretrained"
        )
    model_config = _read_object(model_dir / "config.json", "checkpoint")
    refuse_custom_code(model_dir / "config.json", model_config)
    tokenizer_config = _read_object(path / TOKENIZER_CONFIG, "tokenizer")
    refuse_custom_code(path / TOKENIZER_CONFIG, tokenizer_config)
    from transformers import AutoTokenizer

    # CodeLlama's class appends its fill token ("<FILL_ME>") to the vocabulary (one id
    # past the model's 32,016 rows) and makes an infilling prompt of any text holding it
    # (raising on two): a user's code is only ever text, and infilling prompts are laid
    # out by codeparrot.fim
    no_fill = {"fill_token": None} if _names_codellama(tokenizer_config) else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, **no_fill)
    except Exception as e:  # transformers raises many types for a broken directory
        raise CheckpointError(f"tokenizer {path}: cannot be loaded ({e})") from e
    if tokenizer.eos_token_id is None:
        raise CheckpointError(f"tokenizer {path}: has no end-of-text (eos) token")
    if add_bos_as_configured(tokenizer, tokenizer_config):
        logger.info(
            "tokenizer %s: tokenizer_config.json asks for %s first (add_bos_token), which "
            "transformers' %s does not add: it is added",
            path,
            tokenizer.bos_token,
            type(tokenizer).__name__,
        )
    if model_config.get("n_positions") or model_config.get("max_position_embeddings"):
        fit_to_context(tokenizer, context_length(model_config))
    return tokenizer


def _names_codellama(tokenizer_config: dict[str, Any]) -> bool:
    name = tokenizer_config.get("tokenizer_class")
    return isinstance(name, str) and name.removesuffix("Fast") == "CodeLlamaTokenizer"


def add_bos_as_configured(tokenizer: Any, tokenizer_config: dict[str, Any]) -> bool:
    """Make ``tokenizer`` put its BOS before a text where ``tokenizer_config``
    (tokenizer_config.json) says ``"add_bos_token": true`` and it does not already.

    transformers 5 loads a byte-level tokenizer.json whose config names
    ``LlamaTokenizerFast`` (DeepSeek-Coder's does) as ``TokenizersBackend``, which ignores
    ``add_bos_token``; transformers 4 put the BOS in the post-processor, and the model was
    trained and evaluated after it. The BOS is added the way transformers 4 did, after the
    post-processor the tokenizer has. Returns whether the tokenizer was changed."""
    from codeparrot.fim import leading_special_ids

    backend = getattr(tokenizer, "backend_tokenizer", None)
    bos, bos_id = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "bos_token_id", None)
    if tokenizer_config.get("add_bos_token") is not True or backend is None:
        return False
    if not isinstance(bos, str) or bos_id is None or leading_special_ids(tokenizer):
        return False
    from tokenizers import processors

    template = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0",
        pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
        special_tokens=[(bos, int(bos_id))],
    )
    before = backend.post_processor
    backend.post_processor = template if before is None else processors.Sequence([before, template])
    return True


def fit_to_context(tokenizer: Any, n_positions: int) -> None:
    """The tokenizer's ``model_max_length`` is the model's context (``n_positions``).

    A tokenizer saved with transformers' default (1024) would otherwise call a prompt
    that fits a longer model too long, or let one through that a shorter one cannot take.
    """
    tokenizer.model_max_length = int(n_positions)


def context_length(config: dict[str, Any]) -> int:
    """Positions of a model from its ``config.json`` (GPT-2's name, or the common one)."""
    return int(config.get("n_positions") or config.get("max_position_embeddings") or 1024)


def _read_object(file: Path, what: str) -> dict[str, Any]:
    """A JSON object file ({} when it does not exist)."""
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{what} {file.parent}: {file.name} is not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{what} {file.parent}: {file.name} is not a JSON object")
    return data


def refuse_unknown_model_type(file: Path, config: dict[str, Any]) -> None:
    """A ``model_type`` transformers does not ship would need the checkpoint's own code."""
    model_type = config.get("model_type")
    if model_type in ALWAYS_SHIPPED:
        return  # no need to import transformers to know
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise CheckpointError(
            f"{file}: model_type {model_type!r} is not an architecture transformers ships; "
            "codeparrot never runs code from a checkpoint to load one"
        )


def check_checkpoint_files(path: str | Path, *, revision: str | None = None) -> dict[str, Any]:
    """The checks of :func:`read_model_config` that need neither torch nor transformers
    (a directory, a ``config.json`` object that asks for no custom code, of a causal LM,
    with weights beside it); its ``config.json``. For a process to refuse a bad
    checkpoint within a second of starting; :func:`read_model_config` runs them all.

    For an adapter directory: its base model's (the adapter's own config checked too).
    """
    path, config = _config_of(path, revision)
    _check_causal_lm(path, config)
    return config


def read_model_config(
    path: str | Path, *, revision: str | None = None, defaults: dict[str, int] | None = None
) -> dict[str, Any]:
    """The checkpoint's ``config.json`` after checking that it describes a causal LM of an
    architecture transformers ships, within the size bounds.

    For an adapter directory: its base model's (the adapter's own config checked too).
    ``defaults``: the sizes transformers gives the family where config.json leaves them
    out, as an earlier load kept them (:mod:`codeparrot.models.start_cache`); by default
    transformers says.
    """
    path, config = _config_of(path, revision)
    config_file = path / "config.json"
    refuse_unknown_model_type(config_file, config)
    _check_causal_lm(path, config)
    # sizes, weight index, torch archives
    check_checkpoint_bounds(path, config_file, config, defaults=defaults)
    return config


def _config_of(path: str | Path, revision: str | None) -> tuple[Path, dict[str, Any]]:
    """(the model's directory, its ``config.json``): resolved, an adapter's base followed,
    the file read and refused if it asks for custom code."""
    path = resolve_checkpoint(path, revision)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: no such directory")
    if is_adapter(path):
        return _config_of(adapter_base(path), None)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(
            f"checkpoint {path}: no config.json; expected a directory written by "
            "`codeparrot init`, `codeparrot train` or save_pretrained"
        )
    config = _read_object(config_file, "checkpoint")
    refuse_custom_code(config_file, config)
    return path, config


def _check_causal_lm(path: Path, config: dict[str, Any]) -> None:
    """A causal LM's architecture (where named), and weights beside ``config.json``."""
    architectures = config.get("architectures") or []
    if architectures and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        raise CheckpointError(
            f"checkpoint {path}: architectures {architectures} is not a causal language model "
            f"(its weights do not fit a {config.get('model_type')} causal LM)"
        )
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise CheckpointError(
            f"checkpoint {path}: not a loadable causal LM: no weights (model.safetensors) "
            "next to config.json"
        )


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
    """A requested sequence length must fit the model's positions."""
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


def trained_to_infill(meta: dict[str, Any], *, _depth: int = 0) -> bool | None:
    """Did the checkpoint learn to fill in the middle? None when its metadata cannot say.

    A tokenizer may carry the FIM sentinels while the model never trained on them (``train
    --fim-rate 0``); such a model must be prompted with the prefix alone. The answer is the
    metadata's ``fim_trained`` (written since it was added: this run or the checkpoint it
    started from trained with FIM examples), else the run's own ``fim_rate`` or that of the
    checkpoint it started from; None for a checkpoint without our metadata (a foreign one,
    whose tokenizer's sentinels decide).
    """
    if "fim_trained" in meta:
        return bool(meta["fim_trained"])
    cfg = meta.get("train_config")
    if not isinstance(cfg, dict) or "fim_rate" not in cfg:
        return None
    if cfg["fim_rate"]:
        return True
    base = cfg.get("init_from")
    if base and _depth < 8:
        try:
            return trained_to_infill(read_checkpoint_meta(base), _depth=_depth + 1) or False
        except CheckpointError:
            return False
    return False


def validate_checkpoint(
    path: str | Path,
    tokenizer: Any | None = None,
    *,
    seq_length: int | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    """Check a checkpoint directory without loading weights; returns its config.json.

    Checks: config.json present, a causal LM transformers ships (no custom code), weights
    present, the metadata readable, a tokenizer with an end-of-text token whose vocabulary
    fits the embeddings (``tokenizer``, else the directory's own), and ``seq_length`` (if
    given) within the model's positions. ``path`` may be a Hub id or an adapter directory
    (:func:`resolve_checkpoint`; an adapter's base gets the checks).
    """
    return _checked(resolve_checkpoint(path, revision), tokenizer, seq_length)[0]


def _checked(
    path: Path,
    tokenizer: Any | None,
    seq_length: int | None,
    *,
    defaults: dict[str, int] | None = None,
) -> tuple[dict[str, Any], Any]:
    """(config.json, tokenizer) after every check that needs no weights (``defaults``:
    as :func:`read_model_config`)."""
    config = read_model_config(path, defaults=defaults)
    read_checkpoint_meta(path)
    if tokenizer is None:
        tokenizer = load_tokenizer(path)
    elif tokenizer.eos_token_id is None:
        raise CheckpointError(f"checkpoint {path}: the tokenizer has no end-of-text (eos) token")
    vocab = config.get("vocab_size")
    if isinstance(vocab, int):
        check_vocab(tokenizer, vocab, where=f"checkpoint {path}")
    if seq_length is not None:
        check_sequence_length(seq_length, context_length(config), where=f"checkpoint {path}")
    return config, tokenizer


def _from_pretrained(auto: Any, path: Path, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``auto.from_pretrained``; an architecture that this transformers cannot run with
    the attention asked for (CodeGen has no SDPA before some 5.x releases) gets its own."""
    try:
        return auto.from_pretrained(path, **kwargs)
    except ValueError as e:
        if "attn_implementation" not in kwargs or "scaled_dot_product_attention" not in str(e):
            raise
        kwargs = {k: v for k, v in kwargs.items() if k != "attn_implementation"}
        return auto.from_pretrained(path, **kwargs)


def load_checkpoint(
    path: str | Path,
    *,
    tokenizer: Any | None = None,
    attn_implementation: str | None = "sdpa",
    seq_length: int | None = None,
    revision: str | None = None,
    merge_adapter: bool = True,
) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, meta) of a checkpoint directory or Hub id, validated first.

    Every check of :func:`validate_checkpoint`, then the weights must cover the whole
    model: transformers fills weights a file lacks with random ones, and a model that
    "loads" that way (another architecture's weights, say) only produces noise.
    ``attn_implementation=None`` leaves the choice to transformers.

    An adapter directory loads its base model (every check applies to it) and applies the
    adapter, merged into the weights unless ``merge_adapter=False`` (a ``peft`` model).
    """
    path = resolve_checkpoint(path, revision)
    if path.is_dir() and is_adapter(path):
        return _load_adapter(path, tokenizer, attn_implementation, seq_length, merge_adapter)
    config, tokenizer = _checked(path, tokenizer, seq_length)
    meta = read_checkpoint_meta(path)
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"trust_remote_code": False, "output_loading_info": True}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model, info = _from_pretrained(AutoModelForCausalLM, path, kwargs)
    except Exception as e:  # a truncated safetensors file raises from deep inside
        raise CheckpointError(
            f"checkpoint {path}: weights cannot be loaded, not a loadable causal LM ({e})"
        ) from e
    missing = sorted(info.get("missing_keys") or ()) + sorted(info.get("mismatched_keys") or ())
    if missing:
        shown = ", ".join(str(k) for k in missing[:3])
        raise CheckpointError(
            f"checkpoint {path}: its weights do not fit a {model.config.model_type} causal "
            f"LM ({len(missing)} missing or of the wrong shape, e.g. {shown})"
        )
    check_vocab(tokenizer, model.config.vocab_size, where=f"checkpoint {path}")
    fit_to_context(tokenizer, context_length(config))
    _float_where_bf16_is_slow(model)
    return model, tokenizer, meta


def _load_adapter(
    path: Path,
    tokenizer: Any | None,
    attn_implementation: str | None,
    seq_length: int | None,
    merge: bool,
) -> tuple[Any, Any, dict[str, Any]]:
    """(base model with the adapter applied, tokenizer, meta) of an adapter directory."""
    base = adapter_base(path)
    if tokenizer is None:
        tokenizer = load_tokenizer(path)
    model, tokenizer, base_meta = load_checkpoint(
        base, tokenizer=tokenizer, attn_implementation=attn_implementation, seq_length=seq_length
    )
    model = apply_adapter(model, path, merge=merge)
    meta = read_checkpoint_meta(path) or base_meta
    return model, tokenizer, meta


def _float_where_bf16_is_slow(model: Any) -> None:
    """A bf16 checkpoint (loaded onto the CPU) runs in fp32 where this CPU emulates bf16."""
    import torch

    from codeparrot.precision import cpu_has_fast_bf16

    if model.dtype == torch.bfloat16 and not cpu_has_fast_bf16():
        model.float()


def write_checkpoint_files(
    model: Any,
    tokenizer: Any,
    directory: Path,
    meta: dict[str, Any],
    *,
    state_dict: dict[str, Any] | None = None,
) -> None:
    """Write model, tokenizer and metadata into an existing (temporary) directory.

    The tokenizer is saved with ``model_max_length`` = the model's context, so that
    whoever loads the pair is told the real limit (the tokenizer stage cannot know it).
    ``state_dict``: the weights to write instead of the model's own (a sharded model's,
    gathered whole)."""
    model.save_pretrained(directory, state_dict=state_dict)
    previous = tokenizer.model_max_length
    fit_to_context(tokenizer, context_length(model.config.to_dict()))
    try:
        tokenizer.save_pretrained(directory)
    finally:
        tokenizer.model_max_length = previous  # the caller's object is left as it was
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
