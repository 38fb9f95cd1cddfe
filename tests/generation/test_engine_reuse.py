"""A reused engine samples what a fresh one does: a long-running server's second
request of a prompt gets the completions its first got (and direct evaluation gets)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import torch

from codeparrot.generation import Engine, GenerationConfig

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family


def test_the_same_prompt_twice_through_one_engine_equals_a_fresh_engine(tmp_path) -> None:
    """With bf16 prefill (what ``dtype="auto"`` picks on a CPU with fast bf16), the first
    call prefills a long prompt in bf16; a repeat used to prefill its last position alone
    in float32 against those keys/values, which moved the logits and so the samples."""
    loaded = Engine.load(build_family("qwen2.5-coder", tmp_path / "m"), dtype="float32")
    with torch.no_grad():  # peaked logits: the precision's rounding shows in the samples
        for p in loaded.model.parameters():
            p.mul_(8.0 if p.dim() == 2 else 1.0)
    prompt = Path(textwrap.__file__).read_text()[:1500]

    def engine() -> Engine:
        return Engine(loaded.model, loaded.tokenizer, bf16_prefill=True)

    config = GenerationConfig(n=8, seed=3, temperature=1.0, max_new_tokens=48, stop_at_eos=False)
    assert len(engine().encode_prompt(prompt, 48)[0]) >= 64  # a bf16 prefill
    reused = engine()
    first = [c.text for c in reused.generate(prompt, config)]
    second = reused.generate(prompt, config)
    assert second[0].prompt_cached_tokens == second[0].prompt_tokens - 1  # from the cache
    fresh = [c.text for c in engine().generate(prompt, config)]
    assert first == fresh
    assert [c.text for c in second] == fresh


def test_a_prompt_gets_what_it_gets_alone_after_one_that_starts_the_same(tmp_path) -> None:
    """A server's requests come in any order: a prompt that starts as an earlier one used
    to prefill only its rest after the earlier one's keys/values (its last 20-odd tokens
    in float32, where alone the whole prompt is one bf16 pass), so served samples differed
    from direct ones. Only an engine that reuses prompt starts (the editor's) does that."""
    loaded = Engine.load(build_family("qwen2.5-coder", tmp_path / "m"), dtype="float32")
    with torch.no_grad():  # peaked logits: the precision's rounding shows in the samples
        for p in loaded.model.parameters():
            p.mul_(8.0 if p.dim() == 2 else 1.0)
    prompt = Path(textwrap.__file__).read_text()[:1500]
    earlier = prompt[:-80] + "\n# another ending of the same start\n"

    def engine(**kw) -> Engine:
        return Engine(loaded.model, loaded.tokenizer, bf16_prefill=True, **kw)

    config = GenerationConfig(n=8, seed=3, temperature=1.0, max_new_tokens=48, stop_at_eos=False)
    alone = [c.text for c in engine().generate(prompt, config)]
    served = engine()
    served.generate(earlier, config.replace(n=1))
    after = served.generate(prompt, config)
    assert [c.text for c in after] == alone
    assert after[0].prompt_cached_tokens == 0  # prefilled whole, as alone
    # the editor's engine reuses the start (latency while typing), its rest in float32
    typing = engine(reuse_prompt_starts=True)
    typing.generate(earlier, config.replace(n=1))
    grown = typing.generate(prompt, config)
    assert 0 < grown[0].prompt_cached_tokens < grown[0].prompt_tokens - 1
