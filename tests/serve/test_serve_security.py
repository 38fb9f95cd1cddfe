"""``codeparrot serve`` against the requests a hostile web page or client would send.

Every server here listens on 127.0.0.1, port 0, in a thread of the test, over the tiny
checkpoint. The attacks: a web page's cross-site "simple" POST, DNS rebinding (a
foreign ``Host``), clients that trickle bytes to hold threads, values no JSON schema
stops (a seed of 2**70, half a UTF-16 pair, a body cut short), and a tokenizer whose
native code panics.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import ApiError, check_sender, host_name
from codeparrot.serve.server import make_server

GREEDY = {"prompt": "def fibonacci(n):\n", "max_tokens": 4, "temperature": 0, "seed": 0}


class CountingEngine:
    """The real engine, counting the generations it takes on (a prompt of text or of token
    ids; one the engine itself refuses, before any model work, is not one)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def stream(self, *args, **kwargs):
        events = self.engine.stream(*args, **kwargs)
        self.calls += 1
        return events

    def stream_ids(self, *args, **kwargs):
        events = self.engine.stream_ids(*args, **kwargs)
        self.calls += 1
        return events


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from codeparrot.generation import Engine

    return CountingEngine(Engine.load(tiny_checkpoint, device="cpu", quantize="none"))


def start(config: ServeConfig, engine):
    srv = make_server(config, engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stop(srv) -> None:
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def server(tiny_checkpoint, engine):
    config = ServeConfig(
        checkpoint=tiny_checkpoint, port=0, max_tokens_limit=16, max_body_bytes=300_000
    )
    srv = start(config, engine)
    yield srv
    stop(srv)


def request(srv, method="POST", path="/v1/completions", body=GREEDY, headers=None):
    """(status, headers, parsed JSON body) of one request with exactly ``headers``."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    sent = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
    sent |= headers or {}
    if data is not None:
        sent["Content-Length"] = str(len(data))
    for name, value in sent.items():
        if value is not None:
            conn.putheader(name, value)
    conn.endheaders(data)
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    return resp.status, resp.headers, json.loads(text) if text else None


# -- who may send a request ------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:8000", "127.0.0.1.nip.io", "localhost.evil.example", None],
)
def test_foreign_host_is_refused_before_any_work(server, engine, host):
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1."""
    before = engine.calls
    status, _, body = request(server, headers={"Host": host})
    assert status == 421
    assert "Host" in body["error"]["message"]
    assert engine.calls == before
    status, _, _ = request(server, "GET", "/v1/models", None, headers={"Host": host})
    assert status == 421


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:{port}", "127.0.0.1", "[::1]:{port}"])
def test_loopback_names_are_answered(server, host):
    port = server.server_address[1]
    status, _, body = request(
        server, "GET", "/v1/models", None, headers={"Host": host.format(port=port)}
    )
    assert status == 200 and body["object"] == "list"


def test_configured_host_and_allowed_names_are_accepted(tmp_path):
    config = ServeConfig(
        checkpoint=tmp_path, host="192.168.1.5", allowed_hosts=("parrot.lan:8000",)
    )
    for host in ("192.168.1.5:8000", "parrot.lan", "PARROT.LAN:80", "localhost:8000"):
        assert check_sender(config, host, None, None) is None
    wide = ServeConfig(checkpoint=tmp_path, host="0.0.0.0")
    with pytest.raises(ApiError) as info:
        check_sender(wide, "0.0.0.0:8000", None, None)  # a wildcard is no name of the server
    assert info.value.status == 421
    assert host_name("[::1]:80") == "[::1]"
    assert host_name("localhost:80x") is None


def test_cross_site_simple_post_is_refused(server, engine):
    """What any web page can make a browser send without asking: text/plain, foreign Origin."""
    before = engine.calls
    body = json.dumps(GREEDY).encode()
    page = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    status, headers, answer = request(server, body=body, headers=page)
    assert status == 403 and "evil.example" in answer["error"]["message"]
    assert "Access-Control-Allow-Origin" not in headers
    status, _, _ = request(server, body=body, headers={"Origin": "null"})
    assert status == 403
    fetch = {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}
    status, _, _ = request(server, body=body, headers=fetch)
    assert status == 403
    assert engine.calls == before


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"],
)
def test_body_not_declared_json_is_a_415(server, engine, content_type):
    before = engine.calls
    status, _, body = request(server, headers={"Content-Type": content_type})
    assert status == 415 and "application/json" in body["error"]["message"]
    assert engine.calls == before


def test_json_with_a_charset_is_answered(server):
    headers = {"Content-Type": "Application/JSON; charset=UTF-8"}
    assert request(server, headers=headers)[0] == 200


