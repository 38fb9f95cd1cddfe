"""Muon's optimizer step alone: our batched step against ``torch.optim.Muon``'s loop.

Both step the hidden matrices of a preset's model (what ``--optimizer muon`` gives Muon:
the blocks' 2-D weights) with the same gradients, alternating in rounds so that load from
other work hits them alike. Each side prints milliseconds a step and the FLOP/s of its
Newton-Schulz products (``codeparrot.training.muon.newton_schulz_flops``) against a bf16
matrix product measured in the same run, so the run tells how far the orthogonalisation is
from the device's peak, and whether stacking the matrices of a shape pays here. A check
first steps both from the same weights and stops unless their changes agree within 1% (in
norm; bit for bit on a CPU, ~1e-3 where batched bf16 products round differently).

    .venv/bin/python bench/muon.py [--preset tiny-qwen|small|small-qwen] [--device cpu|cuda]
        [--steps 10] [--rounds 3] [--vocab-size 8192]

The quickstart's Muon is ``--preset tiny-qwen`` on a CPU; a GPU's is ``--preset small
--device cuda`` (GPT-2-small's 48 matrices, 1.52 TFLOP a step).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch


class _Vocabulary:
    """What building a model's config reads of a tokenizer: its length and end id."""

    def __init__(self, size: int) -> None:
        self.size, self.eos_token_id = size, size - 1

    def __len__(self) -> int:
        return self.size


def hidden_shapes(preset: str, vocab_size: int = 8192) -> list[tuple[int, int]]:
    """The shapes of the matrices ``--optimizer muon`` hands Muon in ``preset``'s model."""
    from transformers import AutoModelForCausalLM

    from codeparrot.models.presets import build_model_config
    from codeparrot.training.optim import is_hidden_matrix

    config = build_model_config(preset, _Vocabulary(vocab_size))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [tuple(p.shape) for n, p in model.named_parameters() if is_hidden_matrix(n, p, model)]


def muon_pair(shapes: list[tuple[int, int]], device: str, dtype: str = "bfloat16") -> dict:
    """Our batched Muon and torch's over equal parameters with equal gradients."""
    from codeparrot.training.muon import BatchedMuon

    kwargs = dict(lr=2e-3, weight_decay=0.1, momentum=0.95, adjust_lr_fn="match_rms_adamw")
    sides: dict[str, Any] = {}
    for name in ("batched", "torch"):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(*s, device=device) * 0.02) for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        if name == "batched":
            sides[name] = BatchedMuon(params, newton_schulz_dtype=dtype, **kwargs)
        else:
            sides[name] = torch.optim.Muon(params, **kwargs)
    return sides


def steps_apart(sides: dict, steps: int = 2) -> float:
    """After ``steps`` steps from the same weights, how far apart the two sides' changes to
    the parameters are: the norm of their difference over the norm of ours (0.0: bit for
    bit; batched and single products that round differently in bf16 give ~1e-3)."""
    mine, theirs = (o.param_groups[0]["params"] for o in sides.values())
    start = [p.detach().clone() for p in mine]
    for _ in range(steps):
        for optimizer in sides.values():
            optimizer.step()
    with torch.no_grad():
        ours = torch.cat([(p - s).flatten() for p, s in zip(mine, start, strict=True)])
        other = torch.cat([(p - s).flatten() for p, s in zip(theirs, start, strict=True)])
        return float((ours - other).norm() / ours.norm())


def ms_per_step(optimizer: Any, steps: int, synchronize) -> float:
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def bf16_peak(device: str) -> float:
    """FLOP/s of a bf16 matrix product that fills the device (8192^3 on CUDA)."""
    if device == "cuda":
        from codeparrot.quickstart.plan import cuda_peak_flops

        return cuda_peak_flops()
    from codeparrot.training.loop import measure_peak_flops

    return measure_peak_flops(seconds=1.0, dtype="bfloat16")


def main() -> None:
    from codeparrot.training.muon import newton_schulz_flops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny-qwen")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="timed steps a side a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=8192)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    shapes = hidden_shapes(args.preset, args.vocab_size)
    flops = newton_schulz_flops(shapes)
    sides = muon_pair(shapes, args.device)
    apart = steps_apart(sides)
    if apart > 1e-2:
        raise SystemExit(f"our batched Muon's change to the weights is {apart:.1e} (in norm) "
                         "from torch's: different updates, not timed")  # fmt: skip
    print(f"{args.preset}: {len(shapes)} matrices ({len(set(shapes))} shapes), Newton-Schulz "
          f"{flops / 1e9:,.1f} GFLOP a step; 2 steps from the same weights change them alike "
          f"(difference {apart:.1e} in norm)")  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in sides}
    peaks = []
    for r in range(args.rounds):
        peaks.append(bf16_peak(args.device))
        for name, optimizer in sides.items():
            times[name].append(ms_per_step(optimizer, args.steps, sync))
        print(f"round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f} ms" for n, t in times.items())
              + f"; bf16 peak {peaks[-1] / 1e12:.2f} TFLOP/s", flush=True)  # fmt: skip
    peak = statistics.median(peaks)
    for name, t in times.items():
        ms = statistics.median(t)
        print(f"{name:8s}: {ms:8.2f} ms a step, Newton-Schulz at {flops / ms / 1e9:.2f} TFLOP/s, "
              f"{flops / (ms / 1e3) / peak:.0%} of the bf16 peak")  # fmt: skip
    ratios = [b / t for b, t in zip(times["batched"], times["torch"], strict=True)]
    print(f"batched / torch: median of per-round time ratios {statistics.median(ratios):.2f}x "
          f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}; below 1 is faster)")  # fmt: skip


if __name__ == "__main__":
    main()
