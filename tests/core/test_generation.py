"""Semantics of the engine, driven by a scripted language model.

The scripted model's next-token law depends only on the last token, so each test
writes the exact continuations it needs (a candidate that stops, one that never does,
a stop string split over tokens, a character split over tokens) and checks what a
caller sees: texts, finish reasons, streamed deltas, cancellation.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from codeparrot.errors import ConfigError
from codeparrot.generation import Engine, GenerationConfig, first_block

NEG = float("-inf")


class _Past:
    """A stand-in key/value cache that checks the engine's row and position bookkeeping."""

    def __init__(self, rows: int, length: int, n_positions: int) -> None:
        self.rows, self.length, self.n_positions = rows, length, n_positions

    def add(self, rows: int, length: int) -> None:
        assert rows == self.rows, f"batch of {rows} rows against a cache of {self.rows}"
        self.length += length
        assert self.length <= self.n_positions, "ran past the model's positions"

    def batch_repeat_interleave(self, n: int) -> None:
        self.rows *= n

    def batch_select_indices(self, rows: torch.Tensor) -> None:
        assert int(rows.max()) < self.rows
        self.rows = len(rows)


class ScriptedLM(torch.nn.Module):
    """``law[token]`` is the next-token distribution after ``token`` (token -> weight)."""

    def __init__(self, vocab_size: int, law: dict[int, dict[int, float]], n_positions: int = 64):
        super().__init__()
        self.config = SimpleNamespace(n_positions=n_positions, vocab_size=vocab_size)
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the engine a device
        table = torch.full((vocab_size, vocab_size), NEG)
        for token, nexts in law.items():
            for nxt, weight in nexts.items():
                table[token, nxt] = float(torch.tensor(weight).log())
        self.table = table
        self.calls = 0

    def forward(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=0):
        self.calls += 1
        rows, length = input_ids.shape
        if past_key_values is None:
            past_key_values = _Past(rows, 0, self.config.n_positions)
        past_key_values.add(rows, length)
        logits = self.table[input_ids[:, -1]][:, None, :]  # (B, 1, V)
        return SimpleNamespace(logits=logits, past_key_values=past_key_values)


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def token(tokenizer, text: str) -> int:
    """The id of a text that is a single token (a byte symbol for a non-ASCII byte)."""
    if text in tokenizer.get_vocab():
        return tokenizer.convert_tokens_to_ids(text)
    (only,) = tokenizer(text, add_special_tokens=False)["input_ids"]
    return only


def scripted(tokenizer, law: dict[str, dict[str, float]], n_positions: int = 64) -> Engine:
    ids = {
        t: tokenizer.eos_token_id if t == "<eos>" else token(tokenizer, t)
        for t in {*law, *(n for nexts in law.values() for n in nexts)}
    }
    table = {ids[t]: {ids[n]: w for n, w in nexts.items()} for t, nexts in law.items()}
    model = ScriptedLM(len(tokenizer), table, n_positions)
    return Engine(model, tokenizer)


def collect(engine: Engine, prompt: str, config: GenerationConfig, cancel=None):
    """Deltas per candidate and the final completions, from the stream."""
    deltas: dict[int, list[str]] = {}
    done = {}
    for event in engine.stream(prompt, config, cancel):
        deltas.setdefault(event.index, []).append(event.delta)
        if event.completion is not None:
            assert event.index not in done, "a candidate finished twice"
            done[event.index] = event.completion
    return deltas, done


def test_each_candidate_stops_on_its_own_and_the_others_go_on(tokenizer):
    # after the prompt "x": "a" then a newline (stops), or "b" forever (never stops)
    engine = scripted(
        tokenizer, {"x": {"a": 1, "b": 1}, "a": {"\n": 1}, "\n": {"a": 1}, "b": {"b": 1}}
    )
    config = GenerationConfig(
        n=16, seed=3, temperature=1.0, top_p=1.0, max_new_tokens=9, stop=("\n",)
    )
    out = engine.generate("x", config)
    assert len(out) == 16
    stopped = [c for c in out if c.finish_reason == "stop"]
    ran = [c for c in out if c.finish_reason == "length"]
    assert stopped and ran, "the seed should give both kinds"
    assert all(c.text == "a" and c.new_tokens == 2 for c in stopped)  # stop text trimmed
    # never empty merely because no stop string appeared
    assert all(c.text == "b" * 9 and c.new_tokens == 9 for c in ran)
    assert all(c.prompt_tokens == 1 and c.seed == 3 for c in out)


