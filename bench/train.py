"""Training throughput: our `tiny`-shape step at each precision (``--mixed-precision auto``,
``no`` and ``bf16`` in one run), against a plain fp32 Hugging Face GPT-2 loop and a
nanoGPT-style model in bf16 with torch.compile (the strongest peer the issue names).

All run side by side in one process on the same shape (n_layer 4, n_head 4, n_embd 256,
vocab 16,384, block 256, batch 8), alternating in rounds so that load from other work
on the machine hits them alike. "ours" is the real training step of `codeparrot.training.loop`
(Accelerate, bf16 autocast, the loss function compiled, fused AdamW) fed by an in-memory
source; the baseline is the textbook loop (fp32, eager, default AdamW); the peer is a
minimal GPT written the nanoGPT way (nn.Linear, SDPA causal attention, exact GELU, tied
head, fused AdamW, the model compiled). With ``--preset tiny-qwen`` a second peer runs too:
the same model written the same way (Qwen3 blocks in plain PyTorch, compiled) with our
optimizer taken from torch (``torch.optim.Muon`` with ``--optimizer muon``), which tells the
cost of the loop apart from the cost of the model and the method. The fp32 and bf16 matmul
peaks are measured in the same run, and each of our steps' FLOP/s is reported against the
peak of the precision it trains in.

Targets: ``auto`` reaches at least 0.95x the tokens/s of the faster of ``no`` and ``bf16``;
with ``--optimizers adamw,muon``, a Muon step takes at most 1.2x an AdamW one. To see what a
CPU without bf16 instructions gets on one that has them, force the probe's answer:
``CODEPARROT_CPU_BF16=0`` (auto then trains in fp32, and Muon orthogonalises in fp32; the
``bf16`` rows still run this CPU's native bf16).

    .venv/bin/python bench/train.py [--steps 12] [--rounds 3] [--no-compile] [--no-peer]
        [--no-baseline] [--precisions auto,no,bf16] [--optimizers adamw[,muon]]
        [--preset tiny|tiny-qwen] [--batch-size 8] [--vocab-size 16384]

The quickstart's step is ``--preset tiny-qwen --batch-size 16 --vocab-size 8192``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

VOCAB, BLOCK, BATCH = 16_384, 256, 8


class RandomTokens:
    """An in-memory sequence source (the data path is measured apart from the model)."""

    def __init__(self, seq_length: int, seed: int = 0) -> None:
        self.seq_length = seq_length
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(0, VOCAB - 1, size=(64, seq_length), dtype=np.int64)
        self.i = 0

    def next_sequence(self) -> np.ndarray:
        self.i += 1
        return self.pool[self.i % len(self.pool)]

    def state_dict(self) -> dict:
        return {"i": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.i = state["i"]


def word_tokenizer(directory: Path) -> Path:
    """A tokenizer with exactly VOCAB ids (no training needed for a speed benchmark)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB - 1)}
    vocab["<|endoftext|>"] = VOCAB - 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(directory)
    return directory


def baseline_step_fn():
    """The plain loop: fp32 GPT2LMHeadModel, eager attention, torch.optim.AdamW defaults."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=BLOCK,
        n_embd=256,
        n_layer=4,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config)
    model.config._attn_implementation = "eager"
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1)
    source = RandomTokens(BLOCK)

    def step() -> None:
        ids = torch.from_numpy(np.stack([source.next_sequence() for _ in range(BATCH)]))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def peer_step_fn():
    """nanoGPT's recipe on the same shape: bf16 autocast, the whole model compiled."""
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (
                part.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                for part in self.qkv(self.ln_1(x)).split(c, dim=2)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.down(F.gelu(self.up(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, width: int = 256, layers: int = 4, heads: int = 4) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(VOCAB, width), nn.Embedding(BLOCK, width)
            self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, VOCAB, bias=False)
            self.head.weight = self.tokens.weight
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))

    torch.manual_seed(0)
    model = GPT()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1, fused=True)
    return compiled_bf16_step(model, [opt])


