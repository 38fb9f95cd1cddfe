"""Editor latency and decoding speed on models of real size, on this machine's CPU.

Builds random models with the exact configuration of two models people run in an
editor, each with a byte-level BPE carrying its family's special tokens (trained here on
stdlib files: 8k entries, not the real vocabulary's merges, so prompts take somewhat
more tokens than with the real tokenizer), saved with ``save_pretrained``:

- ``bigcode/tiny_starcoder_py``: GPTBigCode, 164M parameters, 768 wide, 20 layers, 12
  heads with one key/value head (multi-query), context 8192, vocabulary 49152;
- ``Qwen/Qwen2.5-Coder-0.5B``: Qwen2, 494M parameters, 896 wide, 24 layers, 14 query
  heads and 2 key/value heads, intermediate 4864, vocabulary 151936, tied embeddings.

Then, per model:

1. decoding speed: milliseconds per one-token step after a 512-token prompt, through
   the engine's own steps, at each of ``--threads`` (one: as the language server
   decodes): the lean decoder in float32 and with each of its int8 kernels (torch's
   dynamic int8 linear, fbgemm on x86; the weight-only ``_weight_int8pack_mm``; and the
   one its probe chooses), against the ``transformers`` forward (its cache) in float32
   and with torch's dynamic int8 ``quantize_dynamic`` where this torch has it; ratios
   within the run;
2. the language server through ``bench/lsp.py --checkpoint DIR`` (cold start, warm,
   bursts, typing through), with ``--quantize none`` and ``--quantize int8``.

Targets for the 164M model (a one-line suggestion): warm p50 <= 250 ms, p95 <= 600 ms,
the first suggestion after start within 3 s.

    .venv/bin/python bench/editor_models.py [--models starcoder,qwen] [--requests 30]
        [--threads 1,2] [--skip-lsp]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

MODELS = {
    "starcoder": ("tiny_starcoder_py", "bigcode/tiny_starcoder_py"),
    "qwen": ("qwen2.5-coder", "Qwen/Qwen2.5-Coder-0.5B"),
}


def model_config(name: str, bos: int, eos: int) -> Any:
    import transformers as tf

    if name == "starcoder":  # bigcode/tiny_starcoder_py's config.json
        return tf.GPTBigCodeConfig(
            vocab_size=49152, n_positions=8192, n_embd=768, n_layer=20, n_head=12, n_inner=3072,
            multi_query=True, activation_function="gelu_pytorch_tanh", layer_norm_epsilon=1e-5,
            scale_attn_weights=True, bos_token_id=bos, eos_token_id=eos,
        )  # fmt: skip
    return tf.Qwen2Config(  # Qwen/Qwen2.5-Coder-0.5B's config.json
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=True, use_sliding_window=False, max_window_layers=24,
        hidden_act="silu", bos_token_id=bos, eos_token_id=eos,
    )  # fmt: skip


def build(name: str, out: Path, texts: list[str]) -> Path:
    """The random model of ``name`` with its family's tokenizer, saved into ``out``."""
    import families
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    family = families.FAMILIES[MODELS[name][0]]
    families._corpus = lambda: texts  # a vocabulary of real size needs more text
    tokenizer = families.build_tokenizer(family, vocab_size=8192)
    tokenizer.model_max_length = 8192
    eos = tokenizer.convert_tokens_to_ids(family.eos)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(model_config(name, eos, eos))
    model.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=eos)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"{MODELS[name][1]}-shaped random model: {n / 1e6:.1f}M parameters")
    return out


def step_ms(
    engine: Any, ids: list[int], step_threads: int = 1, steps: int = 24, rounds: int = 3
) -> tuple[float, float]:
    """Medians over ``rounds``: milliseconds of the prompt (torch's threads), and the mean
    milliseconds of a one-token step on ``step_threads`` (one: as the language server)."""
    import torch

    threads = torch.get_num_threads()
    times, prompts = [], []
    for _ in range(rounds):
        with torch.inference_mode():
            stepper = engine.decoder.steps(ids, 1, steps + 1)
            start = time.perf_counter()
            nxt = stepper.prefill().argmax(dim=-1)
            prompts.append((time.perf_counter() - start) * 1000)
            torch.set_num_threads(step_threads)  # the prompt on every thread
            start = time.perf_counter()
            for _ in range(steps):
                nxt = stepper.decode(nxt).argmax(dim=-1)
            times.append((time.perf_counter() - start) * 1000 / steps)
            torch.set_num_threads(threads)
        engine.prompt_cache.clear()
    return statistics.median(prompts), statistics.median(times)


