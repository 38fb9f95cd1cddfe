"""Generation speed: our engine against ``model.generate`` on the same model and input.

Builds `tiny`-preset GPT-2s (4 layers, 256 wide, 4 heads, randomly initialised) with
the preset's context of 256 positions and, as a harder case, with 1,024 positions, and an
8k byte-level BPE trained on a few stdlib files, then measures, interleaving ours and the
baseline so that load from other jobs hits both alike:

(a) the editor case: a 1,000-token prompt fitted to the context (the tiny preset keeps its
    last 224 tokens, the 1,024-position model its last 992), 32 new tokens, greedy:
    p50/p95 latency, cold and (a') while typing;
(b) pass@k sampling (1,024 positions): n = 20 samples of 128 tokens for a ~150-token
    prompt: tokens/s.

Sides: "ours" (``Engine.load`` defaults: the checkpoint's float32 weights), "ours-int8"
(``quantize="int8"``), "ours-int8-comp" (int8 plus ``compile_steps``: the language
server's default on a CPU once its background compile is done; the compile time is
printed, not counted) and transformers' ``model.generate`` on the same ids. All generate exactly the same number of tokens (no
stop strings, EOS ignored), so the comparison is work for work. Run with

    .venv/bin/python bench/generate.py [--repeats 30] [--positions 256 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

from codeparrot.generation import GenerationConfig

STDLIB_FILES = ("textwrap.py", "heapq.py", "bisect.py", "argparse.py", "typing.py", "ast.py")


def build_checkpoint(out: Path, vocab_size: int, n_positions: int = 1024) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [(root / name).read_text(encoding="utf-8") for name in STDLIB_FILES]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=max(vocab_size, len(tokenizer)),  # padded, like nanoGPT's 50304
        n_positions=n_positions,
        n_embd=256,
        n_layer=4,
        n_head=4,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def prompt_of(engine, text: str, tokens: int) -> str:
    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"][:tokens]
    return engine.tokenizer.decode(ids)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def report_latency(times: dict[str, list[float]], baseline: str = "hf") -> None:
    base = statistics.median(times[baseline])
    for name, ts in times.items():
        p50, p95 = percentile(ts, 0.5) * 1e3, percentile(ts, 0.95) * 1e3
        ratio = "" if name == baseline else f"   {base / statistics.median(ts):5.2f}x faster"
        print(f"    {name:15s} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms{ratio}")


def editor_case(engines: dict, baseline, source: str, repeats: int) -> None:
    """(a) cold and (a') typing, for one model."""
    engine = engines["ours"]
    # 1,000 tokens + 32 new exceed the positions: the engine keeps the end of the prompt
    # (its tokenizer call is timed); the baseline gets the same ids.
    prompt = prompt_of(engine, source, 1000)
    fitted, _ = engine.encode_prompt(prompt, 32)
    ids = torch.tensor([fitted])
    cfg = GenerationConfig(max_new_tokens=32, temperature=0, stop_at_eos=False, heal=False)

    def ours_a(e):
        def run() -> None:
            e.prompt_cache.clear()  # cold: nothing reused from the previous request
            (c,) = e.generate(prompt, cfg)
            assert c.new_tokens == 32 and c.prompt_cached_tokens == 0, c

        return run

    def hf(input_ids):
        def run() -> None:
            with torch.inference_mode():
                out = baseline.generate(
                    input_ids, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0
                )
            assert out.shape[1] == input_ids.shape[1] + 32

        return run

    sides = {name: ours_a(e) for name, e in engines.items()} | {"hf": hf(ids)}
    print(
        f"(a) cold: prompt {engine.count_tokens(prompt)} tokens (kept {ids.shape[1]}), "
        f"32 new tokens, greedy, {repeats} requests per side"
    )
    for f in list(sides.values()) * 2:  # warm-up
        f()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, f in sides.items():
            times[name].append(timed(f))
    report_latency(times)

    # (a') the same while typing: each request's prompt is the previous one plus a few
    # characters, as an editor sends them; the engine reuses the keys/values of the
    # prompt start it has already seen (the baseline recomputes everything).
    cursor = len(prompt)
    typing: dict[str, list[float]] = {name: [] for name in sides}
    reused: list[int] = []
    for r in range(repeats):
        cursor += 1 + r % 4
        typed = source[:cursor]
        fitted_r, _ = engine.encode_prompt(typed, 32)
        for name, e in engines.items():
            t = time.perf_counter()
            (c,) = e.generate(typed, cfg)
            typing[name].append(time.perf_counter() - t)
            reused.append(c.prompt_cached_tokens / c.prompt_tokens)
        typing["hf"].append(timed(hf(torch.tensor([fitted_r]))))
    print(
        f"(a') typing: {repeats} requests per side, each prompt 1-4 characters longer; "
        f"median {statistics.median(reused):.1%} of the prompt reused"
    )
    report_latency(typing)


def sampling_case(engines: dict, baseline, source: str, repeats: int) -> None:
    """(b) n = 20 samples of 128 tokens: tokens/s."""
    engine = engines["ours"]
    n, new = 20, 128
    prompt_b = prompt_of(engine, source[5000:], 150)
    ids_b = torch.tensor([engine.tokenizer(prompt_b, add_special_tokens=False)["input_ids"]])
    cfg_b = GenerationConfig(
        max_new_tokens=new, temperature=0.8, top_p=0.95, n=n, seed=0, stop_at_eos=False, heal=False
    )

    def ours_b(e):
        def run() -> None:
            out = e.generate(prompt_b, cfg_b)
            assert sum(c.new_tokens for c in out) == n * new

        return run

    def hf_b() -> None:
        with torch.inference_mode():
            out = baseline.generate(
                ids_b,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=True,
                temperature=0.8,
                top_p=0.95,
                num_return_sequences=n,
                pad_token_id=0,
            )
        assert out.shape == (n, ids_b.shape[1] + new)

    sides_b = {name: ours_b(e) for name, e in engines.items()} | {"hf": hf_b}
    print(f"(b) prompt {ids_b.shape[1]} tokens, n={n} x {new} new tokens, T=0.8 top-p 0.95")
    for f in sides_b.values():
        f()
    rates: dict[str, list[float]] = {name: [] for name in sides_b}
    for _ in range(repeats):
        for name, f in sides_b.items():
            rates[name].append(n * new / timed(f))
    base = statistics.median(rates["hf"])
    for name, rs in rates.items():
        ratio = "" if name == "hf" else f"   {statistics.median(rs) / base:5.2f}x"
        print(f"    {name:15s} {statistics.median(rs):8.0f} tokens/s{ratio}")


def int8_loss(checkpoint: Path, files: int) -> None:
    """Held-out loss of a trained checkpoint when every token goes through the decoding
    step, with the checkpoint's float32 weights and with the int8 copies: what int8
    costs in quality (teacher forcing over the first context of a few stdlib files)."""
    import torch.nn.functional as F

    from codeparrot.generation import Engine

    engine = Engine.load(checkpoint, quantize="int8")
    decoder = engine.decoder.lean
    root = Path(sysconfig.get_paths()["stdlib"])
    names = sorted(p.name for p in root.glob("*.py"))[:files]
    loss = {False: 0.0, True: 0.0}
    tokens = agree = 0
    with torch.inference_mode():
        for name in names:
            text = (root / name).read_text(encoding="utf-8", errors="replace")
            ids = engine.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
            ids = ids[: decoder.context_length]
            if len(ids) < 2:
                continue
            caches = {q: decoder.new_cache(1, len(ids)) for q in loss}
            logits = {q: decoder.forward(torch.tensor([ids[:1]]), caches[q]) for q in loss}
            for t in range(1, len(ids)):
                target = torch.tensor([ids[t]])
                for q in loss:
                    loss[q] += F.cross_entropy(logits[q].float(), target).item()
                agree += int(logits[False].argmax() == logits[True].argmax())
                tokens += 1
                for q in loss:
                    logits[q] = decoder.forward(torch.tensor([[ids[t]]]), caches[q], int8=q)
    exact, approx = loss[False] / tokens, loss[True] / tokens
    print(
        f"int8 vs float32 decoding on {checkpoint} ({tokens} tokens of {len(names)} stdlib "
        f"files): loss {exact:.4f} -> {approx:.4f} ({100 * (approx / exact - 1):+.2f}%), "
        f"same greedy token {agree / tokens:.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="requests of (a) and (a') per side")
    parser.add_argument("--sampling-repeats", type=int, default=5, help="runs of (b) per side")
    parser.add_argument("--vocab-size", type=int, default=8192, help="model vocabulary (padded)")
    parser.add_argument(
        "--positions", type=int, nargs="+", default=[256, 1024], help="contexts to measure"
    )
    parser.add_argument("--dtype", default="auto", help="engine dtype (auto, float32, bfloat16)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--int8-loss",
        type=Path,
        metavar="CHECKPOINT",
        help="only measure what int8 decoding costs in held-out loss on a trained checkpoint",
    )
    parser.add_argument(
        "--no-compiled",
        dest="compiled",
        action="store_false",
        help="skip the side with compiled one-token steps (the language server's default)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.int8_loss:
        int8_loss(args.int8_loss, files=20)
        return

    from transformers.utils import logging as hf_logging

    from codeparrot.generation import Engine

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    source = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text()
    for positions in args.positions:
        with tempfile.TemporaryDirectory() as tmp:
            path = build_checkpoint(Path(tmp) / "ckpt", args.vocab_size, positions)
            engines = {
                "ours": Engine.load(path, dtype=args.dtype),
                "ours-int8": Engine.load(path, dtype=args.dtype, quantize="int8"),
            }
            if args.compiled:
                compiled = Engine.load(path, dtype=args.dtype, quantize="int8")
                started = time.perf_counter()
                compiled.compile_steps(background=False)
                print(f"compiled steps ready after {time.perf_counter() - started:.1f} s")
                engines["ours-int8-comp"] = compiled
            baseline = Engine.load(path, dtype="float32", lean_load=False).model  # HF generate
            for e in engines.values():  # the editor's engine: (a') reuses the typed prompt's start
                e.reuse_prompt_starts = True
        params = sum(p.numel() for p in baseline.parameters())
        print(
            f"\n== {positions} positions: torch {torch.__version__}, {torch.get_num_threads()} "
            f"threads; model {params / 1e6:.1f}M parameters, vocab {baseline.config.vocab_size}; "
            f"engine dtype {args.dtype} (bf16 prefill: {engines['ours'].bf16_prefill})"
        )
        editor_case(engines, baseline, source, args.repeats)
        if positions >= 512:
            sampling_case(engines, baseline, source, args.sampling_repeats)
    print("targets: (a) p50 <= 50 ms, p95 <= 120 ms, >= 4x; (b) >= 2x")


if __name__ == "__main__":
    main()
