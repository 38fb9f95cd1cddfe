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
with ``--optimizers adamw,muon``, a Muon step takes at most 1.2x an AdamW one (on a GPU at
most 1.05x; the run prints the floor Muon's orthogonalisation sets, its FLOPs against the
step's, which falls with the tokens of a step: ``--accumulate``). To see what a
CPU without bf16 instructions gets on one that has them, force the probe's answer:
``CODEPARROT_CPU_BF16=0`` (auto then trains in fp32, and Muon orthogonalises in fp32; the
``bf16`` rows still run this CPU's native bf16).

    .venv/bin/python bench/train.py [--steps 12] [--rounds 3] [--no-compile] [--no-peer]
        [--no-baseline] [--precisions auto,no,bf16] [--optimizers adamw[,muon]]
        [--preset tiny|tiny-qwen|mini-qwen|small|small-qwen] [--batch-size 8]
        [--vocab-size 16384] [--device cpu|cuda] [--block 256] [--peer-gelu tanh|none]
        [--no-check]

On a GPU, the issue's comparison is ``--device cuda --preset small --block 1024
--batch-size 32 --vocab-size 8192 --precisions bf16 --no-baseline`` (and ``--preset
small-qwen --optimizers muon``). Before timing, a check runs our model and its peer from
the same initial weights (dropout off, fp32, the same AdamW and batches) and stops unless
the first three losses agree within 1e-2, so that speed is not bought with a different
computation. Each side prints tokens/s, TFLOP/s (6N + 12·L·d·T a token) and MFU against a
bf16 product measured in the same run (8192^3 on CUDA).

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
from train_peers import copy_into_peer, gpt_peer, qwen_peer  # bench/, beside this script
from train_profile import profile_steps

VOCAB, BLOCK, BATCH = 16_384, 256, 8
ACCUMULATE = 1  # micro-batches an optimizer step (--accumulate), on every side
DEVICE = "cpu"
# The GPT-2 peer's activation: our GPT-2 presets use transformers' gelu_new (the tanh
# approximation), so the peer uses it too; nanoGPT's exact GELU is --peer-gelu none.
PEER_GELU = "tanh"


class RandomTokens:
    """An in-memory sequence source (the data path is measured apart from the model)."""

    def __init__(self, seq_length: int, seed: int = 0) -> None:
        self.seq_length = seq_length
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(0, VOCAB - 1, size=(64, seq_length), dtype=np.int64)
        self.i = 0

    def batch(self, n: int) -> torch.Tensor:
        """``n`` sequences on the benchmark's device."""
        rows = np.stack([self.next_sequence() for _ in range(n)])
        return torch.from_numpy(rows).to(DEVICE, non_blocking=True)

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
    model = GPT2LMHeadModel(config).to(DEVICE)
    model.config._attn_implementation = "eager"
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1)
    source = RandomTokens(BLOCK)

    def step() -> None:
        for _ in range(ACCUMULATE):
            ids = source.batch(BATCH)
            (model(input_ids=ids, labels=ids).loss / ACCUMULATE).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _gpt_peer(width: int, layers: int, heads: int) -> torch.nn.Module:
    return gpt_peer(width, layers, heads, vocab=VOCAB, block=BLOCK, gelu=PEER_GELU, device=DEVICE)


def peer_step_fn(preset: str = "tiny"):
    """nanoGPT's recipe at the preset's width, depth and heads: bf16 autocast, the whole
    model compiled, fused AdamW."""
    from codeparrot.models.presets import get_preset

    shape = get_preset(preset)
    model = _gpt_peer(shape.n_embd, shape.n_layer, shape.n_head)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1, fused=True)
    step = compiled_bf16_step(model, [opt])
    step.flops_per_token = peer_flops_per_token(model, shape.n_layer, shape.n_embd)
    return step


def peer_flops_per_token(model: torch.nn.Module, layers: int, width: int) -> float:
    """6N + 12·L·d·T, N without a position table (as ours counts)."""
    n = sum(p.numel() for p in model.parameters())
    positions = getattr(model, "positions", None)
    if positions is not None:
        n -= positions.weight.numel()
    return 6 * n + 12 * layers * width * BLOCK


