"""The lean decode path of :mod:`codeparrot.generation.gpt2` for Qwen3 checkpoints.

:class:`Qwen3Decoder` runs a ``Qwen3ForCausalLM`` (the ``*-qwen`` presets) over its own
parameters with the same pre-allocated KV cache, shared-prompt attention, int8
weight-only one-token steps and compiled step as :class:`GPT2Decoder`: it differs only
in the blocks (RMSNorm, RMS-normed queries and keys, rotary positions, SwiGLU, no
biases). Rotary cos/sin tables are computed once for the whole context by the model's
own rotary module, so positions match ``transformers``' forward exactly.

Covered: every head with its own keys/values, full attention, the default rotary
scaling. Grouped keys/values or sliding windows fall back to the ``transformers`` forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from codeparrot.generation.gpt2 import (
    GPT2Decoder,
    KVCache,
    _int8_linear,
    attend,
    int8_supported,
    quantize_rows_int8,
)

_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# matrices read side by side (one int8 kernel each; the float weights stay separate)
_FUSED = {"qkv": ("q_proj", "k_proj", "v_proj"), "gate_up": ("gate_proj", "up_proj")}


@dataclass
class _Block:
    input_norm: torch.Tensor  # RMSNorm gains (C,)
    qk_norm: torch.Tensor  # (2, 1, hs): the query's and the key's gains, stacked
    post_attention_norm: torch.Tensor  # (C,)
    linears: dict[str, torch.Tensor]  # nn.Linear weights (out, in), no biases


class Qwen3Decoder(GPT2Decoder):
    """Forward passes of a ``Qwen3ForCausalLM`` written out over its parameters."""

    def __init__(self, model: Any) -> None:
        cfg = model.config
        inner = model.model
        self.n_head = cfg.num_attention_heads
        self.n_embd = cfg.hidden_size
        self.head_dim = cfg.head_dim
        self.eps = cfg.rms_norm_eps
        self.context_length = cfg.max_position_embeddings
        self.wte = inner.embed_tokens.weight  # (V, C)
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight  # (V, C), tied to wte by default
        self.lm_bias = None
        self.lm_head_bf16 = None
        self.int8 = None
        self.lm_head_int8 = None
        self._compiled = None
        self.dtype = self.wte.dtype
        self.device = self.wte.device
        self.scaling = self.head_dim**-0.5
        positions = torch.arange(self.context_length, device=self.device)[None]
        with torch.no_grad():
            cos, sin = inner.rotary_emb(self.wte[:1], positions)  # (1, T_ctx, hs)
        self.cos, self.sin = cos[0], sin[0]  # (T_ctx, hs)
        self.blocks = [
            _Block(
                input_norm=layer.input_layernorm.weight,
                qk_norm=torch.stack([layer.self_attn.q_norm.weight, layer.self_attn.k_norm.weight])[
                    :, None
                ].detach(),
                post_attention_norm=layer.post_attention_layernorm.weight,
                linears={
                    name: getattr(layer.self_attn if name[0] in "qkvo" else layer.mlp, name).weight
                    for name in _LINEARS
                },
            )
            for layer in inner.layers
        ]
        self.layers = self.blocks  # new_cache makes one buffer per layer

    @staticmethod
    def supports(model: Any) -> bool:
        """True for a Qwen3 LM with one key/value head per head, full attention, SiLU and
        the default rotary scaling: what :meth:`_blocks` computes."""
        if type(model).__name__ != "Qwen3ForCausalLM":
            return False
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or {}
        return (
            cfg.num_key_value_heads == cfg.num_attention_heads
            and not getattr(cfg, "use_sliding_window", False)
            and set(getattr(cfg, "layer_types", None) or ["full_attention"]) == {"full_attention"}
            and cfg.hidden_act == "silu"
            and rope.get("rope_type", "default") == "default"
        )

    def quantize_int8(self) -> None:
        """int8 copies of every block matrix and the output projection (see GPT-2's).

        The query/key/value matrices are quantized as one (N = 3C) and so are the gate and
        up projections: one kernel each per step instead of three and two.
        """
        if not int8_supported():
            raise RuntimeError("this torch build has no int8 weight-only CPU kernel")
        self.int8 = []
        for block in self.blocks:
            w = block.linears
            self.int8.append(
                {
                    "qkv": quantize_rows_int8(torch.cat([w["q_proj"], w["k_proj"], w["v_proj"]])),
                    "gate_up": quantize_rows_int8(torch.cat([w["gate_proj"], w["up_proj"]])),
                    "o_proj": quantize_rows_int8(w["o_proj"]),
                    "down_proj": quantize_rows_int8(w["down_proj"]),
                }
            )
        self.lm_head_int8 = quantize_rows_int8(self.lm_head)

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(x, self.norm, self.eps)

    def _lin(self, x: torch.Tensor, i: int, name: str, int8: bool) -> torch.Tensor:
        """``x`` (N, in) times a block matrix, or the int8 copy of a fused pair or triple
        (``qkv``, ``gate_up``): the outputs side by side either way."""
        if int8:
            return _int8_linear(x, self.int8[i][name], None)  # type: ignore[index]
        linears = self.blocks[i].linears
        if name in _FUSED:
            return torch.cat([F.linear(x, linears[part]) for part in _FUSED[name]], dim=-1)
        return F.linear(x, linears[name])

    def _blocks(self, ids: torch.Tensor, cache: KVCache, int8: bool = False) -> torch.Tensor:
        B, T = ids.shape
        t0 = cache.length
        t1 = t0 + T
        C, nh, hs = self.n_embd, self.n_head, self.head_dim
        cos, sin = self.cos[t0:t1], self.sin[t0:t1]  # (T, hs)
        x = F.embedding(ids, self.wte)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            h = _rms_norm(x, block.input_norm, self.eps).view(B * T, C)
            qkv = self._lin(h, i, "qkv", int8).view(B, T, 3, nh, hs)
            qk = _rms_norm(qkv[:, :, :2], None, self.eps) * block.qk_norm  # (B, T, 2, nh, hs)
            q, k = _rotate(qk.permute(2, 0, 3, 1, 4), cos, sin)  # each (B, nh, T, hs)
            v = qkv[:, :, 2].transpose(1, 2)  # (B, nh, T, hs)
            y = attend(q, k, v, cache, i, t0, self.scaling)  # (B, nh, T, hs)
            y = y.transpose(1, 2).reshape(B * T, nh * hs)
            x = x + self._lin(y, i, "o_proj", int8).view(B, T, C)
            h = _rms_norm(x, block.post_attention_norm, self.eps).view(B * T, C)
            gate, up = self._lin(h, i, "gate_up", int8).chunk(2, dim=-1)
            x = x + self._lin(F.silu(gate) * up, i, "down_proj", int8).view(B, T, C)
        cache.length = t1
        return x


def _rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' Qwen3RMSNorm over the last dimension: normalised in float32, scaled
    in the input's dtype (torch's fused kernel where the input is float32 already)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.size(-1),), weight, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) if weight is None else weight * xf.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions: ``x`` (..., T, hs), tables (T, hs); halves rotated as in
    transformers' ``rotate_half``."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