def compiled_bf16_step(model: torch.nn.Module, optimizers: list[torch.optim.Optimizer]):
    """A peer's training step: the whole model compiled, bf16 autocast, clipping, then each
    optimizer (the model returns the loss of ``(inputs, targets)``)."""
    compiled = torch.compile(model)
    source = RandomTokens(BLOCK + 1)

    def step() -> None:
        seq = torch.from_numpy(np.stack([source.next_sequence() for _ in range(BATCH)]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = compiled(seq[:, :-1], seq[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def same_model_peer_step_fn(preset: str, optimizer: str):
    """The peer written for our model instead of GPT-2's: the preset's blocks in plain
    PyTorch the modded-nanogpt way (for `tiny-qwen`: RMSNorm, rotary positions, RMS-normed
    queries and keys, SwiGLU, tied head, no biases), the whole model compiled, bf16 autocast,
    and our optimizer from torch itself (``torch.optim.Muon`` on the blocks' matrices with
    fused AdamW on the rest, or fused AdamW on everything)."""
    import torch.nn.functional as F
    from torch import nn

    from codeparrot.models.presets import get_preset

    shape = get_preset(preset)
    width, heads, layers = shape.n_embd, shape.n_head, shape.n_layer
    hidden, dim = shape.intermediate_size or 4 * width, width // heads

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + turned * sin

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm_1, self.norm_2 = nn.RMSNorm(width, eps=1e-6), nn.RMSNorm(width, eps=1e-6)
            self.q_norm, self.k_norm = nn.RMSNorm(dim, eps=1e-6), nn.RMSNorm(dim, eps=1e-6)
            self.qkv = nn.Linear(width, 3 * width, bias=False)
            self.proj = nn.Linear(width, width, bias=False)
            self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
            self.down = nn.Linear(hidden, width, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (part.view(b, t, heads, dim) for part in self.qkv(self.norm_1(x)).split(c, 2))
            q, k = rotate(self.q_norm(q), cos, sin), rotate(self.k_norm(k), cos, sin)
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            gate, up = self.gate_up(self.norm_2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(width, eps=1e-6)
            inv = 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim)
            angles = torch.outer(torch.arange(BLOCK).float(), inv).repeat(1, 2)[:, None, :]
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tokens(ids)
            for block in self.blocks:
                x = block(x, self.cos, self.sin)
            logits = F.linear(self.norm(x), self.tokens.weight)  # tied head
            return F.cross_entropy(logits.view(-1, VOCAB).float(), targets.reshape(-1))

    if shape.architecture != "qwen3":
        raise SystemExit(f"--preset {preset}: the same-model peer is written for Qwen3 blocks")
    torch.manual_seed(0)
    model = Model()
    model.train()
    matrices = [p for p in model.blocks.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if all(p is not m for m in matrices)]
    if optimizer == "muon":
        optimizers = [
            torch.optim.Muon(matrices, lr=3e-3, adjust_lr_fn="match_rms_adamw"),
            torch.optim.AdamW(rest, lr=3e-3, weight_decay=0.1, fused=True),
        ]
    else:
        optimizers = [torch.optim.AdamW(model.parameters(), lr=2e-3, fused=True)]
    return compiled_bf16_step(model, optimizers)


def ours_step_fn(
    workdir: Path,
    compile: bool,
    optimizer: str = "adamw",
    preset: str = "tiny",
    mixed_precision: str = "auto",
):
    import warnings

    from codeparrot.training import TrainConfig
    from codeparrot.training.loop import _train_step, setup

    tokenizer = workdir / "tokenizer"
    if not tokenizer.is_dir():
        word_tokenizer(tokenizer)
    config = TrainConfig(
        data=workdir / "unused",
        tokenizer=tokenizer,
        output=workdir / f"run-{mixed_precision}-{optimizer}",
        preset=preset,
        seq_length=BLOCK,
        batch_size=BATCH,
        mixed_precision=mixed_precision,
        compile=compile,
        optimizer=optimizer,
        schedule="cosine",
        pretokenized=False,
        log_with="none",
        peak_tflops=1.0,
        progress=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bf16 asked on a CPU that emulates it: measured here
        run = setup(
            config,
            train_data=RandomTokens(BLOCK),
            valid_data=lambda: RandomTokens(BLOCK),
            log=lambda line: print(f"  {mixed_precision} {optimizer}: {line}", flush=True),
        )
    return (lambda: _train_step(run)), run


def tokens_per_s(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * BATCH * BLOCK / (time.perf_counter() - start)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation)")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument(
        "--precisions",
        default="auto,no,bf16",
        help="our step's --mixed-precision values, each timed in every round (the first "
        "is 'ours' against the baseline and the peers)",
    )
    parser.add_argument(
        "--optimizers",
        "--optimizer",
        default="adamw",
        help="our step's optimizers, comma-separated (muon: the quickstart's default, Muon "
        "on the hidden matrices); the baseline and the peer keep AdamW",
    )
    parser.add_argument(
        "--preset",
        choices=("tiny", "tiny-qwen"),
        default="tiny",
        help="our step's model (tiny-qwen: the quickstart's, Qwen3 blocks at tiny's layers, "
        "width and heads, within 1%% of its parameters); the baseline and the peer keep GPT-2",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH,
        help="sequences per step (16 and --vocab-size 8192: the quickstart's step)",
    )
    parser.add_argument("--vocab-size", type=int, default=VOCAB, help="the model's vocabulary")
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false", help="skip the nanoGPT-style peers"
    )
    parser.add_argument(
        "--no-baseline", dest="baseline", action="store_false", help="skip the plain fp32 loop"
    )
    args = parser.parse_args()
    args.precisions = args.precisions.split(",")
    args.optimizers = args.optimizers.split(",")
    return args


def _build_steps(args: argparse.Namespace, workdir: Path) -> tuple[dict, dict]:
    """Every timed step, warmed up: ours at each precision and optimizer, then the others."""
    steps, runs = {}, {}
    for optimizer in args.optimizers:
        for precision in args.precisions:
            name = f"ours {precision} {optimizer}"
            t0 = time.perf_counter()
            steps[name], runs[name] = ours_step_fn(
                workdir, args.compile, optimizer, args.preset, precision
            )
            for _ in range(args.warmup):
                steps[name]()
            print(f"{name} ready after {time.perf_counter() - t0:.0f} s", flush=True)
    others = {}
    if args.baseline:
        others["baseline"] = baseline_step_fn
    if args.peer:
        others["peer"] = peer_step_fn
    if args.peer and args.preset != "tiny":
        others["same-model peer"] = lambda: same_model_peer_step_fn(args.preset, args.optimizers[0])
    for name, make in others.items():
        t0 = time.perf_counter()
        steps[name] = make()
        for _ in range(args.warmup):
            steps[name]()
        print(f"{name} ready after {time.perf_counter() - t0:.0f} s", flush=True)
    return steps, runs


def _peaks() -> dict[str, float]:
    """fp32 and bf16 matmul FLOP/s of this CPU, whatever CODEPARROT_CPU_BF16 says (an
    emulated bf16 takes seconds here)."""
    from codeparrot.training.loop import measure_peak_flops

    return {
        "no": measure_peak_flops(seconds=1.0, dtype="float32"),
        "bf16": measure_peak_flops(seconds=1.0, dtype="bfloat16"),
    }


def _report(args: argparse.Namespace, rates: dict, peaks: dict, runs: dict) -> None:
    med = {name: statistics.median(r) for name, r in rates.items()}
    peak = {k: statistics.median(v) for k, v in peaks.items()}
    fpt = next(iter(runs.values())).flops_per_token
    print(f"\nshape: {args.preset}, vocab {VOCAB}, block {BLOCK}, batch {BATCH}")
    print(f"matmul peaks: fp32 {peak['no'] / 1e9:,.0f} GFLOP/s, bf16 {peak['bf16'] / 1e9:,.0f}")
    for name, run in runs.items():
        trains = run.precision.mixed_precision
        print(
            f"{name:24s}: {med[name]:8,.0f} tokens/s  {med[name] * fpt / 1e9:6.1f} GFLOP/s, "
            f"trains {trains}: MFU {med[name] * fpt / peak[trains]:.0%} of the "
            f"{'fp32' if trains == 'no' else trains} peak"
        )
    for optimizer in args.optimizers:
        names = {p: f"ours {p} {optimizer}" for p in args.precisions}
        if {"auto", "no", "bf16"} <= set(names):
            ratios = [
                a / max(n, b)
                for a, n, b in zip(*(rates[names[p]] for p in ("auto", "no", "bf16")), strict=True)
            ]
            print(
                f"{optimizer}: auto / the faster of no and bf16: median of per-round ratios "
                f"{statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)};"
                " target >= 0.95x)"
            )
    if {"adamw", "muon"} <= set(args.optimizers):
        for p in args.precisions:
            ratios = [
                a / m
                for a, m in zip(rates[f"ours {p} adamw"], rates[f"ours {p} muon"], strict=True)
            ]
            print(
                f"{p}: a Muon step takes {statistics.median(ratios):.2f}x an AdamW one (median "
                f"of per-round ratios: {', '.join(f'{r:.2f}' for r in ratios)}; target <= 1.2x)"
            )
    ours = f"ours {args.precisions[0]} {args.optimizers[0]}"
    for other in ("baseline", "peer", "same-model peer"):
        if other in rates:
            ratios = [o / b for o, b in zip(rates[ours], rates[other], strict=True)]
            print(
                f"{other}: {med[other]:8,.0f} tokens/s; {ours} / {other}: median of per-round "
                f"ratios {statistics.median(ratios):.2f}x"
            )


def main() -> None:
    global BATCH, VOCAB  # the shape every step of this one run uses
    args = _arguments()
    BATCH, VOCAB = args.batch_size, args.vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        steps, runs = _build_steps(args, Path(tmp))
        for name, run in runs.items():
            print(f"{name}: {run.precision.describe()}")
        rates: dict[str, list[float]] = {name: [] for name in steps}
        peaks: dict[str, list[float]] = {"no": [], "bf16": []}
        for r in range(args.rounds):
            for key, value in _peaks().items():
                peaks[key].append(value)
            for name, step in steps.items():
                rates[name].append(tokens_per_s(step, args.steps))
            print(
                f"round {r + 1}: "
                + ", ".join(f"{name} {rates[name][-1]:,.0f} tok/s" for name in steps)
                + f"; peaks fp32 {peaks['no'][-1] / 1e9:,.0f}, bf16 {peaks['bf16'][-1] / 1e9:,.0f}"
                " GFLOP/s",
                flush=True,
            )
        _report(args, rates, peaks, runs)


if __name__ == "__main__":
    main()