def compiled_bf16_step(model: torch.nn.Module, optimizers: list[torch.optim.Optimizer]):
    """A peer's training step: the whole model compiled, bf16 autocast, clipping, then each
    optimizer (the model returns the loss of ``(inputs, targets)``)."""
    compiled = torch.compile(model)
    source = RandomTokens(BLOCK + 1)

    def step() -> None:  # no host synchronisation: tokens/s is timed over whole rounds
        for _ in range(ACCUMULATE):
            seq = source.batch(BATCH)
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                loss = compiled(seq[:, :-1], seq[:, 1:])
            (loss / ACCUMULATE).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def same_model_peer_step_fn(preset: str, optimizer: str):
    """The peer written for our model instead of GPT-2's (:func:`qwen_peer`), the whole
    model compiled, bf16 autocast, and our optimizer from torch itself
    (``torch.optim.Muon`` on the blocks' matrices with fused AdamW on the rest, or fused
    AdamW on everything)."""
    from codeparrot.models.presets import get_preset

    model = qwen_peer(preset, vocab=VOCAB, block=BLOCK, device=DEVICE)
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
    step = compiled_bf16_step(model, optimizers)
    shape = get_preset(preset)
    step.flops_per_token = peer_flops_per_token(model, shape.n_layer, shape.n_embd)
    return step


def ours_step_fn(
    workdir: Path,
    compile: bool,
    optimizer: str = "adamw",
    preset: str = "tiny",
    mixed_precision: str = "auto",
    fused_kernels: tuple[str, ...] | None = None,
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
        output=workdir / f"run-{mixed_precision}-{optimizer}-{_variant_name(fused_kernels)}",
        preset=preset,
        dropout=0.0,  # the peers have none
        n_positions=BLOCK if BLOCK > 256 else None,
        seq_length=BLOCK,
        batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE,
        mixed_precision=mixed_precision,
        compile=compile,
        optimizer=optimizer,
        schedule="cosine",
        pretokenized=False,
        log_with="none",
        peak_tflops=1.0,
        progress=False,
        fused_kernels=fused_kernels,
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
    _synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _synchronize()
    return steps * ACCUMULATE * BATCH * BLOCK / (time.perf_counter() - start)


def _synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def same_losses(workdir: Path, preset: str, steps: int = 3, tolerance: float = 1e-2) -> bool:
    """From the same initial weights, dropout off, the same batches and the same AdamW,
    the first ``steps`` losses of our model and its peer (the GPT-2 peer for GPT-2
    presets, the Qwen3 peer for Qwen3 ones), eager fp32: printed, True when they agree
    within ``tolerance``. This checks the model and its loss, not the loop around them."""
    from codeparrot.models.checkpoint import load_tokenizer
    from codeparrot.models.presets import build_model, get_preset

    tokenizer = workdir / "tokenizer"
    if not tokenizer.is_dir():
        word_tokenizer(tokenizer)
    shape = get_preset(preset)
    ours = build_model(preset, load_tokenizer(tokenizer), n_positions=max(BLOCK, 8)).to(DEVICE)
    if ours.config.vocab_size != VOCAB:
        raise SystemExit(f"--vocab-size {VOCAB}: use a multiple of 64 for the loss check")
    peer = _gpt_peer(shape.n_embd, shape.n_layer, shape.n_head) if shape.architecture == "gpt2" \
        else qwen_peer(preset, vocab=VOCAB, block=BLOCK, device=DEVICE)  # fmt: skip
    copy_into_peer(ours, peer, shape.architecture, BLOCK)
    ours.eval(), peer.eval()  # dropout off (the peers have none)
    optims = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ours, peer)]
    source = RandomTokens(BLOCK + 1, seed=1)
    pairs = []
    for _ in range(steps):
        seq = source.batch(min(BATCH, 4))
        logits = ours(input_ids=seq[:, :-1]).logits.float()
        mine = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
        losses = (mine, peer(seq[:, :-1], seq[:, 1:]))
        for loss, opt in zip(losses, optims, strict=True):
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        pairs.append(tuple(float(x.detach()) for x in losses))
    worst = max(abs(a - b) for a, b in pairs)
    print(
        f"same computation ({preset} and its peer from the same weights, dropout off, fp32, "
        f"AdamW): losses {', '.join(f'{a:.4f}/{b:.4f}' for a, b in pairs)}; largest gap "
        f"{worst:.1e} ({'within' if worst <= tolerance else 'OUTSIDE'} {tolerance:g})"
    )
    return worst <= tolerance


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
        choices=("tiny", "tiny-qwen", "mini-qwen", "small", "small-qwen"),
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
    parser.add_argument(
        "--accumulate",
        type=int,
        default=ACCUMULATE,
        help="micro-batches an optimizer step, on every side (6 at --batch-size 32 and "
        "--block 1024: the scale-up recipe's 196,608 tokens a step, where an optimizer's "
        "fixed cost a step weighs what it weighs in real training)",
    )
    parser.add_argument("--vocab-size", type=int, default=VOCAB, help="the model's vocabulary")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--block", type=int, default=BLOCK, help="tokens a sequence (1024 on a GPU)"
    )
    parser.add_argument(
        "--peer-gelu",
        choices=("tanh", "none"),
        default=PEER_GELU,
        help="the GPT-2 peer's GELU: tanh (GPT-2's gelu_new, as our presets) or none (exact)",
    )
    parser.add_argument(
        "--no-check", dest="check", action="store_false", help="skip the same-losses check"
    )
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false", help="skip the nanoGPT-style peers"
    )
    parser.add_argument(
        "--no-baseline", dest="baseline", action="store_false", help="skip the plain fp32 loop"
    )
    parser.add_argument(
        "--fused-kernels",
        default="default",
        help="on CUDA with liger-kernel: our step's fused-kernel variants, comma-separated, "
        "each timed in every round: default (train's), all, none, or kernels joined by + (e.g. "
        "rms_norm+rope+swiglu); the first is 'ours' against the peers",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the rounds, each step's operators by self time (on CUDA: device time, and "
        "the host synchronisations a step makes)",
    )
    args = parser.parse_args()
    if args.accumulate < 1:
        parser.error(f"--accumulate {args.accumulate}: at least 1 micro-batch a step")
    args.precisions = args.precisions.split(",")
    args.optimizers = args.optimizers.split(",")
    args.fused_kernels = _kernel_variants(args.fused_kernels)
    return args


