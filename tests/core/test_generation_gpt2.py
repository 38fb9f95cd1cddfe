"""The engine on a real (tiny, random) GPT-2 checkpoint: the lean decode path against
``transformers``, the prompt cache, determinism, concurrency and bad checkpoints."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.gpt2 import GPT2Decoder

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:
    return Engine.load(tiny_checkpoint, dtype="float32", lean_load=False)


def test_lean_forward_matches_transformers(engine):
    model, decoder = engine.model, engine.decoder.lean
    assert isinstance(decoder, GPT2Decoder)
    ids = torch.tensor([engine.tokenizer(PROMPT * 3)["input_ids"]])  # (1, T)
    T = ids.size(1)
    with torch.inference_mode():
        reference = model(ids).logits  # (1, T, V)
        whole = decoder.new_cache(1, T + 4)
        assert torch.allclose(decoder.forward(ids, whole), reference[:, -1], atol=1e-4)
        # a cached start, then a chunk of 7 positions, then one token at a time
        split = decoder.new_cache(1, T + 4)
        decoder.forward(ids[:, : T - 10], split)
        assert torch.allclose(
            decoder.forward(ids[:, T - 10 : T - 3], split), reference[:, T - 4], atol=1e-4
        )
        for t in range(T - 3, T):
            assert torch.allclose(
                decoder.forward(ids[:, t : t + 1], split), reference[:, t], atol=1e-4
            )
        assert split.length == T
        # three rows sharing the prompt's keys/values, each with its own next tokens
        shared = decoder.new_cache(3, 2, prefix=whole.view(T))
        nexts = torch.tensor([[5], [17], [5]])
        rows = decoder.forward(nexts, shared)  # (3, V)
        for row, nxt in enumerate(nexts[:, 0].tolist()):
            alone = model(torch.cat([ids, torch.tensor([[nxt]])], dim=1)).logits[:, -1]
            assert torch.allclose(rows[row], alone[0], atol=1e-4)
        assert torch.equal(rows[0], rows[2])


def test_bf16_prefill_stays_close(engine):
    decoder = engine.decoder.lean
    ids = torch.tensor([engine.tokenizer(PROMPT * 3)["input_ids"]])
    with torch.inference_mode():
        exact = decoder.forward(ids, decoder.new_cache(1, ids.size(1)))
        approx = decoder.forward(ids, decoder.new_cache(1, ids.size(1)), bf16=True)
    assert approx.dtype == torch.float32
    assert not torch.equal(approx, exact)  # bf16 products ran (they round)
    spread = exact.amax() - exact.amin()
    assert (approx - exact).abs().amax() < 0.02 * spread


def test_greedy_matches_transformers_generate(engine):
    config = GenerationConfig(temperature=0, max_new_tokens=24, stop_at_eos=False, heal=False)
    (ours,) = engine.generate(PROMPT, config)
    ids = torch.tensor([engine.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    with torch.inference_mode():
        out = engine.model.generate(
            ids, do_sample=False, max_new_tokens=24, min_new_tokens=24, pad_token_id=0
        )
    expected = engine.tokenizer.decode(out[0, ids.size(1) :], skip_special_tokens=False)
    assert ours.text == expected.rstrip("\ufffd")
    assert ours.new_tokens == 24 and ours.finish_reason == "length"


def test_transformers_fallback_gives_the_same_text(tiny_checkpoint, engine):
    slow = Engine(engine.model, engine.tokenizer, lean_gpt2=False)
    assert slow.decoder.lean is None
    for config in (
        GenerationConfig(temperature=0, max_new_tokens=16, stop_at_eos=False),
        GenerationConfig(n=3, seed=5, temperature=0.7, max_new_tokens=16, stop=("\n",)),
    ):
        assert [c.text for c in slow.generate(PROMPT, config)] == [
            c.text for c in engine.generate(PROMPT, config)
        ]


def test_seeded_sampling_is_reproducible_and_seeds_differ(engine):
    config = GenerationConfig(n=4, seed=11, temperature=1.0, max_new_tokens=16, stop_at_eos=False)
    first = [c.text for c in engine.generate(PROMPT, config)]
    assert [c.text for c in engine.generate(PROMPT, config)] == first
    other = [c.text for c in engine.generate(PROMPT, config.replace(seed=12))]
    assert other != first
    unseeded = engine.generate(PROMPT, config.replace(seed=None))
    assert unseeded[0].seed is not None  # recorded, so the run can be repeated
    again = engine.generate(PROMPT, config.replace(seed=unseeded[0].seed))
    assert [c.text for c in again] == [c.text for c in unseeded]


def test_n_candidates_come_back_in_order(engine):
    """Candidate i of ``generate`` is the stream's candidate i, whichever finished first
    (a stop string ends them at different steps)."""
    config = GenerationConfig(n=5, seed=1, temperature=1.0, max_new_tokens=8, stop=("\n",))
    out = engine.generate(PROMPT, config)
    streamed = {e.index: e.completion.text for e in engine.stream(PROMPT, config) if e.done}
    assert len(out) == 5 and len({c.text for c in out}) > 1
    assert [c.text for c in out] == [streamed[i] for i in range(5)]


def test_a_growing_prompt_reuses_the_cached_start(tiny_checkpoint):
    engine = Engine.load(tiny_checkpoint, dtype="float32")
    engine.reuse_prompt_starts = True  # the editor profile's (see test_profiles)
    config = GenerationConfig(temperature=0, max_new_tokens=12, stop_at_eos=False)
    (cold,) = engine.generate(PROMPT, config)
    assert cold.prompt_cached_tokens == 0
    (warm,) = engine.generate(PROMPT, config)
    # every position the model reads, and the logits after them (the same prompt again;
    # the healed last token is not read)
    assert warm.prompt_cached_tokens == warm.prompt_tokens - 1
    assert warm.text == cold.text
    longer = PROMPT + "    return fibonacci(n - 1)"
    (grown,) = engine.generate(longer, config)
    assert grown.prompt_cached_tokens >= cold.prompt_tokens - 3
    engine.prompt_cache.clear()
    (fresh,) = engine.generate(longer, config)
    assert fresh.prompt_cached_tokens == 0 and fresh.text == grown.text


def test_concurrent_callers_get_what_sequential_calls_get(tiny_checkpoint):
    engine = Engine.load(tiny_checkpoint, dtype="float32")
    jobs = [
        (PROMPT, GenerationConfig(n=3, seed=s, temperature=0.8, max_new_tokens=20, stop=("\n",)))
        for s in range(3)
    ] + [
        ("import os\n", GenerationConfig(temperature=0, max_new_tokens=20, stop_at_eos=False)),
        ("class A:\n", GenerationConfig(n=2, seed=9, temperature=1.0, top_k=20, max_new_tokens=20)),
    ]
    sequential = [[c.text for c in engine.generate(p, g)] for p, g in jobs]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for _ in range(2):
            futures = [pool.submit(engine.generate, p, g) for p, g in jobs]
            assert [[c.text for c in f.result(timeout=120)] for f in futures] == sequential


def test_long_prompts_never_exceed_the_positions(engine):
    prompt = PROMPT * 80  # far over the 256 positions
    for new in (1, 40, 200):
        (c,) = engine.generate(
            prompt, GenerationConfig(temperature=0, max_new_tokens=new, stop_at_eos=False)
        )
        assert c.prompt_truncated
        assert c.prompt_tokens + c.new_tokens <= engine.context_length
        assert c.new_tokens == new


def test_missing_or_incompatible_checkpoints_are_clear_errors(tmp_path, tiny_checkpoint):
    with pytest.raises(CheckpointError, match="no such directory"):
        Engine.load(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match=r"config\.json"):
        Engine.load(tmp_path)
    broken = tmp_path / "no-weights"
    shutil.copytree(tiny_checkpoint, broken)
    for weights in broken.glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(CheckpointError, match="not a loadable causal LM"):
        Engine.load(broken)
    small = tmp_path / "small-vocab"
    shutil.copytree(tiny_checkpoint, small)
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config.from_pretrained(small)
    config.vocab_size = 100
    GPT2LMHeadModel(config).save_pretrained(small)
    with pytest.raises(CheckpointError, match="tokenizer has"):
        Engine.load(small)
    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_checkpoint, encoder)
    data = json.loads((encoder / "config.json").read_text())
    data.update(model_type="bert", architectures=["BertModel"])
    (encoder / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="do not fit a bert causal LM"):
        Engine.load(encoder)
    with pytest.raises(ConfigError, match="dtype"):
        Engine.load(tiny_checkpoint, dtype="int3")


def test_int8_steps_stay_close_and_prompts_keep_full_precision(engine, monkeypatch):
    from codeparrot.generation import gpt2

    # prompts on the full-precision weights, whatever the timing probe would answer on a
    # loaded machine (it decides whether prompts read the int8 copies)
    monkeypatch.setattr(gpt2, "int8_prompts_faster", lambda *args: False)
    quantized = Engine(engine.model, engine.tokenizer, quantize="int8")  # same weights
    exact_dec, int8_dec = engine.decoder.lean, quantized.decoder.lean
    assert exact_dec.int8 is None and int8_dec.int8 is not None  # engines do not share it
    ids = torch.tensor([engine.tokenizer(PROMPT * 3)["input_ids"]])
    T = ids.size(1)
    with torch.inference_mode():
        a, b = exact_dec.new_cache(2, T + 4), int8_dec.new_cache(2, T + 4)
        prompt = ids.expand(2, -1)
        # prompts run on the full-precision weights in both
        assert torch.equal(exact_dec.forward(prompt, a), int8_dec.forward(prompt, b, int8=True))
        for nxt in ([[5], [9]], [[17], [3]]):
            exact = exact_dec.forward(torch.tensor(nxt), a)
            approx = int8_dec.forward(torch.tensor(nxt), b, int8=True)
            spread = exact.amax(dim=-1) - exact.amin(dim=-1)
            error = (exact - approx).abs().amax(dim=-1)
            assert torch.all(error < 0.02 * spread), (error, spread)
            assert not torch.equal(exact, approx)  # the int8 weights were really used


def test_int8_generation_runs_end_to_end(tiny_checkpoint):
    engine = Engine.load(tiny_checkpoint, quantize="int8")
    assert engine.quantize == "int8"
    cfg = GenerationConfig(max_new_tokens=12, temperature=0.8, n=3, seed=1, stop_at_eos=False)
    first = engine.generate(PROMPT, cfg)
    assert [c.new_tokens for c in first] == [12, 12, 12]
    assert [c.text for c in engine.generate(PROMPT, cfg)] == [c.text for c in first]


def test_bad_quantize_settings_are_clear_errors(tiny_checkpoint, engine):
    with pytest.raises(ConfigError, match="quantize must be one of none, int8"):
        Engine.load(tiny_checkpoint, quantize="int4")
    with pytest.raises(ConfigError, match="needs the lean decode path"):
        Engine(engine.model, engine.tokenizer, lean_gpt2=False, quantize="int8")


def test_token_healing_backs_up_one_token_and_constrains_the_first(engine):
    prompt = PROMPT + "    ret"  # ends half-way through a word
    ids = engine.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    last, allowed = engine.healer.heal(ids)
    assert last == engine.tokenizer.decode(ids[-1:]) and prompt.endswith(last)
    texts = {i: engine.tokenizer.decode([i]) for i in range(engine.vocab_size)}
    special = set(engine.tokenizer.all_special_ids)
    starts = {i for i, t in texts.items() if t.startswith(last) and i not in special}
    shorter = {i for i, t in texts.items() if t and last.startswith(t) and len(t) < len(last)}
    assert set(allowed) == starts | (shorter - special)
    assert ids[-1] in allowed
    # greedy: the first token is the most likely *allowed* one after the shorter prompt,
    # and the returned text continues the prompt (the healed start is not repeated)
    with torch.inference_mode():
        logits = engine.model(torch.tensor([ids[:-1]])).logits[0, -1]
    first = max(allowed, key=lambda i: logits[i].item())
    config = GenerationConfig(temperature=0, max_new_tokens=6, stop_at_eos=False)
    (healed,) = engine.generate(prompt, config)
    assert healed.text.startswith(texts[first][len(last) :])
    assert healed.prompt_tokens == len(ids)
    # nothing to heal: a one-token prompt, or healing turned off
    assert engine.healer.heal(ids[:1]) is None
    (plain,) = engine.generate(prompt, config.replace(heal=False))
    assert plain.new_tokens == 6
    # unhealed, the first token is the greedy one after the whole prompt
    with torch.inference_mode():
        after_all = engine.model(torch.tensor([ids])).logits[0, -1].argmax().item()
    assert plain.text.startswith(texts[after_all]) and plain.text != healed.text


def test_healing_lets_the_usual_split_of_the_healed_text_through(engine, monkeypatch):
    """A prompt ending in a line's indentation ends on one whitespace token, but code
    splits that text differently (GPT-2: "\n   " + " return"). Healing allows a shorter
    start of the healed text too, and then makes the next tokens write the rest: every
    sample writes the healed text again before anything else, and the returned text is
    exactly what follows it."""
    texts = {i: engine.tokenizer.decode([i]) for i in range(engine.vocab_size)}
    vocab = set(texts.values())
    prompt = last = None
    for ending in ("\n        ", "\n    ", "        ", "    ", "\n  ", "  "):
        ids = engine.tokenizer(PROMPT + ending, add_special_tokens=False)["input_ids"]
        tail = texts[ids[-1]]
        if len(tail) > 1 and any(tail[:k] in vocab for k in range(1, len(tail))):
            prompt, last = PROMPT + ending, tail
            break
    assert prompt is not None, "the fixture's tokenizer has no multi-character whitespace token"
    written: dict[int, list[int]] = {}
    advance = engine._advance

    def recording(run, i, tok):
        written.setdefault(i, []).append(tok)
        return advance(run, i, tok)

    monkeypatch.setattr(engine, "_advance", recording)
    config = GenerationConfig(temperature=1.5, n=16, seed=3, max_new_tokens=8, stop_at_eos=False)
    completions = engine.generate(prompt, config)
    shorter_first = 0
    for i, c in enumerate(completions):
        whole = engine.tokenizer.decode(written[i])
        # (a sample may run out of new tokens while still writing it)
        assert whole.startswith(last) or last.startswith(whole), (last, whole)
        # (bytes of a character cut off by the last token are left out of the text)
        assert c.text.rstrip("\ufffd") == whole[len(last) :].rstrip("\ufffd")
        shorter_first += len(texts[written[i][0]]) < len(last)
    assert shorter_first > 0  # the shorter start was taken, and healed further


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["int8", "none"])
def test_compiled_steps_give_the_same_tokens_and_never_recompile_in_a_request(
    tiny_checkpoint, quantize, monkeypatch
):
    from torch._dynamo.utils import counters
    from torch.profiler import profile, record_function

    from codeparrot.generation import int8

    # the weight-only int8 kernel: the dynamic one's steps stay eager (test_int8_kernels)
    monkeypatch.setattr(int8, "measure_kernels", lambda m: {"dynamic": 2.0, "weight-only": 1.0})
    eager = Engine.load(tiny_checkpoint, quantize=quantize)
    compiled = Engine.load(tiny_checkpoint, quantize=quantize)
    greedy = GenerationConfig(max_new_tokens=12, temperature=0, stop_at_eos=False)
    want = eager.generate(PROMPT, greedy)[0].text
    thread = compiled.compile_steps()  # in the background; requests are served meanwhile
    assert compiled.generate(PROMPT, greedy)[0].text == want
    thread.join(timeout=600)
    assert compiled.steps_compiled.is_set() and compiled.compile_error is None

    graphs = counters["stats"]["unique_graphs"]
    with profile() as prof, record_function("the request"):
        text = compiled.generate(PROMPT + "\n", greedy)[0].text
    assert text == eager.generate(PROMPT + "\n", greedy)[0].text
    # every step after the prompt's runs the compiled graph (once, or once per piece where
    # dynamo splits it), and the request compiled nothing. The profiler records every
    # thread of the process: this request's thread is counted, not one another test left
    steps = greedy.max_new_tokens - 1
    calls = _graph_calls_of(prof, "the request")
    assert calls and len(calls) % steps == 0, [(e.name[:48], e.thread) for e in calls]
    assert counters["stats"]["unique_graphs"] == graphs
    # n > 1 is not what the compiled step serves: the eager one runs, nothing compiles
    sampled = GenerationConfig(n=3, max_new_tokens=8, temperature=0.8, seed=3)
    texts = [c.text for c in compiled.generate(PROMPT, sampled)]
    assert texts == [c.text for c in eager.generate(PROMPT, sampled)]
    # a call its guards do not cover (steps on 2 threads; it was compiled for the
    # engine's 1) runs eagerly: the same text, no compiled graph, no recompile
    threads = torch.get_num_threads()
    compiled.decode_threads = None  # the steps run with the caller's count
    torch.set_num_threads(2)
    try:
        with profile() as prof, record_function("the request"):
            assert compiled.generate(PROMPT, greedy)[0].text == want
    finally:
        torch.set_num_threads(threads)
    assert not _graph_calls_of(prof, "the request")
    assert counters["stats"]["unique_graphs"] == graphs


def _graph_calls_of(prof, label: str) -> list:
    """The compiled graphs' calls the profiler saw on the thread that ran ``label``."""
    threads = {e.thread for e in prof.events() if e.name == label}
    assert len(threads) == 1, threads
    return [e for e in prof.events() if "CompiledFxGraph" in e.name and e.thread in threads]


def test_a_failed_compile_leaves_the_eager_steps(tiny_checkpoint, monkeypatch):
    engine = Engine.load(tiny_checkpoint, quantize="int8")

    def broken(self):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(GPT2Decoder, "compile_steps", broken)
    engine.compile_steps().join(timeout=60)
    assert engine.steps_compiled.is_set() and "no C++ compiler" in str(engine.compile_error)
    greedy = GenerationConfig(max_new_tokens=6, temperature=0, stop_at_eos=False)
    assert engine.generate(PROMPT, greedy)[0].new_tokens == 6
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        engine.compile_steps(background=False)
    other = Engine(engine.model, engine.tokenizer, lean_gpt2=False)
    assert engine.can_compile_steps and not other.can_compile_steps
    with pytest.raises(ConfigError, match="need the lean decode path"):
        other.compile_steps()
