"""The compiled one-token step (``Engine.compile_steps``) on the lean decoder's newer
families: a GPTBigCode (tiny_starcoder_py's layout) and a Llama (CodeLlama's, BOS and a
byte-fallback tokenizer). The compiled step must serve every step after the prompt and
write the eager step's greedy text, for two prompt lengths from one compile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.bigcode import GPTBigCodeDecoder
from codeparrot.generation.gpt2 import int8_supported
from codeparrot.generation.llama import LlamaDecoder

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family

PROMPT = "import os\n\n\ndef join(parts, sep):\n    out = []\n    for part in parts:\n"
LONGER = PROMPT + "        out.append(part)\n"
# the steps the editor runs: int8 where this torch has the kernel
QUANTIZE = "int8" if int8_supported() else "none"


def peaked(engine: Engine) -> Engine:
    """Scale a random model's matrices so its greedy choices do not hinge on the last bits
    (as tests/generation/test_lean_families.py does)."""
    with torch.no_grad():
        for p in engine.model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return engine


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "decoder"), [("tiny_starcoder_py", GPTBigCodeDecoder), ("codellama", LlamaDecoder)]
)
def test_compiled_steps_write_the_eager_text(tmp_path, monkeypatch, name, decoder):
    from torch.profiler import profile

    from codeparrot.generation import gpt2
    from codeparrot.generation.int8 import kernel_supported

    if QUANTIZE == "int8" and kernel_supported("weight-only"):
        # the kernel the compiled step serves (the dynamic one's steps stay eager), for both
        # engines alike: left to the timing probe, each may pick another
        monkeypatch.setattr(gpt2, "choose_kernel", lambda matrices, asked, what="": "weight-only")
        # and the same prompt products: on a loaded machine the second probe may answer
        # otherwise for the second engine, whose prompts then differ in their last bits
        monkeypatch.setattr(gpt2, "int8_prompts_faster", lambda *args: True)
    path = build_family(name, tmp_path / name)
    eager = peaked(Engine.load(path, dtype="float32", quantize=QUANTIZE))
    compiled = peaked(Engine.load(path, dtype="float32", quantize=QUANTIZE))
    assert isinstance(compiled.decoder.lean, decoder)
    greedy = GenerationConfig(temperature=0, max_new_tokens=12, stop_at_eos=False, heal=False)
    compiled.compile_steps(background=False)  # raises if inductor fails for this family
    assert compiled.steps_compiled.is_set() and compiled.compile_error is None
    for prompt in (PROMPT, LONGER):
        want = eager.generate(prompt, greedy)[0]
        with profile() as prof:
            got = compiled.generate(prompt, greedy)[0]
        assert got.text == want.text and got.new_tokens == want.new_tokens == 12, prompt
        graph_calls = [e for e in prof.events() if "CompiledFxGraph" in e.name]
        assert len(graph_calls) == greedy.max_new_tokens - 1  # every step after the prompt's
