"""int8 matrices for the lean decoders' one-token steps, and the CPU kernel that multiplies them.

A one-token step on a CPU is bound by how fast the weights stream from memory, so the
lean decoders (:mod:`codeparrot.generation.gpt2` and the families built on it) keep int8
copies of their matrices (symmetric, one scale per output channel) for those steps.
Two of torch's CPU kernels multiply them:

- ``dynamic``: torch's dynamic int8 linear (``quantized::linear_dynamic``; fbgemm on
  x86). Each call quantizes the activations (one scale for the whole input, so rows
  are first scaled to the same largest value, then scaled back) and multiplies int8 by
  int8 into int32, bias included. Activations get 8 bits on a CPU with VNNI, else 7 (as
  torch's own ``quantize_dynamic`` does: fbgemm's AVX2 kernels would saturate with 8).
  Rounding the activations too, it moves the logits about twice as far as the
  weight-only kernel (tests bound both);
- ``weight-only``: ``aten._weight_int8pack_mm``: the int8 weights times bf16 activations
  (fp32 on a CPU without fast bf16, where it is slow).

:func:`choose_kernel` times both on one block's own matrices when the weights are
quantized (a few milliseconds) and keeps the faster for the blocks, and times them again
on the output projection (at most its first ``HEAD_PROBE_ROWS`` rows), which may take the
other: for the quickstart's 5.3M model (8,192 x 256) the dynamic kernel multiplies it in
39 us against 67 us, while its blocks' small matrices are faster weight-only. Measured on an AMD EPYC (Zen 4),
one thread, a shared machine, the matrices of a 164M GPTBigCode model: ``dynamic`` 2.2
ms for one block and the head against 6.6 ms for ``weight-only`` (bf16). Packed weights are built in memory
from the model's own weights, never read from or written to disk.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger(__name__)

KERNELS = ("dynamic", "weight-only")
# Steps with at most this many rows use the int8 weights (when present). Steps of more
# rows, and prompts, use them where the prompt probe finds them faster for many rows
# (GPT2Decoder.choose_int8_prompts), else the blocked fp32/bf16 product.
INT8_MAX_ROWS = 32
# The output projection's kernel is timed on at most this many of its rows (a large
# vocabulary's whole projection would take long to pack twice).
HEAD_PROBE_ROWS = 8192
# The probe's budget for each kernel: at least this many seconds of products, or 3 rounds.
PROBE_SECONDS = 0.02
# Rows of the products that decide whether prompts read the int8 copies too (a prompt read
# whole is a few hundred tokens; one read after a few keystrokes, a handful).
PROMPT_PROBE_ROWS = 256
# ... which they do where the int8 products take at most this share of the dense ones' time
# (the rest of a prompt, attention above all, is the same either way)
PROMPT_INT8_SHARE = 0.9


@dataclass(frozen=True)
class Int8Matrix:
    """One matrix (N, K) in int8, with its bias, in the form its kernel reads.

    ``dynamic``: ``packed`` is the kernel's prepacked int8 rows (one scale, 1, for the
    whole matrix), ``scales`` (N,) float32 the rows' scales, which multiply its output,
    ``reduce_range`` whether activations get 7 bits instead of 8. ``weight-only``:
    ``weight`` int8 (N, K), ``scales`` (N,) in the activations' dtype. Both: ``bias``.
    """

    kernel: str
    packed: Any = None
    reduce_range: bool = True
    weight: torch.Tensor | None = None
    scales: torch.Tensor | None = None
    bias: torch.Tensor | None = None


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 (N, K) and float32 scales (N,) of ``weight`` (N, K): symmetric, one scale
    per row."""
    w = weight.detach().float()
    scales = largest_magnitudes(w).clamp_(min=1e-12) / 127.0
    scaled = w * (1.0 / scales)[:, None]  # the one full-size float copy; rounded in place
    q = scaled.round_().clamp_(-127, 127).to(torch.int8).contiguous()
    return q, scales


def largest_magnitudes(x: torch.Tensor) -> torch.Tensor:
    """The largest magnitude of each row of ``x`` (N, K): (N,). From the largest and the
    smallest values, with no copy of ``x``: 15x faster here than the infinity norm."""
    return torch.maximum(x.amax(dim=1), x.amin(dim=1).neg_())


def quantize_matrix(weight: torch.Tensor, bias: torch.Tensor | None, kernel: str) -> Int8Matrix:
    """``weight`` (N, K) (out, in) and its bias as an :class:`Int8Matrix` for ``kernel``."""
    if kernel not in KERNELS:
        raise ValueError(f"int8 kernel {kernel!r}: use one of {', '.join(KERNELS)}")
    return pack_rows(*quantize_rows(weight), bias, kernel)


