"""Fast from the first request: start-up work never holds a request up."""

from __future__ import annotations

import asyncio
import threading

from lsprotocol import types

from codeparrot.generation.gpt2 import GPT2Decoder
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Document
from codeparrot.lsp.server import build_server


def test_the_server_does_not_compile_unless_asked():
    assert LspConfig().compile is False


def test_requests_during_the_compile_are_served_by_the_eager_step(tiny_checkpoint, monkeypatch):
    """The compile is held open until the requests are answered: they cannot have waited
    for it, and every decoding step they ran was the eager one."""
    started, release = threading.Event(), threading.Event()

    def compile_that_never_ends_during_the_test(self):
        started.set()
        release.wait(timeout=120)

    eager_calls = []
    eager_forward = GPT2Decoder.forward

    def counting_forward(self, *args, **kwargs):
        eager_calls.append(threading.current_thread().name)
        return eager_forward(self, *args, **kwargs)

    monkeypatch.setattr(GPT2Decoder, "compile_steps", compile_that_never_ends_during_the_test)
    monkeypatch.setattr(GPT2Decoder, "forward", counting_forward)

    server = build_server(LspConfig(checkpoint=tiny_checkpoint, compile=True, cache_size=0))
    uris = [f"file:///project/cold{i}.py" for i in range(3)]
    for i, uri in enumerate(uris):
        server.documents[uri] = Document(uri, f"def f{i}(a, b):\n    return a", 1)
    server.load_engine()

    async def requests():
        for uri in uris:
            await server.suggestion(uri, types.Position(1, 12))

    try:
        asyncio.run(requests())
        assert started.is_set() and not release.is_set()  # the compile is still running
        assert server.stats["engineCalls"] == 3
        assert server.stats["servedDuringCompile"] == 3
        assert eager_calls and set(eager_calls) == {"codeparrot-generate_0"}
    finally:
        release.set()
        server._generator.shutdown(wait=True)
