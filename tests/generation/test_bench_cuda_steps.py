"""``bench/cuda_steps.py`` (the engine's device bench) dry-run on a CPU: a model that picks
a special token first still runs its fixed lengths, and transformers' side ends where ours
does, so that a device run of a barely trained checkpoint gives figures, not an error."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(
            "cuda_steps", ROOT / "bench" / "cuda_steps.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


def picks_a_special_token(source: Path, out: Path) -> Path:
    """``source`` with a special token its model picks first at every step."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<fim_suffix>"]})
    model = AutoModelForCausalLM.from_pretrained(source)
    model.resize_token_embeddings(len(tokenizer))
    with torch.no_grad():  # the last layer norm's output gets a constant part, which only
        model.transformer.ln_f.bias.fill_(1.0)  # the new token's row reads (a GPT-2)
        model.get_output_embeddings().weight[len(tokenizer) - 1] = 1.0
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_fixed_lengths_run_through_special_tokens(tiny_checkpoint, tmp_path):
    from codeparrot.generation import GenerationConfig

    bench = load_bench()
    checkpoint = picks_a_special_token(tiny_checkpoint, tmp_path / "model")
    engines = bench.load_engines(checkpoint, "cpu")
    fixed = GenerationConfig(max_new_tokens=5, temperature=0, stop_at_eos=False, heal=False)
    for engine in engines.values():
        (out,) = engine.generate("def add(a, b):\n", fixed)
        assert out.new_tokens == 5 and out.finish_reason == "length"
    ending = GenerationConfig(max_new_tokens=5, temperature=0, heal=False)
    assert engines["eager"].generate("def add(a, b):\n", ending)[0].new_tokens == 0  # as users
    out_file = tmp_path / "steps.json"
    argv = ["--checkpoint", str(checkpoint), "--device", "cpu", "--tokens", "4",
            "--samples", "2", "--new-tokens", "4", "--repeats", "1", "--json", str(out_file)]  # fmt: skip
    assert bench.main(argv) == 0
    result = json.loads(out_file.read_text())
    assert result["ms_per_token"]["eager"] > 0 and result["same_greedy_text"]
    fixed_sides = result["sampling"]["fixed length"]
    assert all(side["new_tokens_per_sample"] == 4 for side in fixed_sides.values())
    ending_sides = result["sampling"]["stop strings"]  # both end at the special token
    assert {side["new_tokens_per_sample"] for side in ending_sides.values()} <= {0, 1}


def test_the_engines_own_figures_are_kept_when_the_comparison_does_not_end(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """(a), the engine's ms a token, is written before (b) compiles transformers' generate:
    a device call whose time runs out in (b) still brings (a) back."""
    import pytest

    bench = load_bench()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("the caller's time limit")

    monkeypatch.setattr(bench, "sampling", killed)
    out_file = tmp_path / "steps.json"
    argv = ["--checkpoint", str(tiny_checkpoint), "--device", "cpu", "--tokens", "4",
            "--repeats", "1", "--json", str(out_file)]  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        bench.main(argv)
    result = json.loads(out_file.read_text())
    assert result["ms_per_token"]["captured"] > 0 and "sampling" not in result
    (line,) = bench.report(result)
    assert line.startswith("(a) ms/token, greedy 4 tokens: eager ")
