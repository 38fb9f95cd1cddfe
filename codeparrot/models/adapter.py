"""LoRA (and other ``peft``) adapters: a directory the loader takes like a checkpoint.

An adapter directory holds ``adapter_config.json`` and ``adapter_model.safetensors`` (as
``peft`` saves them), optionally its tokenizer and ``codeparrot_checkpoint.json``. Its base
model is ``base_model_name_or_path``: a local directory (absolute, relative to the working
directory, or relative to the adapter) or a Hub id at the recorded ``revision``. The loader
loads the base with every check, applies the adapter and merges it, so the engine sees a
plain model of the base's architecture (its fast paths included).

The adapter's own config is checked like a checkpoint's: no ``auto_map``, and its weights
must be safetensors (``peft`` would unpickle an ``adapter_model.bin``) of floats. What it
asks of ``peft`` is checked first too (:mod:`codeparrot.models.adapter_bounds`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def is_adapter(path: Path) -> bool:
    """A ``peft`` adapter directory (it has ``adapter_config.json``)."""
    return (path / ADAPTER_CONFIG).is_file()


def read_adapter_config(path: Path) -> dict[str, Any]:
    """``adapter_config.json`` after the checks a checkpoint's config gets."""
    from codeparrot.models.bounds import refuse_custom_code

    file = path / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"adapter {path}: {ADAPTER_CONFIG} is not valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"adapter {path}: {ADAPTER_CONFIG} is not a JSON object")
    refuse_custom_code(file, config)
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise CheckpointError(
            f"adapter {path}: {ADAPTER_CONFIG} names no base model (base_model_name_or_path)"
        )
    if not (path / ADAPTER_WEIGHTS).is_file():
        raise CheckpointError(
            f"adapter {path}: no {ADAPTER_WEIGHTS}; codeparrot loads adapter weights from "
            "safetensors only (never a pickled adapter_model.bin)"
        )
    return config


def adapter_base(path: Path, config: dict[str, Any] | None = None) -> Path:
    """The local directory of the adapter's base model (fetched when it is a Hub id)."""
    from codeparrot.errors import CodeparrotError
    from codeparrot.hub import looks_like_hub_id, resolve_model

    config = config if config is not None else read_adapter_config(path)
    base = str(config["base_model_name_or_path"])
    revision = config.get("revision") or None
    candidates = [Path(base)]
    if not Path(base).is_absolute():
        candidates.append(path / base)  # a base saved next to the adapter
    for candidate in candidates:
        if candidate.is_dir():
            found = candidate
            break
    else:
        if not looks_like_hub_id(base):
            raise CheckpointError(
                f"adapter {path}: its base model {base!r} cannot be found (no such directory, "
                f"nor a Hub id); put the base there or edit base_model_name_or_path in "
                f"{ADAPTER_CONFIG}"
            )
        try:
            found = resolve_model(base, revision).path
        except CodeparrotError as e:
            raise CheckpointError(
                f"adapter {path}: its base model {base!r} cannot be found: {e}"
            ) from e
    if found.resolve() == path.resolve() or is_adapter(found):
        raise CheckpointError(
            f"adapter {path}: its base model {base!r} is an adapter too; an adapter applies "
            "to a full checkpoint"
        )
    return found


def apply_adapter(model: Any, path: Path, *, merge: bool = True) -> Any:
    """The base ``model`` with the adapter at ``path`` applied (merged into its weights)."""
    from peft import PeftModel

    from codeparrot.models.adapter_bounds import checked_lora_config
    from codeparrot.models.bounds import safetensors_dtypes

    lora = checked_lora_config(path, read_adapter_config(path), model)
    for name, dtype in safetensors_dtypes(path / ADAPTER_WEIGHTS).items():
        if dtype not in ("F16", "BF16", "F32", "F64"):
            raise CheckpointError(
                f"adapter {path}: tensor {name[:200]!r} of {ADAPTER_WEIGHTS} is stored as "
                f"{dtype[:20]}; an adapter's weights must be floats"
            )
    try:
        peft_model = PeftModel.from_pretrained(model, str(path), is_trainable=False, config=lora)
    except Exception as e:  # peft raises many types for a mismatched adapter
        raise CheckpointError(
            f"adapter {path}: does not fit its base model ({type(e).__name__}: {e})"
        ) from e
    return peft_model.merge_and_unload() if merge else peft_model


__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "adapter_base",
    "apply_adapter",
    "is_adapter",
    "read_adapter_config",
]
