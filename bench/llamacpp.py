"""Our engine against llama.cpp on the same checkpoint: the same greedy text, and speed.

Needs a llama.cpp build (``--llama-cpp DIR``: a CMake build folder with ``bin/llama-simple``
and ``bin/llama-bench``, ``bin/llama-tokenize`` if built; llama-cpp-python's source
package carries llama.cpp's sources under ``vendor/llama.cpp``). Without one the bench says
so and stops.

1. **Agreement** (``--checkpoint``: a GPT-2 or Qwen3 checkpoint of ours whose tokenizer
   llama.cpp can split, the quickstart's say): the checkpoint is exported with
   ``codeparrot export --gguf`` (f32 and q8_0); for each of 20 code prompts, llama.cpp's
   greedy text (``llama-simple``: greedy sampler, ``--tokens`` tokens, stops at
   end-of-generation tokens) against ours (``Engine.generate``, temperature 0, the same
   number of tokens, no token healing): f32 against our float32 weights, q8_0 against our
   int8 steps. The prompts' token ids are compared first (``llama-tokenize``).
2. **Speed**, on synthetic ids, the same threads (``--threads``) on both sides, alternating
   rounds so that load from other jobs hits both alike: ``llama-bench``'s ``tg`` (one-token
   steps from an empty cache) and ``pp`` (one prompt) against our decoder on the same
   window: one-token steps through ``Decoder.steps``' path (int8 against Q8_0, float32
   against F32), and prompts as the engine prefills them (bf16 products on a CPU that has
   them, else float32) against F32. For the ``--checkpoint`` model and (part ``big``) a
   random GPT-2 shaped like ``bigcode/tiny_starcoder_py`` (768 wide, 20 layers, 12 heads,
   49,152 tokens; full multi-head attention, which GGUF's gpt2 graph computes).

Ratios are llama.cpp's milliseconds over ours (above 1: ours is faster). Run with

    .venv/bin/python bench/llamacpp.py --llama-cpp BUILD --checkpoint DIR [--parts ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/eval.py would then
# shadow the project's `eval` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

PROMPTS = (
    "def fib(n):",
    "import os\n",
    "def add(a, b):\n    return",
    "class Stack:\n    def __init__(self):",
    "for i in range(10):\n",
    "def is_prime(n):\n    if n < 2:\n        return False\n",
    "import numpy as np\n\ndef mean(xs):",
    "def read_file(path):\n    with open(path) as f:",
    "# sort a list of numbers\ndef sort(xs):",
    "def main():\n    args = parse_args()\n",
    "x = [1, 2, 3]\nprint(",
    "def factorial(n):\n    if n == 0:",
    "try:\n    import json\nexcept ImportError:",
    'if __name__ == "__main__":\n',
    "def reverse(s):\n    return s[",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    "def count_words(text):\n    counts = {}\n    for word in text.split():",
    "from typing import List\n\n\ndef flatten(xs: List[List[int]]) -> List[int]:",
    "def max_of(xs):\n    best = xs[0]\n    for x in xs:",
    'def greet(name):\n    print(f"Hello, {name}',
)


PARTS = ("agreement", "speed", "big")
MEASURES = ("int8", "fp32", "prompt")  # the speed pairs, by the first word of their names


def lscpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line]
    return names[0] if names else "unknown CPU"


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


class LlamaCpp:
    """The binaries of a llama.cpp build folder."""

    def __init__(self, folder: Path) -> None:
        self.bin = folder / "bin" if (folder / "bin").is_dir() else folder
        self.simple = self.bin / "llama-simple"
        self.bench = self.bin / "llama-bench"
        self.tokenizer = self.bin / "llama-tokenize"

    def missing(self) -> list[str]:
        return [p.name for p in (self.simple, self.bench) if not p.is_file()]

    def version(self) -> str:
        out = subprocess.run([self.bench, "--version"], capture_output=True, text=True)
        return (out.stdout + out.stderr).strip().splitlines()[0] if out.returncode == 0 else "?"

    def greedy(self, gguf: Path, prompt: str, tokens: int) -> str:
        """llama-simple's text after ``prompt`` (it prints the prompt's pieces first)."""
        out = subprocess.run(
            [self.simple, "-m", gguf, "-n", str(tokens), prompt], capture_output=True, check=True
        ).stdout
        text = out.decode("utf-8", errors="replace")
        if not text.startswith(prompt):
            raise RuntimeError(f"llama-simple echoed {text[: len(prompt)]!r}, not {prompt!r}")
        return text[len(prompt) :].removesuffix("\n")  # it ends with a newline of its own

    def token_ids(self, gguf: Path, prompt: str) -> list[int] | None:
        if not self.tokenizer.is_file():
            return None
        out = subprocess.run(
            [self.tokenizer, "-m", gguf, "-p", prompt, "--ids", "--log-disable"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(out.strip().splitlines()[-1])

    def speed(self, gguf: Path, threads: int, prompt: int, gen: int, reps: int) -> float:
        """Milliseconds a token of llama-bench's ``pp`` (``gen`` 0) or ``tg`` test."""
        out = subprocess.run(
            [self.bench, "-m", gguf, "-t", str(threads), "-p", str(prompt), "-n", str(gen),
             "-r", str(reps), "-o", "json"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        row = json.loads(out)[0]
        return row["avg_ns"] / 1e6 / (prompt or gen)


def export(checkpoint: Path, out: Path) -> dict[str, Path]:
    from codeparrot.models.gguf_export import ExportConfig, export_gguf

    export_gguf(ExportConfig(checkpoint=checkpoint, gguf=out, types=("f32", "q8_0"), force=True))
    return {kind: out / f"model-{kind}.gguf" for kind in ("f32", "q8_0")}


def agreement(llama: LlamaCpp, checkpoint: Path, ggufs: dict[str, Path], tokens: int) -> None:
    """llama.cpp's greedy text against ours on every prompt: f32 against our float32 weights
    (``dtype="float32"``: float32 logits too), f32 against the engine's default on this CPU
    (where it has bf16, the output projection of each step in bf16), q8_0 against int8."""
    sides = (("f32", "none", "float32"), ("f32", "none", "auto"), ("q8_0", "int8", "auto"))
    for kind, quantize, dtype in sides:
        same_ids, same, same_to_special = compare_side(
            llama, checkpoint, ggufs[kind], tokens, quantize, dtype
        )
        ids = f"{same_ids}/{len(PROMPTS)}" if llama.tokenizer.is_file() else "not compared"
        print(
            f"greedy text, llama.cpp {kind} against ours (quantize {quantize}, dtype {dtype}), "
            f"{tokens} tokens: {same}/{len(PROMPTS)} the same, {same_to_special}/{len(PROMPTS)} "
            f"up to the first special token; prompt ids the same: {ids}  [{load_note()}]"
        )


def compare_side(
    llama: LlamaCpp, checkpoint: Path, gguf: Path, tokens: int, quantize: str, dtype: str
) -> tuple[int, int, int]:
    """(prompts whose ids agree, whose texts agree, whose texts agree once llama.cpp's is
    cut at the first special token, where ours ends: llama.cpp ends only at its
    end-of-generation tokens, and goes on after ``<fim_middle>``, say)."""
    from codeparrot.generation import Engine, GenerationConfig

    config = GenerationConfig(max_new_tokens=tokens, temperature=0.0, heal=False)
    engine = Engine.load(checkpoint, quantize=quantize, dtype=dtype)
    specials = [engine.tokenizer.decode([i]) for i in engine.special_ids]
    same_ids = same = same_to_special = 0
    for prompt in PROMPTS:
        ours_ids = engine.encode_prompt(prompt, tokens)[0]
        theirs_ids = llama.token_ids(gguf, prompt)
        same_ids += theirs_ids == ours_ids
        if theirs_ids is not None and theirs_ids != ours_ids:
            print(f"  ids differ for {prompt!r}: ours {ours_ids}, llama.cpp {theirs_ids}")
        ours = engine.generate(prompt, config)[0].text
        theirs = llama.greedy(gguf, prompt, tokens)
        cut = min([theirs.find(t) for t in specials if t and t in theirs] or [len(theirs)])
        same += ours == theirs
        same_to_special += ours == theirs[:cut]
        if ours != theirs[:cut]:
            at = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None
            )
            at = min(len(ours), len(theirs)) if at is None else at
            print(f"  differs for {prompt!r} at char {at}: ours {ours[at:at + 30]!r}, "
                  f"llama.cpp {theirs[at:at + 30]!r}")  # fmt: skip
    return same_ids, same, same_to_special


def our_step_ms(engine: Any, gen: int, int8: bool) -> float:
    """Milliseconds a one-token step of ours, ``gen`` steps from an empty cache (llama-bench's
    ``tg`` window), on the path ``Decoder.steps``' decode takes."""
    import torch

    lean = engine.decoder.lean
    ids = torch.randint(0, engine.vocab_size, (gen,)).tolist()
    with torch.inference_mode():
        cache = lean.new_cache(1, gen)
        started = time.perf_counter()
        for token in ids:
            lean.step(torch.tensor([[token]]), cache, int8=int8).float()
        return (time.perf_counter() - started) * 1000 / gen


def our_prompt_ms(engine: Any, prompt: int) -> float:
    """Milliseconds a token of a ``prompt``-token prefill as the engine runs one (no cache)."""
    import torch

    ids = torch.randint(0, engine.vocab_size, (prompt,)).tolist()
    engine.prompt_cache.clear()
    with torch.inference_mode():
        started = time.perf_counter()
        engine.decoder.steps(ids, 1, 1).prefill()
        return (time.perf_counter() - started) * 1000 / prompt


def speed(llama: LlamaCpp, checkpoint: Path, ggufs: dict[str, Path], args: Any) -> None:
    """llama-bench against our decoder at each ``--threads``, alternating rounds; medians."""
    from codeparrot.generation import Engine
    from codeparrot.generation.threads import intra_op_threads

    engines = {q: Engine.load(checkpoint, quantize=q) for q in ("int8", "none")}
    prompt = f"prompt ({'bf16' if engines['none'].bf16_prefill else 'fp32'}) vs F32 pp"
    head = " (bf16 head)" if engines["none"].decoder.lean.lm_head_bf16 is not None else ""
    for threads in args.threads:
        pairs = {  # what: (ours, theirs)
            "int8 step vs Q8_0 tg": (
                lambda: our_step_ms(engines["int8"], args.gen, True),
                lambda t=threads: llama.speed(ggufs["q8_0"], t, 0, args.gen, args.reps),
            ),
            f"fp32 step{head} vs F32 tg": (
                lambda: our_step_ms(engines["none"], args.gen, False),
                lambda t=threads: llama.speed(ggufs["f32"], t, 0, args.gen, args.reps),
            ),
            prompt: (
                lambda: our_prompt_ms(engines["none"], args.prompt),
                lambda t=threads: llama.speed(ggufs["f32"], t, args.prompt, 0, args.reps),
            ),
        }
        for what, (ours, theirs) in pairs.items():
            if what.split()[0] not in args.measure:
                continue
            with intra_op_threads(threads):
                ours()  # warm: the first call pays for allocations
            mine, their = [], []
            for _ in range(args.rounds):
                their.append(theirs())
                with intra_op_threads(threads):
                    mine.append(statistics.median(ours() for _ in range(args.reps)))
            report(what, statistics.median(mine), statistics.median(their), threads)


def report(what: str, ours: float, theirs: float, threads: int) -> None:
    if "step" in what:
        unit, rates = "ms/token", ""
    else:
        unit = "ms/prompt token"
        rates = f" (tokens/s: ours {1000 / ours:,.0f}, llama.cpp {1000 / theirs:,.0f})"
    print(
        f"  {what}: ours {ours:.3f} {unit}, llama.cpp {theirs:.3f}{rates}; ratio "
        f"(llama.cpp/ours) {theirs / ours:.2f}x  [{threads} thread(s), {load_note()}]"
    )


def big_checkpoint(tokenizer_from: Path, out: Path) -> Path:
    """A random GPT-2 shaped like bigcode/tiny_starcoder_py, with ``tokenizer_from``'s
    tokenizer (its vocabulary padded to the model's 49,152 rows)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    eos = json.loads((tokenizer_from / "config.json").read_text())["eos_token_id"]
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=49152, n_positions=8192, n_embd=768, n_layer=20, n_head=12, n_inner=3072,
        bos_token_id=eos, eos_token_id=eos,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_from / name).is_file():
            shutil.copy(tokenizer_from / name, out / name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, help="llama.cpp's build folder (with bin/)")
    ap.add_argument("--checkpoint", type=Path, required=True, help="a GPT-2 or Qwen3 checkpoint")
    ap.add_argument("--tokens", type=int, default=32, help="greedy tokens per prompt")
    ap.add_argument("--threads", type=int, nargs="+", default=[2], help="each side's threads")
    ap.add_argument("--gen", type=int, default=64, help="one-token steps per timing")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per timing")
    ap.add_argument("--reps", type=int, default=3, help="timings per round and side")
    ap.add_argument(
        "--measure",
        nargs="+",
        choices=MEASURES,
        default=list(MEASURES),
        help="speed: int8 steps against Q8_0, fp32 steps against F32, prompts against F32",
    )
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="agreement: greedy text; speed: the checkpoint's; big: the tiny_starcoder_py shape",
    )
    args = ap.parse_args()
    from codeparrot.generation.waits import prefer_passive_waits

    prefer_passive_waits()  # as serve and lsp do (before torch is imported)
    llama = LlamaCpp(args.llama_cpp) if args.llama_cpp else None
    if llama is None or llama.missing():
        why = "no --llama-cpp" if llama is None else f"{', '.join(llama.missing())} not built"
        print(f"skipped: this bench needs a llama.cpp build ({why})")
        return
    waits = os.environ.get("OMP_WAIT_POLICY", "default")
    print(f"llama.cpp {llama.version()}; CPU {lscpu_name()}; OpenMP waits {waits}; {load_note()}")
    with tempfile.TemporaryDirectory() as tmp:
        ggufs = export(args.checkpoint, Path(tmp) / "gguf")
        if "agreement" in args.parts:
            agreement(llama, args.checkpoint, ggufs, args.tokens)
        if "speed" in args.parts:
            print(f"speed, {args.checkpoint.name}:")
            speed(llama, args.checkpoint, ggufs, args)
        if "big" in args.parts:
            big = big_checkpoint(args.checkpoint, Path(tmp) / "big")
            print("speed, random GPT-2 shaped like tiny_starcoder_py:")
            speed(llama, big, export(big, Path(tmp) / "big-gguf"), args)


if __name__ == "__main__":
    main()
