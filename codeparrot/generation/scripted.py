"""The Llama family's one-token step as one TorchScript function: no Python between its ops.

A one-token step of a small model is mostly the overhead of its tensor operations, and
in eager mode each of them also pays for Python (an attribute read, a call, a dispatch
from the interpreter): the quickstart's 5.3M Qwen3 model runs some 150 of them a step.
:func:`one_token_blocks` is :meth:`~codeparrot.generation.llama.LlamaDecoder._one_token_blocks`
op for op (the same logits, to the bit; tests compare them), written for TorchScript,
whose interpreter runs the loop over the blocks in C++: 0.75-0.8x the eager step's time
for that model on one thread (RESULTS.md, Against llama.cpp). Scripting it takes some
0.1 s, once per decoder and weights (int8 or not).

TorchScript is deprecated (torch 2.10 and later warn), so :func:`script_steps` returns
None (and the eager step serves) wherever ``torch.jit.script`` is missing or fails;
``torch.compile`` is the supported compiler but takes minutes on a CPU for this step.
It covers float32 models on the float weights or the ``weight-only`` int8 kernel (the
``dynamic`` kernel's packed weights are not a type TorchScript passes): the decoder
keeps the eager step for the rest.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)


def _linear(
    x: torch.Tensor,
    weights: list[torch.Tensor],
    bias: torch.Tensor | None,
    int8: bool,
    cast: bool,
) -> torch.Tensor:
    """:meth:`~codeparrot.generation.llama.LlamaDecoder._lin`: ``int8``: ``weights`` are
    the weight-only kernel's int8 rows and scales (:func:`~codeparrot.generation.int8.int8_linear`);
    else the float parts of a group, side by side."""
    if int8:
        out = torch.ops.aten._weight_int8pack_mm(x.to(weights[1].dtype), weights[0], weights[1])
        if bias is not None:
            return torch.add(bias, out)
        if not cast and x.dtype == torch.float32:
            return out
        return out.to(x.dtype)
    if len(weights) == 1:
        return F.linear(x, weights[0], bias)
    out = torch.cat([F.linear(x, w) for w in weights], dim=-1)
    if bias is None:
        return out
    return out + bias


def _norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, layer_norm: bool, eps: float
) -> torch.Tensor:
    if layer_norm:
        return F.layer_norm(x, [x.size(-1)], weight, bias, eps)
    return _rms(x, eps).mul_(weight)


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``torch.rms_norm`` without a weight, written out: the same values to the bit (its
    CPU kernel computes the mean of squares as their sum divided by their count), in
    fewer ops and allocations (it also casts to and from float32, and its mean makes a
    tensor to divide)."""
    squares = x.pow(2).sum(-1, keepdim=True)
    return x * squares.div_(x.size(-1)).add_(eps).rsqrt_()


def _mlp(
    h: torch.Tensor,
    weights: list[torch.Tensor],
    bias: torch.Tensor | None,
    int8: bool,
    gated: bool,
    activation: int,
) -> torch.Tensor:
    """:meth:`~codeparrot.generation.llama.LlamaDecoder._mlp`; ``activation`` 0: SiLU,
    1: GELU's tanh approximation."""
    if not gated:
        up = _linear(h, weights, bias, int8, True)
        return F.silu(up) if activation == 0 else F.gelu(up, approximate="tanh")
    if int8:
        gate, up = _linear(h, weights, bias, int8, True).chunk(2, dim=-1)
    else:
        gate, up = F.linear(h, weights[0]), F.linear(h, weights[1])
        if bias is not None:
            parts = bias.split([weights[0].size(0), weights[1].size(0)])
            gate, up = gate + parts[0], up + parts[1]
    act = F.silu(gate) if activation == 0 else F.gelu(gate, approximate="tanh")
    return act.mul_(up)


def _attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
) -> torch.Tensor:
    """:func:`~codeparrot.generation.gpt2._grouped_query`."""
    B, nh, hs = q.size(0), q.size(1), q.size(3)
    nkv = keys.size(1)
    if nkv == nh:
        return F.scaled_dot_product_attention(q, keys, values, scale=scale)
    grouped = q.reshape(B, nkv, nh // nkv, hs)
    y = F.scaled_dot_product_attention(grouped, keys, values, scale=scale)
    return y.reshape(B, nh, 1, hs)


def one_token_blocks(
    x: torch.Tensor,
    t0: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    norms: list[list[torch.Tensor | None]],
    gains: list[torch.Tensor | None],
    matrices: list[list[list[torch.Tensor]]],
    biases: list[list[torch.Tensor | None]],
    windows: list[int],
    shape: list[int],
    flags: list[bool],
    activation: int,
    eps: float,
    scaling: float,
) -> torch.Tensor:
    """The blocks of one new token per row: ``x`` (B, C) embedded, at position ``t0``;
    per block its norms (input weight and bias, post-attention weight and bias), query/key
    gain, the matrices and biases of its groups (query/key/value, output, up, down),
    window (0: none); ``shape`` the heads, key/value heads and head size; ``flags``
    int8, layer norm, gated MLP. Writes the keys and values at ``t0``; returns ``x`` (its
    own: it is added to in place) after the blocks. In-place ops where the eager step
    makes a new tensor: the same values, fewer allocations."""
    nh, nkv, hs = shape[0], shape[1], shape[2]
    int8, layer_norm, gated = flags[0], flags[1], flags[2]
    B = x.size(0)
    t1 = t0 + 1
    for i in range(len(keys)):
        norm, mats, bias = norms[i], matrices[i], biases[i]
        n0 = norm[0]
        assert n0 is not None
        h = _norm(x, n0, norm[1], layer_norm, eps)
        qkv = _linear(h, mats[0], bias[0], int8, True).view(B, nh + 2 * nkv, hs)
        qk = qkv[:, : nh + nkv]
        gain = gains[i]
        if gain is not None:
            qk = _rms(qk, eps).mul_(gain)
        qk = (qk * cos).add_(qk.roll(hs // 2, dims=-1).mul_(sin))
        k, v = keys[i], values[i]
        k.select(2, t0).copy_(qk[:, nh:])
        v.select(2, t0).copy_(qkv[:, nh + nkv :])
        start = 0 if windows[i] <= 0 else max(0, t1 - windows[i])
        k, v = k.narrow(2, start, t1 - start), v.narrow(2, start, t1 - start)
        y = _attention(qk[:, :nh, None], k, v, scaling)
        x = x.add_(_linear(y.reshape(B, nh * hs), mats[1], bias[1], int8, False))
        n1 = norm[2]
        assert n1 is not None
        h = _norm(x, n1, norm[3], layer_norm, eps)
        x = x.add_(_linear(_mlp(h, mats[2], bias[2], int8, gated, activation), mats[3],
                           bias[3], int8, False))  # fmt: skip
    return x


def script_steps() -> Any:
    """:func:`one_token_blocks` scripted, or None (one log line saying why) where
    TorchScript is missing or refuses it."""
    try:
        with warnings.catch_warnings():  # deprecated, see the module's docstring
            warnings.simplefilter("ignore")
            return torch.jit.script(one_token_blocks)
    except Exception as e:  # TorchScript's front end raises many types
        logger.info("one-token steps run eagerly: TorchScript failed (%s)", e)
        return None
