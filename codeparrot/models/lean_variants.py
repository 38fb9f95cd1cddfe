"""Which variants of a family's configuration the lean decoders compute.

A family's record (:mod:`codeparrot.families`) says which lean decoder computes its class;
some configurations of a covered class still need the ``transformers`` forward (scaled
rotary positions that change with the length, cross-attention, an activation the blocks
do not write out). The checks read the configuration only, so that the lean load
(:mod:`codeparrot.models.lean_load`) refuses such a checkpoint before reading a weight
and the decoders (:mod:`codeparrot.generation.lean`) refuse it on a loaded model alike.
"""

from __future__ import annotations

from typing import Any

from codeparrot.families import layout_of_class

# rotary scalings whose angles depend on the position alone (computed once in the module)
STATIC_ROPE = ("default", "linear", "llama3")


def variant_problem(model_class: str, cfg: Any) -> str:
    """Why a ``model_class`` model of configuration ``cfg`` (transformers' configuration
    object) is not one the lean decoders compute; "" where it is."""
    layout = layout_of_class(model_class)
    if layout is None:
        return f"{model_class} has no lean decoder"
    if layout.stack == "transformer":
        return gpt2_config_problem(cfg)
    return llama_config_problem(cfg, model_class)


def gpt2_config_problem(cfg: Any) -> str:
    """Why a GPT-2-style config (GPT-2, GPTBigCode) is a variant the blocks do not compute."""
    if getattr(cfg, "add_cross_attention", False):
        return "cross-attention"
    return "" if cfg.n_embd % cfg.n_head == 0 else "width not a multiple of the heads"


def llama_config_problem(cfg: Any, name: str) -> str:
    """Why the config of a covered Llama-style class is a variant the blocks do not compute."""
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in STATIC_ROPE:
        return f"rotary scaling {kind!r} (covered: {', '.join(STATIC_ROPE)})"
    if getattr(cfg, "partial_rotary_factor", 1.0) != 1.0:
        return "partial rotary embeddings"
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        return "query heads not a multiple of key/value heads"
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if not kinds <= {"full_attention", "sliding_attention"}:
        return f"attention layer types {sorted(kinds)}"
    layout = layout_of_class(name)
    if layout is not None and layout.layer_norm:  # Starcoder2's plain MLP
        return "" if cfg.hidden_act in ("gelu_pytorch_tanh", "gelu", "gelu_new") else "activation"
    if cfg.hidden_act != "silu":
        return f"activation {cfg.hidden_act!r} (covered: silu)"
    return ""
