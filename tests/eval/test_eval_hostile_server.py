"""`eval --backend openai` against a hostile or broken server: each case ends with a clear
error (or a cleaned value), in bounded memory, within the request's deadline.

A tiny standard-library server on 127.0.0.1 plays each part: an answer of 1.5 GB, an
endless chunked body, a drip of one byte at a time, a redirect to another host, mixed-type
``index`` values, a huge ``finish_reason``, a server that ignores ``suffix``.
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codeparrot.errors import ConfigError, DataError
from codeparrot.eval.backends import BackendError, ServedEngine
from codeparrot.eval.config import HumanEvalConfig
from codeparrot.eval.humaneval import generate_samples

MODELS = {"object": "list", "data": [{"id": "m", "object": "model"}]}


class HostileHandler(BaseHTTPRequestHandler):
    """Answers ``GET /v1/models`` honestly and each completion as ``server.mode`` says."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, payload, status=200, headers=()):
        body = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(self.server.models)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.posts.append((self.headers.get("Host"), request))
        getattr(self, "answer_" + self.server.mode)(request)

    def _endless(self, write_one, headers):
        self.send_response(200)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        try:
            while not self.server.stopping.is_set():
                write_one()
        except OSError:  # the client hung up: what a client should do
            self.server.hung_up.set()
        self.close_connection = True

    def answer_declared_huge(self, request):
        block = b'{"choices": [' + b" " * 65536
        self._endless(lambda: self.wfile.write(block), [("Content-Length", str(1_500_000_000))])

    def answer_undeclared_huge(self, request):
        block = b" " * 65536
        self._endless(lambda: self.wfile.write(block), [("Connection", "close")])

    def answer_chunked(self, request):
        chunk = b"10000\r\n" + b" " * 65536 + b"\r\n"
        self._endless(lambda: self.wfile.write(chunk), [("Transfer-Encoding", "chunked")])

    def answer_drip(self, request):
        def one_byte():
            self.wfile.write(b" ")
            self.wfile.flush()
            time.sleep(0.1)

        self._endless(one_byte, [("Content-Length", "100000")])

    def answer_redirect(self, request):
        port = self.server.server_address[1]
        self._send({}, 307, [("Location", f"http://localhost:{port}/v1/completions")])

    def answer_mixed_index(self, request):
        choices = [{"index": 0, "text": "a"}, {"index": "1", "text": "b"}]
        self._send({"choices": choices})

    def answer_huge_finish_reason(self, request):
        choices = [{"index": 0, "text": "    return 1\n", "finish_reason": "x" * 500_000}]
        self._send({"choices": choices})

    def answer_ignores_suffix(self, request):
        choices = [{"index": 0, "text": "1", "finish_reason": "length"}]
        self._send({"choices": choices, "usage": {"prompt_tokens": 5, "completion_tokens": 1}})

    def answer_reads_suffix(self, request):
        tokens = 5 + len(request.get("suffix", "")) // 4
        choices = [{"index": 0, "text": "1", "finish_reason": "length"}]
        self._send({"choices": choices, "usage": {"prompt_tokens": tokens}})


@pytest.fixture
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileHandler)
    server.daemon_threads = True
    server.mode, server.posts, server.models = "mixed_index", [], MODELS
    server.stopping, server.hung_up = threading.Event(), threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()


def engine_of(server, **kwargs) -> ServedEngine:
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return ServedEngine(base, "m", retries=0, backoff=0.01, **kwargs)


