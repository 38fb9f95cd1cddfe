"""``codeparrot serve`` answered over real HTTP: by urllib, raw sockets and the openai client.

One server on port 0 in a thread over the tiny checkpoint; the engine is wrapped to
count its calls, so refused requests can be shown to cost no model work.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import ApiError
from codeparrot.serve.server import GenerationLine, make_server


class CountingEngine:
    """The real engine, counting generations."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.calls = 0
        self.delay = 0.0  # seconds added per event: a generation a slow test can outlast

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def stream(self, *args, **kwargs):
        return self._started(self.engine.stream(*args, **kwargs))

    def stream_ids(self, *args, **kwargs):  # a prompt of token ids (refused ones raise first)
        return self._started(self.engine.stream_ids(*args, **kwargs))

    def _started(self, events):
        self.calls += 1
        self.events = 0
        self.finished = threading.Event()
        return self._counted(events)

    def _counted(self, events):
        try:
            for event in events:
                self.events += 1
                time.sleep(self.delay)
                yield event
        finally:
            self.finished.set()


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from codeparrot.generation import Engine

    return CountingEngine(Engine.load(tiny_checkpoint, device="cpu", quantize="none"))


@pytest.fixture(scope="module")
def server(tiny_checkpoint, engine):
    config = ServeConfig(
        checkpoint=tiny_checkpoint,
        port=0,
        model_name="tiny",
        max_body_bytes=8192,
        max_prompt_chars=1000,
        max_stop_sequences=4,
        max_stop_chars=20,
        max_candidates=4,
        max_tokens_limit=64,
        read_timeout=5,
    )
    srv = make_server(config, engine)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def post(server, payload, path="/v1/completions"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    req = urllib.request.Request(
        server.url + path, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def events(text: str) -> list:
    lines = [line for line in text.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines), text
    data = [line.removeprefix("data: ") for line in lines]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


GREEDY = {"prompt": "def fibonacci(n):\n", "max_tokens": 12, "temperature": 0, "seed": 0}


def reference(engine, **changes):
    """The engine's own answer for GREEDY, without the server."""
    from codeparrot.generation import GenerationConfig

    config = GenerationConfig(max_new_tokens=12, temperature=0, top_p=1, seed=0, **changes)
    return engine.engine.generate(GREEDY["prompt"], config)


def test_models_lists_the_one_model(server):
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as resp:
        body = json.load(resp)
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["tiny"]
    assert body["data"][0]["object"] == "model"


def test_completion_has_openai_shape_and_the_engine_text(server, engine):
    status, headers, text = post(server, GREEDY)
    assert status == 200 and headers["Content-Type"] == "application/json"
    body = json.loads(text)
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    assert body["id"].startswith("cmpl-") and isinstance(body["created"], int)
    [choice] = body["choices"]
    [expected] = reference(engine)
    assert choice["text"] == expected.text
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["completion_tokens"] == expected.new_tokens <= 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_stream_sends_the_same_text_as_server_sent_events(server, engine):
    payload = GREEDY | {"stream": True, "stream_options": {"include_usage": True}}
    status, headers, text = post(server, payload)
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    chunks = events(text)
    assert all(c["object"] == "text_completion" for c in chunks)
    *pieces, usage = chunks
    # the usage of the whole answer, as the non-streamed one reports it
    assert usage["choices"] == [] and usage["usage"] == json.loads(post(server, GREEDY)[2])["usage"]
    assert "".join(c["choices"][0]["text"] for c in pieces) == reference(engine)[0].text
    reasons = [c["choices"][0]["finish_reason"] for c in pieces]
    assert reasons[-1] in ("stop", "length") and set(reasons[:-1]) <= {None}


def test_n_two_returns_two_indexed_choices(server, engine):
    status, _, text = post(server, GREEDY | {"n": 2, "temperature": 0.8})
    assert status == 200
    choices = json.loads(text)["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert all(isinstance(c["text"], str) and c["finish_reason"] for c in choices)
    # the usage counts the tokens of both choices (greedy: twice the one answer's)
    usage = json.loads(post(server, GREEDY | {"n": 2})[2])["usage"]
    assert usage["completion_tokens"] == 2 * reference(engine)[0].new_tokens


def test_stop_string_ends_the_text_before_it(server, engine):
    full = reference(engine)[0].text
    assert len(full) >= 6, full
    stop = full[3:5]
    status, _, text = post(server, GREEDY | {"stop": [stop, "never-seen"]})
    assert status == 200
    [choice] = json.loads(text)["choices"]
    assert choice["text"] == full[: full.find(stop)]
    assert choice["finish_reason"] == "stop"


BAD_REQUESTS = [
    ("oversized prompt", {"prompt": "x" * 1001}, "prompt"),
    ("NaN temperature", b'{"prompt": "def f():", "temperature": NaN}', "temperature"),
    ("infinite top_p", b'{"prompt": "def f():", "top_p": Infinity}', "top_p"),
    ("negative temperature", {"prompt": "a", "temperature": -1}, "temperature"),
    ("top_p zero", {"prompt": "a", "top_p": 0}, "top_p"),
    ("n too large", {"prompt": "a", "n": 5}, "n"),
    ("n zero", {"prompt": "a", "n": 0}, "n"),
    ("max_tokens a string", {"prompt": "a", "max_tokens": "10"}, "max_tokens"),
    ("fractional seed", {"prompt": "a", "seed": 1.5}, "seed"),
    ("prompt a number", {"prompt": 3}, "prompt"),
    ("no prompt", {"max_tokens": 3}, "prompt"),
    ("two prompts", {"prompt": ["a", "b"]}, "prompt"),
    ("too many stops", {"prompt": "a", "stop": ["1", "2", "3", "4", "5"]}, "stop"),
    ("long stop", {"prompt": "a", "stop": "y" * 21}, "stop"),
    ("empty stop", {"prompt": "a", "stop": [""]}, "stop"),
    ("stream not a boolean", {"prompt": "a", "stream": "yes"}, "stream"),
    ("cache_prompt not a boolean", {"prompt": "a", "cache_prompt": 1}, "cache_prompt"),
    ("logprobs asked for", {"prompt": "a", "logprobs": 5}, "logprobs"),
    ("suffix on a checkpoint without FIM", {"prompt": "a", "suffix": "b"}, "suffix"),
    ("malformed JSON", b'{"prompt": ', None),
    ("not an object", b"[1, 2]", None),
]


@pytest.mark.parametrize(
    ("payload", "param"), [b[1:] for b in BAD_REQUESTS], ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_request_is_a_400_with_a_message_and_no_model_work(server, engine, payload, param):
    before = engine.calls
    status, _, text = post(server, payload)
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert 0 < len(error["message"]) < 300
    if param is not None:
        assert param in error["message"]
    assert "Traceback" not in text
    assert engine.calls == before


def test_unknown_path_is_a_404_in_openai_shape(server, engine):
    before = engine.calls
    status, _, text = post(server, {"prompt": "a"}, path="/v1/embeddings")
    assert status == 404 and "embeddings" in json.loads(text)["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(server.url + "/nothing", timeout=10)
    assert info.value.code == 404
    assert engine.calls == before


def test_huge_body_refused_from_its_content_length_before_it_is_sent(server, engine):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(10**9))
    conn.endheaders()  # and no body at all: the answer cannot have waited for it
    resp = conn.getresponse()
    assert resp.status == 413
    assert "8,192" in json.loads(resp.read())["error"]["message"]
    conn.close()
    assert post(server, GREEDY)[0] == 200  # and the server still answers


def test_line_refuses_at_once_when_full():
    line = GenerationLine(waiting=1)
    running, release, waited = threading.Event(), threading.Event(), threading.Event()

    def hold():
        with line.turn():
            running.set()
            release.wait(10)

    def wait_turn():
        with line.turn():
            waited.set()

    threads = [threading.Thread(target=hold), threading.Thread(target=wait_turn)]
    threads[0].start()
    assert running.wait(10)
    threads[1].start()
    while line._in_line < 2:  # the second request has taken its place in line
        threading.Event().wait(0.01)
    with pytest.raises(ApiError) as info, line.turn():
        pass
    assert info.value.status == 503
    release.set()
    for t in threads:
        t.join(10)
    assert waited.is_set()


def test_openai_client_completes_and_streams(server, engine):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    expected = reference(engine)[0].text
    done = client.completions.create(
        model="tiny", prompt=GREEDY["prompt"], max_tokens=12, temperature=0, seed=0
    )
    assert done.choices[0].text == expected
    assert done.usage.completion_tokens >= 1
    stream = client.completions.create(
        model="tiny", prompt=GREEDY["prompt"], max_tokens=12, temperature=0, seed=0, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in stream) == expected
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt="a", n=5)
    assert "n must be a whole number in 1..4, got 5" in str(info.value)


def test_body_without_content_length_is_refused(server, engine):
    before = engine.calls
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with socket.create_connection(server.server_address[:2], timeout=10) as sock:
        sock.sendall(head)  # the chunks never come: the answer cannot wait for them
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        assert resp.status == 411
        assert "Content-Length" in json.loads(resp.read())["error"]["message"]
    assert engine.calls == before


def test_client_that_goes_away_mid_stream_stops_its_generation(server, engine):
    payload = json.dumps(GREEDY | {"max_tokens": 64, "stream": True}).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    engine.delay = 0.02  # 64 tokens take more than a second: time enough to hang up
    try:
        with socket.create_connection(server.server_address[:2], timeout=30) as sock:
            sock.sendall(head.encode() + payload)
            received = b""
            while b"\r\n\r\n" not in received:
                received += sock.recv(4096)
            assert received.startswith(b"HTTP/1.1 200")
        # gone once the stream has begun (its first text may still be held back by the
        # repetition cut: this model writes only whitespace)
        assert engine.finished.wait(30)
    finally:
        engine.delay = 0.0
    assert engine.events < 64  # one event per token at most would reach 64 and the end
    assert post(server, GREEDY)[0] == 200


def _fim_test_module():
    """The FIM snippet model of the engine's tests (built and trained in a few seconds)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "core" / "test_generation_fim.py"
    spec = importlib.util.spec_from_file_location("_serve_fim_snippet", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    from codeparrot.generation import Engine

    snippet = _fim_test_module()
    checkpoint = snippet.build_fim_checkpoint(tmp_path_factory.mktemp("fim") / "checkpoint")
    engine = CountingEngine(Engine.load(checkpoint, device="cpu"))
    srv = make_server(ServeConfig(checkpoint=checkpoint, port=0), engine)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, snippet
    srv.shutdown()
    srv.server_close()


def test_suffix_fills_the_middle(fim_server):
    server, snippet = fim_server
    payload = {"prompt": snippet.PREFIX, "suffix": snippet.SUFFIX, "max_tokens": 20}
    status, _, text = post(server, payload | {"temperature": 0, "n": 2})
    assert status == 200, text
    choices = json.loads(text)["choices"]
    assert [c["text"] for c in choices] == [snippet.MIDDLE] * 2
    assert all(c["finish_reason"] == "stop" for c in choices)
    # without the suffix the model has no middle to write: the suffix is really used
    plain = json.loads(post(server, payload | {"temperature": 0, "suffix": ""})[2])
    assert plain["choices"][0]["text"] != snippet.MIDDLE


def test_openai_client_streams_the_middle(fim_server):
    openai = pytest.importorskip("openai")
    server, snippet = fim_server
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    stream = client.completions.create(
        model="any",
        prompt=snippet.PREFIX,
        suffix=snippet.SUFFIX,
        max_tokens=20,
        temperature=0,
        stream=True,
    )
    assert "".join(chunk.choices[0].text for chunk in stream) == snippet.MIDDLE


def test_other_methods_are_a_405_in_openai_shape(server, engine):
    before = engine.calls
    req = urllib.request.Request(server.url + "/v1/completions", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 405
    assert "DELETE" in json.loads(info.value.read())["error"]["message"]
    assert engine.calls == before
