"""``Engine.stream_ids``: a prompt given as token ids completes as its text does unhealed."""

from __future__ import annotations

import pytest

from codeparrot.errors import ConfigError
from codeparrot.generation import Engine, GenerationConfig, StreamEvent


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:
    return Engine.load(tiny_checkpoint, device="cpu")


def test_ids_stream_what_their_text_streams(engine) -> None:
    prompt = "def add(a, b):\n    return"
    config = GenerationConfig(n=2, seed=1, temperature=0.8, max_new_tokens=10, heal=False)
    ids, _ = engine.encode_prompt(prompt, config.max_new_tokens)
    by_text = list(engine.stream(prompt, config))
    by_ids = list(engine.stream_ids(ids, config))
    assert all(isinstance(e, StreamEvent) for e in by_ids)
    assert [(e.index, e.delta) for e in by_ids] == [(e.index, e.delta) for e in by_text]
    assert [e.completion.text for e in by_ids if e.done] == [
        e.completion.text for e in by_text if e.done
    ]


def test_a_long_id_prompt_keeps_its_end(engine) -> None:
    config = GenerationConfig(max_new_tokens=4, seed=0)
    ids = [5] * (engine.context_length + 10)
    [done] = [e.completion for e in engine.stream_ids(ids, config) if e.done]
    assert done.prompt_truncated and done.prompt_tokens == engine.context_length - 4


@pytest.mark.parametrize("ids", [[], [1, -1], [1, 10**9], ["a"], [True]])
def test_bad_ids_are_refused_naming_the_range(engine, ids) -> None:
    with pytest.raises(ConfigError, match="token ids"):
        engine.stream_ids(ids, GenerationConfig())
