"""Muon on the hidden matrices and AdamW on the rest, as one ``torch.optim.Optimizer``.

Accelerate prepares, steps and checkpoints it like any optimizer; a scheduler sets the
learning rate of every group (the groups are the inner optimizers' own dicts); its state
dict holds the two inner states (plain tensors, loadable with ``weights_only=True``).
"""

from __future__ import annotations

from typing import Any

import torch


def _evaluate(closure: Any) -> Any:
    """An optimizer's closure, evaluated with gradients on (None without one)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


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
        loss = _evaluate(closure)
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


def _orthogonalize(updates: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                   eps: float, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:  # fmt: skip
    """Newton-Schulz orthogonalization of a stack of equal-shape matrices at once.

    The same iteration as ``torch.optim.Muon`` (bf16, the wide orientation, each matrix scaled
    to Frobenius norm at most 1, then ``steps`` quintic iterations), batched: one ``baddbmm``
    per product instead of one small ``addmm`` per matrix. ``dtype`` float32 where bf16 is
    emulated (a CPU without bf16 instructions: 42x slower there, measured).
    """
    a, b, c = coefficients
    x = updates.to(dtype)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT
        gram = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, gram, x, beta=a)
    return x.mT if tall else x


class BatchedMuon(torch.optim.Muon):
    """``torch.optim.Muon``, stepping the matrices of one shape together.

    The update is torch's (momentum with Nesterov, the Newton-Schulz orthogonalization, decoupled
    weight decay, the shape's learning-rate adjustment); the state is torch's too (one
    ``momentum_buffer`` per matrix), so checkpoints load in either. A transformer's blocks repeat
    a few shapes, so the step runs a few batched products instead of many small ones.

    ``newton_schulz_dtype`` is the orthogonalisation's dtype: bfloat16 as torch's, or
    float32 where bf16 is slow (:mod:`codeparrot.precision` decides).
    """

    def __init__(
        self, params: Any, *, newton_schulz_dtype: str = "bfloat16", **kwargs: Any
    ) -> None:
        super().__init__(params, **kwargs)
        self.newton_schulz_dtype = getattr(torch, newton_schulz_dtype)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = _evaluate(closure)
        for group in self.param_groups:
            params: list[torch.Tensor] = []
            grads: list[torch.Tensor] = []
            bufs: list[torch.Tensor] = []
            self._init_group(group, params, grads, bufs)
            if params:
                self._step_group(group, params, grads, bufs)
        return loss

    def _step_group(self, group: dict[str, Any], params: list[torch.Tensor],
                    grads: list[torch.Tensor], bufs: list[torch.Tensor]) -> None:  # fmt: skip
        from torch.optim._muon import _adjust_lr

        momentum, lr = group["momentum"], float(group["lr"])
        torch._foreach_lerp_(bufs, grads, 1 - momentum)
        updates = torch._foreach_lerp(grads, bufs, momentum) if group["nesterov"] else bufs
        torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(params):
            by_shape.setdefault(tuple(p.shape), []).append(i)
        for shape, index in by_shape.items():
            stacked = torch.stack([updates[i] for i in index])
            ortho = _orthogonalize(stacked, group["ns_coefficients"], group["ns_steps"],
                                   group["eps"], self.newton_schulz_dtype)  # fmt: skip
            step = -_adjust_lr(lr, group["adjust_lr_fn"], torch.Size(shape))
            torch._foreach_add_([params[i] for i in index], list(ortho.unbind(0)), alpha=step)


def newton_schulz_flops(shapes: list[tuple[int, ...]], steps: int = 5) -> float:
    """The FLOPs of one Muon step's orthogonalisation over matrices of these shapes.

    Each quintic iteration on an m x n matrix (m <= n, the wide orientation) makes three
    products: the Gram matrix X Xᵀ (2m²n), its square (2m³) and that times X (2m²n). That is
    a fixed cost an optimizer step, against the 6mn FLOPs a token the matrix costs in training:
    about 3.3 m / tokens of it (m = 768 at 32 x 1,024 tokens a step: 7.8%), whatever the code.
    """
    total = 0.0
    for shape in shapes:
        m, n = sorted(shape[-2:])
        total += steps * (4 * m * m * n + 2 * m**3)
    return total
