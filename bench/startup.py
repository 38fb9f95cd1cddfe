"""Start-up: seconds from a fresh process to an engine ready for its first suggestion.

Each start is a new Python process that does what the language server's loading thread
does (import torch, load, the int8 copies and their probes, the prompt-speed probe; the
steps' threads are chosen later, by the first suggestions) and reports how long each part
took. Starts alternate between the sides, so load from other jobs hits all alike:

- ``lean``: the lean load (:mod:`codeparrot.models.lean_load`), with what the start before
  kept: the int8 rows (:mod:`codeparrot.generation.int8_cache`), transformers'
  configuration and tokenizer (:mod:`codeparrot.models.start_cache`) and the probes'
  answers (:mod:`codeparrot.generation.speeds_cache`), in temporary folders; garbage
  collection paused until the engine is loaded, as the commands that serve do
  (:mod:`codeparrot.generation.heap`);
- ``lean, speeds measured``: the same with the probes run (their answers not kept);
- ``lean, collecting``: the probes run, and collections on throughout;
- ``lean, rows kept``: collecting, with the start cache off (transformers imported for the
  configuration and tokenizer);
- ``lean, rows made``: collecting, both caches off (a checkpoint's first start);
- ``transformers``: transformers' model classes (``CODEPARROT_LEAN_LOAD=0``), nothing
  kept, collecting: the baseline.

``gc`` is the time the collections took (``gc.callbacks``).

The medians and their ratios to the baseline are printed. The weights stay in the file
cache after the first start (the first round is a warm-up and not counted). Run with

    .venv/bin/python bench/startup.py --checkpoint DIR [--rounds 4]

on a checkpoint of a lean decoder family, e.g. one with ``bigcode/tiny_starcoder_py``'s
configuration (bench/editor_models.py builds one with random weights).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PARTS = ("torch", "load", "quantize", "probe", "gc", "total")
SIDES = (
    "lean",
    "lean, speeds measured",
    "lean, collecting",
    "lean, rows kept",
    "lean, rows made",
    "transformers",
)

# the child: one start, its parts in seconds as one JSON line
CHILD = """
import gc, json, os, sys, time
collecting = [0.0, 0.0]
def timed(phase, info):
    if phase == "start":
        collecting[1] = time.perf_counter()
    else:
        collecting[0] += time.perf_counter() - collecting[1]
gc.callbacks.append(timed)
if os.environ["BENCH_GC"] == "paused":
    gc.disable()
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
from codeparrot.generation import Engine
from codeparrot.generation.int8_cache import RowsCache
from codeparrot.generation.threads import cpu_cores, kept_or_timed_prompt
torch.set_num_threads(cpu_cores())
t2 = time.perf_counter()
engine = Engine.load(sys.argv[1], quantize="none")
t3 = time.perf_counter()
files = getattr(engine.model, "weight_files", None)  # the lean load's: Engine.load's rule
engine.quantize = "int8"  # as Engine.load(quantize="int8") does, timed apart
engine.decoder.enable_int8(files and RowsCache.for_weights(files, torch.float32))
t4 = time.perf_counter()
kept_or_timed_prompt(engine, cpu_cores())
if os.environ["BENCH_GC"] == "paused":
    gc.freeze()  # as codeparrot.generation.heap.settle_heap
    gc.enable()
t5 = time.perf_counter()
classes = sorted(m for m in sys.modules if m in ("transformers", "transformers.modeling_utils"))
print(json.dumps({"torch": t1 - t0, "load": t3 - t2, "quantize": t4 - t3,
                  "probe": t5 - t4, "gc": collecting[0], "total": t5 - t0,
                  "model_classes": classes}))
"""


def one_start(checkpoint: str, side: str, cache: str) -> dict:
    env = {
        **os.environ,
        "CODEPARROT_LEAN_LOAD": "0" if side == "transformers" else "1",
        "CODEPARROT_INT8_CACHE": f"{cache}/int8" if side in SIDES[:4] else "0",
        "CODEPARROT_START_CACHE": f"{cache}/start" if side in SIDES[:3] else "0",
        "CODEPARROT_SPEEDS_CACHE": f"{cache}/speeds" if side == "lean" else "0",
        "BENCH_GC": "paused" if side in SIDES[:2] else "on",
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, checkpoint],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a lean decoder family's checkpoint")
    parser.add_argument("--rounds", type=int, default=4, help="starts of each kind counted")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as cache:
        for round_ in range(args.rounds + 1):
            for side in SIDES:
                start = one_start(args.checkpoint, side, cache)
                if round_:  # the first round warms the file cache and keeps the rows
                    runs[side].append(start)
    print(f"{args.checkpoint}: {args.rounds} starts each, medians in seconds")
    medians = {}
    for side, starts in runs.items():
        medians[side] = {p: statistics.median(s[p] for s in starts) for p in PARTS}
        parts = "  ".join(f"{p} {medians[side][p]:.2f}" for p in PARTS)
        print(f"  {side:<22} {parts}  (totals {[round(s['total'], 2) for s in starts]})")
        print(f"  {'':<22} of transformers, imported: {starts[0]['model_classes']}")
    base = medians["transformers"]
    for side in SIDES[:-1]:
        m = medians[side]
        print(
            f"  ratio {side} / transformers: load {m['load'] / base['load']:.2f}x, "
            f"int8 {m['quantize'] / base['quantize']:.2f}x, total {m['total'] / base['total']:.2f}x"
        )


if __name__ == "__main__":
    main()
