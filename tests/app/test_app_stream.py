"""The page's own stream of ``/generate`` (codeparrot.app.stream): frames, refusals, the
shared line of generation slots, Stop and a page that goes away.

The playground serves a fake engine that yields one piece per candidate and then holds
the generation until the test releases it or it is cancelled, so the tests assert on
what arrives and in which order, never on wall-clock time."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from codeparrot.app.stream import STREAM_PATH, FrameDeltas, parse_generation
from codeparrot.generation import Completion, StreamEvent

httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:Warning", "ignore:The copy keyword is deprecated:Warning"
)


class HeldEngine:
    """Yields ``piece`` for each candidate, then waits for ``release`` or the cancel."""

    context_length = 256

    def __init__(self, piece: str = " return 1") -> None:
        self.piece = piece
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.cancelled = threading.Event()

    def encode_prompt(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        return [0] * min(len(prompt), 10), False

    def stream(self, prompt, config, cancel=None) -> Iterator[StreamEvent]:
        self.started.release()
        for i in range(config.n):
            yield StreamEvent(i, self.piece)
        while not self.release.wait(0.01):
            if cancel is not None and cancel.is_set():
                self.cancelled.set()
                return
        for i in range(config.n):
            yield StreamEvent(i, "", Completion(self.piece, "length", 1, 1, 0.01, seed=0))


def inputs(playground, prompt: str = "def f():\n", **changes) -> dict:
    out = dict(checkpoint=next(iter(playground.pool.checkpoints)), prompt=prompt,
               max_new_tokens=16, temperature=0.2, top_p=0.95, n=1, seed=0,
               stop_mode="none", stop_text="", cut_repetition=False, suffix="")  # fmt: skip
    out.update(changes)
    return out


class Lines:
    """The stream's lines as the page reads them, the texts rebuilt from their appends
    (dropping it closes the connection: httpx closes a stream whose reader is dropped)."""

    def __init__(self, response) -> None:
        self.lines = response.iter_lines()
        self.values: dict[int, object] = {}

    def next(self) -> dict:
        message = json.loads(next(self.lines))
        for key, value in message.get("frame", {}).items():
            if isinstance(value, dict) and "__append__" in value:
                value = self.values[int(key)] + value["__append__"]
            elif isinstance(value, dict) and "value" in value:
                value = value["value"]
            self.values[int(key)] = value
        return message


def post(http, playground, session: str = "page-1", **changes):
    body = {"session_hash": session, "inputs": inputs(playground, **changes)}
    return http.stream("POST", STREAM_PATH, json=body)


def test_frames_stream_the_candidate_then_its_finished_label(served):
    engine = HeldEngine()
    url, playground = served(engine)
    with httpx.Client(base_url=url, timeout=30) as http, post(http, playground) as answer:
        assert answer.status_code == 200
        lines = Lines(answer)
        editor = lines.next()["frame"]["2"]  # candidate 1: every property
        assert editor["visible"] is True and "generating" in editor["label"]
        while lines.values[2] != "def f():\n return 1":  # the token, as the page shows it
            assert "error" not in lines.next()
        engine.release.set()
        rest = [json.loads(line) for line in lines.lines]
        assert all("error" not in m for m in rest)
    editors = [m["frame"].get("2") for m in rest]
    labels = [e.get("label", "") for e in editors if isinstance(e, dict)]
    assert any("1 tokens" in label and "length" in label for label in labels)
    assert playground.slots.in_line == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"temperature": "hot"}, "Temperature must be"),
        ({"prompt": "   "}, "The prompt is empty"),
        ({"n": 9}, "Number of candidates must be a whole number in 1..8"),
    ],
)
def test_a_refused_request_gets_a_plain_answer_naming_the_value(served, changes, message):
    engine = HeldEngine()
    url, playground = served(engine)
    with httpx.Client(base_url=url, timeout=30) as http:
        answer = http.post(STREAM_PATH, json={"inputs": inputs(playground, **changes)})
    assert answer.status_code == 400 and message in answer.json()["error"]
    assert playground.slots.in_line == 0


def test_a_malformed_body_is_refused_saying_why(served):
    url, playground = served(HeldEngine())
    with httpx.Client(base_url=url, timeout=30) as http:
        not_json = http.post(
            STREAM_PATH, content=b"{nope", headers={"Content-Type": "application/json"}
        )
        unknown = http.post(STREAM_PATH, json={"inputs": {**inputs(playground), "model": "x"}})
        missing = http.post(STREAM_PATH, json={"inputs": {"prompt": "x"}})
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]
    assert "unknown inputs: model" in unknown.json()["error"]
    assert "missing inputs: checkpoint" in missing.json()["error"]


def test_a_body_another_site_could_post_unasked_is_refused(served):
    """text/plain and forms need no CORS preflight, so a page of another site could send
    them to a playground on localhost: only application/json starts a generation."""
    engine = HeldEngine()
    url, playground = served(engine)
    body = json.dumps({"inputs": inputs(playground)}).encode()
    with httpx.Client(base_url=url, timeout=30) as http:
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": kind} if kind else {}
            answer = http.post(STREAM_PATH, content=body, headers=headers)
            assert answer.status_code == 415 and "application/json" in answer.json()["error"]
    assert engine.started.acquire(timeout=0) is False
    assert playground.slots.in_line == 0


def test_a_body_over_the_limit_is_refused_unread(served):
    url, playground = served(HeldEngine(), max_prompt_chars=1000)
    with httpx.Client(base_url=url, timeout=30) as http:
        answer = http.post(STREAM_PATH, json={"inputs": inputs(playground, "x" * 2_000_000)})
    assert answer.status_code == 413 and "bytes" in answer.json()["error"]
    assert playground.slots.in_line == 0


def test_the_stream_waits_in_the_same_line_as_generate(served):
    """One slot, one place to wait: a second stream waits, a third is refused, and a
    /generate through Gradio's queue finds the line full too."""
    engine = HeldEngine()
    url, playground = served(engine, concurrency=1, queue_size=1)
    with httpx.Client(base_url=url, timeout=30) as http, post(http, playground) as first:
        running = Lines(first)  # kept: a line reader dropped closes its connection
        running.next()
        with post(http, playground, session="page-2") as second:
            waiting_lines = Lines(second)
            waiting = waiting_lines.next()["frame"]
            assert "1 generation(s) ahead" in waiting["0"]["value"]
            third = http.post(STREAM_PATH, json={"inputs": inputs(playground)})
            assert third.status_code == 400 and "busy" in third.json()["error"]
            from gradio_client import Client
            from gradio_client.exceptions import AppError

            client = Client(url, verbose=False)
            with pytest.raises(AppError, match="busy"):
                client.predict(*inputs(playground).values(), api_name="/generate")
            engine.release.set()


