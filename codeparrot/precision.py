"""Is bf16 fast here? The one answer every bf16 decision of the project uses.

On a CPU without bf16 instructions (no AVX512_BF16 or AMX: AMD before Zen 4, most Intel
laptop chips) PyTorch emulates bf16 and its matrix products run some 100x slower than
fp32; where the instructions exist they run faster than fp32. So the training precision
(``--mixed-precision auto``), Muon's Newton-Schulz iteration and the engine's bf16 paths
(long-prompt prefill, the bf16 output head) all ask :func:`cpu_bf16_probe` or
:func:`cpu_has_fast_bf16` rather than assume.

The probe times a few matrix products in the model's own shapes, fp32 against bf16, in
well under a second (an emulating CPU is recognised from one small product). The
environment variable ``CODEPARROT_CPU_BF16`` forces its answer: ``0`` (behave as a CPU
without fast bf16: how to measure that case on a machine that has it) or ``1``.

Training's choice (:func:`choose_mixed_precision`):

- ``auto``: on a CUDA device bf16 where the device supports it, else fp32; on a CPU bf16
  only where the probe finds it faster than fp32, else fp32 (``"no"``).
- ``bf16``: as asked; on a CPU that emulates it, with one warning giving the slowdown.
- ``fp16``: on a CUDA device as asked; on a CPU a :class:`ConfigError` (no fp16 autocast
  there worth having).
- ``no``: fp32.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from codeparrot.errors import ConfigError

ENV = "CODEPARROT_CPU_BF16"
# bf16 must beat fp32 by this much in the probe to be chosen: autocast adds a cast of each
# weight and activation per product that a bare matrix product does not pay.
MIN_SPEEDUP = 1.1
# bf16 this many times slower than fp32 in a small product ends the probe: emulated.
EMULATED_RATIO = 4.0
# The probe stops after the shape that takes it past this many seconds.
MAX_SECONDS = 1.0
# Rows of the probe's products (the model's batch x sequence, capped so that an
# emulating CPU answers quickly).
PROBE_ROWS = 256


@dataclass(frozen=True)
class Bf16Probe:
    """What the probe found: bf16 fast or not, and the figures behind it."""

    fast: bool
    source: str  # "measured", "env" (CODEPARROT_CPU_BF16) or "cuda"
    fp32_gflops: float | None = None
    bf16_gflops: float | None = None

    @property
    def slowdown(self) -> float | None:
        """How many times slower bf16 ran than fp32 (None without figures)."""
        if not self.fp32_gflops or not self.bf16_gflops:
            return None
        return self.fp32_gflops / self.bf16_gflops

    def describe(self) -> str:
        if self.source == "env":
            return f"{ENV}={os.environ.get(ENV)} says bf16 is {'fast' if self.fast else 'slow'}"
        if self.source == "cuda":
            return "the CUDA device " + ("supports bf16" if self.fast else "has no bf16")
        return (
            f"matrix products in the model's shapes ran {self.fp32_gflops:,.1f} GFLOP/s in "
            f"fp32, {self.bf16_gflops:,.1f} in bf16"
        )


@dataclass(frozen=True)
class PrecisionChoice:
    """The training precision: what was asked, what runs, and why (recorded with the run)."""

    requested: str  # auto | no | bf16 | fp16
    mixed_precision: str  # no | bf16 | fp16: what Accelerate runs
    device: str  # cpu | cuda | ...
    reason: str
    bf16_fast: bool  # decides Muon's Newton-Schulz dtype as well
    fp32_gflops: float | None = None
    bf16_gflops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrecisionChoice:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})

    def describe(self) -> str:
        """One line for the log: the choice and the figures behind it."""
        name = {"no": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}
        return f"precision: {name[self.mixed_precision]} on {self.device} ({self.reason})"


def _env_answer() -> bool | None:
    value = os.environ.get(ENV)
    if value is None or value == "":
        return None
    if value not in ("0", "1"):
        raise ConfigError(f"{ENV}={value!r}: use 0 (treat bf16 as slow) or 1 (as fast)")
    return value == "1"


def _gflops(a: Any, b: Any, seconds: float) -> float:
    """GFLOP/s of ``a @ b``: its fastest of at least three timed products (repeated for
    about ``seconds``), after one untimed one. The fastest, because other work on the
    machine only ever slows a product down."""
    a @ b
    best, iters, start = float("inf"), 0, time.perf_counter()
    while time.perf_counter() - start < seconds or iters < 3:
        before = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - before)
        iters += 1
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / max(best, 1e-9) / 1e9


def measure_cpu_bf16(shapes: Sequence[tuple[int, int, int]], seconds: float = 0.05) -> Bf16Probe:
    """fp32 against bf16 over products of (rows, inner, cols) ``shapes`` on the CPU.

    A small product first: where bf16 runs :data:`EMULATED_RATIO` times slower than fp32
    there, the answer is clear and the model's shapes (seconds each when emulated) are
    skipped. Rows are capped at :data:`PROBE_ROWS`; the shapes after the one that takes the
    probe past :data:`MAX_SECONDS` are skipped too."""
    import torch

    generator = torch.Generator().manual_seed(0)  # leaves the global RNG alone

    def rates(rows: int, inner: int, cols: int, timed: float) -> tuple[float, float]:
        a = torch.randn(min(rows, PROBE_ROWS), inner, generator=generator)
        b = torch.randn(inner, cols, generator=generator)
        return _gflops(a, b, timed), _gflops(a.bfloat16(), b.bfloat16(), timed)

    fp32, bf16 = rates(64, 256, 256, 0.005)
    if bf16 * EMULATED_RATIO < fp32:
        return Bf16Probe(fast=False, source="measured", fp32_gflops=fp32, bf16_gflops=bf16)
    work = {"fp32": 0.0, "bf16": 0.0}
    spent = {"fp32": 0.0, "bf16": 0.0}
    began = time.perf_counter()
    for rows, inner, cols in shapes:
        flops = 2 * min(rows, PROBE_ROWS) * inner * cols / 1e9
        for name, rate in zip(("fp32", "bf16"), rates(rows, inner, cols, seconds), strict=True):
            work[name] += flops
            spent[name] += flops / rate
        if time.perf_counter() - began > MAX_SECONDS:  # a machine busy with other work
            break
    fp32, bf16 = work["fp32"] / spent["fp32"], work["bf16"] / spent["bf16"]
    return Bf16Probe(
        fast=bf16 >= MIN_SPEEDUP * fp32, source="measured", fp32_gflops=fp32, bf16_gflops=bf16
    )


def model_shapes(width: int, hidden: int, vocab: int, rows: int) -> list[tuple[int, int, int]]:
    """The products of one transformer step: attention in, MLP in and out, the head."""
    return [(rows, width, 3 * width), (rows, width, hidden), (rows, hidden, width),
            (rows, width, vocab)]  # fmt: skip


def cpu_bf16_probe(shapes: Sequence[tuple[int, int, int]] | None = None) -> Bf16Probe:
    """The forced answer (``CODEPARROT_CPU_BF16``), or a measurement in ``shapes``
    (default: a small transformer's)."""
    forced = _env_answer()
    if forced is not None:
        return Bf16Probe(fast=forced, source="env")
    return measure_cpu_bf16(shapes or model_shapes(256, 1024, 8192, PROBE_ROWS))


BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=1)
def _known_or_measured() -> bool:
    # A fact of the machine, found at most once per process (the engine asks at every load).
    if cpu_flags() & BF16_CPU_FLAGS:
        return True
    return measure_cpu_bf16(model_shapes(256, 1024, 8192, PROBE_ROWS)).fast


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively and fast: ``CODEPARROT_CPU_BF16`` if set,
    else its flags (AVX512-BF16, AMX), else a measurement. The engine's bf16 paths ask this;
    training asks :func:`cpu_bf16_probe` in its own shapes, where bf16 must also win."""
    forced = _env_answer()
    return forced if forced is not None else _known_or_measured()


def cuda_bf16_supported() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def choose_mixed_precision(
    requested: str, device: str, shapes: Sequence[tuple[int, int, int]] | None = None
) -> PrecisionChoice:
    """The autocast dtype a run on ``device`` uses for ``--mixed-precision requested``."""
    if requested not in ("auto", "no", "bf16", "fp16"):
        raise ConfigError(f"--mixed-precision must be auto, no, bf16 or fp16, got {requested!r}")
    if device == "cuda":
        return _choose_on_cuda(requested)
    if device != "cpu":  # mps, xpu, ...: autocast support varies, fp32 is the safe default
        chosen = "no" if requested == "auto" else requested
        return PrecisionChoice(requested, chosen, device, "asked" if requested != "auto"
                               else f"fp32 on {device}", bf16_fast=False)  # fmt: skip
    if requested == "fp16":
        raise ConfigError(
            "--mixed-precision fp16: fp16 autocast is for CUDA devices, and this run is on "
            "the CPU; use auto (bf16 where this CPU runs it fast, else fp32), bf16 or no"
        )
    probe = cpu_bf16_probe(shapes)
    if requested == "auto":
        chosen = "bf16" if probe.fast else "no"
        verdict = "bf16 is faster" if probe.fast else "bf16 is not faster here"
        reason = f"auto: {verdict}; {probe.describe()}"
    else:
        chosen = requested
        reason = f"asked; {probe.describe()}"
    return PrecisionChoice(requested, chosen, "cpu", reason, probe.fast,
                           probe.fp32_gflops, probe.bf16_gflops)  # fmt: skip


def _choose_on_cuda(requested: str) -> PrecisionChoice:
    supported = cuda_bf16_supported()
    if requested == "auto":
        chosen = "bf16" if supported else "no"
        reason = "auto: the device supports bf16" if supported else "auto: no bf16 on the device"
    else:
        chosen, reason = requested, "asked"
    return PrecisionChoice(requested, chosen, "cuda", reason, bf16_fast=supported)


def slow_bf16_warning(choice: PrecisionChoice) -> str | None:
    """The one warning of a run that asked for bf16 on a CPU that emulates it (else None)."""
    if choice.mixed_precision != "bf16" or choice.device != "cpu" or choice.bf16_fast:
        return None
    slower = ""
    if choice.fp32_gflops and choice.bf16_gflops:
        ratio = choice.fp32_gflops / choice.bf16_gflops
        if ratio <= 1:  # not faster enough for auto, but not slow: nothing to warn about
            return None
        shown = f"{ratio:,.1f}" if ratio < 10 else f"{ratio:,.0f}"
        slower = f" ({shown}x slower than fp32 in matrix products)"
    return (
        f"--mixed-precision bf16: this CPU runs bf16 slowly{slower}; training goes ahead as "
        "asked, but --mixed-precision auto (or no) trains in fp32 here, faster"
    )


def newton_schulz_dtype(choice: PrecisionChoice | None) -> str:
    """Muon's orthogonalisation dtype: bf16 (as torch.optim.Muon) only where bf16 is fast."""
    return "bfloat16" if choice is None or choice.bf16_fast else "float32"


__all__ = [
    "ENV",
    "Bf16Probe",
    "PrecisionChoice",
    "choose_mixed_precision",
    "cpu_bf16_probe",
    "cpu_has_fast_bf16",
    "measure_cpu_bf16",
    "model_shapes",
    "newton_schulz_dtype",
    "slow_bf16_warning",
]
