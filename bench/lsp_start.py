"""The language server's start as an editor meets it: from the process start to `initialize`
answered and to the first suggestion.

Each start runs ``python -m codeparrot.lsp --checkpoint DIR`` (the server's defaults, no
statistics, no suggestion cache) as an editor does, sends ``initialize``, opens a stdlib
file cut at a cursor deep into it and asks for one inline completion at once. Starts
alternate between the sides and the medians are printed, with their ratios to the first
side (the baseline):

- ``kept``: what an earlier start kept (the int8 rows, :mod:`codeparrot.generation.int8_cache`,
  transformers' facts, :mod:`codeparrot.models.start_cache`, and the probes' answers,
  :mod:`codeparrot.generation.speeds_cache`), in temporary folders filled by an untimed
  first start;
- ``speeds measured``: the same with ``CODEPARROT_SPEEDS_CACHE=0``: the int8 kernel,
  int8 prompts and prompt-speed probes run, as at every start before their answers were
  kept;
- ``transformers``: the same as ``kept`` with ``CODEPARROT_START_CACHE=0``: the
  configuration and tokenizer loaded through transformers;
- ``first``: a checkpoint's first start (new empty folders each time, which it fills);
- ``--python OTHER``: the same server started by another interpreter, e.g. the virtual
  environment of another checkout, to compare two versions of the code alternately
  (with nothing kept).

    .venv/bin/python bench/lsp_start.py --checkpoint DIR [--starts 4] [--python OTHER]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as t

# `python bench/lsp_start.py` puts bench/ first on the path, where bench/lsp.py would
# shadow the `lsp` package; its helpers are loaded by file name instead
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]


def _bench_lsp():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_lsp", _HERE / "lsp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def one_start(python: str, checkpoint: str, env: dict[str, str], doc) -> dict[str, float]:
    """Seconds from the process start to `initialize` answered and to the first suggestion."""
    from pygls.lsp.client import LanguageClient

    name, line, col, text = doc
    client = LanguageClient("bench", "1")
    started = time.perf_counter()
    await client.start_io(
        python, "-m", "codeparrot.lsp", "--checkpoint", checkpoint, "--no-stats",
        "--cache-size", "0", env={**os.environ, **env},
    )  # fmt: skip
    await client.initialize_async(t.InitializeParams(capabilities=t.ClientCapabilities()))
    initialized = time.perf_counter()
    client.initialized(t.InitializedParams())
    uri = f"file:///start/{name}"
    item = t.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
    client.text_document_did_open(t.DidOpenTextDocumentParams(text_document=item))
    params = t.InlineCompletionParams(
        context=t.InlineCompletionContext(trigger_kind=t.InlineCompletionTriggerKind.Automatic),
        text_document=t.TextDocumentIdentifier(uri),
        position=t.Position(line, col),
    )
    result = await client.text_document_inline_completion_async(params)
    answered = time.perf_counter()
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    if not result or not result.items:
        raise RuntimeError("the first request got no suggestion")
    return {"initialize": initialized - started, "first": answered - started}


INT8 = "CODEPARROT_INT8_CACHE"
START = "CODEPARROT_START_CACHE"
SPEEDS = "CODEPARROT_SPEEDS_CACHE"


def _empty_folders(root: str) -> dict[str, str]:
    """New empty cache folders: what a checkpoint's first start meets."""
    new = tempfile.mkdtemp(dir=root)
    return {INT8: f"{new}/int8", START: f"{new}/start", SPEEDS: f"{new}/speeds"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--starts", type=int, default=4, help="timed starts of each side")
    parser.add_argument("--python", help="another interpreter to start the server with")
    args = parser.parse_args()
    bench = _bench_lsp()
    texts = bench.stdlib_texts()
    name, line, col = bench.cursors(texts, 1, 0)[0]
    doc = (name, line, col, bench.document_until(texts[name], line, col))
    with tempfile.TemporaryDirectory() as root:
        kept = {INT8: f"{root}/int8", START: f"{root}/start", SPEEDS: f"{root}/speeds"}
        sides = {
            "kept": (sys.executable, lambda: kept),
            "speeds measured": (sys.executable, lambda: {**kept, SPEEDS: "0"}),
            "transformers": (sys.executable, lambda: {**kept, START: "0"}),
            "first": (sys.executable, lambda: _empty_folders(root)),
        }
        if args.python:
            sides["--python"] = (args.python, lambda: {INT8: "0", START: "0", SPEEDS: "0"})
        asyncio.run(one_start(sys.executable, args.checkpoint, kept, doc))  # fills them
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for _ in range(args.starts):
            for side, (python, env) in sides.items():
                runs[side].append(asyncio.run(one_start(python, args.checkpoint, env(), doc)))
    print(f"{args.checkpoint}: {args.starts} starts each, a request in {name} at line {line}")
    base = None
    for side, starts in runs.items():
        init = statistics.median(s["initialize"] for s in starts)
        first = statistics.median(s["first"] for s in starts)
        base = base or first
        each = [round(s["first"], 2) for s in starts]
        print(
            f"  {side:<16} initialize answered {init:5.2f} s  first suggestion {first:5.2f} s "
            f"({first / base:.2f}x)  {each}"
        )


if __name__ == "__main__":
    main()
