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


def test_no_probe_holds_the_first_suggestion_up_the_first_ones_choose_the_threads(
    tiny_checkpoint, monkeypatch, caplog
):
    """The steps' thread count is chosen from the first suggestions' own step times (here
    30 ms a step on one thread, 18 on two), not by a probe before the first one."""
    import logging

    from codeparrot.generation import Completion
    from codeparrot.generation import threads as th
    from codeparrot.lsp import server as server_module
    from codeparrot.lsp.completion import Outcome

    def no_probe(*args, **kwargs):
        raise AssertionError("the thread probe ran at load")

    monkeypatch.setattr(th, "tune_decode_threads", no_probe)
    monkeypatch.setattr(th, "cpu_cores", lambda: 2)
    monkeypatch.setattr(th, "time_prompt", lambda engine, threads=None: {1: 0.2, 2: 0.1}[threads])
    steps_ms = iter([30.0, 30.0, 18.0])
    threads_used = []

    def timed_suggestion(engine, *args, **kwargs):
        threads_used.append(engine.decode_threads)
        ms = next(steps_ms)
        timing = Completion("x", "length", 40, 10, 0.1 + ms / 100, prompt_seconds=0.1)
        return Outcome("x", "x", "length", 40, 10, timing=timing)

    monkeypatch.setattr(server_module, "suggest", timed_suggestion)
    server = build_server(LspConfig(checkpoint=tiny_checkpoint, cache_size=0))
    uri = "file:///project/a.py"
    server.documents[uri] = Document(uri, "def f(a, b):\n    return a", 1)
    server.load_engine()

    async def requests():
        for column in (10, 11, 12):
            await server.suggestion(uri, types.Position(1, column))

    try:
        with caplog.at_level(logging.INFO, logger="codeparrot.lsp"):
            asyncio.run(requests())
        engine = server._engine.result()
        # the first call is not timed, the second times one thread, the third both
        assert threads_used == [1, 1, 2]
        assert engine.decode_threads == 2 and engine.prompt_threads == 2
        assert server._tuning.settled
        assert any("30.0 ms a step on 1, 18.0 ms on 2" in r.getMessage() for r in caplog.records)
    finally:
        server._generator.shutdown(wait=True)


def test_the_server_checks_a_checkpoint_without_importing_torch(tiny_checkpoint, tmp_path):
    """`initialize` is answered at once: the check before it imports neither torch nor
    transformers (~2 s), and still refuses a checkpoint that asks to run its own code."""
    import json
    import shutil
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from codeparrot.errors import CheckpointError\n"
        "from codeparrot.models.checkpoint import check_checkpoint_files\n"
        "check_checkpoint_files(sys.argv[1])\n"
        "try:\n"
        "    check_checkpoint_files(sys.argv[2])\n"
        "except CheckpointError as e:\n"
        "    print('refused:', e)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    custom = tmp_path / "custom"
    shutil.copytree(tiny_checkpoint, custom)
    config = json.loads((custom / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling.Model"}
    (custom / "config.json").write_text(json.dumps(config))
    out = subprocess.run(
        [sys.executable, "-c", code, str(tiny_checkpoint), str(custom)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "refused:" in out and "auto_map" in out
    assert out.strip().endswith("[]")