def test_allowed_origin_gets_cors_headers_and_others_do_not(tiny_checkpoint, engine):
    config = ServeConfig(
        checkpoint=tiny_checkpoint, port=0, allowed_origins=("http://localhost:3000",)
    )
    srv = start(config, engine)
    try:
        preflight = {
            "Origin": "http://localhost:3000",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        }
        status, headers, _ = request(srv, "OPTIONS", body=None, headers=preflight)
        assert status == 204
        assert headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
        assert "POST" in headers["Access-Control-Allow-Methods"]
        status, headers, body = request(srv, headers={"Origin": "http://localhost:3000"})
        assert status == 200 and body["choices"]
        assert headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
        other = preflight | {"Origin": "http://localhost:4000"}
        assert request(srv, "OPTIONS", body=None, headers=other)[0] == 403
    finally:
        stop(srv)
    # CORS is off by default: no preflight passes
    assert request_default_preflight(tiny_checkpoint, engine) == 403


def request_default_preflight(checkpoint, engine) -> int:
    srv = start(ServeConfig(checkpoint=checkpoint, port=0), engine)
    try:
        headers = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
        return request(srv, "OPTIONS", body=None, headers=headers)[0]
    finally:
        stop(srv)


# -- slow clients against the connection cap and the deadline --------------------------


def trickle(address, head: bytes, every: float, result: dict) -> None:
    """Send ``head`` one byte every ``every`` seconds; record when the server hangs up."""
    start_time = time.monotonic()
    with socket.create_connection(address, timeout=30) as sock:
        result["connected"] = True
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                time.sleep(every)
            result["received"] = sock.recv(4096)
        except OSError:
            result["received"] = b""
        result["seconds"] = time.monotonic() - start_time


def test_slow_clients_are_capped_and_cut_at_the_deadline(tiny_checkpoint, engine):
    """Three clients each trickle a byte every 0.3 s, always within the 2 s read timeout;
    a fourth connection is refused at once, and the three are cut at the 1.5 s deadline."""
    config = ServeConfig(
        checkpoint=tiny_checkpoint,
        port=0,
        max_connections=3,
        request_deadline=1.5,
        read_timeout=2.0,
    )
    srv = start(config, engine)
    address = srv.server_address[:2]
    head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 200
    results = [{} for _ in range(3)]
    threads = [
        threading.Thread(target=trickle, args=(address, head, 0.3, r), daemon=True) for r in results
    ]
    try:
        for t in threads:
            t.start()
        while not all(r.get("connected") for r in results):
            time.sleep(0.02)
        time.sleep(0.3)  # the server has accepted all three
        with socket.create_connection(address, timeout=10) as extra:
            refused = extra.recv(4096)
        assert refused.startswith(b"HTTP/1.1 503")
        assert b"server_busy" in refused
        for t in threads:
            t.join(30)
        # each would have trickled for 60 s (200 bytes at 0.3 s): the deadline cut it
        assert all(not t.is_alive() for t in threads)
        assert all(r["seconds"] < 20 for r in results), results
        assert all(not r["received"].startswith(b"HTTP/1.1 200") for r in results)
        # the slots are free again
        status, _, body = request(srv)
        assert status == 200 and body["choices"]
    finally:
        stop(srv)


