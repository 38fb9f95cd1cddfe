"""The playground's background sampler: batching, errors, and stopping the thread.

Its batches are an async iterator on the event loop (Gradio's, in the app); each test
runs one loop of its own."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from codeparrot.app.ui import _events_in_background
from codeparrot.errors import ConfigError
from codeparrot.generation import Completion, GenerationConfig, StreamEvent


class ScriptedEngine:
    """Yields one event per piece, ``delay`` seconds apart; honours ``cancel`` per piece."""

    def __init__(self, pieces: list[str], delay: float = 0.0, fail_after: int | None = None):
        self.pieces = pieces
        self.delay = delay
        self.fail_after = fail_after
        self.produced = 0
        self.stopped = threading.Event()

    def stream(self, prompt, config, cancel=None):
        try:
            for i, piece in enumerate(self.pieces):
                if cancel is not None and cancel.is_set():
                    return
                if self.fail_after is not None and i == self.fail_after:
                    raise ConfigError("scripted failure")
                time.sleep(self.delay)
                self.produced += 1
                yield StreamEvent(0, piece)
            yield StreamEvent(
                0, "", Completion("".join(self.pieces), "length", 1, len(self.pieces), 0.1)
            )
        finally:
            self.stopped.set()


def batches_of(engine, interval, cancel=None):
    return _events_in_background(
        engine, "p", GenerationConfig(), cancel or threading.Event(), interval
    )


async def every_batch(gen) -> list:
    return [batch async for batch in gen]


def test_every_event_arrives_once_in_order():
    engine = ScriptedEngine([f"t{i} " for i in range(50)])

    async def run():
        return await every_batch(batches_of(engine, 0.0))

    events = [e for b in asyncio.run(run()) for e in b]
    assert "".join(e.delta for e in events) == "".join(engine.pieces)
    assert events[-1].completion is not None and events[-1].completion.text == "".join(
        engine.pieces
    )


def test_slow_reader_gets_coalesced_batches():
    engine = ScriptedEngine([f"t{i} " for i in range(40)], delay=0.005)

    async def run():
        gen = batches_of(engine, 0.0)
        first = await anext(gen)
        if not first:  # no token yet when the first batch went out
            first = await anext(gen)
        deadline = time.monotonic() + 10
        while engine.produced < len(first) + 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the page is busy; sampling goes on meanwhile
        assert engine.produced >= len(first) + 10
        second = await anext(gen)
        assert len(second) > 5
        rest = [e for b in await every_batch(gen) for e in b]
        assert len(first) + len(second) + len(rest) == 41

    asyncio.run(run())


def test_errors_of_the_sampler_reach_the_reader():
    engine = ScriptedEngine(["a", "b", "c"], fail_after=2)

    async def run():
        return await every_batch(batches_of(engine, 0.0))

    with pytest.raises(ConfigError, match="scripted failure"):
        asyncio.run(run())


def test_setting_cancel_ends_the_sampling_thread():
    engine = ScriptedEngine([f"t{i}" for i in range(10_000)], delay=0.001)
    cancel = threading.Event()

    async def run():
        gen = batches_of(engine, 0.01, cancel)
        await anext(gen)
        await gen.aclose()
        cancel.set()  # what the playground does when the page stops reading

    asyncio.run(run())
    assert engine.stopped.wait(5)
    assert engine.produced < 10_000


def test_the_first_token_goes_out_at_once_and_later_ones_at_most_every_interval():
    engine = ScriptedEngine([f"t{i} " for i in range(10_000)], delay=0.002)
    cancel = threading.Event()

    async def run():
        start = time.monotonic()
        gen = batches_of(engine, 0.5, cancel)
        first = await anext(gen)
        took = time.monotonic() - start
        assert took < 0.4 and first  # not held back for the update interval
        second = await anext(gen)
        assert time.monotonic() - start >= 0.5 - 0.01  # the next update waits out the interval
        assert len(second) > 1  # and carries what came meanwhile
        await gen.aclose()

    asyncio.run(run())
    cancel.set()
    assert engine.stopped.wait(5)


def test_the_first_batch_waits_an_interval_at_most_for_the_first_token():
    engine = ScriptedEngine(["a", "b"], delay=0.5)

    async def run():
        gen = batches_of(engine, 0.05)
        start = time.monotonic()
        assert await anext(gen) == []  # no token yet: the page learns the generation started
        assert time.monotonic() - start < 0.4
        assert [e.delta for e in await anext(gen)] == ["a"]  # then the first token at once
        assert "".join(e.delta for b in await every_batch(gen) for e in b) == "b"

    asyncio.run(run())


def test_sampling_waits_while_the_first_token_is_with_the_reader():
    engine = ScriptedEngine([f"t{i} " for i in range(20)])

    async def run():
        gen = batches_of(engine, 5.0)
        first = await anext(gen)
        assert [e.delta for e in first] == ["t0 "]
        time.sleep(0.2)  # the reader (Gradio sending the first update) is busy
        assert engine.produced == 1
        rest = [e for b in await every_batch(gen) for e in b]  # back for more: sampling goes on
        assert len(rest) == 20 and engine.produced == 20

    asyncio.run(run())


def test_blank_first_tokens_do_not_hold_back_the_first_text():
    # after a prompt's last line the first tokens are often a newline and indentation,
    # which the page does not show: the first token that shows goes out at once too
    engine = ScriptedEngine(["\n", "    ", "return"] + [f" t{i}" for i in range(10)])

    async def run():
        gen = batches_of(engine, 5.0)
        start = time.monotonic()
        batches = [await anext(gen)]
        while not any(e.delta.strip() for e in batches[-1]):
            batches.append(await anext(gen))
        assert time.monotonic() - start < 2  # not an interval (5 s) between them
        assert [e.delta for b in batches for e in b] == ["\n", "    ", "return"]
        rest = [e for b in await every_batch(gen) for e in b]
        assert len(rest) == 11

    asyncio.run(run())
