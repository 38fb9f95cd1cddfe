"""Pretraining with Hugging Face Accelerate: ``TrainConfig`` and ``train``.

Importing the package is cheap: ``train`` (torch, transformers, accelerate) is loaded
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codeparrot.training.config import TrainConfig

if TYPE_CHECKING:
    from codeparrot.training.loop import TrainResult, train

__all__ = ["TrainConfig", "TrainResult", "train"]


def __getattr__(name: str) -> Any:
    if name in ("train", "TrainResult"):
        from codeparrot.training import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'codeparrot.training' has no attribute {name!r}")