def pack_rows(
    q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, kernel: str
) -> Int8Matrix:
    """int8 rows ``q`` (N, K) with float32 ``scales`` (N,) (:func:`quantize_rows`'s) and a
    bias as an :class:`Int8Matrix` for ``kernel``."""
    if kernel == "weight-only":
        from codeparrot.precision import cpu_has_fast_bf16

        dtype = torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
        return Int8Matrix(kernel, weight=q, scales=scales.to(dtype), bias=bias)
    if kernel != "dynamic":
        raise ValueError(f"int8 kernel {kernel!r}: use one of {', '.join(KERNELS)}")
    return Int8Matrix(
        kernel, packed=_prepack(q), reduce_range=not _has_vnni(), scales=scales.float(), bias=bias
    )


@functools.cache
def _has_vnni() -> bool:
    """Does fbgemm multiply 8-bit activations here without saturating (VNNI's int32 sums)?"""
    check = getattr(torch.cpu, "_is_vnni_supported", None)
    return bool(check and check())


def _prepack(q: torch.Tensor) -> Any:
    """The dynamic kernel's packed form of int8 rows ``q`` (N, K), as a matrix of one scale,
    1: the rows' own scales multiply the kernel's output instead. fbgemm packs such a matrix
    in 0.6-0.9x the time of one with a scale per row, and multiplies by it faster (a 164M
    model's output projection, one row: 2.7 against 3.5 ms on a Zen 4 core)."""
    with warnings.catch_warnings():  # torch deprecates making quantized tensors in Python;
        # this one lives only until the kernel has packed it
        warnings.filterwarnings("ignore", message=".*quantized tensor creation")
        qweight = torch._make_per_tensor_quantized_tensor(q, 1.0, 0)
        return torch.ops.quantized.linear_prepack(qweight, None)


def int8_linear(x: torch.Tensor, m: Int8Matrix, *, cast: bool = True) -> torch.Tensor:
    """``x`` (B, K) times ``m`` (N, K) transposed, plus its bias: (B, N) in ``x``'s dtype
    (the bias's where it is wider: the residual's). ``cast=False``: for float32
    ``x``, the weight-only kernel's product without a bias may stay in its own dtype
    (bf16), for a caller that adds it to a float32 tensor (the same sum, one kernel less)."""
    if m.packed is not None:
        return _dynamic_linear(x, m)
    out = torch.ops.aten._weight_int8pack_mm(x.to(m.scales.dtype), m.weight, m.scales)
    if m.bias is not None:  # one op adds the bias and returns the bias's (the residual's) dtype
        return torch.add(m.bias, out)
    # into float32 the cast is exact, and the caller's sum does it anyway
    return out if not cast and x.dtype == torch.float32 else out.to(x.dtype)


def _dynamic_linear(x: torch.Tensor, m: Int8Matrix) -> torch.Tensor:
    """The dynamic kernel's product. It quantizes its whole input with one scale, so a
    row of small values next to one of large values would keep few bits: rows are
    scaled to a largest value of 1 first (W (x / s) + b, times s, is W x + s b), and one
    more row, of -1 and 1, pins the input's range to [-1, 1]. Each row is then rounded
    the same whatever rows come with it (integer sums are exact): a prompt gives the same
    keys and values in one piece or in two."""
    xf = x.float()
    if len(x) == 1:
        out = torch.ops.quantized.linear_dynamic(xf, m.packed, m.reduce_range)  # (1, N)
        out = out.mul_(m.scales) if m.bias is None else torch.addcmul(m.bias, out, m.scales)
        return _fit(out, x)
    s = largest_magnitudes(xf).clamp_(min=1e-12)[:, None]
    rows = xf.new_empty(len(x) + 1, x.size(1))
    torch.mul(xf, s.reciprocal(), out=rows[:-1])
    rows[-1].zero_()
    rows[-1, 0], rows[-1, -1] = -1.0, 1.0  # the range row (K >= 2 for every matrix)
    out = torch.ops.quantized.linear_dynamic(rows, m.packed, m.reduce_range)[:-1]  # (B, N)
    out = out.mul_(s).mul_(m.scales)
    return _fit(out if m.bias is None else out.add_(m.bias), x)