def test_end_of_text_ends_a_candidate_unless_told_otherwise(tokenizer):
    engine = scripted(tokenizer, {"e": {"<eos>": 1}, "<eos>": {"<eos>": 1}})
    (c,) = engine.generate("e", GenerationConfig(max_new_tokens=5, temperature=0))
    assert (c.text, c.finish_reason, c.new_tokens) == ("", "eos", 0)
    (c,) = engine.generate(
        "e", GenerationConfig(max_new_tokens=3, temperature=0, stop_at_eos=False)
    )
    assert c.finish_reason == "length"
    assert c.text == tokenizer.eos_token * 3


def test_a_stop_string_split_over_tokens_is_never_streamed(tokenizer):
    # "q" -> "\n" "d" "e" "f": the stop "\ndef" arrives in four tokens
    law = {"q": {"\n": 1}, "\n": {"d": 1}, "d": {"e": 1}, "e": {"f": 1}, "f": {"f": 1}}
    engine = scripted(tokenizer, law)
    config = GenerationConfig(temperature=0, max_new_tokens=20, stop=("\ndef", "\nclass"))
    deltas, done = collect(engine, "q", config)
    assert done[0].text == "" and done[0].finish_reason == "stop"
    assert "".join(deltas[0]) == ""


def test_held_back_text_is_released_when_it_cannot_become_a_stop(tokenizer):
    # "r" -> "\n" "d" then "x" forever: "\nd" looked like the start of "\ndef"
    law = {"r": {"\n": 1}, "\n": {"d": 1}, "d": {"x": 1}, "x": {"x": 1}}
    engine = scripted(tokenizer, law)
    config = GenerationConfig(temperature=0, max_new_tokens=6, stop=("\ndef",))
    deltas, done = collect(engine, "r", config)
    assert done[0].text == "\ndxxxx" and done[0].finish_reason == "length"
    assert "".join(deltas[0]) == done[0].text
    # nothing was shown while "\n" and "\nd" could still have become "\ndef"
    assert deltas[0][0] == "\ndx"


def test_streamed_deltas_of_every_candidate_add_up_to_its_text(tokenizer):
    law = {
        "x": {"a": 1, "b": 1, "\n": 1},
        "a": {"\n": 1, "b": 1},
        "b": {"a": 1, "b": 1},
        "\n": {"a": 1},
    }
    engine = scripted(tokenizer, law)
    config = GenerationConfig(
        n=6, seed=0, temperature=1.0, top_p=1.0, max_new_tokens=12, stop=("\na",)
    )
    deltas, done = collect(engine, "x", config)
    assert sorted(done) == list(range(6))
    for i, c in done.items():
        assert "".join(deltas[i]) == c.text
        assert "\na" not in c.text
        assert not any("\na" in d for d in deltas[i])


def test_characters_split_over_tokens_stream_whole(tokenizer):
    # "é" is two bytes; as two byte tokens, its first half alone must not be shown
    first, second = token(tokenizer, "Ã"), token(tokenizer, "©")  # byte symbols of 0xC3 0xA9
    assert tokenizer.decode([first, second]) == "é"
    model = ScriptedLM(
        len(tokenizer), {token(tokenizer, "u"): {first: 1}, first: {second: 1}, second: {first: 1}}
    )
    engine = Engine(model, tokenizer)
    deltas, done = collect(engine, "u", GenerationConfig(temperature=0, max_new_tokens=5))
    assert done[0].text == "éé"  # the fifth token, half a character, is dropped
    assert not any("\ufffd" in d for d in deltas[0])
    assert "".join(deltas[0]) == "éé"


def test_cancel_from_another_thread_stops_within_one_token(tokenizer):
    engine = scripted(tokenizer, {"x": {"b": 1}, "b": {"b": 1}}, n_positions=5000)
    cancel = threading.Event()
    seen = 0
    final = None
    for event in engine.stream("x", GenerationConfig(temperature=0, max_new_tokens=4000), cancel):
        if event.completion is not None:
            final = event.completion
            break
        seen += 1
        if seen == 3:
            setter = threading.Thread(target=cancel.set)
            setter.start()
            setter.join()
    assert final is not None and final.finish_reason == "cancelled"
    assert final.new_tokens <= seen + 1
    assert final.text == "b" * final.new_tokens


