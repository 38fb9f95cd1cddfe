"""int8 prompts: what reading a prompt on the int8 copies costs in quality and gains in time.

With ``--quantize int8`` (the language server's and ``serve``'s ``auto`` on a CPU) a probe
at load decides whether prompts read the int8 copies of the matrices too
(``GPT2Decoder.choose_int8_prompts``). This bench measures both sides of that choice on
one checkpoint, in one run:

- **quality**: the loss, in nats a token, of the checkpoint on Python it never trained on
  (files of this Python's standard library, in windows of ``--window`` tokens), with the
  prompt's products in float32, in bf16 (CPU autocast), and on the int8 copies through
  the dynamic kernel with 8-bit activations (a CPU with VNNI) and with 7-bit ones (any
  other x86 CPU), their attention in bf16 where the engine's prompts would be; and how
  often the int8 side's most likely next token is float32's;
- **time**: prompts of 256 and 768 tokens (or the context, if shorter) read as the engine
  reads them, bf16 against int8, alternating, medians and the ratio (``--fp32``: float32
  against int8, as on a CPU without bf16 instructions).

The loss needs a trained checkpoint (the quickstart's, say); the time, one of real size
(bench/editor_models.py builds a random one with ``bigcode/tiny_starcoder_py``'s
configuration). Run with

    .venv/bin/python bench/int8_prompts.py --checkpoint DIR [--no-loss] [--no-time]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/eval.py would then
# shadow the project's `eval` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

# held-out code: standard library files (as bench/lsp.py uses)
FILES = ("argparse.py", "difflib.py", "pathlib.py", "tarfile.py", "inspect.py")


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line]
    return names[0] if names else "unknown CPU"


def load(checkpoint: str, seven_bits: bool = False) -> Any:
    """An int8 engine on the dynamic kernel (7-bit activations where asked)."""
    from codeparrot.generation import Engine, gpt2, int8

    kernel, vnni = gpt2.choose_kernel, int8._has_vnni
    gpt2.choose_kernel = lambda matrices, asked="auto": "dynamic"
    if seven_bits:
        int8._has_vnni = lambda: False
    try:
        engine = Engine.load(checkpoint, quantize="int8")
    finally:
        gpt2.choose_kernel, int8._has_vnni = kernel, vnni
    if engine.decoder.lean is None or engine.decoder.lean.int8_kernel != "dynamic":
        raise SystemExit(f"{checkpoint}: not on the lean decoder's dynamic int8 kernel")
    return engine


def held_out_ids(engine: Any) -> list[list[int]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [(root / name).read_text(encoding="utf-8") for name in FILES]
    return [
        engine.tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"] for t in texts
    ]


def losses(engine: Any, window: int, windows: int, sides: tuple[str, ...]) -> dict[str, Any]:
    """Loss (nats a token) of each side over the same windows, and the int8 side's top-1
    agreement with float32."""
    import torch
    import torch.nn.functional as F

    d = engine.decoder.lean
    total = dict.fromkeys(sides, 0.0)
    tokens, agree, seen = 0, 0, 0
    for ids in held_out_ids(engine):
        for start in range(0, min(len(ids) - window, windows * window), window):
            chunk = torch.tensor([ids[start : start + window]])
            top = {}
            for side in sides:
                with torch.inference_mode():
                    cache = d.new_cache(1, window)
                    # int8 prompts run under autocast where bf16 ones would (attention)
                    bf16 = side == "bf16" or (side != "fp32" and engine.bf16_prefill)
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                        x = d._blocks(chunk, cache, int8=side.startswith("int8"))
                    logits = F.linear(d._final_norm(x.float())[0], d.lm_head.float())
                total[side] += F.cross_entropy(logits[:-1], chunk[0, 1:], reduction="sum").item()
                top[side] = logits.argmax(dim=-1)
            tokens += window - 1
            int8_side = next(s for s in sides if s.startswith("int8"))
            agree += int((top[int8_side] == top["fp32"]).sum())
            seen += window
    return {
        "loss": {s: v / tokens for s, v in total.items()},
        "agree": agree / seen,
        "tokens": tokens,
    }


def prompt_times(
    engine: Any, lengths: list[int], rounds: int, bf16: bool
) -> dict[int, dict[str, float]]:
    """Median seconds to read a fresh prompt of each length, dense (bf16 under autocast
    with ``bf16``, else float32) and int8, alternating."""
    import torch

    d = engine.decoder.lean
    ids = [i for doc in held_out_ids(engine) for i in doc]
    out: dict[int, dict[str, float]] = {}
    for length in lengths:
        times: dict[str, list[float]] = {"dense": [], "int8": []}
        for r in range(rounds + 1):
            for side in times:
                d.int8_prompts = side == "int8"
                chunk = torch.tensor([ids[r * length : (r + 1) * length]])
                with torch.inference_mode():
                    cache = d.new_cache(1, length)
                    start = time.perf_counter()
                    d.forward(chunk, cache, bf16=bf16)
                    if r:  # the first round warms up
                        times[side].append(time.perf_counter() - start)
        out[length] = {side: statistics.median(v) for side, v in times.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--window", type=int, default=512, help="tokens a loss window holds")
    parser.add_argument("--windows", type=int, default=6, help="windows of each file at most")
    parser.add_argument("--rounds", type=int, default=5, help="timed prompts of each side")
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    parser.add_argument("--no-loss", action="store_true")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument(
        "--fp32",
        action="store_true",
        help="time prompts as a CPU without bf16 instructions reads them (float32)",
    )
    args = parser.parse_args()

    import torch

    from codeparrot.generation.threads import cpu_cores

    torch.set_num_threads(args.threads or cpu_cores())
    print(f"{cpu_name()}, {torch.get_num_threads()} threads; {args.checkpoint}")
    engine = load(args.checkpoint)
    window = min(args.window, engine.context_length)
    if not args.no_loss:
        result = losses(engine, window, args.windows, ("fp32", "bf16", "int8"))
        seven = losses(
            load(args.checkpoint, seven_bits=True), window, args.windows, ("fp32", "int8 7-bit")
        )
        loss = {**result["loss"], "int8 7-bit": seven["loss"]["int8 7-bit"]}
        print(f"loss on held-out code ({result['tokens']:,} tokens, windows of {window}):")
        for side, value in loss.items():
            change = value / loss["fp32"] - 1
            print(f"  {side:11s} {value:.4f} nats/token ({change:+.3%} against fp32)")
        print(f"  top-1 as fp32's: int8 {result['agree']:.2%}, int8 7-bit {seven['agree']:.2%}")
    if not args.no_time:
        lengths = sorted({min(n, engine.context_length) for n in (256, 768)})
        bf16 = engine.bf16_prefill and not args.fp32
        dense = "bf16" if bf16 else "float32"
        for length, t in prompt_times(engine, lengths, args.rounds, bf16).items():
            print(
                f"prompt of {length} tokens: {dense} {t['dense'] * 1e3:.0f} ms, int8 "
                f"{t['int8'] * 1e3:.0f} ms ({t['int8'] / t['dense']:.2f}x)"
            )


if __name__ == "__main__":
    main()
