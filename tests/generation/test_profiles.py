"""``Engine.load(profile=...)``: what each profile prepares at load, and that the language
server and the playground load through theirs (one engine, tuned alike everywhere)."""

from __future__ import annotations

import pytest

from codeparrot.errors import ConfigError
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation import threads as th


@pytest.fixture(autouse=True)
def no_kept_speeds(monkeypatch) -> None:
    monkeypatch.setenv("CODEPARROT_SPEEDS_CACHE", "0")  # every figure measured here


def test_batch_is_the_plain_load(tiny_checkpoint) -> None:
    engine = Engine.load(tiny_checkpoint, device="cpu")
    assert engine.quantize == "none"
    assert engine.decode_threads == 1 and engine.prompt_threads is None
    assert engine.tuning is None and engine.prompt_ms_per_token is None


def test_only_the_editor_reuses_prompt_starts(tiny_checkpoint, monkeypatch) -> None:
    """`serve` and `eval generate` give a prompt what it gets alone, whatever ran before
    (greedy served = direct); the editor prefills only what typing added."""
    monkeypatch.setattr(th, "time_prompt", lambda engine, threads=None: 5.0)
    start = "def fibonacci(n):\n    if n < 2:\n        return n\n"
    config = GenerationConfig(temperature=0, max_new_tokens=8, stop_at_eos=False)
    cached = {}
    for profile in ("batch", "server", "editor"):
        engine = Engine.load(
            tiny_checkpoint, device="cpu", quantize="none", profile=profile, threads=1
        )
        engine.generate(start + "    x = 1\n", config)
        cached[profile] = engine.generate(start + "    return 2\n", config)[0].prompt_cached_tokens
    assert cached["batch"] == cached["server"] == 0
    assert cached["editor"] > 5


def test_an_unknown_profile_is_named(tiny_checkpoint) -> None:
    with pytest.raises(ConfigError, match="profile must be one of batch, editor, server"):
        Engine.load(tiny_checkpoint, profile="laptop")


def test_editor_times_prompts_and_lets_the_first_calls_choose_the_threads(
    tiny_checkpoint, monkeypatch
) -> None:
    monkeypatch.setattr(th, "cpu_cores", lambda: 2)
    monkeypatch.setattr(th, "time_prompt", lambda engine, threads=None: {1: 30.0, 2: 20.0}[threads])
    engine = Engine.load(tiny_checkpoint, device="cpu", profile="editor")
    assert engine.prompt_ms_per_token == 20.0
    assert isinstance(engine.tuning, th.LiveTuning) and not engine.tuning.settled
    assert engine.prompt_threads == 2  # every core reads prompts 1.5x faster
    from codeparrot.generation.gpt2 import int8_supported

    assert engine.quantize == ("int8" if int8_supported() else "none")  # quantize auto
    # the tuning acts on the engine the calls run on
    engine.decode_threads = 1
    assert engine.tuning.engine.decode_threads == 1


def test_editor_with_fixed_threads_measures_no_steps(tiny_checkpoint, monkeypatch) -> None:
    monkeypatch.setattr(th, "time_prompt", lambda engine, threads=None: 5.0)
    monkeypatch.setattr(th, "tune_decode_threads", pytest.fail)
    engine = Engine.load(tiny_checkpoint, device="cpu", profile="editor", threads=1)
    assert engine.decode_threads == engine.prompt_threads == 1
    assert engine.tuning is None and engine.prompt_ms_per_token == 5.0


def test_server_measures_the_steps_threads_at_load(tiny_checkpoint, monkeypatch) -> None:
    measured = []

    def tune(decoder, cores=None):
        measured.append(decoder)
        decoder.decode_threads, decoder.prompt_threads = 1, 2
        return th.ThreadChoice(1, 3.0, None, 2)

    monkeypatch.setattr(th, "tune_decode_threads", tune)
    monkeypatch.setattr(th, "cpu_cores", lambda: 2)
    monkeypatch.setattr(th, "time_prompt", lambda engine, threads=None: {1: 0.05, 2: 0.07}[threads])
    engine = Engine.load(tiny_checkpoint, device="cpu", profile="server")
    assert measured == [engine.decoder]
    # a small model whose prompts read faster on one thread (waking the other costs more)
    assert (engine.decode_threads, engine.prompt_threads) == (1, 1)
    assert engine.tuning is None and engine.prompt_ms_per_token is None
    config = GenerationConfig(max_new_tokens=4, seed=0)
    assert engine.generate("def f(", config)[0].new_tokens >= 1


def test_int8_that_does_not_apply_falls_back_except_in_a_batch(
    tiny_checkpoint, monkeypatch
) -> None:
    from codeparrot.generation.decoder import Decoder

    def refuse(self, rows_cache=None):
        raise ConfigError("quantize 'int8' needs the lean decode path: not here")

    monkeypatch.setattr(Decoder, "enable_int8", refuse)
    monkeypatch.setattr(
        th, "tune_decode_threads", lambda d, cores=None: th.ThreadChoice(1, 1, None, 1)
    )
    engine = Engine.load(tiny_checkpoint, device="cpu", quantize="int8", profile="server")
    assert engine.quantize == "none"
    with pytest.raises(ConfigError, match="lean decode path"):
        Engine.load(tiny_checkpoint, device="cpu", quantize="int8")


def test_the_language_server_loads_with_the_editor_profile(tiny_checkpoint, monkeypatch) -> None:
    from codeparrot.generation.config import FimSettings
    from codeparrot.lsp import server

    calls = []
    monkeypatch.setattr(Engine, "load", classmethod(lambda cls, path, **kw: calls.append(kw)))
    fim = FimSettings(fim_order="spm")
    server._load(tiny_checkpoint, None, 3, "auto", True, fim)
    assert calls == [
        {"device": None, "quantize": "auto", "profile": "editor", "threads": 3, "compile": True,
         "fim": fim}
    ]  # fmt: skip


def test_the_playground_loads_with_the_server_profile(tiny_checkpoint, monkeypatch) -> None:
    pytest.importorskip("gradio")
    from codeparrot.app.ui import EnginePool

    calls = []

    def load(cls, path, **kw):
        calls.append(kw)
        return object()

    monkeypatch.setattr(Engine, "load", classmethod(load))
    EnginePool((tiny_checkpoint,), device="cpu", compile=True).get(str(tiny_checkpoint))
    assert calls == [{"device": "cpu", "profile": "server", "compile": True}]


def test_serve_loads_with_the_server_profile(tiny_checkpoint, monkeypatch) -> None:
    """`codeparrot serve` is prepared as the playground is (and the editor's engine)."""
    from codeparrot.serve.config import ServeConfig
    from codeparrot.serve.server import load_engine

    calls = []
    monkeypatch.setattr(Engine, "load", classmethod(lambda cls, path, **kw: calls.append(kw)))
    load_engine(ServeConfig(checkpoint=tiny_checkpoint))
    assert len(calls) == 1 and calls[0]["profile"] == "server"
