"""suggest(): the engine call behind every request (tiny random model, in process)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from codeparrot.lsp.completion import prompt_budget, suggest
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Document, cursor_window
from codeparrot.lsp.postprocess import block_indent


@pytest.fixture(scope="module")
def engine(tiny_checkpoint: Path):
    from codeparrot.generation import Engine

    return Engine.load(tiny_checkpoint, device="cpu")


class Spy:
    """The engine, recording what suggest() asked of it and what it decoded."""

    def __init__(self, engine, on_event=None) -> None:
        self._engine = engine
        self.on_event = on_event
        self.prompts: list[str] = []
        self.events: list = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def stream(self, prompt, config, cancel=None):
        self.prompts.append(prompt)
        self.config = config
        for event in self._engine.stream(prompt, config, cancel=cancel):
            self.events.append(event)
            if self.on_event:
                self.on_event(event)
            yield event


def window_at(text: str):
    offset = text.index("|")
    doc = Document("u", text.replace("|", "", 1))
    return cursor_window(doc, offset, 100_000, 2000)


def test_cancel_stops_decoding_within_one_token(engine):
    cancel = threading.Event()
    spy = Spy(engine, on_event=lambda e: cancel.set())
    config = LspConfig(max_new_tokens=64)
    # a stop string nothing produces would let it run to 64 tokens
    out = suggest(spy, window_at("values = [|"), None, config, cancel)
    assert out is None  # a cancelled request shows nothing
    finals = [e.completion for e in spy.events if e.completion is not None]
    if finals:  # the engine reported how far it got
        assert finals[0].finish_reason in ("cancelled", "stop", "eos")
        assert finals[0].new_tokens <= 2
    assert len(spy.events) <= 2


def test_single_line_prompt_fits_the_context(engine):
    spy = Spy(engine)
    config = LspConfig(max_new_tokens=16, context_tokens=4096)
    text = "".join(f"item_{i} = compute({i})\n" for i in range(3000)) + "total = |"
    w = window_at(text)
    out = suggest(spy, w, block_indent(w), config, threading.Event())
    budget, new = prompt_budget(engine, config, multiline=False)
    assert budget + new < engine.context_length
    (prompt,) = spy.prompts
    assert prompt.endswith("total = ") and engine.count_tokens(prompt) <= budget
    assert prompt.startswith("item_")  # cut at a line start
    assert spy.config.stop == ("\n",) and spy.config.max_new_tokens == 16
    assert out is not None and out.new_tokens <= 16  # the one-line cut: a Scripted test


def test_empty_block_asks_for_several_lines(engine):
    spy = Spy(engine)
    w = window_at("def area(radius):|")
    base = block_indent(w)
    out = suggest(spy, w, base, LspConfig(multiline_max_new_tokens=24), threading.Event())
    assert base == 0 and "\n" not in spy.config.stop
    assert out is not None  # where it ends: test_a_block_suggestion_ends_where_the_block_does


def test_empty_document_prompt(engine):
    spy = Spy(engine)
    w = window_at("|")
    suggest(spy, w, block_indent(w), LspConfig(max_new_tokens=4), threading.Event())
    assert spy.prompts == [engine.tokenizer.eos_token]


def test_typing_keeps_the_prompt_start_so_the_engine_reuses_it(engine):
    from codeparrot.generation import Engine
    from codeparrot.prompting import prompt_quantum

    # as the language server loads it (profile="editor": only it reuses prompt starts)
    engine = Engine.load(engine.path, device="cpu", profile="editor", quantize="none")
    spy = Spy(engine)
    config = LspConfig(max_new_tokens=2, context_tokens=4096)
    text = "".join(f"result_{i} = transform(data[{i}])\n" for i in range(400))
    starts, reused = set(), []
    typed = "summary = [x for x in range(10)]"
    for n in range(1, len(typed) + 1):
        doc = Document("u", text + typed[:n])
        w = cursor_window(doc, len(doc.text), 8 * 4096, 2000, grid=prompt_quantum(4096))
        out = suggest(spy, w, block_indent(w), config, threading.Event())
        prompt = spy.prompts[-1]
        starts.add(doc.text.rfind(prompt) if prompt in doc.text else -1)
        reused.append(out.cached_prompt_tokens)
    # the prompt is cut to the model's context, yet its start moved at most a few times
    assert -1 not in starts and len(starts) <= 4
    assert sum(r > 0 for r in reused[1:]) >= len(reused[1:]) // 2


def test_typing_lines_at_the_default_budget_rarely_reads_the_whole_prompt_again():
    # each move of the prompt's start reads it all again (~1 s for a 164M model on 2
    # cores): at the default 768 tokens, five lines typed move it at most twice
    from codeparrot.prompting import prompt_parts, prompt_quantum, window_chars, window_start

    def count(text: str) -> int:
        return len(text) // 4

    budget = LspConfig().context_tokens
    text = "".join(f"value_{i} = compute(items[{i}], {i})\n" for i in range(600))
    typed = "".join(f"total_{k} = sum(values[{k}:]) / len(values)\n" for k in range(5))
    starts = set()
    for n in range(1, len(typed) + 1):
        doc = text + typed[:n]
        lo = window_start(doc, len(doc), window_chars(budget), grid=prompt_quantum(budget))
        parts = prompt_parts(count, doc[lo:], "", budget, suffix_share=0.25)
        starts.add(len(doc) - len(parts.text))
    assert len(starts) <= 3


class Scripted(Spy):
    """The engine's tokenizer and prompts, with a model that writes ``pieces``."""

    def __init__(self, engine, pieces: list[str]) -> None:
        super().__init__(engine)
        self.pieces = pieces
        self.sent = 0

    def stream(self, prompt, config, cancel=None, suffix=None):
        from codeparrot.generation.events import Completion, StreamEvent

        self.prompts.append(prompt)
        self.config = config
        for piece in self.pieces:
            self.sent += 1
            yield StreamEvent(0, piece)
        done = Completion("".join(self.pieces), "length", 4, len(self.pieces), 0.01)
        yield StreamEvent(0, "", done)


