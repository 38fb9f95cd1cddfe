"""Muon on the hidden matrices and AdamW on the rest, as one ``torch.optim.Optimizer``.

Accelerate prepares, steps and checkpoints it like any optimizer; a scheduler sets the
learning rate of every group (the groups are the inner optimizers' own dicts); its state
dict holds the two inner states (plain tensors, loadable with ``weights_only=True``).
"""

from __future__ import annotations

from typing import Any

import torch


class MuonWithAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon`` and ``torch.optim.AdamW`` over disjoint parameters, as one."""

    def __init__(self, adamw: torch.optim.Optimizer, muon: torch.optim.Optimizer) -> None:
        params = [p for o in (adamw, muon) for g in o.param_groups for p in g["params"]]
        super().__init__(params, {})
        self.inner = {"adamw": adamw, "muon": muon}
        self.param_groups = self._groups()

    def _groups(self) -> list[dict[str, Any]]:
        return [g for o in self.inner.values() for g in o.param_groups]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for o in self.inner.values():
            o.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.inner.values():
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {name: o.state_dict() for name, o in self.inner.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != set(self.inner):
            raise ValueError(
                f"optimizer state holds {sorted(state_dict)}, expected {sorted(self.inner)}"
            )
        for name, o in self.inner.items():
            o.load_state_dict(state_dict[name])
        self.param_groups = self._groups()
