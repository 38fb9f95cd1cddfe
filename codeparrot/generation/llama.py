"""The lean decode path of :mod:`codeparrot.generation.gpt2` for Llama-style checkpoints.

:class:`LlamaDecoder` runs ``LlamaForCausalLM`` (CodeLlama, DeepSeek-Coder),
``Qwen2ForCausalLM`` (Qwen2.5-Coder), ``MistralForCausalLM`` and
``Starcoder2ForCausalLM`` over their own parameters, with the same pre-allocated KV
cache, prompt-cache reuse, shared-prompt attention, int8 weight-only one-token steps and
compiled step as :class:`~codeparrot.generation.gpt2.GPT2Decoder`. The blocks differ
from GPT-2's in rotary positions, grouped keys/values (fewer key/value heads than query
heads: the cache holds only the key/value heads) and, per family:

- normalisation: RMSNorm (Llama, Qwen2, Mistral) or LayerNorm with a bias (Starcoder2);
- biases: on the query/key/value projections (Qwen2), on every projection (Starcoder2,
  Llama's ``attention_bias``/``mlp_bias``), or none;
- the MLP: SwiGLU (``gate_proj``, ``up_proj``, ``down_proj``) or a plain one (Starcoder2's
  ``c_fc``, ``c_proj``);
- a sliding window (Mistral, Starcoder2, Qwen2's ``sliding_attention`` layers): each
  position sees the ``window`` positions up to itself, as transformers masks it;
- RMS-normed queries and keys (Qwen3, :mod:`codeparrot.generation.qwen3`).

Rotary angles are computed per call from the model's own rotary module (its inverse
frequencies and attention scaling), with the arithmetic of its forward, so positions
match ``transformers`` exactly for the static scalings (default, linear, llama3). Others
(dynamic, yarn, longrope: they change with the length) fall back to the ``transformers``
forward, as does anything :meth:`LlamaDecoder.why_not` names.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from codeparrot.families import layout_of_class, lean_layouts
from codeparrot.generation.bf16_prompts import packed_linear
from codeparrot.generation.gpt2 import GPT2Decoder, KVCache, _grouped_query, attend
from codeparrot.generation.int8 import int8_linear
from codeparrot.models.lean_variants import STATIC_ROPE as STATIC_ROPE
from codeparrot.models.lean_variants import llama_config_problem as _config_problem

# the model classes this decoder (or Qwen3's, a subclass) runs: those of the families
# whose weights are laid out as Llama's
ARCHITECTURES = tuple(cls for cls, lay in lean_layouts().values() if lay.stack == "model")
# matrices read side by side: one int8 kernel for each group (float weights stay apart)
_GATED_GROUPS = {"qkv": ("q", "k", "v"), "o": ("o",), "up": ("gate", "up"), "down": ("down",)}
_PLAIN_GROUPS = {"qkv": ("q", "k", "v"), "o": ("o",), "up": ("up",), "down": ("down",)}
_MODULES = {
    "q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
    "gate": "gate_proj", "up": "up_proj", "down": "down_proj",
}  # fmt: skip
_PLAIN_MLP = {"up": "c_fc", "down": "c_proj"}


# the activations the scripted one-token step computes (scripted.one_token_blocks' codes)
SCRIPT_ACTIVATIONS = {"silu": 0, "gelu_pytorch_tanh": 1, "gelu_new": 1}

# Rotary angles of the first positions (up to the context) are computed once: a table of
# cos and sin, read by every call instead of a dozen small kernels per step
ROTARY_TABLE_POSITIONS = 4096


@dataclass
class _Block:
    norms: tuple[tuple[torch.Tensor, torch.Tensor | None], ...]  # input, post-attention
    qk_norm: tuple[torch.Tensor, torch.Tensor] | None  # query's and key's gains (hs,)
    weights: dict[str, torch.Tensor]  # nn.Linear weights (out, in) by short name
    biases: dict[str, torch.Tensor | None]  # by group name (concatenated for a group)
    window: int | None  # positions a token sees (itself included), None: all
    # the float products of each group: (weight, bias or None) per part
    parts: dict[str, tuple[tuple[torch.Tensor, torch.Tensor | None], ...]] | None = None
    # Qwen3: the query heads' gain then the key heads', (nh + nkv, hs): both normed at once
    qk_gain: torch.Tensor | None = None


class LlamaDecoder(GPT2Decoder):
    """Forward passes of a Llama-style causal LM written out over its parameters."""

    qk_norm = False  # Qwen3's RMS-normed queries and keys

    def __init__(self, model: Any) -> None:
        cfg = model.config
        inner = model.model
        attn0 = inner.layers[0].self_attn
        self.n_head = cfg.num_attention_heads
        self.n_kv_head = cfg.num_key_value_heads
        self.n_embd = cfg.hidden_size
        self.head_dim = attn0.q_proj.weight.size(0) // self.n_head
        self.scaling = self.head_dim**-0.5
        self.eps = getattr(cfg, "rms_norm_eps", None) or getattr(cfg, "norm_epsilon", 1e-5)
        layout = layout_of_class(type(model).__name__)
        self.layer_norm = layout is not None and layout.layer_norm  # Starcoder2's
        self.gated = hasattr(inner.layers[0].mlp, "gate_proj")
        self.groups = _GATED_GROUPS if self.gated else _PLAIN_GROUPS
        self.context_length = cfg.max_position_embeddings
        self.wte = inner.embed_tokens.weight  # (V, C)
        self.ln_f = (inner.norm.weight, getattr(inner.norm, "bias", None))
        self._init_head(model)
        self.inv_freq = inner.rotary_emb.inv_freq.detach().float()  # (hs/2,)
        self.rope_scale = float(getattr(inner.rotary_emb, "attention_scaling", 1.0))
        # cos and sin of the first positions (see _rotary)
        self.rotary_table = self._rotary_angles(0, min(self.context_length, ROTARY_TABLE_POSITIONS))
        self.act = _activation(inner.layers[0].mlp, cfg.hidden_act)
        # the activation as the scripted step names it (None: the eager step's alone)
        self.act_code = SCRIPT_ACTIVATIONS.get(cfg.hidden_act)
        self.blocks = [self._block(layer, cfg, i) for i, layer in enumerate(inner.layers)]
        self.layers = self.blocks  # new_cache makes one buffer per layer

    def _block(self, layer: Any, cfg: Any, i: int) -> _Block:
        attn, mlp = layer.self_attn, layer.mlp
        modules = {k: getattr(attn, m) for k, m in _MODULES.items() if k in "qkvo"}
        for k, m in _MODULES.items() if self.gated else _PLAIN_MLP.items():
            if k not in "qkvo":
                modules[k] = getattr(mlp, m)
        biases = {}
        for group, parts in self.groups.items():
            own = [modules[p].bias for p in parts]
            if all(b is None for b in own):
                biases[group] = None
            else:  # a missing bias in a group is zeros
                sizes = [modules[p].weight.size(0) for p in parts]
                zeros = [modules[p].weight.new_zeros(n) for p, n in zip(parts, sizes, strict=True)]
                biases[group] = torch.cat(
                    [b.detach() if b is not None else z for b, z in zip(own, zeros, strict=True)]
                )
        norms = tuple(
            (norm.weight, getattr(norm, "bias", None))
            for norm in (layer.input_layernorm, layer.post_attention_layernorm)
        )
        qk = (attn.q_norm.weight, attn.k_norm.weight) if self.qk_norm else None
        gain = None
        if qk is not None:  # RMS norm times a gain is the norm without it, times the gain
            gain = torch.cat(
                [qk[0].detach().expand(self.n_head, -1), qk[1].detach().expand(self.n_kv_head, -1)]
            )
        parts = {}
        for group, names in self.groups.items():
            bias = biases[group]
            pieces = (
                [None] * len(names)
                if bias is None
                else bias.split([modules[p].weight.size(0) for p in names])
            )
            parts[group] = tuple((modules[p].weight, b) for p, b in zip(names, pieces, strict=True))
        return _Block(
            norms=norms,
            qk_norm=qk,
            weights={k: m.weight for k, m in modules.items()},
            biases=biases,
            window=_window(cfg, i),
            parts=parts,
            qk_gain=gain,
        )

    @classmethod
    def why_not(cls, model: Any) -> str:
        """Empty where :meth:`_blocks` computes this model, else what it does not cover."""
        name = type(model).__name__
        if name not in ARCHITECTURES or name == "Qwen3ForCausalLM":
            return f"{name} is not a Llama-style model the lean decoder knows"
        return _config_problem(model.config, name)

    def new_cache(self, rows: int, length: int, prefix: KVCache | None = None) -> KVCache:
        """Room for ``length`` positions of ``rows`` sequences: key/value heads only."""
        shape = (rows, self.n_kv_head, length, self.head_dim)
        make = lambda: torch.empty(shape, dtype=self.dtype, device=self.device)  # noqa: E731
        return KVCache([make() for _ in self.blocks], [make() for _ in self.blocks], prefix)

    def _int8_sources(self, i: int) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
        """Block ``i``'s matrices for :meth:`quantize_int8`, by group: the query/key/value
        matrices as one, and the gate and up projections as one (one kernel each per step
        instead of three and two)."""
        block = self.blocks[i]
        return {
            group: (torch.cat([block.weights[p] for p in parts]), block.biases[group])
            for group, parts in self.groups.items()
        }

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x, self.ln_f)

    def _norm(
        self, x: torch.Tensor, norm: tuple[torch.Tensor, torch.Tensor | None]
    ) -> torch.Tensor:
        if self.layer_norm:
            return F.layer_norm(x, (x.size(-1),), norm[0], norm[1], self.eps)
        return _rms_norm(x, norm[0], self.eps)

    def _lin(
        self, x: torch.Tensor, i: int, group: str, int8: bool, cast: bool = True
    ) -> torch.Tensor:
        """``x`` (N, in) times a group's matrices (``qkv``, ``o``, ``up``, ``down``): the
        outputs side by side, from the int8 copy when ``int8``. ``cast=False``: the int8
        output may stay in the kernel's dtype (bf16), for a caller that adds it to the
        float32 residual (the sum casts it exactly)."""
        if int8:
            return int8_linear(x, self.int8[i][group], cast=cast)  # type: ignore[index]
        parts = self.blocks[i].parts[group]  # type: ignore[index]
        if len(parts) == 1:
            return F.linear(x, *parts[0])
        out = torch.cat([F.linear(x, w) for w, _ in parts], dim=-1)
        bias = self.blocks[i].biases[group]
        return out if bias is None else out + bias

    def _packed_lin(
        self, x: torch.Tensor, i: int, group: str, int8: bool, cast: bool = True
    ) -> torch.Tensor:
        """:meth:`_lin` of a bf16 prompt: one product of the group's packed bf16 copy
        (:meth:`use_bf16_prompt_weights`), its bias added by the kernel."""
        return packed_linear(x, self.bf16_prompt[i][group])  # type: ignore[index]

    def _mlp(self, h: torch.Tensor, i: int, int8: bool, packed: bool = False) -> torch.Tensor:
        """The MLP's hidden activations of ``h`` (N, C): act(gate) * up, or act(up);
        ``packed``: from one product of the packed gate and up matrices side by side."""
        if packed:
            out = self._packed_lin(h, i, "up", int8)
            if not self.gated:
                return self.act(out)
            gate, up = out.chunk(2, dim=-1)
            return self.act(gate) * up
        if not self.gated:
            return self.act(self._lin(h, i, "up", int8))
        if int8:
            gate, up = self._lin(h, i, "up", int8).chunk(2, dim=-1)
        else:  # the two float products as they are, with no joined copy to split again
            (wg, bg), (wu, bu) = self.blocks[i].parts["up"]  # type: ignore[index]
            gate, up = F.linear(h, wg), F.linear(h, wu)
            if bg is not None:  # the group's bias, added as to the joined outputs
                gate, up = gate + bg, up + bu
        return self.act(gate) * up

    def _rotary_angles(self, t0: int, t1: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (T, hs) of positions ``t0:t1``, as the model's rotary module
        computes cos and sin; the sin's first half negated (see :func:`_rotate_rolled`)."""
        positions = torch.arange(t0, t1, device=self.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.to(self.device)  # (T, hs/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.rope_scale, emb.sin() * self.rope_scale
        half = sin.size(-1) // 2
        sin[:, :half].neg_()  # negation is exact: -(a * s) == a * (-s)
        return cos.to(self.dtype), sin.to(self.dtype)

    def _rotary(self, t0: int, t1: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (T, hs) of positions ``t0:t1``: rows of the table where it
        holds them (the same values), else computed."""
        cos, sin = self.rotary_table
        if t1 <= cos.size(0):
            return cos[t0:t1], sin[t0:t1]
        return self._rotary_angles(t0, t1)

    def _blocks(
        self, ids: torch.Tensor, cache: KVCache, int8: bool = False, packed: bool = False
    ) -> torch.Tensor:
        """The blocks' output (B, T, C) after ``ids``, their keys/values appended to
        ``cache``; ``packed``: the products in bf16 on :attr:`bf16_prompt`'s copies, and
        attention as autocast runs it (in bf16), so that the cache holds what it would."""
        B, T = ids.shape
        if T == 1 and cache.prefix is None and not torch.is_autocast_enabled(self.device.type):
            return self._one_token_blocks(ids, cache, int8)
        t0 = cache.length
        lin = self._packed_lin if packed else self._lin
        bf16 = torch.autocast(self.device.type, dtype=torch.bfloat16) if packed else nullcontext()
        C, nh, nkv, hs = self.n_embd, self.n_head, self.n_kv_head, self.head_dim
        cos, sin = self._rotary(t0, t0 + T)  # (T, hs)
        x = F.embedding(ids, self.wte)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            h = self._norm(x, block.norms[0]).view(B * T, C)
            qkv = lin(h, i, "qkv", int8).view(B, T, nh + 2 * nkv, hs)
            qk, v = qkv[:, :, : nh + nkv], qkv[:, :, nh + nkv :]  # (B, T, heads, hs)
            if block.qk_gain is not None:  # the queries' and keys' norms in one
                qk = _rms_norm(qk, None, self.eps) * block.qk_gain
            qk = _rotate_rolled(qk.transpose(1, 2), cos, sin)  # (B, nh + nkv, T, hs)
            q, k = qk[:, :nh], qk[:, nh:]  # (B, nh, T, hs), (B, nkv, T, hs)
            with bf16:
                y = attend(q, k, v.transpose(1, 2), cache, i, t0, self.scaling, block.window)
            y = y.transpose(1, 2).reshape(B * T, nh * hs)
            x = x + lin(y, i, "o", int8, cast=False).view(B, T, C)
            h = self._norm(x, block.norms[1]).view(B * T, C)
            x = x + lin(self._mlp(h, i, int8, packed), i, "down", int8, cast=False).view(B, T, C)
        cache.length = t0 + T
        return x

    def _one_token_blocks(self, ids: torch.Tensor, cache: KVCache, int8: bool) -> torch.Tensor:
        """:meth:`_blocks` for one new token per row (B, 1) without a shared prefix: the
        same computation, to the bit, on (B, C) rows and (B, heads, hs) heads, with no
        transposes and the query read as a view (a step of a small model is mostly the
        overhead of its tensor operations: 0.87-0.97x the time of the general path).
        Where it applies, the same ops run as one TorchScript function
        (:mod:`codeparrot.generation.scripted`), without Python between them."""
        B = ids.size(0)
        t0 = cache.length
        t1 = t0 + 1
        nh, nkv, hs = self.n_head, self.n_kv_head, self.head_dim
        cos, sin = self._rotary(t0, t1)  # (1, hs): broadcast over rows and heads
        x = F.embedding(ids.view(B), self.wte)  # (B, C)
        scripted = None if torch.compiler.is_compiling() else self._scripted_step(int8)
        if scripted is not None:
            function, arguments = scripted
            x = function(x, t0, cos, sin, cache.keys, cache.values, *arguments)
            cache.length = t1
            return x.view(B, 1, -1)
        for i, block in enumerate(self.blocks):
            qkv = self._lin(self._norm(x, block.norms[0]), i, "qkv", int8)
            qkv = qkv.view(B, nh + 2 * nkv, hs)
            qk = qkv[:, : nh + nkv]  # (B, nh + nkv, hs)
            if block.qk_gain is not None:
                qk = _rms_norm(qk, None, self.eps) * block.qk_gain
            qk = _rotate_rolled(qk, cos, sin)
            keys, values = cache.keys[i], cache.values[i]  # (B, nkv, T_max, hs)
            # narrow, not indexing by position: a compiled step keeps the length symbolic
            keys.narrow(2, t0, 1).copy_(qk[:, nh:, None])
            values.narrow(2, t0, 1).copy_(qkv[:, nh + nkv :, None])
            start = 0 if block.window is None else max(0, t1 - block.window)
            keys, values = keys.narrow(2, start, t1 - start), values.narrow(2, start, t1 - start)
            y = _grouped_query(qk[:, :nh, None], keys, values, self.scaling)
            x = x + self._lin(y.reshape(B, nh * hs), i, "o", int8, cast=False)
            h = self._norm(x, block.norms[1])
            x = x + self._lin(self._mlp(h, i, int8), i, "down", int8, cast=False)
        cache.length = t1
        return x.view(B, 1, -1)

    def _script_steps(self) -> Any:
        """The Llama family's scripted one-token blocks (see
        :mod:`codeparrot.generation.scripted`), or None where TorchScript fails."""
        from codeparrot.generation.scripted import script_steps

        return script_steps()

    def _scriptable(self, int8: bool) -> bool:
        if self.dtype != torch.float32 or self.device.type != "cpu" or self.act_code is None:
            return False
        if int8:
            return self.int8 is not None and all(
                m.kernel == "weight-only" for layer in self.int8 for m in layer.values()
            )
        return True

    def _scripted_arguments(self, int8: bool) -> tuple[Any, ...]:
        """The blocks' tensors as :func:`~codeparrot.generation.scripted.one_token_blocks`
        takes them."""
        groups = ("qkv", "o", "up", "down")
        matrices, biases = [], []
        for i, block in enumerate(self.blocks):
            if int8:
                mats = [self.int8[i][g] for g in groups]  # type: ignore[index]
                matrices.append([[m.weight, m.scales] for m in mats])
                biases.append([m.bias for m in mats])
            else:
                matrices.append([[w for w, _ in block.parts[g]] for g in groups])  # type: ignore[index]
                biases.append([block.biases[g] for g in groups])
        norms = [[*block.norms[0], *block.norms[1]] for block in self.blocks]
        return (
            norms,
            [block.qk_gain for block in self.blocks],
            matrices,
            biases,
            [block.window or 0 for block in self.blocks],
            [self.n_head, self.n_kv_head, self.head_dim],
            [int8, self.layer_norm, self.gated],
            self.act_code,
            float(self.eps),
            float(self.scaling),
        )


def _window(cfg: Any, i: int) -> int | None:
    """The sliding window of layer ``i`` as transformers applies it, None for full attention."""
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if window is None or (types is not None and types[i] != "sliding_attention"):
        return None
    if getattr(cfg, "use_sliding_window", True) is False:
        return None
    return int(window)


def _activation(mlp: Any, name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The MLP's activation: torch's fused kernel where there is one, else the module's."""
    if name == "silu":
        return F.silu
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return lambda h: F.gelu(h, approximate="tanh")
    return getattr(mlp, "act_fn", None) or mlp.act


def _rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' RMSNorm over the last dimension: normalised in float32, scaled in the
    input's dtype (torch's fused kernel where the input is float32 already)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.size(-1),), weight, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) if weight is None else weight * xf.to(x.dtype)


def _rotate_rolled(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """:func:`_rotate` with ``sin``'s first half negated (:meth:`LlamaDecoder._rotary`): the
    halves swap by one roll, and the sign is in the table (four kernels instead of six, the
    same values)."""
    return x * cos + x.roll(x.size(-1) // 2, dims=-1) * sin


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions: ``x`` (..., T, hs), tables (T, hs); halves rotated as in
    transformers' ``rotate_half``."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
