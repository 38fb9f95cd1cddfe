"""The lean decode path of :mod:`codeparrot.generation.llama` for Qwen3 checkpoints.

:class:`Qwen3Decoder` runs a ``Qwen3ForCausalLM`` (the ``*-qwen`` presets, and Qwen3's
own models) as :class:`~codeparrot.generation.llama.LlamaDecoder` does a Llama: RMSNorm,
rotary positions, grouped keys/values, SwiGLU, optional sliding-window layers; the one
difference is the RMS norm of each head's query and key before the rotation.
"""

from __future__ import annotations

from typing import Any

from codeparrot.generation.llama import LlamaDecoder, _config_problem
from codeparrot.generation.llama import _rms_norm as _rms_norm
from codeparrot.generation.llama import _rotate as _rotate


class Qwen3Decoder(LlamaDecoder):
    """Forward passes of a ``Qwen3ForCausalLM`` written out over its parameters."""

    qk_norm = True

    @classmethod
    def why_not(cls, model: Any) -> str:
        """Empty where the blocks compute this Qwen3 model, else what they do not cover."""
        name = type(model).__name__
        if name != "Qwen3ForCausalLM":
            return f"{name} is not a Qwen3 model"
        return _config_problem(model.config, name)