def _variant_name(kernels: tuple[str, ...] | None) -> str:
    return "default" if kernels is None else "+".join(kernels)


def _kernel_variants(text: str) -> list[tuple[str, ...] | None]:
    """``--fused-kernels``: comma-separated variants, each default (train's: all, without
    the fused cross-entropy when compiled), all, none, or kernels joined by +."""
    from codeparrot.training.kernels import KERNELS

    variants: list[tuple[str, ...] | None] = []
    for variant in text.split(","):
        named = {"default": None, "all": KERNELS}
        kernels = named[variant] if variant in named else tuple(variant.split("+"))
        unknown = set(kernels or ()) - {*KERNELS, "none"}
        if unknown:
            raise SystemExit(f"--fused-kernels: unknown {sorted(unknown)} (known: default, all, none, "
                             f"{', '.join(KERNELS)}, joined by +)")  # fmt: skip
        variants.append(kernels)
    return variants


def _build_steps(args: argparse.Namespace, workdir: Path) -> tuple[dict, dict]:
    """Every timed step, warmed up: ours at each precision, optimizer and fused-kernel
    variant (the first variant unnamed), then the others."""
    from codeparrot.models.presets import get_preset

    steps, runs = {}, {}
    combinations = [(o, p, k) for o in args.optimizers for p in args.precisions
                    for k in args.fused_kernels]  # fmt: skip
    qwen3 = get_preset(args.preset).architecture == "qwen3"
    stock_rope = _rope() if qwen3 else None
    for optimizer, precision, kernels in combinations:
        name = f"ours {precision} {optimizer}"
        if kernels != args.fused_kernels[0]:
            name += f" kernels={_variant_name(kernels)}"

        def make(optimizer=optimizer, precision=precision, kernels=kernels, name=name):
            if qwen3:
                _rope(stock_rope)  # an earlier variant's Liger rotary embedding is not this one's
            step, runs[name] = ours_step_fn(
                workdir, args.compile, optimizer, args.preset, precision, kernels
            )
            return _with_rope(step, _rope()) if qwen3 else step

        _ready(steps, name, make, args.warmup)
    others = {}
    if args.baseline:
        others["baseline"] = baseline_step_fn
    if args.peer:
        others["peer"] = lambda: peer_step_fn(args.preset)
    if args.peer and get_preset(args.preset).architecture == "qwen3":  # GPT-2's is "peer"
        others["same-model peer"] = lambda: same_model_peer_step_fn(args.preset, args.optimizers[0])
    for name, make in others.items():
        _ready(steps, name, make, args.warmup)
    return steps, {name: run for name, run in runs.items() if name in steps}


