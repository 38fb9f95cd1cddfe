"""What an ``adapter_config.json`` may ask of ``peft``, checked before ``peft`` sees it.

``peft`` reads several fields of the file as regular expressions and others as sizes or
instructions, and acts on them while it builds the adapter around the base model. From a
file that came from elsewhere these were hostile: a regex in ``target_modules`` hung a
load past 90 s, one in ``rank_pattern`` took it from ~16 s to 83 s, ``"r": 262144``
allocated 4.5 GiB before a shape mismatch refused it, and ``"init_lora_weights":
"pissa"`` silently rewrote the base weights. So, for a LoRA adapter (the only kind
codeparrot loads):

- module names (``target_modules``, ``exclude_modules``, ``modules_to_save``,
  ``target_parameters`` and the keys of ``rank_pattern`` and ``alpha_pattern``) must be
  plain dotted names, matched literally as peft matches a list (the name or its suffix);
- ``r`` and every rank in ``rank_pattern`` must be positive integers no larger than the
  smaller dimension of every layer they apply to, checked against the base model before
  anything is built;
- the adapter is built with ``init_lora_weights=False`` (its weights come from the file),
  and fields that change the model beyond the adapter (``layer_replication``, Megatron
  layers) are refused.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError

ADAPTER_CONFIG = "adapter_config.json"
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*$")
MAX_NAMES = 1024
MAX_NAME_CHARS = 200
# Fields that change the base model beyond adding the adapter's layers: refused unless
# they hold their harmless default.
_REFUSED = {"layer_replication": None, "megatron_config": None}
_NAME_LISTS = ("target_modules", "exclude_modules", "modules_to_save", "target_parameters")


def _problem(path: Path, field: str, what: str) -> CheckpointError:
    return CheckpointError(f"adapter {path}: {ADAPTER_CONFIG}: {field} {what}")


def _plain_names(path: Path, field: str, value: Any) -> list[str]:
    """``value`` as a list of literal module names (None: empty)."""
    if value is None:
        return []
    if isinstance(value, str):
        raise _problem(
            path,
            field,
            f"is a string ({value[:80]!r}), which peft reads as a regular expression; "
            "codeparrot takes a list of module names only",
        )
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise _problem(path, field, f"must be a list of at most {MAX_NAMES} module names")
    for name in value:
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not _PLAIN_NAME.match(name):
            raise _problem(
                path,
                field,
                f"holds {str(name)[:80]!r}, which is not a plain module name (letters, digits, "
                "'_' and '.'); peft would read it as a regular expression",
            )
    return list(value)


def _rank(path: Path, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _problem(path, field, f"must be a positive integer, not {str(value)[:40]!r}")
    return value


def _pattern(path: Path, field: str, value: Any, *, rank: bool) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_NAMES:
        raise _problem(path, field, f"must be an object of at most {MAX_NAMES} module names")
    _plain_names(path, field, list(value))
    for key, item in value.items():
        if rank:
            _rank(path, f"{field}[{key!r}]", item)
        elif isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise _problem(path, f"{field}[{key!r}]", "must be a finite number")
    return value


def _matches(module_name: str, target: str) -> bool:
    """peft's rule for a list of names: the whole name, or its last dotted parts."""
    return module_name == target or module_name.endswith("." + target)


def check_ranks_fit(path: Path, model: Any, config: dict[str, Any]) -> None:
    """Every targeted layer exists, has a 2-D weight, and is wider than its rank."""
    targets = config.get("target_modules") or []
    ranks = config.get("rank_pattern") or {}
    found: set[str] = set()
    for name, module in model.named_modules():
        target = next((t for t in targets if _matches(name, t)), None)
        if target is None:
            continue
        found.add(target)
        weight = getattr(module, "weight", None)
        shape = tuple(getattr(weight, "shape", ()))
        if len(shape) != 2:
            raise _problem(
                path, "target_modules", f"names {target!r}, which is not a linear layer ({name})"
            )
        key = next((k for k in ranks if _matches(name, k)), None)
        field, rank = (f"rank_pattern[{key!r}]", ranks[key]) if key else ("r", config["r"])
        if rank > min(shape):
            raise _problem(
                path,
                field,
                f"is {rank:,}, more than layer {name} allows (its weight is "
                f"{shape[0]} x {shape[1]}; a rank is at most {min(shape)})",
            )
    missing = [t for t in targets if t not in found]
    if missing:
        raise _problem(path, "target_modules", f"names {missing[:3]} not found in the base model")


def checked_lora_config(path: Path, config: dict[str, Any], model: Any) -> Any:
    """A ``peft.LoraConfig`` of ``config`` after every check above (for ``model``)."""
    from dataclasses import fields

    from peft import LoraConfig

    kind = config.get("peft_type")
    if kind != "LORA":
        raise _problem(path, "peft_type", f"is {str(kind)[:40]!r}; codeparrot loads LoRA only")
    _rank(path, "r", config.get("r"))
    alpha = config.get("lora_alpha", 8)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
        raise _problem(path, "lora_alpha", "must be a finite number")
    for field in _NAME_LISTS:
        _plain_names(path, field, config.get(field))
    if not config.get("target_modules"):
        raise _problem(path, "target_modules", "must name at least one module")
    _pattern(path, "rank_pattern", config.get("rank_pattern"), rank=True)
    _pattern(path, "alpha_pattern", config.get("alpha_pattern"), rank=False)
    for field, default in _REFUSED.items():
        if config.get(field, default) != default:
            raise _problem(path, field, "changes the base model beyond the adapter; refused")
    check_ranks_fit(path, model, config)
    known = {f.name for f in fields(LoraConfig)} - {"megatron_core"}
    kwargs = {k: v for k, v in config.items() if k in known}
    kwargs["init_lora_weights"] = False  # the weights come from the file; no PiSSA rewrite
    kwargs.pop("peft_type", None)
    try:
        return LoraConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise CheckpointError(
            f"adapter {path}: {ADAPTER_CONFIG} is not a valid LoRA config ({e})"
        ) from e


__all__ = ["check_ranks_fit", "checked_lora_config"]
