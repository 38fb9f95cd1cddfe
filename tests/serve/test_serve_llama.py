"""llama.cpp's ``/infill``, ``/completion`` and ``/health``, asked as llama.vim and
llama.vscode ask them (request shapes read from their sources: the fields, their types and
their values; the code is ours)."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from codeparrot.serve.config import ServeConfig
from codeparrot.serve.server import make_server

TIMING_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]


def llama_vim_request(prefix: str, middle: str, suffix: str, extra: list) -> dict:
    """What llama.vim's FIM call sends: the lines before the cursor's line, the text
    before the cursor on it (``prompt``), the rest, its ring-buffer chunks and settings."""
    return {
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": extra,
        "prompt": middle,
        "n_predict": 20,
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
        "response_fields": TIMING_FIELDS,
    }


def llama_vscode_request(prefix: str, middle: str, suffix: str, extra: list) -> dict:
    """What llama.vscode's completion call sends (its default request parameters
    spread in, ``n_indent`` only when the line is indented)."""
    return {
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": extra,
        "prompt": middle,
        "n_predict": 20,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "n_indent": 4,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 2500,
        "id_slot": 0,
    }


def warm_up_request(extra: list) -> dict:
    """Both plugins' ring-buffer warm-up: no prediction, only the extra context."""
    return {
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": extra,
        "prompt": "",
        "n_predict": 0,
        "samplers": [],
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }


EXTRA = [{"text": "import math\n", "time": 1700000000, "filename": "util.py"}]