def test_stop_of_the_session_ends_its_stream(served):
    engine = HeldEngine()
    url, playground = served(engine)

    class Request:  # the page's /stop carries its session
        session_hash = "page-1"

    with httpx.Client(base_url=url, timeout=30) as http, post(http, playground) as answer:
        lines = Lines(answer)
        lines.next()
        playground.stop(Request())
        assert engine.cancelled.wait(10)
        tail = [json.loads(line) for line in lines.lines]  # the stream ends
    assert tail and all("error" not in m for m in tail)
    assert playground.slots.in_line == 0


def test_a_page_that_goes_away_frees_its_slot(served):
    engine = HeldEngine()
    url, playground = served(engine)
    with httpx.Client(base_url=url, timeout=30) as http:
        with post(http, playground) as answer:
            lines = Lines(answer)  # kept until the connection closes below
            lines.next()
            assert playground.slots.in_line == 1
        # the connection closed mid-stream: the generation is cancelled, its place given back
        assert engine.cancelled.wait(10)
        deadline = time.monotonic() + 10
        while playground.slots.in_line and time.monotonic() < deadline:
            time.sleep(0.01)
    assert playground.slots.in_line == 0


class FailingEngine(HeldEngine):
    """Yields its piece, then fails with a detail the page must not see."""

    def stream(self, prompt, config, cancel=None) -> Iterator[StreamEvent]:
        yield StreamEvent(0, self.piece)
        raise RuntimeError("secret detail of /srv/models/private.bin")


def test_a_failure_after_the_first_frame_ends_the_stream_with_a_short_line(served, caplog):
    url, playground = served(FailingEngine())
    with (
        caplog.at_level(logging.ERROR, logger="codeparrot.app.ui"),
        httpx.Client(base_url=url, timeout=30) as http,
        post(http, playground) as answer,
    ):
        messages = [json.loads(line) for line in answer.iter_lines()]
    assert "frame" in messages[0]
    assert messages[-1] == {
        "error": "Generation failed on the server (the server's log has the details)."
    }
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "secret detail" in str(logged[0].exc_info[1])
    assert playground.slots.in_line == 0


def test_frame_deltas_send_what_changed_and_grown_text_as_its_tail():
    deltas = FrameDeltas()
    details = [{"candidate": 1}]
    first = deltas.encode(["", details, {"__type__": "update", "value": "ab", "label": "x"}])
    assert first == {
        "0": "",
        "1": details,
        "2": {"__type__": "update", "value": "ab", "label": "x"},
    }
    assert deltas.encode(["", details, "abcd"]) == {"2": {"__append__": "cd"}}
    assert deltas.encode(["", details, "abcd"]) == {}
    assert deltas.encode(["", [{"candidate": 1}], "xy"]) == {"1": [{"candidate": 1}], "2": "xy"}


def test_parse_generation_names_what_is_wrong():
    session, fields = parse_generation(b'{"session_hash": "s", "inputs": {}}'.replace(
        b"{}", json.dumps({k: 1 for k in ("checkpoint", "prompt", "max_new_tokens",
        "temperature", "top_p", "n", "seed", "stop_mode", "stop_text")}).encode()))  # fmt: skip
    assert session == "s" and "suffix" not in fields
    with pytest.raises(ValueError, match="session_hash must be text"):
        parse_generation(b'{"session_hash": 3, "inputs": {}}')
    with pytest.raises(ValueError, match="must be"):
        parse_generation(b"[1, 2]")