def test_a_block_suggestion_ends_where_the_block_does(engine):
    """In an empty block the suggestion may take several lines, all inside the block: the
    model's first finished line back at the block's indent ends it, and the model is
    stopped there."""
    pieces = ["\n", "    return", " 3.14 * radius", " ** 2", "\n", "print(", "area(2))", "\n",
              "more", " = 1", "\n"]  # fmt: skip
    model = Scripted(engine, pieces)
    w = window_at("def area(radius):|")
    out = suggest(model, w, block_indent(w), LspConfig(multiline_max_new_tokens=24),
                  threading.Event())  # fmt: skip
    assert out is not None and out.finish_reason == "block"
    assert out.suggestion == "\n    return 3.14 * radius ** 2"
    # stopped once the dedented line was finished, not run to its end
    assert model.sent == pieces.index("area(2))") + 2 < len(pieces)


def test_a_crlf_document_gets_its_own_line_breaks(tiny_checkpoint, monkeypatch):
    """A several-line suggestion in a document of CRLF lines comes back with CRLF breaks."""
    import asyncio

    from lsprotocol import types

    from codeparrot.lsp import server as server_module
    from codeparrot.lsp.completion import Outcome
    from codeparrot.lsp.server import build_server

    written = Outcome("\n    return a\n    b = 1", "", "block", 1, 3)
    monkeypatch.setattr(server_module, "suggest", lambda *args, **kwargs: written)
    server = build_server(LspConfig(checkpoint=tiny_checkpoint, cache_size=0))
    uri = "file:///project/crlf.py"
    server.documents[uri] = Document(uri, "x = 1\r\n\r\ndef g(a):\r\n", 1)
    server.load_engine()
    try:
        found = asyncio.run(server.suggestion(uri, types.Position(2, 9)))
    finally:
        server._generator.shutdown(wait=True)
    assert found.text == "\r\n    return a\r\n    b = 1"


def test_a_line_suggestion_ends_at_the_line_end(engine):
    """Mid-line, the suggestion is the rest of the line: the model's next lines are cut."""
    model = Scripted(engine, ["x", " + 1", "\n", "y = 2", "\n"])
    w = window_at("total = |")
    out = suggest(model, w, block_indent(w), LspConfig(max_new_tokens=16), threading.Event())
    assert out is not None and out.suggestion == "x + 1"
