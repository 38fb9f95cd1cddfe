"""Training under FSDP (``accelerate launch --use_fsdp``): what it refuses, and the state it
saves and loads.

Each process holds a shard of every parameter, so the checkpoint is written from full
state dicts gathered to CPU (torch.distributed.checkpoint.state_dict) and read back by
broadcasting them from the main process. The export drops the output weight where it is
tied to the embedding (the two names of one tensor in the gathered dict), as
``save_pretrained`` does for an unsharded model, so that AutoModelForCausalLM ties them
again on load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from codeparrot.errors import ConfigError

# Optimizers whose update reads a whole matrix: a shard is not one.
UNSHARDABLE = {"muon": "Muon orthogonalises each weight matrix whole (Newton-Schulz)"}


def fsdp_requested(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``accelerate launch --use_fsdp`` (or its config file) started this process."""
    env = os.environ if env is None else env
    return env.get("ACCELERATE_USE_FSDP", "false").lower() in ("true", "1", "yes")


def check_shardable(optimizer: str, env: Mapping[str, str] | None = None) -> None:
    """Refuse, before any work, an ``--optimizer`` that cannot run on FSDP's shards."""
    if not fsdp_requested(env) or optimizer not in UNSHARDABLE:
        return
    raise ConfigError(
        f"--optimizer {optimizer} cannot train under FSDP (accelerate launch --use_fsdp): "
        f"{UNSHARDABLE[optimizer]}, and FSDP gives each process a shard of it. Use "
        "--optimizer adamw with FSDP, or keep Muon and launch with DDP (--multi_gpu)"
    )


def is_fsdp(accelerator: Any) -> bool:
    from accelerate.utils import DistributedType

    return getattr(accelerator, "distributed_type", None) == DistributedType.FSDP


def tied_names(model: Any) -> dict[str, str]:
    """{name: the name it shares a tensor with} for the parameters a model ties (GPT-2 and
    Qwen3's output weight to the embedding), from the module tree (unsharded or not)."""
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            tied[name] = first[id(param)]
        else:
            first[id(param)] = name
    return tied


def export_state_dict(model: Any, full: dict[str, Any]) -> dict[str, Any]:
    """The full state dict to save as an export: each tied name kept once (the first)."""
    tied = tied_names(model)
    return {name: tensor for name, tensor in full.items() if name not in tied}


def with_tied(model: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the tied names :func:`export_state_dict` left out put back (a full
    state dict is loaded strictly: every name of the module tree)."""
    restored = dict(state)
    for name, source in tied_names(model).items():
        if name not in restored and source in restored:
            restored[name] = restored[source]
    return restored


def export_weights(accelerator: Any, model: Any) -> dict[str, Any] | None:
    """The weights to export under FSDP, gathered whole (tied names once) on the main
    process (a collective: every process calls it); None without FSDP (the model saves
    itself)."""
    if not is_fsdp(accelerator):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(model, options=options)
    return export_state_dict(accelerator.unwrap_model(model), full)


def gather_full_state(model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Model and optimizer state dicts gathered whole to CPU (a collective: every process
    calls it; the main process gets the tensors)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=options)
    return model_state, optimizer_state


def load_full_state(
    model: Any, optimizer: Any, model_state: dict[str, Any], optimizer_state: dict[str, Any]
) -> None:
    """Load full state dicts (read on the main process; empty elsewhere) into the shards."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