def _fit(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out`` in ``x``'s dtype, or in bf16 under CPU autocast, as a dense product's."""
    if torch.is_autocast_enabled("cpu"):
        return out.to(torch.get_autocast_dtype("cpu"))
    return out if x.dtype == torch.float32 else out.to(x.dtype)


@functools.cache
def kernel_supported(kernel: str) -> bool:
    """Does this torch build run ``kernel`` on this CPU (a tiny product, once)?"""
    try:
        w = torch.zeros(8, 64)
        m = quantize_matrix(w, torch.zeros(8), kernel)
        int8_linear(torch.zeros(1, 64), m)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True


def int8_supported() -> bool:
    """Does this torch have a CPU int8 kernel for the one-token steps (either of them)?"""
    return any(kernel_supported(k) for k in KERNELS)


def choose_kernel(
    matrices: dict[str, tuple[torch.Tensor, torch.Tensor | None]],
    asked: str = "auto",
    what: str = "int8 steps",
) -> str:
    """The int8 kernel for ``matrices`` (name -> weight (out, in), bias: one block's, or the
    output projection's): ``asked`` where it is one of :data:`KERNELS`, else the one of
    them that multiplies these matrices faster for one row here (one log line, naming
    ``what``, says which and the figures)."""
    if asked in KERNELS:
        if not kernel_supported(asked):
            raise RuntimeError(f"this torch build has no {asked} int8 CPU kernel")
        return asked
    if asked != "auto":
        raise ValueError(f"int8 kernel {asked!r}: use auto or one of {', '.join(KERNELS)}")
    available = [k for k in KERNELS if kernel_supported(k)]
    if not available:
        raise RuntimeError("this torch build has no int8 CPU kernel")
    if len(available) == 1:
        logger.info("%s: the %s kernel (the only one this torch has)", what, available[0])
        return available[0]
    timings = measure_kernels(matrices)
    best = min(timings, key=timings.__getitem__)
    logger.info(
        "%s: the %s kernel (%s, one row: %s)",
        what,
        best,
        ", ".join(matrices) if len(matrices) == 1 else "one block's matrices",
        ", ".join(f"{k} {us:.0f} us" for k, us in timings.items()),
    )
    return best


def measure_kernels(
    matrices: dict[str, tuple[torch.Tensor, torch.Tensor | None]],
) -> dict[str, float]:
    """Microseconds each kernel takes to multiply one row by every one of ``matrices``
    (the fastest of at least three rounds). The kernels' rounds alternate, so that other
    work on the machine (another thread of this process included) slows both alike."""
    packed = {k: [quantize_matrix(w, b, k) for w, b in matrices.values()] for k in KERNELS}
    xs = [torch.randn(1, w.size(1), dtype=w.dtype) for w, _ in matrices.values()]
    best = dict.fromkeys(KERNELS, float("inf"))
    with torch.inference_mode():
        for kernel in KERNELS:
            for x, m in zip(xs, packed[kernel], strict=True):
                int8_linear(x, m)  # untimed: the first call may set things up
        rounds, start = 0, time.perf_counter()
        while rounds < 3 or time.perf_counter() - start < PROBE_SECONDS * len(KERNELS):
            for kernel in KERNELS:
                before = time.perf_counter()
                for x, m in zip(xs, packed[kernel], strict=True):
                    int8_linear(x, m)
                best[kernel] = min(best[kernel], time.perf_counter() - before)
            rounds += 1
    return {k: t * 1e6 for k, t in best.items()}


def int8_prompts_faster(
    matrices: dict[str, tuple[torch.Tensor, torch.Tensor | None]],
    packed: dict[str, Int8Matrix],
    bf16: bool,
) -> bool:
    """Do one block's products of ``PROMPT_PROBE_ROWS`` rows on the ``packed`` int8
    copies of ``matrices`` take at most ``PROMPT_INT8_SHARE`` of their time as prompts
    compute them otherwise (:func:`measure_prompt_products`)? One log line says, with the
    figures."""
    timings = measure_prompt_products(matrices, packed, bf16)
    faster = timings["int8"] <= PROMPT_INT8_SHARE * timings["dense"]
    dense = "bf16" if bf16 else str(next(iter(matrices.values()))[0].dtype).removeprefix("torch.")
    logger.info(
        "int8 prompts: %s (one block's matrices, %d rows: int8 %.0f us, %s %.0f us)",
        "yes" if faster else "no",
        PROMPT_PROBE_ROWS,
        timings["int8"],
        dense,
        timings["dense"],
    )
    return faster


def measure_prompt_products(
    matrices: dict[str, tuple[torch.Tensor, torch.Tensor | None]],
    packed: dict[str, Int8Matrix],
    bf16: bool,
    rows: int = PROMPT_PROBE_ROWS,
) -> dict[str, float]:
    """Microseconds to multiply ``rows`` rows by every one of ``matrices`` (name ->
    weight (out, in), bias): ``dense`` as prompts do without int8 (in bf16 under CPU
    autocast with ``bf16``, else in the weights' dtype), ``int8`` with their ``packed``
    copies (the fastest of at least three alternating rounds)."""
    names = list(matrices)
    xs = [torch.randn(rows, matrices[n][0].size(1), dtype=matrices[n][0].dtype) for n in names]

    def dense() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for x, n in zip(xs, names, strict=True):
                torch.nn.functional.linear(x, *matrices[n])

    def int8() -> None:
        for x, n in zip(xs, names, strict=True):
            int8_linear(x, packed[n])

    sides = {"dense": dense, "int8": int8}
    best = dict.fromkeys(sides, float("inf"))
    with torch.inference_mode():
        for run in sides.values():
            run()  # untimed: the first call may set things up
        rounds, start = 0, time.perf_counter()
        while rounds < 3 or time.perf_counter() - start < PROBE_SECONDS * len(sides):
            for side, run in sides.items():
                before = time.perf_counter()
                run()
                best[side] = min(best[side], time.perf_counter() - before)
            rounds += 1
    return {k: t * 1e6 for k, t in best.items()}
