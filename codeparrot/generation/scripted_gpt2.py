"""GPT-2's and GPTBigCode's one-token step as one TorchScript function (see
:mod:`codeparrot.generation.scripted`, the Llama family's).

:func:`one_token_blocks` is :meth:`~codeparrot.generation.gpt2.GPT2Decoder._blocks` for
one new token per row without a shared prefix, op for op (the same logits, to the bit;
tests compare them), on the float weights and on both int8 kernels: the ``dynamic``
kernel's packed weights are TorchScript objects (``LinearPackedParamsBase``) that a
scripted function takes in a list. For a 186M GPT-2 (int8, one thread) the step's
products are some three quarters of its time; the rest is ~500 small operations, each
paying Python's call and dispatch in eager mode (RESULTS.md, Against llama.cpp).
Where ``torch.jit.script`` is missing or fails, :func:`script_steps` returns None and
the eager step serves.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from codeparrot.generation.scripted import _attention

logger = logging.getLogger(__name__)

# how the blocks' matrices are multiplied (GPT2Decoder._linear, int8.int8_linear)
FLOAT_CONV1D, FLOAT_LINEAR, WEIGHT_ONLY, DYNAMIC = 0, 1, 2, 3
# how the fused query/key/value projection's output splits (GPT2Decoder._split_qkv and
# GPTBigCodeDecoder's): GPT-2's, one key/value head (multi-query), heads interleaved
SPLIT_GPT2, SPLIT_MULTI_QUERY, SPLIT_INTERLEAVED = 0, 1, 2


def _dynamic(
    x: torch.Tensor,
    packed: torch.classes.quantized.LinearPackedParamsBase,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    reduce_range: bool,
) -> torch.Tensor:
    """:func:`~codeparrot.generation.int8._dynamic_linear` for float32 ``x`` outside autocast."""
    if x.size(0) == 1:
        out = torch.ops.quantized.linear_dynamic(x, packed, reduce_range)
        if bias is None:
            return out.mul_(scales)
        return torch.addcmul(bias, out, scales)
    s = torch.maximum(x.amax(dim=1), x.amin(dim=1).neg_()).clamp_(min=1e-12)[:, None]
    rows = x.new_empty(x.size(0) + 1, x.size(1))
    torch.mul(x, s.reciprocal(), out=rows[:-1])
    rows[-1].zero_()
    rows[-1, 0] = -1.0
    rows[-1, -1] = 1.0
    out = torch.ops.quantized.linear_dynamic(rows, packed, reduce_range)[:-1]
    out = out.mul_(s).mul_(scales)
    if bias is None:
        return out
    return out.add_(bias)


def _linear(
    x: torch.Tensor,
    i: int,
    j: int,
    weights: list[list[torch.Tensor]],
    scales: list[list[torch.Tensor]],
    biases: list[list[torch.Tensor | None]],
    packed: list[list[torch.classes.quantized.LinearPackedParamsBase]],
    kernel: int,
    reduce_range: bool,
) -> torch.Tensor:
    """Block ``i``'s matrix ``j`` (c_attn, c_proj, c_fc, mlp_proj) times ``x`` (B, K)."""
    bias = biases[i][j]
    if kernel == 3:  # DYNAMIC (TorchScript reads no module globals)
        return _dynamic(x, packed[i][j], scales[i][j], bias, reduce_range)
    if kernel == 2:  # WEIGHT_ONLY
        s = scales[i][j]
        out = torch.ops.aten._weight_int8pack_mm(x.to(s.dtype), weights[i][j], s)
        if bias is not None:
            return torch.add(bias, out)
        return out.to(x.dtype)
    if kernel == 0:  # FLOAT_CONV1D
        assert bias is not None
        return torch.addmm(bias, x, weights[i][j])
    return F.linear(x, weights[i][j], bias)


def _split(
    qkv: torch.Tensor, B: int, nh: int, hs: int, split: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused projection's output (B, width) -> q (B, nh, 1, hs), k, v (B, nkv, 1, hs)."""
    if split == 0:  # SPLIT_GPT2
        parts = qkv.view(B, 1, 3, nh, hs).permute(2, 0, 3, 1, 4)
        return parts[0], parts[1], parts[2]
    if split == 1:  # SPLIT_MULTI_QUERY
        parts = qkv.view(B, 1, nh + 2, hs).split((nh, 1, 1), dim=2)
        return parts[0].transpose(1, 2), parts[1].transpose(1, 2), parts[2].transpose(1, 2)
    parts = qkv.view(B, 1, nh, 3 * hs).transpose(1, 2).split(hs, dim=-1)
    return parts[0], parts[1], parts[2]


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
    t0: int, scale: float,
) -> torch.Tensor:  # fmt: skip
    """:func:`~codeparrot.generation.gpt2.attend` for one new token per row, no prefix."""
    keys.narrow(2, t0, 1).copy_(k)
    values.narrow(2, t0, 1).copy_(v)
    if t0 > 0:
        k, v = keys.narrow(2, 0, t0 + 1), values.narrow(2, 0, t0 + 1)
    return _attention(q, k, v, scale)


def one_token_blocks(
    x: torch.Tensor,
    t0: int,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    norms: list[list[torch.Tensor]],
    weights: list[list[torch.Tensor]],
    scales: list[list[torch.Tensor]],
    biases: list[list[torch.Tensor | None]],
    packed: list[list[torch.classes.quantized.LinearPackedParamsBase]],
    scalings: list[float],
    shape: list[int],
    kernel: int,
    reduce_range: bool,
    eps: float,
) -> torch.Tensor:
    """The blocks of one new token per row: ``x`` (B, C) embedded (positions included), at
    position ``t0``; per block its norms (ln_1 weight and bias, ln_2's), its matrices'
    weights, scales, biases and packed forms (as ``kernel`` reads them: lists it does not
    read may be empty) and its attention's scaling; ``shape`` the heads, head size and
    the split of the fused projection. Writes the keys and values at ``t0``; returns ``x``
    (its own: it is added to in place) after the blocks, GELU's tanh approximation as
    the activation."""
    nh, hs, split = shape[0], shape[1], shape[2]
    B, C = x.size(0), x.size(1)
    for i in range(len(keys)):
        norm = norms[i]
        h = F.layer_norm(x, [C], norm[0], norm[1], eps)
        qkv = _linear(h, i, 0, weights, scales, biases, packed, kernel, reduce_range)
        q, k, v = _split(qkv, B, nh, hs, split)
        y = _attend(q, k, v, keys[i], values[i], t0, scalings[i])
        y = y.transpose(1, 2).reshape(B, C)
        x = x.add_(_linear(y, i, 1, weights, scales, biases, packed, kernel, reduce_range))
        h = F.layer_norm(x, [C], norm[2], norm[3], eps)
        h = _linear(h, i, 2, weights, scales, biases, packed, kernel, reduce_range)
        h = F.gelu(h, approximate="tanh")
        x = x.add_(_linear(h, i, 3, weights, scales, biases, packed, kernel, reduce_range))
    return x


def script_steps() -> Any:
    """:func:`one_token_blocks` scripted, or None (one log line saying why) where
    TorchScript is missing or refuses it."""
    try:
        with warnings.catch_warnings():  # deprecated, see scripted's docstring
            warnings.simplefilter("ignore")
            return torch.jit.script(one_token_blocks)
    except Exception as e:  # TorchScript's front end raises many types
        logger.info("GPT-2 one-token steps run eagerly: TorchScript failed (%s)", e)
        return None