def call(srv, payload, path):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(
        srv.url + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def answer(srv, payload, path="/infill"):
    status, body = call(srv, payload, path)
    assert status == 200, body
    if not payload.get("stream"):
        return json.loads(body)
    events = [e for e in body.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and "[DONE]" not in body
    return [json.loads(e.removeprefix("data: ")) for e in events]


def start(engine, checkpoint, **settings):
    srv = make_server(ServeConfig(checkpoint=checkpoint, port=0, **settings), engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def fim(tmp_path_factory):
    from codeparrot.generation import Engine

    path = Path(__file__).parent.parent / "core" / "test_generation_fim.py"
    spec = importlib.util.spec_from_file_location("_llama_fim_snippet", path)
    snippet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snippet)
    checkpoint = snippet.build_fim_checkpoint(tmp_path_factory.mktemp("fim") / "checkpoint")
    srv = start(Engine.load(checkpoint, device="cpu"), checkpoint)
    yield srv, snippet
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def plain(tiny_checkpoint):
    from codeparrot.generation import Engine

    engine = Engine.load(tiny_checkpoint, device="cpu", quantize="none")
    srv = start(engine, tiny_checkpoint)
    yield srv, engine
    srv.shutdown()
    srv.server_close()


def split(snippet):
    """The snippet as an editor plugin cuts it: lines before, the cursor line's start, after."""
    lines_before, _, middle = snippet.PREFIX.rpartition("\n")
    return lines_before + "\n", middle, snippet.SUFFIX


# -- /infill ---------------------------------------------------------------------------


def test_llama_vim_gets_the_middle_with_the_fields_it_reads(fim):
    srv, snippet = fim
    got = answer(srv, llama_vim_request(*split(snippet), []))
    assert got["content"] == snippet.MIDDLE
    # response_fields: exactly the paths asked for, each under its own name
    assert set(got) == set(TIMING_FIELDS)
    assert got["timings/predicted_n"] >= 1 and got["timings/prompt_n"] >= 1
    assert got["truncated"] is False


def test_llama_vscode_gets_the_middle_in_llama_cpp_shape(fim):
    srv, snippet = fim
    got = answer(srv, llama_vscode_request(*split(snippet), []))
    assert got["content"] == snippet.MIDDLE and got["stop"] is True
    assert got["stop_type"] == "eos"
    assert got["timings"]["predicted_n"] == got["tokens_predicted"] >= 1
    # a prompt read again comes from the prompt cache: llama.cpp counts only new tokens
    assert got["timings"]["prompt_n"] + got["tokens_cached"] == got["tokens_evaluated"]


def test_llama_vscode_gets_its_parallel_completions(fim):
    """Recent llama.vscode sends n_cmpl (its max_parallel_completions, 3 by default)
    and reads an array of answers, one per completion, as llama.cpp sends them."""
    srv, snippet = fim
    request = llama_vscode_request(*split(snippet), []) | {"n_cmpl": 3}
    got = answer(srv, request)
    assert isinstance(got, list) and [a["index"] for a in got] == [0, 1, 2]
    assert all(a["stop"] is True and isinstance(a["content"], str) for a in got)
    greedy = answer(srv, request | {"temperature": 0})
    assert [a["content"] for a in greedy] == [snippet.MIDDLE] * 3
    one = answer(srv, request | {"n_cmpl": 1, "temperature": 0})  # one object, as before
    assert isinstance(one, dict) and one["content"] == snippet.MIDDLE
    streamed = answer(srv, request | {"temperature": 0, "stream": True})
    ends = [e for e in streamed if e["stop"]]
    assert sorted(e["index"] for e in ends) == [0, 1, 2]
    for i in range(3):
        assert "".join(e["content"] for e in streamed if e["index"] == i) == snippet.MIDDLE


@pytest.mark.parametrize(
    "change", [{"n_cmpl": 9}, {"n_cmpl": 0}, {"n_cmpl": "3"}, {"n_cmpl": 2, "n": 3}]
)
def test_n_cmpl_beyond_the_servers_bound_is_a_400_naming_it(fim, change):
    srv, snippet = fim
    status, body = call(srv, llama_vscode_request(*split(snippet), []) | change, "/infill")
    error = json.loads(body)["error"]
    assert status == 400 and error["param"] == "n_cmpl" and "n_cmpl" in error["message"]


def test_extra_context_goes_before_the_prefix(fim, monkeypatch):
    from codeparrot.generation import Engine

    srv, snippet = fim
    prompts = []
    real = Engine.stream

    def stream(self, prompt, *args, **kwargs):
        prompts.append(prompt)
        return real(self, prompt, *args, **kwargs)

    monkeypatch.setattr(Engine, "stream", stream)
    bare = answer(srv, llama_vscode_request(*split(snippet), []))
    with_extra = answer(srv, llama_vscode_request(*split(snippet), EXTRA))
    assert with_extra["tokens_evaluated"] > bare["tokens_evaluated"]
    # the extra file's text, then the prefix the editor sent (its lines and the cursor's)
    assert prompts[-1].startswith(EXTRA[0]["text"]) and prompts[-1].endswith(snippet.PREFIX)


def test_infill_reuses_the_prompt_start_unless_cache_prompt_is_false(fim):
    """The plugins' next request after a keystroke starts as the last one: its
    ``tokens_cached`` counts what it took from the prompt cache (llama.cpp's default is
    cache_prompt true); false prefills it whole."""
    srv, snippet = fim
    before, middle, after = split(snippet)
    answer(srv, llama_vscode_request(before, middle, after, []))
    typed = llama_vscode_request(before, middle + "x = 1", after, [])
    exact = answer(srv, typed | {"cache_prompt": False})
    assert exact["tokens_cached"] == 0 and exact["timings"]["prompt_n"] > 0
    typed = llama_vscode_request(before, middle + "y = 2", after, [])
    reused = answer(srv, typed)  # cache_prompt true, as the plugins send it
    assert 0 < reused["tokens_cached"] < reused["tokens_evaluated"]


def test_the_warm_up_is_answered_without_generating(fim):
    srv, _ = fim
    assert answer(srv, warm_up_request(EXTRA)) == {}


def test_a_streamed_infill_sends_the_same_middle(fim):
    srv, snippet = fim
    request = llama_vscode_request(*split(snippet), []) | {"stream": True}
    events = answer(srv, request)
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert "".join(e["content"] for e in events) == snippet.MIDDLE


BAD_INFILL = [
    ({"input_prefix": 3}, "input_prefix"),
    ({"input_suffix": ["x"]}, "input_suffix"),
    ({"input_extra": "import os"}, "input_extra"),
    ({"input_extra": [{"text": 3, "filename": "a.py"}]}, "input_extra"),
    ({"input_extra": [{"text": "a", "filename": 1}]}, "input_extra"),
    ({"input_extra": ["import os"]}, "input_extra"),
    ({"prompt": 12}, "prompt"),
    ({"n_predict": "20"}, "n_predict"),
    ({"n_predict": 2.5}, "n_predict"),
    ({"n_indent": -1}, "n_indent"),
    ({"top_k": "40"}, "top_k"),
    ({"top_p": 2}, "top_p"),
    ({"samplers": 3}, "samplers"),
    ({"response_fields": [1]}, "response_fields"),
    ({"t_max_predict_ms": "fast"}, "t_max_predict_ms"),
    ({"stream": "no"}, "stream"),
    ({"cache_prompt": "true"}, "cache_prompt"),
    ({"cache_prompt": True, "mirostat": 2}, "mirostat"),
    ({"grammar_lazy": True}, "grammar_lazy"),
]


@pytest.mark.parametrize(("change", "param"), BAD_INFILL, ids=[b[1] for b in BAD_INFILL])
def test_a_field_of_the_wrong_type_is_a_400_naming_it(fim, change, param):
    srv, snippet = fim
    status, body = call(srv, llama_vim_request(*split(snippet), []) | change, "/infill")
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["param"] == param and param in error["message"]


def test_infill_to_a_model_without_fim_is_a_400(plain):
    srv, _ = plain
    status, body = call(srv, llama_vim_request("def f():\n", "    ", "\n", []), "/infill")
    assert status == 400 and json.loads(body)["error"]["param"] == "input_suffix"


# -- /completion and /health -------------------------------------------------------------


def test_completion_writes_what_the_openai_endpoint_writes(plain):
    srv, _ = plain
    asked = {"prompt": "def fibonacci(n):\n", "n_predict": 12, "temperature": 0, "seed": 0}
    got = answer(srv, asked, "/completion")
    status, body = call(
        srv, {"prompt": asked["prompt"], "max_tokens": 12, "temperature": 0}, "/v1/completions"
    )
    assert status == 200, body
    assert got["content"] == json.loads(body)["choices"][0]["text"]
    assert got["tokens_predicted"] <= 12 and got["stop"] is True


class CachedCounts:
    """The real engine, recording how many prompt tokens each call took from the cache."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.cached: list[int] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def stream(self, *args, **kwargs):
        for event in self.engine.stream(*args, **kwargs):
            if event.completion is not None:
                self.cached.append(event.completion.prompt_cached_tokens)
            yield event


START = "def fibonacci(n):\n    if n < 2:\n        return n\n"


@pytest.mark.parametrize("path", ["/completion", "/v1/completions"])
def test_cache_prompt_reuses_a_kept_start_only_when_asked(plain, tiny_checkpoint, path):
    """llama.cpp's cache_prompt: true (its default, on /completion and /infill) prefills
    only what follows a kept prompt's start; false (and /v1/completions' default) prefills
    the whole prompt in one pass, so that its text never depends on earlier requests."""
    _, engine = plain
    counting = CachedCounts(engine)
    srv = start(counting, tiny_checkpoint)
    budget = {"n_predict": 2} if path == "/completion" else {"max_tokens": 2}
    try:
        engine.prompt_cache.clear()
        answer(srv, {"prompt": START, "temperature": 0} | budget, path)
        for ending, flag in [("    a = 1", False), ("    b = 2", True), ("    c = 3", None)]:
            asked = {"prompt": START + ending, "temperature": 0} | budget
            if flag is not None:
                asked["cache_prompt"] = flag
            answer(srv, asked, path)
        shared = engine.count_tokens(START)
        no, yes, default = counting.cached[1:]
        assert no == 0 and yes >= shared - 1
        assert default == (yes if path == "/completion" else 0)
    finally:
        engine.prompt_cache.clear()
        srv.shutdown()
        srv.server_close()


def test_completion_takes_token_ids_and_streams(plain):
    srv, engine = plain
    ids = engine.tokenizer("def fibonacci(n):\n")["input_ids"]
    asked = {"prompt": ids, "n_predict": 12, "temperature": 0}
    whole = answer(srv, asked, "/completion")
    events = answer(srv, asked | {"stream": True}, "/completion")
    assert "".join(e["content"] for e in events) == whole["content"]


def test_health_says_ok(plain):
    srv, _ = plain
    with urllib.request.urlopen(srv.url + "/health", timeout=10) as resp:
        assert json.loads(resp.read()) == {"status": "ok"}


# -- n_indent and t_max_predict_ms -------------------------------------------------------


class Scripted:
    """Writes ``text`` a few characters per event, ``delay`` seconds apart; honours cancel."""

    context_length = 256
    bos_ids = ()

    def __init__(self, text: str, delay: float = 0.0) -> None:
        self.text = text
        self.delay = delay
        self.sent = 0

    def infill_template(self, fim_tokens=""):
        return None

    def count_tokens(self, text):
        return len(text)

    def stream(self, prompt, generation, cancel, **extra):
        from codeparrot.generation.engine import Completion, StreamEvent

        reason, self.sent = "length", 0
        for start in range(0, len(self.text), 2):
            if cancel.is_set():
                reason = "cancelled"
                break
            time.sleep(self.delay)
            self.sent = start + 2
            yield StreamEvent(0, self.text[start : start + 2])
        yield StreamEvent(0, "", Completion(self.text[: self.sent], reason, 3, self.sent // 2, 0.1))


@pytest.mark.parametrize("stream", [False, True])
def test_n_indent_ends_the_text_before_a_line_indented_less(tmp_path, stream):
    engine = Scripted("x = 1\n    if x:\n\n        y\nz = 2\nmore = 3\n" * 3)
    srv = start(engine, tmp_path)
    try:
        got = answer(srv, {"prompt": "    ", "n_indent": 4, "stream": stream}, "/completion")
        final = got[-1] if stream else got
        text = "".join(e["content"] for e in got) if stream else got["content"]
        assert text == "x = 1\n    if x:\n\n        y\n"
        assert final["stop_type"] == "limit"
        assert engine.sent < len(engine.text)  # generation stopped with the answer known
    finally:
        srv.shutdown()
        srv.server_close()


def test_t_max_predict_ms_stops_after_a_line_once_the_time_is_up(tmp_path):
    engine = Scripted("a = 1\n" * 200, delay=0.01)
    srv = start(engine, tmp_path)
    try:
        got = answer(srv, {"prompt": "x", "t_max_predict_ms": 100}, "/completion")
        assert got["stop_type"] == "limit"
        assert 0 < len(got["content"]) < len(engine.text)
    finally:
        srv.shutdown()
        srv.server_close()
