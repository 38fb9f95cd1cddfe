"""Thread counts of prompts and one-token steps: measured at load, kept when they pay."""

from __future__ import annotations

import pytest
import torch

from codeparrot.generation import Completion, Engine, GenerationConfig
from codeparrot.generation import threads as th


@pytest.fixture()
def engine(tiny_checkpoint) -> Engine:
    return Engine.load(tiny_checkpoint)


def _fake_steps(monkeypatch, ms: dict[int, float]) -> list[int]:
    asked: list[int] = []

    def fake(engine, threads):
        asked.append(threads)
        return ms[threads]

    monkeypatch.setattr(th, "time_steps", fake)
    return asked


def test_a_small_model_keeps_one_thread_without_timing_more(engine, monkeypatch):
    asked = _fake_steps(monkeypatch, {1: 3.0, 4: 1.0})
    choice = th.tune_decode_threads(engine, cores=4)
    assert asked == [1]  # fast on one thread: the second measurement is skipped
    assert (engine.decode_threads, engine.prompt_threads) == (1, 4)
    assert choice.many_ms is None and "3.0 ms a step" in choice.describe()


def test_a_model_of_real_size_decodes_on_every_core_when_that_pays(engine, monkeypatch):
    _fake_steps(monkeypatch, {1: 27.8, 2: 18.0})
    choice = th.tune_decode_threads(engine, cores=2)
    assert engine.decode_threads == 2 and choice.threads == 2
    assert "27.8 ms a step on 1, 18.0 ms on 2" in choice.describe()


def test_a_small_gain_leaves_the_editor_its_core(engine, monkeypatch):
    _fake_steps(monkeypatch, {1: 20.0, 2: 18.5})  # 1.08x: not worth a core
    assert th.tune_decode_threads(engine, cores=2).threads == 1
    _fake_steps(monkeypatch, {1: 20.0})
    assert th.tune_decode_threads(engine, cores=1).threads == 1  # nothing to compare


def test_the_real_probe_times_steps_and_leaves_no_prompt_behind(engine):
    before = torch.get_num_threads()
    choice = th.tune_decode_threads(engine, cores=2)
    assert choice.one_ms > 0 and choice.threads in (1, 2)
    assert torch.get_num_threads() == before  # the caller's setting is restored
    assert engine.prompt_cache.lookup([7, 38, 69])[0] is None
    config = GenerationConfig(max_new_tokens=8, temperature=0.0)
    tuned = engine.generate("def add(a, b):", config)[0].text
    engine.decode_threads, engine.prompt_threads = 1, None
    assert engine.generate("def add(a, b):", config)[0].text == tuned


def test_the_prompt_probe_measures_a_speed_and_leaves_no_prompt_behind(engine):
    before = torch.get_num_threads()
    ms = th.time_prompt(engine, threads=1)
    assert 0 < ms < 1000  # milliseconds a token of the tiny model, whatever the machine
    assert torch.get_num_threads() == before
    assert not engine.prompt_cache._table  # the probe's prompts are not kept


def _call(step_ms: float, new_tokens: int = 16, prompt_s: float = 0.05) -> Completion:
    """A finished call whose steps took ``step_ms`` each."""
    seconds = prompt_s + step_ms * new_tokens / 1000
    return Completion("x", "length", 40, new_tokens, seconds, prompt_seconds=prompt_s)


def test_live_tuning_keeps_one_thread_for_a_small_model_without_timing_more(engine):
    tuning = th.LiveTuning(engine, cores=4)
    assert (engine.decode_threads, engine.prompt_threads) == (1, 4)
    assert tuning.observe(_call(3.0, new_tokens=th.LIVE_MIN_STEPS - 1)) is None  # too short
    assert tuning.observe(_call(50.0)) is None  # the first timed call sets things up
    said = tuning.observe(_call(3.0))
    assert tuning.settled and engine.decode_threads == 1
    assert said == tuning.choice.describe() and "under 8 ms" in said
    assert tuning.observe(_call(30.0)) is None  # chosen once


def test_live_tuning_times_every_core_on_the_next_call_and_keeps_them_when_they_pay(engine):
    tuning = th.LiveTuning(engine, cores=2)
    tuning.observe(_call(40.0))
    assert tuning.observe(_call(27.8)) is None
    assert engine.decode_threads == 2 and not tuning.settled  # the next call runs on both
    said = tuning.observe(_call(18.0))
    assert engine.decode_threads == 2 and "27.8 ms a step on 1, 18.0 ms on 2" in said


def test_live_tuning_starts_a_large_model_on_every_core(engine, monkeypatch):
    monkeypatch.setattr(th, "LARGE_MODEL_PARAMETERS", 1)
    tuning = th.LiveTuning(engine, cores=2)
    assert engine.decode_threads == 2
    tuning.observe(_call(40.0))
    assert tuning.observe(_call(18.0)) is None and engine.decode_threads == 1
    said = tuning.observe(_call(27.8))
    assert engine.decode_threads == 2 and "27.8 ms a step on 1, 18.0 ms on 2" in said


def test_live_tuning_leaves_the_editor_its_core_for_a_small_gain(engine):
    tuning = th.LiveTuning(engine, cores=2)
    for ms in (40.0, 20.0, 18.5):  # 1.08x
        tuning.observe(_call(ms))
    assert tuning.settled and engine.decode_threads == 1
    single = th.LiveTuning(engine, cores=1)
    for ms in (40.0, 20.0):
        single.observe(_call(ms))
    assert single.choice.threads == 1 and single.choice.many_ms is None


def test_a_completion_says_how_long_its_prompt_took(engine):
    config = GenerationConfig(max_new_tokens=8, temperature=0.0, stop_at_eos=False)
    (done,) = engine.generate("def add(a, b):\n    return a + b\n" * 4, config)
    assert 0 < done.prompt_seconds < done.seconds
    assert done.new_tokens == 8


def _fake_prompts(monkeypatch, ms: dict[int, float]) -> list[int]:
    asked: list[int] = []

    def fake(engine, threads=None):
        asked.append(threads)
        return ms[threads]

    monkeypatch.setattr(th, "time_prompt", fake)
    return asked


def test_a_small_model_reads_prompts_on_one_thread_where_that_is_faster(engine, monkeypatch):
    asked = _fake_prompts(monkeypatch, {2: 0.069, 1: 0.047})
    choice = th.choose_prompt_threads(engine, cores=2)
    assert sorted(asked) == [1, 2]
    assert engine.prompt_threads == 1 and choice.ms == 0.047
    assert "prompts on 1 thread(s)" in choice.describe()


def test_prompts_keep_every_core_only_when_that_pays(engine, monkeypatch):
    _fake_prompts(monkeypatch, {2: 0.03, 1: 0.05})
    assert th.choose_prompt_threads(engine, cores=2).threads == 2
    assert engine.prompt_threads == 2
    _fake_prompts(monkeypatch, {2: 0.045, 1: 0.05})  # 1.11x: not worth a second core
    assert th.choose_prompt_threads(engine, cores=2).threads == 1


def test_a_model_of_real_size_reads_prompts_on_every_core_without_timing_one(engine, monkeypatch):
    monkeypatch.setattr(th, "LARGE_MODEL_PARAMETERS", 1)
    asked = _fake_prompts(monkeypatch, {4: 0.5})
    choice = th.choose_prompt_threads(engine, cores=4)
    assert asked == [4] and choice.threads == 4 and engine.prompt_threads == 4
