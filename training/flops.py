"""The FLOP count and the MFU: the model FLOP/s of a run over the peak of the device."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def measure_peak_flops(
    seconds: float = 1.0, n: int = 1024, dtype: str = "bfloat16", device: str = "cpu"
) -> float:
    """FLOP/s of a square matmul in ``dtype`` on ``device`` (the MFU denominator); at
    least one timed product, however long it takes (an emulated dtype: seconds)."""
    import torch

    generator = torch.Generator().manual_seed(0)  # leaves the global RNG (dropout) alone
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=getattr(torch, dtype))
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    a @ b  # warm up
    sync()
    iters, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or iters < 1:
        a @ b
        iters += 1
        sync()
    return 2 * n**3 * iters / elapsed


PEAK_DTYPES = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}


def measure_peaks(choice: Any) -> dict[str, float]:
    """FLOP/s of the run's own precision (1 s: the MFU denominator) and of the other of
    fp32 / bf16 (briefly, in a small product: an emulated bf16 is slow to measure)."""
    own = PEAK_DTYPES[choice.mixed_precision]
    device = "cuda" if choice.device == "cuda" else "cpu"
    peaks = {own: measure_peak_flops(dtype=own, device=device)}
    other = "bfloat16" if own != "bfloat16" else "float32"
    n = 1024 if device == "cuda" or choice.bf16_fast or other == "float32" else 256
    peaks[other] = measure_peak_flops(seconds=0.2, n=n, dtype=other, device=device)
    return peaks


def peak_flops(choice: Any, say: Callable[[str], None]) -> float:
    """The MFU denominator: the peak of the precision the run trains in (both printed)."""
    peaks = measure_peaks(choice)
    own = PEAK_DTYPES[choice.mixed_precision]
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    shown = ", ".join(f"{short[name]} {flops / 1e9:,.1f}" for name, flops in peaks.items())
    say(f"matmul peaks (GFLOP/s): {shown}; MFU is measured against the {short[own]} peak")
    return peaks[own]