@pytest.mark.parametrize("mode", ["declared_huge", "undeclared_huge", "chunked"])
def test_an_answer_without_end_is_cut_at_the_cap_in_bounded_memory(hostile, mode):
    """1.5 GB answers were read whole (1,529 MiB, then a MemoryError); chunked: 2,985 MiB."""
    hostile.mode = mode
    engine = engine_of(hostile, request_timeout=30)
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(BackendError, match="answer is too large") as info:
            engine.complete("def f():\n", n=1, max_tokens=16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 20
    assert peak < 16 * 2**20, f"{peak / 2**20:.1f} MiB held"
    assert "n x max_tokens" in str(info.value)


def test_a_server_dripping_bytes_is_cut_at_the_whole_requests_deadline(hostile):
    """Each byte came within the per-read timeout, so the run hung; the deadline is whole."""
    hostile.mode = "drip"
    engine = engine_of(hostile, request_timeout=1.0)
    start = time.monotonic()
    with pytest.raises(BackendError, match="within --request-timeout"):
        engine.complete("def f():\n", n=1, max_tokens=16)
    assert time.monotonic() - start < 3


def test_a_redirect_to_another_host_is_not_followed(hostile):
    hostile.mode = "redirect"
    with pytest.raises(BackendError, match="redirected to another host"):
        engine_of(hostile).complete("def f():\n", n=1, max_tokens=4)
    assert [host for host, _ in hostile.posts] == [f"127.0.0.1:{hostile.server_address[1]}"]


def test_mixed_type_indexes_are_a_clear_error(hostile):
    """They gave a TypeError traceback (sorting an int against a str)."""
    with pytest.raises(BackendError, match=r"index fields must be the integers 0\.\.1"):
        engine_of(hostile).complete("def f():\n", n=2, max_tokens=4)


def test_a_huge_finish_reason_is_not_recorded(hostile):
    """A 50 MB finish_reason made every samples line too long to read back."""
    hostile.mode = "huge_finish_reason"
    made = engine_of(hostile).complete("def f():\n", n=1, max_tokens=4)
    assert [(c.text, c.finish_reason) for c in made] == [("    return 1\n", "unknown")]


def test_a_server_that_ignores_the_suffix_is_refused_before_any_work(hostile):
    hostile.mode = "ignores_suffix"
    with pytest.raises(ConfigError, match="the suffix was ignored"):
        engine_of(hostile).check(infill=True)
    hostile.mode = "reads_suffix"
    engine = engine_of(hostile)
    engine.check(infill=True)
    assert engine.fim is True


def test_the_servers_quantization_and_context_are_recorded(hostile, tmp_path):
    hostile.models = {
        "data": [{"id": "m", "quantization": "int8", "max_model_len": 2048, "junk": "x"}]
    }
    engine = engine_of(hostile)
    engine.check()
    assert engine.server_info == {"quantization": "int8", "max_model_len": 2048}
    hostile.mode = "reads_suffix"
    config = HumanEvalConfig(
        backend="openai", base_url=engine.base_url, model="m", output=tmp_path / "run",
        limit=1, n=1, batch_size=1, max_new_tokens=4, allow_code_execution=True,
    )  # fmt: skip
    problems = {"HumanEval/0": {"task_id": "HumanEval/0", "prompt": "def f():\n"}}
    generate_samples(config, problems, engine=engine, progress=False)
    meta = json.loads((tmp_path / "run" / "samples.meta.json").read_text())
    assert meta["server"] == {"quantization": "int8", "max_model_len": 2048}


def test_resume_files_of_the_wrong_shape_or_origin_are_refused(hostile, tmp_path):
    config = HumanEvalConfig(
        backend="openai", base_url="http://127.0.0.1:9/v1", model="m", output=tmp_path / "run",
        limit=1, n=1, batch_size=1, max_new_tokens=4, allow_code_execution=True,
    )  # fmt: skip
    out = tmp_path / "run"
    out.mkdir()
    (out / "samples.jsonl").write_text("")
    (out / "samples.meta.json").write_text("[1, 2]")
    problems = {"HumanEval/0": {"task_id": "HumanEval/0", "prompt": "def f():\n"}}
    with pytest.raises(DataError, match=r"samples\.meta\.json: not a samples\.meta\.json"):
        generate_samples(config, problems, engine=engine_of(hostile), progress=False)
    (out / "samples.meta.json").unlink()
    (out / "samples.shard-0-of-2.jsonl").write_text('{"task_id": "HumanEval/0"}\n')
    (out / "samples.shard-evil.jsonl").write_text("")
    with pytest.raises(DataError) as info:
        generate_samples(config, problems, engine=engine_of(hostile), progress=False)
    assert "samples.shard-0-of-2.jsonl" in str(info.value)
    assert "samples.shard-evil.jsonl" in str(info.value)
