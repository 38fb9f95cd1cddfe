"""``bench/train.py --profile``: where each side's step spends its time, and where it waits.

Each side's heaviest operators, then one table of every side's device time a step by kind
of kernel (matrix products, attention, the compiler's fused kernels, copies and casts, the
optimizer, the rest), with the number of kernels a step launches: a gap between two sides
shows in the row that holds it, where the heaviest operators alone (matrix products first)
can hide many small kernels. On CUDA, also the host synchronisations one step makes, each
placed in the code that made it.
"""

from __future__ import annotations

import re
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# First match wins: attention kernels' names hold "sm90" or "gemm" too, so they go first.
KINDS = (
    ("attention", r"flash|fmha|sdpa|attention|attn"),
    ("matrix products", r"gemm|cutlass|nvjet|xmma|cublas|\baten::(mm|addmm|bmm|baddbmm)\b"),
    ("fused by the compiler", r"^triton_|compiledfxgraph|torch-compiled region|compiledfunction"),
    ("optimizer and clipping", r"adam|muon|multi_tensor|foreach|newton"),
    ("copies and casts", r"memcpy|memset|copy|cast|fill|\bcat\b|catarray|clone|contiguous"),
)

# Ranges the host marks (compiled graphs, optimizer steps), which a device trace may also
# show as spans over their kernels: never kernels themselves.
ANNOTATION = re.compile(r"^## |Torch-Compiled Region|CompiledFunction|^Optimizer\.|ProfilerStep")


def kind_of(name: str) -> str:
    """The kind of a profiled kernel or operator, by its name (``KINDS``), else "other"."""
    lowered = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other"


def time_by_kind(events: Any, cuda: bool, steps: int) -> dict[str, float]:
    """Milliseconds a step per kind, and "kernels" a step, from ``prof.key_averages()``.

    On CUDA the device's kernels only (the host operators that launched them carry the same
    time again, and user annotations span many kernels). On a CPU the host operators' self
    time, the compiled graphs' own code counted as the compiler's fused kernels."""
    totals = {kind: 0.0 for kind, _ in KINDS} | {"other": 0.0}
    launched = 0
    for event in events:
        on_device = event.device_type != torch.autograd.DeviceType.CPU
        if cuda and (not on_device or event.is_user_annotation or ANNOTATION.search(event.key)):
            continue
        self_us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if self_us <= 0:
            continue
        totals[kind_of(event.key)] += self_us / 1e3 / steps
        launched += event.count
    totals["kernels"] = launched / steps
    return totals


def optimizer_ranges(events: Any, cuda: bool, steps: int) -> str:
    """Each optimizer's step (torch's profiler marks them ``Optimizer.step#NAME.step``) in
    milliseconds a step, everything it ran included: its matrix products count as matrix
    products in ``time_by_kind``, so this says how much of that row is the optimizer's."""
    found = []
    for event in events:
        if event.key.startswith("Optimizer.step#"):
            total = event.device_time_total if cuda else event.cpu_time_total
            found.append(
                f"{event.key.removeprefix('Optimizer.step#')} {total / 1e3 / steps:.2f} ms"
            )
    return ", ".join(found) or "none marked"


def kinds_table(sides: dict[str, dict[str, float]], walls: dict[str, float], cuda: bool) -> str:
    """Every side's ``time_by_kind`` side by side, with each side's wall time a step."""
    names = list(sides)
    unit = "device" if cuda else "CPU"
    lines = [f"{unit} time a step by kind (ms) | " + " | ".join(names)]
    rows = [kind for kind, _ in KINDS] + ["other"]
    for row in rows:
        lines.append(f"  {row:<24}" + "".join(f"{sides[n][row]:>12.2f}" for n in names))
    lines.append(f"  {'all kinds':<24}" + "".join(f"{sum(sides[n][r] for r in rows):>12.2f}"
                                                for n in names))  # fmt: skip
    lines.append(f"  {'wall, a step':<24}" + "".join(f"{walls[n]:>12.2f}" for n in names))
    counted = "kernels a step" if cuda else "operators a step"
    lines.append(f"  {counted:<24}" + "".join(f"{sides[n]['kernels']:>12.0f}" for n in names))
    return "\n".join(lines)


def profile_steps(
    steps: dict[str, Callable[[], None]], cuda: bool, n: int = 3, top: int = 25
) -> dict[str, dict[str, float]]:
    """Where each step's time goes, for finding why one side is slower: its operators by
    self time on the device (on a CPU, the CPU's), on CUDA the host synchronisations one
    step makes (each keeps the host from queueing the next step while the device runs), and
    then every side's time by kind side by side (returned too)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sides, walls = {}, {}
    for name, step in steps.items():
        _synchronize(cuda)
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            for _ in range(n):
                step()
            queued = time.perf_counter() - start
            _synchronize(cuda)
        done = time.perf_counter() - start
        walls[name] = done * 1e3 / n
        print(f"\n{name}: {n} steps profiled; the host queued them in {queued * 1e3 / n:.1f} ms "
              f"a step, the device finished in {walls[name]:.1f} ms a step")  # fmt: skip
        events = prof.key_averages()
        sort = "self_device_time_total" if cuda else "self_cpu_time_total"
        print(events.table(sort_by=sort, row_limit=top, max_name_column_width=60))
        sides[name] = time_by_kind(events, cuda, n)
        print(f"{name}: optimizer steps a step, kernels they launched included: "
              f"{optimizer_ranges(events, cuda, n)}")  # fmt: skip
        if cuda:
            syncs = host_syncs(step)
            print(f"{name}: host synchronisations in one step: {len(syncs)}")
            for place in syncs:
                print(f"  at {place}")
    print("\n" + kinds_table(sides, walls, cuda))
    return sides


def _synchronize(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def host_syncs(step: Callable[[], None]) -> list[str]:
    """Where one ``step()`` makes a synchronising CUDA call (torch's sync debug mode): for
    each, the innermost frames of the Python code that made it."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        places = warned_at(step, "synchroniz")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return places


def warned_at(call: Callable[[], None], words: str, frames: int = 4) -> list[str]:
    """Where ``call()`` warned with ``words`` in the message: per warning, the innermost
    ``frames`` Python frames that led to it (innermost first), each "file:line function"."""
    places: list[str] = []

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if words in str(message):
            stack = [f for f in traceback.extract_stack()[:-1] if "warnings" not in f.filename]
            places.append(" <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                                      for f in reversed(stack[-frames:])))  # fmt: skip

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        call()
    return places