def _ready(steps: dict, name: str, make, warmup: int) -> None:
    """``steps[name]``: the step ``make()`` builds, warmed up (compiled); a side that fails
    there is named with its error and left out, so that one failure (a kernel that does not
    compile on this torch, an out-of-memory) does not cost the other sides' figures."""
    t0 = time.perf_counter()
    breaks = _graph_breaks()
    try:
        step = make()
        for _ in range(warmup):
            step()
    except Exception as e:  # torch, triton and CUDA raise many types
        print(f"{name} FAILED before timing, left out: {type(e).__name__}: {str(e)[:400]}",
              flush=True)  # fmt: skip
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        return
    steps[name] = step
    print(f"{name} ready after {time.perf_counter() - t0:.0f} s{_breaks_since(breaks)}",
          flush=True)  # fmt: skip


def _rope(function=None):
    """transformers' Qwen3 rotary embedding function (set to ``function`` where given).

    Liger's replaces it for the whole process (attention looks it up at every call), so
    each kernel variant of our step runs with its own (compiled code guards on it)."""
    from transformers.models.qwen3 import modeling_qwen3

    if function is not None:
        modeling_qwen3.apply_rotary_pos_emb = function
    return modeling_qwen3.apply_rotary_pos_emb


def _with_rope(step, function):
    def step_with_its_rope() -> None:
        _rope(function)
        step()

    return step_with_its_rope


def _graph_breaks() -> dict[str, int]:
    """torch.compile's graph breaks so far in this process, by reason."""
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


def _breaks_since(before: dict[str, int]) -> str:
    """The graph breaks compiling a step added (each splits its compiled graph), said shortly."""
    new = {k: n - before.get(k, 0) for k, n in _graph_breaks().items() if n > before.get(k, 0)}
    if not new:
        return "; no graph break"
    lines = [line.strip() for line in next(iter(new)).splitlines() if line.strip()]
    first = " ".join(lines[:2])[:200]  # the kind of break, then dynamo's explanation
    return f"; {sum(new.values())} graph breaks (first: {first})"


def _peaks() -> dict[str, float]:
    """fp32 and bf16 matmul FLOP/s of this CPU, whatever CODEPARROT_CPU_BF16 says (an
    emulated bf16 takes seconds here)."""
    if DEVICE == "cuda":
        from codeparrot.quickstart.plan import cuda_peak_flops

        return {"no": float("nan"), "bf16": cuda_peak_flops()}
    from codeparrot.training.loop import measure_peak_flops

    return {
        "no": measure_peak_flops(seconds=1.0, dtype="float32"),
        "bf16": measure_peak_flops(seconds=1.0, dtype="bfloat16"),
    }


def muon_floor(run) -> str:
    """What Muon's orthogonalisation adds to a step at the least, whatever the code: its
    FLOPs against the step's training FLOPs (6N + 12·L·d·T a token, every token of the
    step's micro-batches), which at equal FLOP/s is the share it adds to an AdamW step."""
    from codeparrot.training.muon import newton_schulz_flops

    optimizer = run.optimizer
    while not hasattr(optimizer, "inner"):  # Accelerate's wrapper around ours
        optimizer = optimizer.optimizer
    muon = optimizer.inner["muon"]
    shapes = [tuple(p.shape) for g in muon.param_groups for p in g["params"]]
    steps = muon.param_groups[0]["ns_steps"]
    ns = newton_schulz_flops(shapes, steps)
    step = run.flops_per_token * ACCUMULATE * BATCH * BLOCK
    return (
        f"Muon's Newton-Schulz ({len(shapes)} matrices, {steps} iterations): "
        f"{ns / 1e9:,.0f} GFLOP an optimizer step, {ns / step:.1%} of the step's "
        f"{step / 1e9:,.0f} GFLOP of training ({ACCUMULATE * BATCH * BLOCK:,} tokens): at "
        f"the model's FLOP/s a Muon step takes {1 + ns / step:.3f}x an AdamW one"
    )


