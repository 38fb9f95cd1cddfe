"""Hostile requests to the playground: oversized, non-finite, failing, and a flood.

The playground here serves a fake engine that counts its calls and, when asked, holds
its generation until the test releases it, so the tests assert on counts and order,
never on wall-clock time.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterator

import pytest

from codeparrot.app.limits import GenerationSlots, RequestLimits, RequestRefused, check_request
from codeparrot.generation import Completion, StreamEvent

gradio_client = pytest.importorskip("gradio_client")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:Warning", "ignore:The copy keyword is deprecated:Warning"
)

LIMITS = RequestLimits(
    prompt_chars=1000, stop_sequences=4, stop_chars=10, candidates=8, max_new_tokens=64
)
FINE = dict(
    prompt="def f():\n", n=2, max_new_tokens=16, temperature=0.2, top_p=0.95, seed=-1,
    stop_text="\\ndef",
)  # fmt: skip


# -- the checks on their own -------------------------------------------------------------


def test_a_fine_request_passes():
    check_request(LIMITS, **FINE)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prompt": "x" * 1001}, "1,001 characters; this server accepts at most 1,000"),
        ({"prompt": None}, "prompt must be text"),
        ({"stop_text": "a\nb\nc\nd\ne"}, "stop list holds 5 strings; at most 4"),
        ({"stop_text": "x" * 11}, "stop list holds a string of 11 characters; at most 10"),
        ({"stop_text": "\n" * 100}, "stop sequences are 100 characters"),
        ({"temperature": math.nan}, "Temperature must be a finite number"),
        ({"temperature": math.inf}, "Temperature must be a finite number"),
        ({"top_p": "0.9"}, r"Top-p must be a number in \(0, 1\], got '0.9'"),
        ({"top_p": 0}, r"Top-p must be a number in \(0, 1\], got 0"),
        ({"seed": 2.0**70}, "Seed must be a whole number from -2\\*\\*63"),
        ({"n": 9}, "Number of candidates must be a whole number in 1..8"),
        ({"n": 1.5}, "Number of candidates must be a whole number"),
        ({"max_new_tokens": math.nan}, "Max new tokens must be a finite number"),
        ({"seed": math.nan}, "Seed must be a finite number"),
        ({"seed": 2.5}, "Seed must be a whole number"),
    ],
)
def test_each_bad_value_is_named(changes, message):
    with pytest.raises(RequestRefused, match=message):
        check_request(LIMITS, **{**FINE, **changes})


def test_slots_run_in_arrival_order_and_refuse_when_the_line_is_full():
    slots = GenerationSlots(running=1, waiting=2)
    first, second, third = slots.join(), slots.join(), slots.join()
    with pytest.raises(RequestRefused, match="busy: 2 generation request"):
        slots.join()
    assert [slots.ahead(t, timeout=0) for t in (first, second, third)] == [0, 1, 2]
    slots.leave(first)
    assert [slots.ahead(t, timeout=0) for t in (second, third)] == [0, 1]
    fourth = slots.join()  # room again
    slots.leave(third)  # one that gave up waiting
    assert slots.ahead(fourth, timeout=0) == 1 and slots.in_line == 2


def test_a_waiter_is_woken_when_its_turn_comes():
    slots = GenerationSlots(running=1, waiting=1)
    first, second = slots.join(), slots.join()
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(slots.ahead(second, timeout=30)))
    waiter.start()
    slots.leave(first)
    waiter.join(5)  # well before the waiter's own 30 s: only a wake-up ends it in time
    assert seen == [0]


# -- through the served page -------------------------------------------------------------


class FakeEngine:
    """Counts calls; each generation yields one piece, then waits for ``release``."""

    context_length = 256

    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.calls: list[str] = []
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.fail_with = fail_with

    def encode_prompt(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        self.calls.append("encode_prompt")
        return [0] * min(len(prompt), 10), False

    def count_tokens(self, text: str) -> int:
        self.calls.append("count_tokens")
        return len(text)

    def stream(self, prompt, config, cancel=None) -> Iterator[StreamEvent]:
        self.calls.append("stream")
        if self.fail_with is not None:
            raise self.fail_with
        self.started.release()
        for i in range(config.n):
            yield StreamEvent(i, "x")
        self.release.wait(60)
        for i in range(config.n):
            yield StreamEvent(i, "", Completion("x", "length", 1, 1, 0.01, seed=0))


def generate_args(playground, prompt="def f():\n", **kw):
    args = dict(max_new_tokens=16, temperature=0.2, top_p=0.95, n=1, seed=0,
                stop_mode="none", stop_text="", cut_repetition=True, suffix="")  # fmt: skip
    args.update(kw)
    return (next(iter(playground.pool.checkpoints)), prompt, *args.values())


def test_a_5_mb_prompt_is_refused_before_the_engine_sees_it(served):
    engine = FakeEngine()
    url, playground = served(engine)
    client = gradio_client.Client(url, verbose=False)
    with pytest.raises(gradio_client.exceptions.AppError, match="accepts at most 100,000"):
        client.predict(*generate_args(playground, "x" * 5_000_000), api_name="/generate")
    stops = "\n".join("s" * 1000 for _ in range(5000))
    with pytest.raises(gradio_client.exceptions.AppError, match="stop sequences"):
        client.predict(
            *generate_args(playground, stop_mode="stop sequences", stop_text=stops),
            api_name="/generate",
        )
    assert engine.calls == []
    assert playground.slots.in_line == 0


def raw_generate(url: str, playground, **changes) -> dict:
    """POST a /generate request as raw JSON (NaN included), return its final message."""
    config = httpx.get(f"{url}config").json()
    (fn,) = [d["id"] for d in config["dependencies"] if d.get("api_name") == "generate"]
    data = list(generate_args(playground, **changes))
    body = {"data": data, "fn_index": fn, "session_hash": "raw-client"}
    with httpx.Client(base_url=url, timeout=60) as http:
        joined = http.post(
            "gradio_api/queue/join",
            content=json.dumps(body),  # allow_nan: JSON with a bare NaN, as a hostile client
            headers={"content-type": "application/json"},
        )
        joined.raise_for_status()
        with http.stream("GET", "gradio_api/queue/data?session_hash=raw-client") as events:
            for line in events.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if message.get("msg") == "process_completed":
                        return message
    raise AssertionError("no process_completed message")


@pytest.mark.parametrize("field", ["temperature", "top_p", "seed", "n"])
def test_non_finite_numbers_are_refused(served, field):
    engine = FakeEngine()
    url, playground = served(engine)
    message = raw_generate(url, playground, **{field: math.nan})
    assert message["success"] is False
    assert "must be a finite number" in message["output"]["error"]
    assert engine.calls == []


def test_clients_see_a_short_error_and_the_log_keeps_the_traceback(served, caplog):
    engine = FakeEngine(fail_with=RuntimeError("secret detail of /srv/models/private.bin"))
    url, playground = served(engine)
    client = gradio_client.Client(url, verbose=False)
    with (
        caplog.at_level(logging.ERROR, logger="codeparrot.app.ui"),
        pytest.raises(gradio_client.exceptions.AppError) as err,
    ):
        client.predict(*generate_args(playground), api_name="/generate")
    assert "Generation failed on the server" in str(err.value)
    assert "secret detail" not in str(err.value) and "RuntimeError" not in str(err.value)
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "secret detail" in str(logged[0].exc_info[1])
    assert playground.slots.in_line == 0  # the failed generation gave its place back


def test_stop_and_model_card_answer_during_a_flood(served):
    engine = FakeEngine()
    url, playground = served(engine, queue_size=19)
    flood = gradio_client.Client(url, verbose=False)
    jobs = [flood.submit(*generate_args(playground), api_name="/generate") for _ in range(24)]
    assert engine.started.acquire(timeout=60)  # one runs, held until release
    deadline = time.monotonic() + 60
    while sum(j.done() for j in jobs) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    refused = [j for j in jobs if j.done()]
    assert len(refused) == 4  # 1 running + 19 waiting; the rest are turned away at once
    for job in refused:
        with pytest.raises(gradio_client.exceptions.AppError, match="busy"):
            job.result()
    assert playground.slots.in_line == 20

    user = gradio_client.Client(url, verbose=False)  # another session, during the flood
    card = user.predict(next(iter(playground.pool.checkpoints)), api_name="/model_card")
    user.predict(api_name="/stop")
    assert card[0] and not engine.release.is_set()
    assert engine.calls.count("stream") == 1 and playground.slots.in_line == 20

    engine.release.set()
    for job in jobs:
        if job not in refused:
            assert job.result(timeout=120)[1][0]["finish_reason"] == "length"
    assert engine.calls.count("stream") == 20 and playground.slots.in_line == 0


def test_stop_takes_a_waiting_request_out_of_line(served):
    engine = FakeEngine()
    url, playground = served(engine)
    busy = gradio_client.Client(url, verbose=False)
    running = busy.submit(*generate_args(playground), api_name="/generate")
    assert engine.started.acquire(timeout=60)
    waiter = gradio_client.Client(url, verbose=False)  # its own session
    waiting = waiter.submit(*generate_args(playground), api_name="/generate")
    deadline = time.monotonic() + 60
    while playground.slots.in_line < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert playground.slots.in_line == 2
    waiter.predict(api_name="/stop")
    notice = waiting.result(timeout=60)[0]  # still shown since the waiting frame: a plain text
    assert "Stopped before it started" in (notice if isinstance(notice, str) else notice["value"])
    assert engine.calls.count("stream") == 1 and playground.slots.in_line == 1
    engine.release.set()
    assert running.result(timeout=60)[1][0]["finish_reason"] == "length"
