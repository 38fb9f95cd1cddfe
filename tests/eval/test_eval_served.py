"""`eval --backend openai`: a served model evaluated like a checkpoint on disk.

``codeparrot serve`` runs as a subprocess on 127.0.0.1 over the tiny checkpoint, as a user
would run it; a tiny standard-library server stands in for one that refuses requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codeparrot.errors import ConfigError
from codeparrot.eval.backends import BackendError, ServedEngine
from codeparrot.eval.config import GenerateConfig, HumanEvalConfig
from codeparrot.eval.data import load_problems, select_problems
from codeparrot.eval.humaneval import generate_samples, run


@pytest.fixture(scope="module")
def served(tiny_checkpoint):
    """The base URL of ``codeparrot serve`` over the tiny checkpoint (model id ``tiny``)."""
    argv = [sys.executable, "-m", "codeparrot", "serve", "--checkpoint", str(tiny_checkpoint),
            "--port", "0", "--model-name", "tiny", "--quantize", "none"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert " on http://" in line, line
        yield line.rsplit(" on ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


SETTINGS = dict(n=2, batch_size=2, max_new_tokens=12, limit=3, workers=2, ks=(1, 2))


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def comparable(records):
    return [(r["task_id"], r["completion"], r["seed"]) for r in records]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_served_samples_and_pass_at_k_equal_direct(tiny_checkpoint, served, tmp_path, temperature):
    direct = run(
        HumanEvalConfig(checkpoint=tiny_checkpoint, output=tmp_path / "direct",
                        temperature=temperature, allow_code_execution=True, **SETTINGS),
        progress=False,
    )  # fmt: skip
    remote = run(
        HumanEvalConfig(backend="openai", base_url=served, model="tiny", output=tmp_path / "served",
                        temperature=temperature, allow_code_execution=True, **SETTINGS),
        progress=False,
    )  # fmt: skip
    served_samples = read(tmp_path / "served" / "samples.jsonl")
    assert len(served_samples) == 6
    assert comparable(served_samples) == comparable(read(tmp_path / "direct" / "samples.jsonl"))
    assert remote["pass_at_k"] == direct["pass_at_k"]
    assert remote["generation"]["backend"] == "openai"
    assert remote["generation"]["model"] == "tiny"


def test_served_generation_resumes_after_a_kill(tiny_checkpoint, served, tmp_path):
    problems = select_problems(load_problems(), limit=3)
    settings = dict(n=4, batch_size=2, max_new_tokens=8, temperature=0.8)
    whole = generate_samples(
        GenerateConfig(checkpoint=tiny_checkpoint, output=tmp_path / "whole", **settings),
        problems,
        progress=False,
    )
    config = GenerateConfig(
        backend="openai", base_url=served, model="tiny", output=tmp_path / "resumed", **settings
    )
    made = []

    def kill_after_three_batches(record):  # samples reach the disk a batch at a time
        made.append(record)
        if len(made) == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_samples(config, problems, progress=False, on_sample=kill_after_three_batches)
    path = tmp_path / "resumed" / "samples.jsonl"
    kept = len(path.read_text().splitlines())
    assert kept == 6
    with open(path, "a") as fh:  # the kill tore the line being written
        fh.write('{"task_id": "HumanEval/1", "compl')
    again = []
    generate_samples(config, problems, progress=False, on_sample=again.append)
    assert len(again) == 12 - kept  # only the samples the kill left unwritten are asked for
    assert comparable(read(path)) == comparable(read(whole))


def test_unknown_model_unreachable_url_and_missing_suffix_are_refused(served, tmp_path):
    with pytest.raises(ConfigError, match=r"--model 'nope'.*lists: tiny"):
        ServedEngine(served, "nope").check()
    with pytest.raises(ConfigError, match=r"--base-url http://127\.0\.0\.1:9/v1"):
        ServedEngine("http://127.0.0.1:9/v1", "tiny", retries=1, backoff=0.01).check()
    # the tiny checkpoint has no FIM sentinels: an infilling task is refused before any sample
    config = HumanEvalConfig(backend="openai", base_url=served, model="tiny",
                             task="infill-single-line", output=tmp_path / "fim", limit=1,
                             n=1, batch_size=1, allow_code_execution=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"does not fill in the middle.*suffix"):
        run(config, progress=False)
    assert not (tmp_path / "fim").exists()  # nothing written


def test_flags_are_checked_before_any_work():
    with pytest.raises(ConfigError) as caught:
        HumanEvalConfig(backend="openai", syntax_samples=3)
    message = str(caught.value)
    assert "--base-url is required" in message and "--model is required" in message
    assert "--syntax-samples" in message
    with pytest.raises(ConfigError, match="http:// or https://"):
        GenerateConfig(backend="openai", base_url="localhost:8000", model="m")


class FlakyHandler(BaseHTTPRequestHandler):
    """Fails the first ``server.failures`` completions with ``server.status``, then answers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, payload, headers=()):
        body = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.posts += 1
            fail = self.server.posts <= self.server.failures
        if fail and self.server.status is None:  # a dropped connection
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if fail:
            self._send(self.server.status, {"error": {"message": "slow down"}},
                       [("Retry-After", "0")])  # fmt: skip
            return
        choices = [{"index": i, "text": f"    return {i}\n", "finish_reason": "stop"}
                   for i in range(min(request["n"], self.server.max_choices))]  # fmt: skip
        self._send(200, {"object": "text_completion", "choices": choices})