def test_generate_in_a_worker_returns_soon_after_cancel(tokenizer):
    engine = scripted(tokenizer, {"x": {"b": 1}, "b": {"b": 1}}, n_positions=5000)
    cancel, started = threading.Event(), threading.Event()
    result = {}

    def work():
        for event in engine.stream(
            "x", GenerationConfig(n=3, temperature=0, max_new_tokens=4000), cancel
        ):
            started.set()
            if event.completion is not None:
                result[event.index] = event.completion

    worker = threading.Thread(target=work)
    worker.start()
    assert started.wait(60)
    cancel.set()
    worker.join(60)
    assert not worker.is_alive(), "generation did not stop after cancel"
    assert sorted(result) == [0, 1, 2]
    assert all(c.finish_reason == "cancelled" and c.new_tokens < 4000 for c in result.values())


def test_a_padded_vocabulary_never_yields_undecodable_ids(tokenizer):
    # the model has 64 more ids than the tokenizer and prefers one of them by far
    pad, x, b = len(tokenizer) + 5, token(tokenizer, "x"), token(tokenizer, "b")
    model = ScriptedLM(len(tokenizer) + 64, {x: {pad: 1e6, b: 1}, b: {pad: 1e6, b: 1}})
    engine = Engine(model, tokenizer)
    out = engine.generate("x", GenerationConfig(n=4, seed=0, temperature=1.0, max_new_tokens=5))
    assert [c.text for c in out] == ["bbbbb"] * 4


def test_prompts_longer_than_the_context_keep_their_end(tokenizer):
    engine = scripted(tokenizer, {"b": {"b": 1}}, n_positions=64)
    prompt = "".join(f"v{i} = {i}\n" for i in range(200)) + "b"
    config = GenerationConfig(temperature=0, max_new_tokens=10)
    (c,) = engine.generate(prompt, config)  # _Past asserts the positions are never exceeded
    assert c.prompt_truncated and c.prompt_tokens + c.new_tokens <= 64
    ids, truncated = engine.encode_prompt(prompt, 10)
    assert truncated and len(ids) == c.prompt_tokens
    assert prompt.endswith(tokenizer.decode(ids))
    # cut at a multiple of the stride: at most stride - 1 tokens under the budget
    full = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert ids == full[len(full) - len(ids) :]
    assert 54 - 16 < len(ids) <= 54
    assert engine.encode_prompt(prompt, 10, stride=1)[0] == full[-54:]


def test_short_prompts_are_not_truncated(tokenizer):
    engine = scripted(tokenizer, {"b": {"b": 1}})
    ids, truncated = engine.encode_prompt("a = b", 8)
    assert not truncated and tokenizer.decode(ids) == "a = b"
    assert engine.count_tokens("a = b") == len(ids)


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"n": 0}, "--n"),
        ({"n": 5000}, "--n"),
        ({"max_new_tokens": 0}, "--max-new-tokens"),
        ({"max_new_tokens": 10_000}, "--max-new-tokens"),
        ({"temperature": -1.0}, "--temperature"),
        ({"top_p": 0.0}, "--top-p"),
        ({"top_k": -2}, "--top-k"),
        ({"stop": ("",)}, "--stop"),
    ],
)
def test_out_of_range_settings_are_refused_naming_the_flag(changes, flag):
    with pytest.raises(ConfigError, match=flag):
        GenerationConfig(**changes)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        GenerationConfig(n=0, max_new_tokens=0)
    assert "--n" in str(info.value) and "--max-new-tokens" in str(info.value)


def test_empty_prompt_and_no_room_for_a_prompt_are_clear_errors(tokenizer):
    engine = scripted(tokenizer, {"b": {"b": 1}}, n_positions=64)
    with pytest.raises(ConfigError, match="empty"):
        engine.generate("", GenerationConfig())
    with pytest.raises(ConfigError, match="max-new-tokens 64"):
        engine.generate("b", GenerationConfig(max_new_tokens=64))
    assert engine.model.calls == 0  # refused before any work


def test_first_block_cuts_at_the_first_stop_sequence():
    text = "    return a + b\n\ndef other():\n    pass\n"
    assert first_block(text) == "    return a + b\n"
    assert first_block("    return 1") == "    return 1"
    assert first_block("x = 1\n# note\nif y:", ("\nif", "\n#")) == "x = 1"
