"""Optimizers and learning-rate schedules of the pretraining loop.

- ``adamw``: AdamW on every parameter (decay on matrices and embeddings), the CodeParrot recipe.
- ``muon``: ``torch.optim.Muon`` on the hidden weight matrices of the transformer blocks, and
  AdamW on the rest (token and position embeddings, the output head, biases and norm gains),
  as the small-model speedruns do (modded-nanogpt, nanochat). Muon's update is scaled to the
  RMS of an AdamW update (``adjust_lr_fn="match_rms_adamw"``), so one peak learning rate and
  one weight decay serve both.

The two are one :class:`torch.optim.Optimizer` (:class:`MuonWithAdamW`) so Accelerate prepares,
steps, schedules and checkpoints it like any other: its ``param_groups`` are the two inner
optimizers' groups, and its state dict holds both states as plain tensors.

Schedules (multipliers of the peak learning rate): ``cosine`` (linear warmup, cosine to the
floor) and ``wsd`` (warmup, stable at the peak, then a linear decay to the floor over the last
``decay_fraction`` of the steps).
"""

from __future__ import annotations

import math
from typing import Any

from codeparrot.training.optim_names import OPTIMIZERS, SCHEDULES

__all__ = ["OPTIMIZERS", "SCHEDULES", "build_optimizer", "lr_factor", "parameter_groups"]


def lr_factor(
    step: int,
    *,
    warmup_steps: int,
    max_steps: int,
    min_lr_ratio: float,
    schedule: str = "cosine",
    decay_fraction: float = 0.2,
) -> float:
    """Learning-rate multiplier at ``step``."""
    # 1) linear warmup from lr/(warmup+1) to lr
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    # 2) past the end of the schedule: the floor
    if step >= max_steps:
        return min_lr_ratio
    if schedule == "wsd":
        # 3a) stable at the peak, then linear to the floor over the last decay_fraction
        decay_start = max(warmup_steps, max_steps - round(decay_fraction * max_steps))
        if step < decay_start:
            return 1.0
        progress = (step - decay_start) / max(1, max_steps - decay_start)
        return 1.0 - (1.0 - min_lr_ratio) * progress
    # 3b) cosine decay from 1 to min_lr_ratio in between
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def is_hidden_matrix(name: str, p: Any, model: Any) -> bool:
    """A 2-D weight inside the transformer blocks (not an embedding or the output head)."""
    if p.ndim != 2:
        return False
    embeddings = {id(model.get_input_embeddings().weight)}
    out = model.get_output_embeddings()
    if out is not None:
        embeddings.add(id(out.weight))
    wpe = getattr(getattr(model, "transformer", None), "wpe", None)
    if wpe is not None:
        embeddings.add(id(wpe.weight))
    return id(p) not in embeddings


def parameter_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups of every trainable parameter of ``model``."""
    return adamw_groups(_trainable(model), weight_decay)


def _trainable(model: Any) -> list[tuple[str, Any]]:
    seen: set[int] = set()
    named = []
    for n, p in model.named_parameters():
        if p.requires_grad and id(p) not in seen:  # tied weights once
            seen.add(id(p))
            named.append((n, p))
    return named


def adamw_groups(named: list[tuple[str, Any]], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices and embeddings, none on biases and norm gains."""
    decay = [p for _n, p in named if p.ndim >= 2]
    no_decay = [p for _n, p in named if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _fast_adamw_kwargs(torch: Any) -> dict[str, Any]:
    """The fused AdamW kernel where torch has one for this device, else the foreach one."""
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], fused=True)
        return {"fused": True}
    except (RuntimeError, TypeError):
        return {"foreach": True}


def build_optimizer(
    model: Any,
    *,
    name: str,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    muon_momentum: float = 0.95,
    newton_schulz_dtype: str = "bfloat16",
) -> Any:
    """The optimizer ``name`` over ``model``'s trainable parameters.

    ``newton_schulz_dtype``: Muon's orthogonalisation runs in it (bfloat16 as in
    ``torch.optim.Muon``; float32 where bf16 is emulated: codeparrot.precision)."""
    import torch

    from codeparrot.training.muon import BatchedMuon, MuonWithAdamW

    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    named = _trainable(model)
    fast = _fast_adamw_kwargs(torch)
    if name == "adamw":
        return torch.optim.AdamW(adamw_groups(named, weight_decay), lr=lr, betas=betas, **fast)
    matrices = [p for n, p in named if is_hidden_matrix(n, p, model)]
    rest = [(n, p) for n, p in named if not is_hidden_matrix(n, p, model)]
    adamw = torch.optim.AdamW(adamw_groups(rest, weight_decay), lr=lr, betas=betas, **fast)
    muon = BatchedMuon(
        matrices, lr=lr, weight_decay=weight_decay, momentum=muon_momentum,
        adjust_lr_fn="match_rms_adamw", newton_schulz_dtype=newton_schulz_dtype,
    )  # fmt: skip
    return MuonWithAdamW(adamw, muon)