@pytest.fixture
def flaky():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    server.lock, server.posts, server.failures, server.status = threading.Lock(), 0, 0, 503
    server.max_choices = 100
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server):
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("status", [429, 503, None])
def test_refused_and_dropped_requests_are_retried_with_backoff(flaky, status):
    flaky.failures, flaky.status = 3, status
    waits = []
    engine = ServedEngine(url(flaky), "m", retries=3, backoff=0.5, sleep=waits.append)
    engine.check()
    made = engine.complete("def f():\n", n=2, max_tokens=4)
    assert [c.text for c in made] == ["    return 0\n", "    return 1\n"]
    assert flaky.posts == 4
    assert len(waits) == 3  # doubling, with up to 10% jitter
    assert all(0.5 * 2**k <= w <= 0.55 * 2**k for k, w in enumerate(waits))


def test_a_rate_limit_outlasting_the_retries_stops_the_run_and_keeps_samples(flaky, tmp_path):
    problems = select_problems(load_problems(), limit=2)
    config = GenerateConfig(backend="openai", base_url=url(flaky), model="m",
                            output=tmp_path, n=1, batch_size=1, retries=1)  # fmt: skip
    generate_samples(config, select_problems(load_problems(), limit=1), progress=False)
    flaky.failures, flaky.status = 10**6, 429  # from now on every request is refused
    with pytest.raises(BackendError, match=r"after 1 retries.*--retries"):
        generate_samples(config, problems, progress=False)
    # the sample written before the limit is kept
    assert [r["task_id"] for r in read(tmp_path / "samples.jsonl")] == ["HumanEval/0"]
    flaky.failures, posts = 0, flaky.posts  # the limit lifts: the rerun completes the file
    generate_samples(config, problems, progress=False)
    assert flaky.posts - posts == 1  # HumanEval/1 alone: the kept sample is not asked again
    assert [r["task_id"] for r in read(tmp_path / "samples.jsonl")] == [
        "HumanEval/0",
        "HumanEval/1",
    ]


def test_cli_generates_from_a_served_model(served, tmp_path, capsys):
    from codeparrot.cli import main

    out = tmp_path / "gen"
    argv = ["eval", "generate", "--backend", "openai", "--base-url", served, "--model", "tiny",
            "--output", str(out), "--n", "2", "--batch-size", "2", "--max-new-tokens", "4",
            "--limit", "2", "--concurrency", "2"]  # fmt: skip
    assert main(argv) == 0
    assert "4 samples of 2 problems" in capsys.readouterr().out
    meta = json.loads((out / "samples.meta.json").read_text())
    assert meta["generation"]["backend"] == "openai" and meta["generation"]["model"] == "tiny"


def test_a_server_ignoring_n_is_told_to_use_batch_size_one(flaky):
    flaky.max_choices = 1  # a server that ignores n
    engine = ServedEngine(url(flaky), "m")
    with pytest.raises(BackendError, match=r"returned 1 choices.*--batch-size 1"):
        engine.complete("def f():\n", n=2, max_tokens=4)
    assert [c.text for c in engine.complete("def f():\n", n=1, max_tokens=4)] == ["    return 0\n"]