def test_body_that_stops_coming_is_a_400_at_the_deadline(tiny_checkpoint, engine):
    srv = start(ServeConfig(checkpoint=tiny_checkpoint, port=0, request_deadline=1.0), engine)
    try:
        head = (
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        with socket.create_connection(srv.server_address[:2], timeout=30) as sock:
            sock.sendall(head + b'{"prompt": "a"')  # and then nothing, connection open
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            assert resp.status == 400
            assert "14 of 100 bytes" in json.loads(resp.read())["error"]["message"]
    finally:
        stop(srv)


def test_truncated_body_is_a_400(server, engine):
    before = engine.calls
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    with socket.create_connection(server.server_address[:2], timeout=30) as sock:
        sock.sendall(head + b'{"prompt": "a"')
        sock.shutdown(socket.SHUT_WR)  # the client is done sending
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        assert resp.status == 400
        assert "14 of 100 bytes" in json.loads(resp.read())["error"]["message"]
    assert engine.calls == before


# -- every bad value is a 400 ----------------------------------------------------------

BAD_VALUES = [
    ("seed 2**70", {"seed": 2**70}, "seed"),
    ("seed below -2**63", {"seed": -(2**63) - 1}, "seed"),
    ("seed a string", {"seed": "1"}, "seed"),
    ("lone surrogate in the prompt", b'{"prompt": "def f():\\ud800"}', "prompt"),
    ("lone low surrogate in a stop", b'{"prompt": "a", "stop": ["\\udc00"]}', "stop"),
    ("temperature a string", {"temperature": "hot"}, "temperature"),
    ("temperature a boolean", {"temperature": True}, "temperature"),
    ("top_p a list", {"top_p": [1]}, "top_p"),
    ("n a boolean", {"n": True}, "n"),
    ("n fractional", {"n": 1.5}, "n"),
    ("max_tokens negative", {"max_tokens": -1}, "max_tokens"),
    ("max_tokens fractional", {"max_tokens": 2.5}, "max_tokens"),
    ("max_tokens 0", {"max_tokens": 0}, "max_tokens"),
    ("stop a number", {"stop": 3}, "stop"),
    ("stop holding a number", {"stop": [3]}, "stop"),
    ("prompt a list of a boolean", {"prompt": [True]}, "prompt"),
    ("prompt a negative token id", {"prompt": [-1]}, "prompt"),
    ("prompt a token id out of the vocabulary", {"prompt": [10**9]}, "prompt"),
    ("an unknown field", {"best_effort": True}, "best_effort"),
    ("a suffix after token ids", {"prompt": [1, 2], "suffix": "x"}, "suffix"),
    ("a penalty asked for", {"repetition_penalty": 1.3}, "repetition_penalty"),
    ("prompt an object", {"prompt": {"a": 1}}, "prompt"),
    ("stream_options a list", {"stream_options": []}, "stream_options"),
    ("echo asked for", {"echo": True}, "echo"),
    ("temperature 1e400", b'{"prompt": "a", "temperature": 1e400}', "temperature"),
    ("a 5,000-digit number", b'{"prompt": "a", "n": ' + b"9" * 5000 + b"}", None),
    ("invalid UTF-8", b'{"prompt": "\xff\xfe"}', None),
    ("deeply nested", b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),
]


@pytest.mark.parametrize("prompt", ["def f(x):\n", [1, 2]], ids=["text", "token ids"])
def test_a_good_request_is_counted(server, engine, prompt):
    """The count the refusals below rely on sees a generation of either kind of prompt."""
    before = engine.calls
    status, _, answer = request(server, body=json.dumps(GREEDY | {"prompt": prompt}).encode())
    assert status == 200, answer
    assert engine.calls == before + 1


@pytest.mark.parametrize(
    ("payload", "param"), [b[1:] for b in BAD_VALUES], ids=[b[0] for b in BAD_VALUES]
)
def test_bad_value_is_a_400_naming_it(server, engine, payload, param):
    before = engine.calls
    body = payload if isinstance(payload, bytes) else json.dumps(GREEDY | payload).encode()
    status, _, answer = request(server, body=body)
    assert status == 400, answer
    error = answer["error"]
    assert error["param"] == param and 0 < len(error["message"]) < 300
    if param is not None:
        assert param in error["message"]
    assert engine.calls == before


# -- a tokenizer that panics -----------------------------------------------------------

# Oniguruma gives up on this pattern over "aaaa...b" (its retry limit), and the
# tokenizers library turns that into a Rust panic: pyo3's PanicException, a BaseException.
PANIC_PATTERN = "(a|a?)+$"
PANIC_PROMPT = "a" * 40 + "b"


def panicking_checkpoint(tiny_checkpoint: Path, out: Path) -> Path:
    shutil.copytree(tiny_checkpoint, out)
    file = out / "tokenizer.json"
    tokenizer = json.loads(file.read_text(encoding="utf-8"))
    split = {
        "type": "Split",
        "pattern": {"Regex": PANIC_PATTERN},
        "behavior": "Isolated",
        "invert": False,
    }
    tokenizer["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [split, tokenizer["pre_tokenizer"]],
    }
    file.write_text(json.dumps(tokenizer), encoding="utf-8")
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_tokenizer_panic_is_a_short_500_and_the_server_goes_on(tiny_checkpoint, tmp_path, stream):
    from codeparrot.generation import Engine

    checkpoint = panicking_checkpoint(tiny_checkpoint, tmp_path / "panics")
    engine = Engine.load(checkpoint, device="cpu", quantize="none")
    srv = start(ServeConfig(checkpoint=checkpoint, port=0), engine)
    try:
        payload = GREEDY | {"prompt": PANIC_PROMPT, "stream": stream}
        status, headers, body = request(srv, body=payload)
        assert status == 500 and headers["Content-Type"] == "application/json"
        assert body["error"]["type"] == "server_error"
        assert "PanicException" in body["error"]["message"]
        assert len(body["error"]["message"]) < 200
        status, _, body = request(srv)  # an ordinary prompt still completes
        assert status == 200 and body["choices"]
    finally:
        stop(srv)