def _report(args: argparse.Namespace, rates: dict, peaks: dict, runs: dict, steps: dict) -> None:
    med = {name: statistics.median(r) for name, r in rates.items()}
    peak = {k: statistics.median(v) for k, v in peaks.items()}
    fpt = next(iter(runs.values())).flops_per_token
    print(f"\nshape: {args.preset}, vocab {VOCAB}, block {BLOCK}, batch {BATCH} x {ACCUMULATE} "
          f"micro-batches a step, on {DEVICE}"
          f" ({torch.cuda.get_device_name(0) if DEVICE == 'cuda' else 'CPU'}), torch "
          f"{torch.__version__}")  # fmt: skip
    print(
        "settings: dropout 0 on every side (ours set to the peers'); the GPT-2 peer's GELU "
        f"{'tanh approximation (as GPT-2s gelu_new)' if PEER_GELU == 'tanh' else 'exact'}; "
        "bf16 autocast, loss in fp32, fused AdamW, clipping at 1.0"
    )
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
        if {"auto", "no", "bf16"} <= set(names) and set(names.values()) <= set(rates):
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
        for p in [
            p for p in args.precisions if {f"ours {p} adamw", f"ours {p} muon"} <= set(rates)
        ]:
            ratios = [
                a / m
                for a, m in zip(rates[f"ours {p} adamw"], rates[f"ours {p} muon"], strict=True)
            ]
            print(
                f"{p}: a Muon step takes {statistics.median(ratios):.2f}x an AdamW one (median "
                f"of per-round ratios: {', '.join(f'{r:.2f}' for r in ratios)}; target <= "
                f"{'1.05' if DEVICE == 'cuda' else '1.2'}x)"
            )
        if f"ours {args.precisions[0]} muon" in runs:
            print(muon_floor(runs[f"ours {args.precisions[0]} muon"]))
    ours = f"ours {args.precisions[0]} {args.optimizers[0]}"
    if ours not in rates:  # it failed before timing: the first of ours that ran instead
        ours = next(iter(runs))
    for variant in [n for n in rates if n.startswith(f"{ours} kernels=")]:
        for other in (ours, "same-model peer", "peer"):
            if other in rates:
                ratios = [v / o for v, o in zip(rates[variant], rates[other], strict=True)]
                print(f"{variant} / {other}: median of per-round ratios "
                      f"{statistics.median(ratios):.2f}x")  # fmt: skip
    for other in ("peer", "same-model peer"):
        per_token = getattr(steps.get(other), "flops_per_token", None)
        if other in rates and per_token:
            flops = med[other] * per_token
            print(
                f"{other:24s}: {med[other]:8,.0f} tokens/s  {flops / 1e12:6.2f} TFLOP/s, "
                f"trains bf16: MFU {flops / peak['bf16']:.0%} of the bf16 peak"
            )
    for other in ("baseline", "peer", "same-model peer"):
        if other in rates:
            ratios = [o / b for o, b in zip(rates[ours], rates[other], strict=True)]
            print(
                f"{other}: {med[other]:8,.0f} tokens/s; {ours} / {other}: median of per-round "
                f"ratios {statistics.median(ratios):.2f}x"
            )


def main() -> None:
    global BATCH, VOCAB, BLOCK, DEVICE, PEER_GELU, ACCUMULATE  # every step of this run uses them
    args = _arguments()
    BATCH, VOCAB, BLOCK, DEVICE = args.batch_size, args.vocab_size, args.block, args.device
    ACCUMULATE = args.accumulate
    PEER_GELU = args.peer_gelu
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    with tempfile.TemporaryDirectory() as tmp:
        if args.check and not same_losses(Path(tmp), args.preset):
            raise SystemExit("ours and the peer compute different losses: speed not compared")
        steps, runs = _build_steps(args, Path(tmp))
        if not runs:
            raise SystemExit("no variant of our step could be built and warmed up: none timed")
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
        _report(args, rates, peaks, runs, steps)
        if args.profile:
            profile_steps(steps, cuda=DEVICE == "cuda")


if __name__ == "__main__":
    main()
