"""Which lean decoder (own KV cache, int8 and compiled one-token steps) serves a model."""

from __future__ import annotations

from typing import Any

from codeparrot.generation.gpt2 import GPT2Decoder
from codeparrot.generation.qwen3 import Qwen3Decoder

DECODERS: tuple[type[GPT2Decoder], ...] = (GPT2Decoder, Qwen3Decoder)


def lean_decoder(model: Any) -> GPT2Decoder | None:
    """The lean decoder over ``model``'s parameters, or None where the ``transformers``
    forward must serve it (another architecture, or a variant the decoders do not cover)."""
    for decoder in DECODERS:
        if decoder.supports(model):
            return decoder(model)
    return None


def has_lean_decoder(model: Any) -> bool:
    return any(decoder.supports(model) for decoder in DECODERS)
