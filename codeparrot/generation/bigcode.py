"""The lean decode path of :mod:`codeparrot.generation.gpt2` for GPTBigCode checkpoints.

``GPTBigCodeForCausalLM`` is StarCoder's architecture (StarCoder, StarCoderBase,
``bigcode/tiny_starcoder_py``, SantaCoder's transformers-native form): GPT-2's blocks
with ``nn.Linear`` matrices (out, in) instead of ``Conv1D`` and, with ``multi_query``, one
key/value head for every query head. The fused projection ``c_attn`` then writes the
queries (C), then one head's key and value (head size each); the cache holds that one
head, so a step reads ``n_head`` times fewer cached bytes than GPT-2's. Without
``multi_query`` the projection interleaves each head's query, key and value.

:class:`GPTBigCodeDecoder` reuses GPT-2's blocks, cache, int8 and compiled steps; only
the matrices' layout and the split of the fused projection differ.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from codeparrot.generation.gpt2 import GPT2Decoder, _Layer
from codeparrot.generation.int8 import int8_linear
from codeparrot.models.lean_variants import gpt2_config_problem


class GPTBigCodeDecoder(GPT2Decoder):
    """Forward passes of a ``GPTBigCodeForCausalLM`` written out over its parameters."""

    _float_kernel = 1  # scripted_gpt2.FLOAT_LINEAR

    def __init__(self, model: Any) -> None:
        cfg = model.config
        t = model.transformer
        self.n_head = cfg.n_head
        self.n_kv_head = 1 if cfg.multi_query else cfg.n_head
        self._split_kind = 1 if cfg.multi_query else 2  # scripted_gpt2's SPLIT_* codes
        self.n_embd = cfg.n_embd
        self.head_dim = cfg.n_embd // cfg.n_head
        self.eps = cfg.layer_norm_epsilon
        self.context_length = cfg.n_positions
        self.wte = t.wte.weight  # (V, C)
        self.wpe = t.wpe.weight  # (T_ctx, C)
        self.ln_f = (t.ln_f.weight, t.ln_f.bias)
        self._init_head(model)
        self.fast_gelu = cfg.activation_function in ("gelu_new", "gelu_pytorch_tanh")
        self.acts = [block.mlp.act for block in t.h]
        scaling = self.head_dim**-0.5 if cfg.scale_attn_weights else 1.0
        linear = lambda m: (m.weight, m.bias)  # noqa: E731
        self.layers = [
            _Layer(
                ln_1=(block.ln_1.weight, block.ln_1.bias),
                c_attn=linear(block.attn.c_attn),  # (C + 2 * nkv * hs, C)
                c_proj=linear(block.attn.c_proj),
                ln_2=(block.ln_2.weight, block.ln_2.bias),
                c_fc=linear(block.mlp.c_fc),
                mlp_proj=linear(block.mlp.c_proj),
                scaling=scaling,
            )
            for block in t.h
        ]

    @classmethod
    def why_not(cls, model: Any) -> str:
        """Empty for a GPTBigCode LM without cross-attention, else what is not covered."""
        if type(model).__name__ != "GPTBigCodeForCausalLM":
            return f"{type(model).__name__} is not a GPTBigCode model"
        return gpt2_config_problem(model.config)

    @staticmethod
    def _out_in(weight: torch.Tensor) -> torch.Tensor:
        return weight  # nn.Linear keeps (out, in) already

    def _split_qkv(self, qkv: torch.Tensor, B: int, T: int) -> tuple[torch.Tensor, ...]:
        """``c_attn``'s output (B*T, C + 2 * nkv * hs) -> q (B, nh, T, hs), k, v (B, nkv, T, hs)."""
        nh, hs = self.n_head, self.head_dim
        if self.n_kv_head == 1:  # queries, then the one head's key and value
            q, k, v = qkv.view(B, T, nh + 2, hs).split((nh, 1, 1), dim=2)
            return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        # each head's query, key and value side by side
        q, k, v = qkv.view(B, T, nh, 3 * hs).transpose(1, 2).split(hs, dim=-1)
        return q, k, v

    def _linear(
        self, x: torch.Tensor, i: int, name: str, layer: _Layer, int8: bool
    ) -> torch.Tensor:
        weight, bias = getattr(layer, name)
        if int8:
            return int8_linear(x, self.int8[i][name])  # type: ignore[index]
        return F.linear(x, weight, bias)
