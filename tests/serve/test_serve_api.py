"""The API returns what the model wrote: no cut unless asked, max_tokens fitted to the
context, token-id prompts, top_k and min_p honoured, and every field known by name."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from codeparrot.serve.config import ServeConfig
from codeparrot.serve.server import make_server

LOOP = "for q in = = = = = = = = = = ="


class RecordingEngine:
    """Writes ``text``; records the generation settings; a token is a word."""

    context_length = 64
    bos_ids = ()
    quantize = "int8"

    def __init__(self, text: str = "x") -> None:
        self.text = text
        self.configs = []

    def infill_template(self, fim_tokens: str = ""):
        return None

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def stream(self, prompt, generation, cancel, **extra):
        from codeparrot.generation.engine import Completion, StreamEvent

        self.configs.append(generation)
        for start in range(0, len(self.text), 3):
            yield StreamEvent(0, self.text[start : start + 3])
        done = Completion(self.text, "length", 3, len(self.text), 0.01, seed=generation.seed)
        yield StreamEvent(0, "", done)


def start(engine, tmp_path, **settings):
    srv = make_server(ServeConfig(checkpoint=tmp_path, port=0, **settings), engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def serving():
    servers = []

    def run(engine, tmp_path, **settings):
        servers.append(start(engine, tmp_path, **settings))
        return servers[-1]

    yield run
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def call(srv, payload, path="/v1/completions", method="POST"):
    data = None if method == "GET" else json.dumps(payload).encode()
    req = urllib.request.Request(
        srv.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            body = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    if payload and payload.get("stream"):
        chunks = [c.removeprefix("data: ") for c in body.split("\n\n") if c]
        return status, [json.loads(c) for c in chunks if c != "[DONE]"]
    return status, json.loads(body)


def streamed_choice(chunks):
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    return text, reasons[-1]


# -- repetition cut: opt-in ------------------------------------------------------------


def test_by_default_the_answer_is_what_the_model_wrote(serving, tmp_path):
    srv = serving(RecordingEngine(LOOP), tmp_path)
    _, answer = call(srv, {"prompt": "    "})
    assert answer["choices"][0]["text"] == LOOP
    assert answer["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_asks_for_the_cut_and_is_told_it_cut(serving, tmp_path, stream):
    srv = serving(RecordingEngine(LOOP), tmp_path)
    _, answer = call(srv, {"prompt": "    ", "cut_repetition": True, "stream": stream})
    text, reason = (
        streamed_choice(answer)
        if stream
        else (answer["choices"][0]["text"], answer["choices"][0]["finish_reason"])
    )
    assert (text, reason) == ("for q in", "repetition")


def test_a_request_turns_the_server_cut_off(serving, tmp_path):
    srv = serving(RecordingEngine(LOOP), tmp_path, cut_repetition=True)
    assert call(srv, {"prompt": " "})[1]["choices"][0]["finish_reason"] == "repetition"
    _, answer = call(srv, {"prompt": " ", "cut_repetition": False})
    assert answer["choices"][0]["text"] == LOOP


def test_text_the_cut_keeps_whole_is_not_reported_as_cut(serving, tmp_path):
    srv = serving(RecordingEngine("return x\n"), tmp_path, cut_repetition=True)
    assert call(srv, {"prompt": "def f(x):\n    "})[1]["choices"][0]["finish_reason"] == "length"


# -- max_tokens and the context ---------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "asked", "generated"),
    [
        (10, 768, 54),  # what the context leaves after the prompt
        (10, 20, 20),  # asked for less: as asked
        (60, 768, 16),  # a prompt that leaves less: a quarter of the context
        (10, 10**30, 54),  # any size is clamped, not refused
    ],
)
def test_max_tokens_beyond_the_context_is_clamped(serving, tmp_path, words, asked, generated):
    engine = RecordingEngine()
    srv = serving(engine, tmp_path, max_tokens_limit=4096)
    status, answer = call(srv, {"prompt": "w " * words, "max_tokens": asked})
    assert status == 200, answer
    assert engine.configs[-1].max_new_tokens == generated


def test_the_server_limit_also_clamps(serving, tmp_path):
    engine = RecordingEngine()
    srv = serving(engine, tmp_path, max_tokens_limit=8)
    assert call(srv, {"prompt": "w", "max_tokens": 768})[0] == 200
    assert engine.configs[-1].max_new_tokens == 8


@pytest.mark.parametrize(
    "payload", [{"prompt": "w " * 10, "max_tokens": 55}, {"prompt": "w", "max_tokens": 9}]
)
def test_over_context_refuse_names_max_tokens(serving, tmp_path, payload):
    engine = RecordingEngine()
    srv = serving(
        engine,
        tmp_path,
        over_context="refuse",
        max_tokens_limit=8 if payload["prompt"] == "w" else 512,
    )
    status, answer = call(srv, payload)
    assert status == 400 and answer["error"]["param"] == "max_tokens"
    assert engine.configs == []


def test_a_clamped_answer_ends_with_length_on_the_real_model(tiny_checkpoint, serving):
    from codeparrot.generation import Engine

    engine = Engine.load(tiny_checkpoint, device="cpu", quantize="none")
    engine.end_ids = frozenset()  # a random model may write end-of-text early
    engine.special_ids = frozenset()
    srv = serving(engine, tiny_checkpoint, max_tokens_limit=4096)
    prompt = "def f(x):\n    return x\n" * 8
    used = engine.count_tokens(prompt) + len(engine.bos_ids)
    status, answer = call(srv, {"prompt": prompt, "max_tokens": 768, "temperature": 0})
    assert status == 200, answer
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == engine.context_length - used


# -- token ids, top_k and min_p on the real model ------------------------------------------


@pytest.fixture(scope="module")
def real(tiny_checkpoint):
    from codeparrot.generation import Engine

    engine = Engine.load(tiny_checkpoint, device="cpu", quantize="none")
    srv = start(engine, tiny_checkpoint)
    yield srv, engine
    srv.shutdown()
    srv.server_close()


def text_of(srv, **payload):
    status, answer = call(srv, {"max_tokens": 12, "seed": 3} | payload)
    assert status == 200, answer
    return answer["choices"][0]["text"]


def test_a_token_id_prompt_is_completed_from_those_ids(real):
    from codeparrot.generation import GenerationConfig

    srv, engine = real
    ids = engine.tokenizer("def fibonacci(n):\n")["input_ids"]
    config = GenerationConfig(max_new_tokens=12, temperature=0, seed=0)
    direct = [e.completion.text for e in engine.stream_ids(ids, config) if e.completion]
    assert text_of(srv, prompt=ids, temperature=0) == direct[0]
    assert text_of(srv, prompt=[ids], temperature=0) == direct[0]


def test_stream_ids_writes_what_an_unhealed_text_prompt_writes(real):
    from codeparrot.generation import GenerationConfig

    _, engine = real
    prompt = "def fibonacci(n):\n    if n"
    config = GenerationConfig(max_new_tokens=12, temperature=0, seed=0, heal=False)
    ids, _ = engine.encode_prompt(prompt, 12)
    by_text = engine.generate(prompt, config)[0].text
    by_ids = [e.completion.text for e in engine.stream_ids(ids, config) if e.completion]
    assert by_ids == [by_text]


@pytest.mark.parametrize("field", [{"top_k": 1}, {"min_p": 1.0}])
def test_top_k_and_min_p_are_honoured(real, field):
    srv, _ = real
    greedy = text_of(srv, prompt="import os\n", temperature=0)
    sampled = text_of(srv, prompt="import os\n", temperature=1.5)
    assert sampled != greedy  # without the field, this seed samples something else
    assert text_of(srv, prompt="import os\n", temperature=1.5, **field) == greedy


def test_harmless_fields_are_accepted_by_name(real):
    srv, _ = real
    payload = {"prompt": "x = ", "user": "me", "cache_prompt": True, "model": "any"}
    payload |= {"samplers": ["top_k", "top_p"], "t_max_prompt_ms": 500, "id_slot": 0}
    assert call(srv, payload)[0] == 200


def test_models_reports_quantization_and_context(serving, tmp_path):
    srv = serving(RecordingEngine(), tmp_path)
    _, answer = call(srv, None, path="/v1/models", method="GET")
    model = answer["data"][0]
    assert model["quantization"] == "int8" and model["max_model_len"] == 64


def test_the_engine_must_have_the_servers_fim_settings(real, tiny_checkpoint, monkeypatch):
    """The FIM settings are the engine's, resolved at load: a server refuses an engine
    loaded with others than its flags, and load_engine gives it its own."""
    from codeparrot.errors import ConfigError
    from codeparrot.generation import Engine
    from codeparrot.generation.config import FimSettings
    from codeparrot.serve.server import load_engine

    _srv, engine = real  # loaded with the defaults
    config = ServeConfig(checkpoint=tiny_checkpoint, port=0, fim_order="psm")
    with pytest.raises(ConfigError, match=r"FIM settings.*fim_order.*psm"):
        make_server(config, engine)
    given = []
    monkeypatch.setattr(Engine, "load", lambda *a, **kw: given.append(kw["fim"]))
    load_engine(config.replace(fim_tokens="<a>,<b>,<c>"))
    assert given == [FimSettings(fim_order="psm", fim_tokens="<a>,<b>,<c>")]
