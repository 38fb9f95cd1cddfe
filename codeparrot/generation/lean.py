"""Which lean decoder (own KV cache, int8 and compiled one-token steps) serves a model.

The decoders: GPT-2 (:mod:`~codeparrot.generation.gpt2`), GPTBigCode
(:mod:`~codeparrot.generation.bigcode`: StarCoder, SantaCoder), the Llama family
(:mod:`~codeparrot.generation.llama`: Llama, CodeLlama, DeepSeek-Coder, Qwen2,
Qwen2.5-Coder, Mistral, Starcoder2) and Qwen3 (:mod:`~codeparrot.generation.qwen3`); which
family each computes is in its record in :mod:`codeparrot.families`.
Any other model, or a variant of these the blocks do not compute, runs the
``transformers`` forward; :func:`lean_decoder` logs one line saying which and why.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from codeparrot.families import lean_covered, lean_decoders
from codeparrot.generation.gpt2 import GPT2Decoder

logger = logging.getLogger(__name__)


def _decoder_class(dotted: str) -> type[GPT2Decoder]:
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


# the model class (as transformers names it) -> the decoder that computes it
DECODERS: dict[str, type[GPT2Decoder]] = {
    model_class: _decoder_class(dotted) for model_class, dotted in lean_decoders().items()
}
COVERED = lean_covered()


def why_no_lean_decoder(model: Any) -> str:
    """Empty where a lean decoder computes ``model``, else why the ``transformers`` forward
    must serve it (another architecture, or a variant the decoders do not cover)."""
    name = type(model).__name__
    decoder = DECODERS.get(name)
    if decoder is None:
        kind = getattr(getattr(model, "config", None), "model_type", name)
        return f"the lean decoder covers {COVERED} models, not {kind}"
    problem = decoder.why_not(model)
    return f"{name} with {problem}" if problem else ""


def lean_decoder(model: Any) -> GPT2Decoder | None:
    """The lean decoder over ``model``'s parameters, or None (after one log line saying
    why) where the ``transformers`` forward must serve it."""
    why = why_no_lean_decoder(model)
    if why:
        logger.info("decoding with the transformers forward: %s", why)
        return None
    return DECODERS[type(model).__name__](model)


def has_lean_decoder(model: Any) -> bool:
    return not why_no_lean_decoder(model)
