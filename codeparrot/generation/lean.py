"""Which lean decoder (own KV cache, int8 and compiled one-token steps) serves a model.

Covered: GPT-2 (:mod:`~codeparrot.generation.gpt2`), GPTBigCode
(:mod:`~codeparrot.generation.bigcode`: StarCoder, SantaCoder), the Llama family
(:mod:`~codeparrot.generation.llama`: Llama, CodeLlama, DeepSeek-Coder, Qwen2,
Qwen2.5-Coder, Mistral, Starcoder2) and Qwen3 (:mod:`~codeparrot.generation.qwen3`).
Any other model, or a variant of these the blocks do not compute, runs the
``transformers`` forward; :func:`lean_decoder` logs one line saying which and why.
"""

from __future__ import annotations

import logging
from typing import Any

from codeparrot.generation.bigcode import GPTBigCodeDecoder
from codeparrot.generation.gpt2 import GPT2Decoder
from codeparrot.generation.llama import LlamaDecoder
from codeparrot.generation.qwen3 import Qwen3Decoder

logger = logging.getLogger(__name__)

# the model class (as transformers names it) -> the decoder that computes it
DECODERS: dict[str, type[GPT2Decoder]] = {
    "GPT2LMHeadModel": GPT2Decoder,
    "GPTBigCodeForCausalLM": GPTBigCodeDecoder,
    "LlamaForCausalLM": LlamaDecoder,
    "Qwen2ForCausalLM": LlamaDecoder,
    "MistralForCausalLM": LlamaDecoder,
    "Starcoder2ForCausalLM": LlamaDecoder,
    "Qwen3ForCausalLM": Qwen3Decoder,
}
COVERED = "GPT-2, GPTBigCode, Llama, Qwen2, Mistral, Starcoder2 and Qwen3"


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