def decode_speed(path: Path, text: str, threads: list[int]) -> None:
    """Per-token decode ms at each thread count: the lean decoder in float32 and with each
    int8 kernel, against transformers' forward, same prompt; ratios within the run."""
    import torch

    from codeparrot.generation import Engine
    from codeparrot.generation.int8 import KERNELS, kernel_supported

    # as the server (bf16 prompts where fast), but as transformers' model: the baselines
    # below run its forward
    lean = Engine.load(path, quantize="none", lean_load=False)
    ids = lean.tokenizer(text, add_special_tokens=False)["input_ids"][:512]
    engines = {"lean float32": lean}
    same = {"bf16_prefill": lean.bf16_prefill}  # prompts as the float32 engine's
    auto = Engine(lean.model, lean.tokenizer, quantize="int8", **same)  # the probe's choice
    for kernel in KERNELS:
        if kernel_supported(kernel):
            engines[f"lean int8 {kernel}"] = engine = Engine(lean.model, lean.tokenizer, **same)
            engine.decoder.lean.quantize_int8(kernel)  # the steps read int8 where it is there
    engines[f"lean int8 auto ({auto.decoder.lean.int8_kernel})"] = auto
    engines["transformers float32"] = Engine(lean.model, lean.tokenizer, lean_gpt2=False)
    try:
        dynamic = torch.ao.quantization.quantize_dynamic(
            lean.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False
        )
        engines["transformers dynamic int8"] = Engine(dynamic, lean.tokenizer, lean_gpt2=False)
    except Exception as e:  # not in every torch build
        print(f"  transformers dynamic int8: not measured ({type(e).__name__}: {e})")
    print(f"  prompt of {len(ids)} tokens (bf16 prefill: {lean.bf16_prefill})")
    for n in threads:
        rows = {name: step_ms(engine, ids, n) for name, engine in engines.items()}
        base = rows["lean float32"][1]
        print(f"  one-token steps on {n} thread(s); x = lean float32's ms / the row's")
        for name, (prompt_ms, ms) in rows.items():
            print(
                f"    {name:<30} prompt {prompt_ms:6.0f} ms   step {ms:6.1f} ms/token"
                f"   {base / ms:5.2f}x"
            )
        if "lean int8 dynamic" in rows and "lean int8 weight-only" in rows:
            ratio = rows["lean int8 weight-only"][1] / rows["lean int8 dynamic"][1]
            print(f"    dynamic int8 kernel vs weight-only: {ratio:.2f}x faster steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="starcoder,qwen")
    parser.add_argument("--quantize", default="none,int8")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--skip-lsp", action="store_true", help="decoding speed only")
    parser.add_argument(
        "--threads", default="1", help="thread counts of the timed steps, comma-separated"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from lsp import stdlib_texts

    texts = stdlib_texts()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            t0 = time.perf_counter()
            path = build(name, Path(tmp) / name, list(texts.values()))
            print(f"built in {time.perf_counter() - t0:.1f} s")
            print(f"{name}: decoding speed, 512-token prompt")
            decode_speed(path, texts["argparse.py"], [int(n) for n in args.threads.split(",")])
            if args.skip_lsp:
                continue
            for q in args.quantize.split(","):
                print(f"{name}: language server, --quantize {q}", flush=True)
                subprocess.run(
                    [
                        sys.executable, str(HERE / "lsp.py"), "--checkpoint", str(path),
                        "--quantize", q, "--requests", str(args.requests),
                        "--bursts", str(args.bursts), "--max-new-tokens",
                        str(args.max_new_tokens), "--targets", "real-size", "--no-typing",
                    ],
                    check=True,
                )  # fmt: skip


if __name__ == "__main__":
    main()
