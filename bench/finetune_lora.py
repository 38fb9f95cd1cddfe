"""``finetune --peft lora`` of a model of real size on a CPU: peak memory and step time,
against full fine-tuning of the same model in the same run.

The model is random, with the exact configuration of ``bigcode/tiny_starcoder_py``
(gpt_bigcode, multi-query attention, n_embd 768, 20 layers, 12 heads, 8,192 positions,
49,152-token vocabulary: 164M parameters); the tokenizer is a small BPE trained here (its
ids fit the model's vocabulary; the logits are the full 49,152 wide). The repository is a
few standard-library packages. Each mode runs ``codeparrot finetune`` in a subprocess of
its own, so that its peak RSS (``wait4``'s ``ru_maxrss``) is its alone; the sequence length
is the default (the context capped at 1,024). Target: LoRA within 3 GiB.

    .venv/bin/python bench/finetune_lora.py [--steps 2] [--batch-size 1] [--modes lora full]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

PACKAGES = ("json", "email", "http", "logging", "concurrent")
TARGET_GIB = 3.0


def build_repository(root: Path) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in PACKAGES:
        shutil.copytree(stdlib / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def build_base(out: Path, repository: Path) -> Path:
    """A random tiny_starcoder_py-shaped model and a 4k BPE trained on the repository."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM, PreTrainedTokenizerFast

    texts = [p.read_text(encoding="utf-8") for p in sorted(repository.rglob("*.py"))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    config = GPTBigCodeConfig(  # bigcode/tiny_starcoder_py's config.json
        vocab_size=49152,
        n_positions=8192,
        n_embd=768,
        n_layer=20,
        n_head=12,
        n_inner=3072,
        multi_query=True,
        activation_function="gelu_pytorch_tanh",
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = GPTBigCodeForCausalLM(config)
    print(f"base: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def run_mode(mode: str, base: Path, repository: Path, work: Path, args: argparse.Namespace):
    """One ``codeparrot finetune`` in a child process: (peak RSS in GiB, wall s, output)."""
    out = work / f"ft-{mode}"
    command = [
        sys.executable, "-m", "codeparrot", "finetune", str(repository),
        "--checkpoint", str(base), "--output", str(out), "--force",
        "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
        "--eval-tokens", "512", "--max-minutes", "60", "--log-with", "none", "--no-progress", "--workers", "1",
    ]  # fmt: skip
    if mode == "lora":
        command += ["--peft", "lora"]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    log = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        print(log)
        raise SystemExit(f"{mode}: finetune failed (status {status})")
    peak_gib = usage.ru_maxrss / (1 << 20)  # KiB on Linux
    return peak_gib, wall, out


def step_seconds(mode: str, out: Path) -> float:
    """Median seconds of a training step (the first, with its warm-up, left out for full)."""
    model = out / "model"
    if mode == "lora":
        return float(
            json.loads((model / "codeparrot_checkpoint.json").read_text())["seconds_per_step"]
        )
    records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    times = [r["elapsed_s"] for r in records if "elapsed_s" in r and "loss" in r]
    steps = [b - a for a, b in itertools.pairwise(times)] or times
    return sorted(steps)[len(steps) // 2]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--modes", nargs="+", default=["lora", "full"], choices=["lora", "full"])
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repository = build_repository(work / "repo")
        base = build_base(work / "base", repository)
        rows = {}
        for mode in args.modes:
            peak, wall, out = run_mode(mode, base, repository, work, args)
            result = json.loads((out / "finetune.json").read_text())
            rows[mode] = (peak, step_seconds(mode, out), wall, result)
            size = sum(f.stat().st_size for f in (out / "model").iterdir() if f.is_file())
            print(
                f"{mode:>4}: load average {os.getloadavg()[0]:.1f}, peak RSS {peak:.2f} GiB, {step_seconds(mode, out):.1f} s/step "
                f"(batch {args.batch_size} x {result['seq_length']} tokens), {wall:.0f} s in "
                f"all, saved {size / 1e6:.1f} MB, train loss {result['train_loss_before']:.3f} "
                f"-> {result['train_loss_after']:.3f}"
            )
    if "lora" in rows:
        verdict = "met" if rows["lora"][0] <= TARGET_GIB else "MISSED"
        print(f"LoRA peak RSS {rows['lora'][0]:.2f} GiB: target <= {TARGET_GIB} GiB {verdict}")
    if {"lora", "full"} <= rows.keys():
        print(
            f"LoRA / full: peak RSS {rows['lora'][0] / rows['full'][0]:.2f}x, step time "
            f"{rows['lora'][1] / rows['full'][1]:.2f}x"
        )


if __name__ == "__main__":
    main()
