"""Causal attention for training: SDPA told ``is_causal=True``, never handed a mask.

Training batches are packed token sequences without padding, so every position attends to
every position before it, which is SDPA's ``is_causal``. transformers cannot always tell
it may skip the mask: under ``torch.compile`` on torch before 2.14 it builds one of
(batch, 1, T, T) and passes it with ``is_causal=False``, and a GPU kernel given a mask
computes the masked half too. On one H200 (torch 2.11) the attention of a GPT-2-small step
took 2.3x as long as the same call with ``is_causal`` (RESULTS.md, On a GPU).

The implementation is registered under :data:`NAME` in transformers' attention and mask
interfaces when a run starts (not at import) and set on the model being trained; the
checkpoint does not record it, so an exported model loads with ``AutoModelForCausalLM``
and its default attention.
"""

from __future__ import annotations

from typing import Any

NAME = "codeparrot_causal_sdpa"


def causal_sdpa(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> Any:
    """transformers' SDPA attention with no mask and ``is_causal=True`` (a packed batch)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs["is_causal"] = True
    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


def no_mask(*args: Any, **kwargs: Any) -> None:
    """The mask :func:`causal_sdpa` is given: none."""
    return None


def use_causal_attention(model: Any) -> None:
    """Train ``model`` (set to SDPA) with :func:`causal_sdpa`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, causal_sdpa)
    AttentionMaskInterface.register(NAME, no_mask)
    model.set_attn_implementation(NAME)


__all__ = ["NAME", "causal_sdpa", "no_mask", "use_causal_attention"]
