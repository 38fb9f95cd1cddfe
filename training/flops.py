"""The FLOP count and the MFU: the model FLOP/s of a run over the peak of the device.

The numerator is the documented count of training FLOPs a token, 6N + 12·L·d·T (N without
the position table; PaLM appendix B, as nanoGPT), times the tokens a second. The
denominator is measured at start: a square matmul in the run's precision, large enough to
fill the device (8192^3 on CUDA; a 1,024^3 product leaves most of an H100-class GPU idle
and gave MFUs above 200%). The datasheet's dense peak of the device, where the device is in
:data:`DATASHEET_PEAKS`, is printed beside it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Dense (no 2:4 sparsity) tensor-core TFLOP/s in bf16 (fp16 the same), from each vendor's
# datasheet; the first pattern that matches the device's name (torch.cuda.get_device_name)
# wins, so the more specific names come first.
DATASHEET_PEAKS: tuple[tuple[str, float], ...] = (
    (r"\bH200 NVL\b", 835.0),
    (r"\bH200\b", 989.0),
    (r"\bGH200\b", 989.0),
    (r"\bH100 NVL\b", 835.0),
    (r"\bH100 PCIe\b", 756.0),
    (r"\bH100\b", 989.0),  # SXM (its name: "NVIDIA H100 80GB HBM3")
    (r"\bH800\b", 989.0),
    (r"\bB200\b", 2250.0),
    (r"\bA100\b", 312.0),  # 40 and 80 GB, SXM and PCIe alike
    (r"\bA800\b", 312.0),
    (r"\bL40S\b", 362.0),
    (r"\bL40\b", 181.0),
    (r"\bL4\b", 121.0),
    (r"\bA10G\b", 70.0),
    (r"\bA10\b", 125.0),
    (r"\bRTX 4090\b", 165.0),  # fp32 accumulation (330 with fp16 accumulation)
    (r"\bRTX 3090\b", 71.0),
    (r"\bRTX 6000 Ada\b", 364.0),
    (r"\bMI300X\b", 1307.0),
    (r"\bMI250X?\b", 383.0),
)

CUDA_PEAK_N = 8192  # the product that fills an H100-class GPU (782 TFLOP/s on an H200)
CPU_PEAK_N = 1024

PEAK_DTYPES = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def datasheet_peak_flops(device_name: str | None) -> float | None:
    """The datasheet's dense bf16 FLOP/s of a device by its name; None if not known."""
    if not device_name:
        return None
    for pattern, tflops in DATASHEET_PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return tflops * 1e12
    return None


def format_flops(flops: float) -> str:
    """``flops`` FLOP/s in the unit that reads best: TFLOP/s on a GPU, GFLOP/s on a CPU."""
    if flops >= 1e12:
        return f"{flops / 1e12:,.1f} TFLOP/s"
    return f"{flops / 1e9:,.1f} GFLOP/s"


def mfu(flops_per_s: float, peak: float) -> float:
    """Model FLOPs utilisation: the run's FLOP/s over the peak, never above 1."""
    if peak <= 0:
        return 0.0
    return min(1.0, flops_per_s / peak)


def flops_per_token(model: Any, seq_length: int) -> float:
    """Training FLOPs a token of ``model`` (6N + 12·L·d·T, N without the position table)."""
    from codeparrot.models.presets import count_parameters
    from codeparrot.models.presets import flops_per_token as count

    n = count_parameters(model, exclude_position_embeddings=True)
    return count(model.config, n, seq_length)


def measure_peak_flops(
    seconds: float = 1.0, n: int = CPU_PEAK_N, dtype: str = "bfloat16", device: str = "cpu"
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


def measure_peaks(choice: Any) -> dict[str, float]:
    """FLOP/s of the run's own precision (1 s: the MFU denominator) and of the other of
    fp32 / bf16 (briefly; on a CPU in a small product: an emulated bf16 is slow to measure)."""
    own = PEAK_DTYPES[choice.mixed_precision]
    device = "cuda" if choice.device == "cuda" else "cpu"
    n = CUDA_PEAK_N if device == "cuda" else CPU_PEAK_N
    peaks = {own: measure_peak_flops(n=n, dtype=own, device=device)}
    other = "bfloat16" if own != "bfloat16" else "float32"
    if device != "cuda" and not (choice.bf16_fast or other == "float32"):
        n = 256
    peaks[other] = measure_peak_flops(seconds=0.2, n=n, dtype=other, device=device)
    return peaks


def device_name(device_type: str) -> str:
    """The name of the device a run trains on (the GPU's own, or the CPU's model name)."""
    if device_type == "cuda":
        import torch

        return str(torch.cuda.get_device_name())
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


@dataclass(frozen=True)
class Peaks:
    """The MFU's denominator and what is printed beside it."""

    measured: float  # FLOP/s of the run's precision, measured (or --peak-tflops)
    datasheet: float | None  # the device's dense bf16 peak, where its name is known
    device_name: str


def peak_flops(choice: Any, say: Callable[[str], None], given_tflops: float | None) -> Peaks:
    """The MFU denominator: the peak of the precision the run trains in (``--peak-tflops``
    if given, else measured), with the datasheet's peak beside it (all printed)."""
    name = device_name(choice.device)
    datasheet = datasheet_peak_flops(name) if choice.device == "cuda" else None
    sheet = "" if datasheet is None else f"; datasheet dense bf16 {format_flops(datasheet)}"
    own = SHORT[PEAK_DTYPES[choice.mixed_precision]]
    if given_tflops:
        say(f"{name}: peak {given_tflops:g} TFLOP/s (--peak-tflops){sheet}")
        return Peaks(given_tflops * 1e12, datasheet, name)
    peaks = measure_peaks(choice)
    shown = ", ".join(f"{SHORT[dtype]} {format_flops(flops)}" for dtype, flops in peaks.items())
    say(f"{name}: matmul peaks {shown}{sheet}; MFU is measured against the {own} peak")
    return Peaks(peaks[PEAK_DTYPES[choice.mixed_precision]], datasheet, name)
