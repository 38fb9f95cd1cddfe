"""``codeparrot serve --cut-repetition`` cuts a unit repeated at a line end, whole or streamed.

A scripted engine stands for a model that fell into a loop (the suggestions an
undertrained model showed in the editor); the tiny checkpoint shows that a stream and a
whole answer agree for the same seed. A stream never sends text it would have to take back.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.request

import pytest

from codeparrot.generation.repetition import LineEndRepetitionStream, cut_line_end_repetition
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.server import make_server


class ScriptedEngine:
    """Answers every prompt with ``text``, streamed ``piece`` characters at a time."""

    context_length = 256

    def __init__(self, text: str, piece: int = 2) -> None:
        self.text = text
        self.piece = piece

    def infill_template(self, fim_tokens: str = ""):
        return None

    def count_tokens(self, text: str) -> int:
        return len(text)

    def stream(self, prompt, generation, cancel, **extra):
        from codeparrot.generation.engine import Completion, StreamEvent

        n = getattr(generation, "n", 1)  # every candidate writes the text, interleaved
        for start in range(0, len(self.text), self.piece):
            for index in range(n):
                yield StreamEvent(index, self.text[start : start + self.piece])
        done = Completion(self.text, "length", 3, len(self.text), 0.01, seed=generation.seed)
        for index in range(n):
            yield StreamEvent(index, "", done)


def serve(tmp_path, engine, **settings):
    srv = make_server(ServeConfig(checkpoint=tmp_path, port=0, **settings), engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def post(srv, payload) -> str:
    """The text of the one choice: joined from the chunks when ``stream``."""
    req = urllib.request.Request(
        srv.url + "/v1/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read().decode()
    if not payload.get("stream"):
        return [c["text"] for c in json.loads(body)["choices"]]
    texts: dict[int, str] = {}
    for event in body.split("\n\n"):
        data = event.removeprefix("data: ")
        if data and data != "[DONE]":
            for choice in json.loads(data)["choices"]:
                texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    return [texts[i] for i in sorted(texts)]


DEGENERATE = [
    ("    ", "for q in = = = = = = = = = = =", "for q in"),
    ("    ", "dtemp.unkunkunkunkunkunkunkunk", "dtemp"),
    ("class A:\n    ", "def __init________________", "def __init"),
    ("def f(x):\n", "    y = x.bar\n    return y.unkunkunkunkunk\n    z = 1", "    y = x.bar\n    return y"),
]  # fmt: skip


@pytest.mark.parametrize(("prompt", "raw", "expected"), DEGENERATE)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("n", [1, 2])
def test_degenerate_suggestions_are_cut_whole_and_streamed(
    tmp_path, prompt, raw, expected, stream, n
):
    """Each choice is cut, whole or streamed (its own hold-back where choices interleave)."""
    srv = serve(tmp_path, ScriptedEngine(raw), cut_repetition=True)
    try:
        assert post(srv, {"prompt": prompt, "stream": stream, "n": n}) == [expected] * n
    finally:
        srv.shutdown()
        srv.server_close()


HONEST = [
    ('def f():\n    """Title.\n\n    ', "==========\n    "),
    ("MASK = ", "0x00000000\nN = 1000000"),
    ("x = compute()  ", "# ------------"),
]


@pytest.mark.parametrize(("prompt", "raw"), HONEST)
@pytest.mark.parametrize("stream", [False, True])
def test_rulers_and_numbers_are_kept(tmp_path, prompt, raw, stream):
    srv = serve(tmp_path, ScriptedEngine(raw, piece=1), cut_repetition=True)
    try:
        assert post(srv, {"prompt": prompt, "stream": stream}) == [raw]
    finally:
        srv.shutdown()
        srv.server_close()


def test_by_default_the_text_is_sent_as_generated(tmp_path):
    raw = DEGENERATE[0][1]
    srv = serve(tmp_path, ScriptedEngine(raw))  # the default: what the model wrote
    try:
        assert post(srv, {"prompt": "    "}) == [raw]
        assert post(srv, {"prompt": "    ", "stream": True}) == [raw]
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_stream_never_sends_what_the_cut_takes_back():
    """Random loops cut into random pieces: every prefix sent is a prefix of the answer."""
    rng = random.Random(0)
    alphabet = ["=", " ", "a", "_", "\n", ",", ".", "0", "x", "un", "k", "#", "  "]
    cuts = 0
    for _ in range(3000):
        units = ["".join(rng.choices(alphabet, k=rng.randint(1, 4))) for _ in range(6)]
        text = "".join(u * rng.choice([1, 2, 3, 5]) for u in units)
        before = rng.choice(["", "for q in", "x = 0x", "    # ", "a\nb"])
        answer = cut_line_end_repetition(text, before)
        cuts += answer != text
        held = LineEndRepetitionStream(before)
        sent, start = "", 0
        while start < len(text):
            end = start + rng.randint(1, 5)
            sent += held.feed(text[start:end])
            assert answer.startswith(sent), (text, before, sent)
            start = end
        assert sent + held.finish() == answer, (text, before)
    assert cuts > 500  # the loops really were cut


def test_stream_equals_the_whole_answer_for_each_seed(tiny_checkpoint, tmp_path):
    from codeparrot.generation import Engine

    engine = Engine.load(tiny_checkpoint, device="cpu", quantize="none")
    srv = serve(tiny_checkpoint, engine, cut_repetition=True)
    try:
        for seed in range(4):
            payload = {"prompt": "def f(x):\n", "max_tokens": 48, "temperature": 1.0}
            payload |= {"seed": seed, "n": 2}
            whole = post(srv, payload)
            assert post(srv, payload | {"stream": True}) == whole
            assert all(t == cut_line_end_repetition(t, payload["prompt"]) for t in whole)
    finally:
        srv.shutdown()
        srv.server_close()
