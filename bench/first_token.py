"""First-token latency of the same checkpoint through every front door, in one run.

The language server, ``codeparrot serve`` and the playground load their engine with the
same preparation (``Engine.load(profile=...)``: threads, the prompt timing, int8 steps),
so the same prompt should reach its first token as fast through each. This bench asks
each, with its own default settings, for a one-token completion of the same prompts
(the end of a stdlib file cut at a random place: code none of them has seen), and
reports the latency a client sees:

- ``engine``: ``Engine.load(checkpoint, profile="editor")`` in this process, called in a
  worker thread (the baseline: no transport);
- ``lsp``: ``codeparrot lsp`` over stdio, ``textDocument/inlineCompletion`` with the cursor
  at the end of the document, ``--max-new-tokens 1 --debounce-ms 0 --cache-size 0
  --no-multiline`` (no waiting for more keystrokes, no cache, one token);
- ``lsp, spinning waits`` (``--spinning-too``): the same with ``OMP_WAIT_POLICY=ACTIVE``,
  how torch's OpenMP threads waited before the serving commands chose passive waits;
- ``serve``: ``POST /v1/completions`` with ``max_tokens: 1``;
- ``app``: the playground as its page talks to it: a ``POST`` of ``codeparrot/generate``
  (one candidate, ``--app-tokens`` new tokens; the page's own stream beside Gradio's
  queue, codeparrot.app.stream), its lines read until the first new token shows in the
  candidate's editor, then to the end;
- ``app, Gradio queue``: the same through ``/generate`` joined to Gradio's queue, its event
  stream read the same way (the page's fallback); the report also gives the time until
  Gradio's ``process_starts`` message arrived (its queue's share);
- ``app, gradio_client`` (``--gradio-client``): the same endpoint through
  ``gradio_client``, one token, to its answer (that client looks for new messages every
  50 ms);
- ``app before`` (``--app-python PY``): the page's way in to the playground of another
  checkout, the Python that has it installed (a worktree of an earlier commit): its own
  stream where it has one, else Gradio's queue.

Each server runs as its own process, as a user runs it (one per row: an engine keeps
the prompt it last saw), and is warmed with
``--warmup`` prompts (the load, the first-step timing), then left until the servers are
idle (whatever they do in the background after loading is over) before anything is
timed. Every
round sends one new prompt to each side, in a rotating order, so that load from other
jobs falls on all alike; the ratio to the engine is taken within each round, then the
median over rounds. Without ``--checkpoint`` a random 4-layer, 256-wide GPT-2 with an 8k
BPE and 1,024 positions is built (see bench/lsp.py).

    .venv/bin/python bench/first_token.py [--checkpoint DIR] [--prompts 30] [--chars 1200]
        [--app-python OTHER_CHECKOUT/.venv/bin/python] [--gradio-client] [--spinning-too]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


def _sibling(name: str) -> Any:
    """A sibling bench module, by file (bench/lsp.py would shadow the `lsp` package)."""
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", Path(__file__).with_name(f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_lsp, _playground = _sibling("lsp"), _sibling("playground")
Session, start_server, stdlib_texts = _lsp.Session, _lsp.start_server, _lsp.stdlib_texts
build_lsp_checkpoint, wait_for_client = _lsp.build_checkpoint, _playground.wait_for_client
shows_new_text, has_stream = _playground.shows_new_text, _playground.has_stream
stream_shows_new_text, StreamReader = _playground.stream_shows_new_text, _playground.StreamReader

Side = Callable[[str], Awaitable[float]]


def prompts(n: int, chars: int, seed: int) -> list[str]:
    """``n`` distinct prompts: ``chars`` characters of a stdlib file ending at a random
    place inside a code line (what a user has typed so far)."""
    texts = stdlib_texts()
    rng, out = random.Random(seed), []
    names = sorted(texts)
    while len(out) < n:
        text = texts[rng.choice(names)]
        end = rng.randrange(chars, len(text))
        prompt = text[end - chars : end]
        if prompt.isascii() and prompt.strip() and not prompt.endswith("\n") and prompt not in out:
            out.append(prompt)
    return out


def engine_side(checkpoint: Path) -> Side:
    from codeparrot.generation import Engine, GenerationConfig

    engine = Engine.load(checkpoint, profile="editor")
    config = GenerationConfig(max_new_tokens=1, temperature=0.0, stop=())

    def once(prompt: str) -> float:
        # in a worker thread, as every server runs it (the main thread's intra-op threads
        # behave differently on a loaded CPU)
        took: list[float] = []

        def work() -> None:
            start = time.perf_counter()
            engine.generate(prompt, config)
            took.append(time.perf_counter() - start)

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return took[0]

    async def side(prompt: str) -> float:
        return once(prompt)

    return side


async def lsp_side(checkpoint: Path, context: int, wait_policy: str | None = None):
    flags = ["--max-new-tokens", "1", "--debounce-ms", "0", "--cache-size", "0"]
    flags += ["--context-tokens", str(context), "--no-multiline"]
    saved = os.environ.get("OMP_WAIT_POLICY")
    if wait_policy is not None:  # the server inherits this process's environment
        os.environ["OMP_WAIT_POLICY"] = wait_policy
    try:
        client = await start_server(checkpoint, flags)
    finally:
        if saved is None:
            os.environ.pop("OMP_WAIT_POLICY", None)
        else:
            os.environ["OMP_WAIT_POLICY"] = saved
    session, count = Session(client), [0]

    async def side(prompt: str) -> float:
        count[0] += 1
        uri = f"file:///bench/doc{count[0]}.py"
        session.open(uri, prompt)
        lines = prompt.split("\n")
        ms, _items = await session.inline(uri, len(lines) - 1, len(lines[-1]))
        return ms / 1000

    return client, side


def serve_side(checkpoint: Path) -> tuple[subprocess.Popen, Side]:
    argv = [sys.executable, "-m", "codeparrot", "serve", "--checkpoint", str(checkpoint),
            "--port", "0", "--model-name", "bench"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if " on http://" not in line:
        proc.kill()
        raise SystemExit(f"codeparrot serve did not start: {line!r}")
    url = line.rsplit(" on ", 1)[1].strip() + "/completions"

    def once(prompt: str) -> float:
        body = {"model": "bench", "prompt": prompt, "max_tokens": 1, "temperature": 0}
        request = urllib.request.Request(
            url, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=300) as answer:
            json.loads(answer.read())
        return time.perf_counter() - start

    async def side(prompt: str) -> float:
        return await asyncio.to_thread(once, prompt)

    return proc, side


def start_app(checkpoint: Path, python: str = sys.executable) -> tuple[subprocess.Popen, str]:
    """``codeparrot app`` over ``checkpoint`` (run by ``python``: this checkout's or
    another's) with its defaults, and its URL once it answers."""
    from codeparrot.app.ui import free_port

    port = free_port()
    argv = [python, "-m", "codeparrot", "app", "--checkpoint", str(checkpoint),
            "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    wait_for_client(url, proc)
    return proc, url


def client_side(url: str, checkpoint: Path) -> Side:
    """The playground through ``gradio_client`` (a Python program's way in; it looks for
    new messages every 50 ms)."""
    from gradio_client import Client

    client = Client(url, verbose=False)

    def once(prompt: str) -> float:
        # checkpoint, prompt, max new tokens, temperature, top_p, n, seed, ...
        start = time.perf_counter()
        client.predict(str(checkpoint), prompt, 1, 0.0, 1.0, 1, 0, "none", "",
                       api_name="/generate")  # fmt: skip
        return time.perf_counter() - start

    async def side(prompt: str) -> float:
        return await asyncio.to_thread(once, prompt)

    return side


def page_side(url: str, checkpoint: Path, tokens: int, queue_ms: list[float]) -> Side:
    """The playground as its page talks to it: ``/generate`` joined to Gradio's queue,
    then its event stream read until candidate 1 shows the first new token. Appends to
    ``queue_ms`` the time until the handler started (Gradio's ``process_starts``)."""
    import httpx

    config = httpx.get(url + "config", timeout=60).json()
    prefix = config.get("api_prefix", "/gradio_api").strip("/")
    fn = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "generate")
    http = httpx.Client(base_url=f"{url}{prefix}/", timeout=300)  # kept alive, as a browser
    session = uuid.uuid4().hex

    def once(prompt: str) -> float:
        # checkpoint, prompt, max new tokens, temperature, top_p, n, seed, stop mode,
        # stop text, cut repetition, suffix
        data = [str(checkpoint), prompt, tokens, 0.0, 1.0, 1, 0, "none", "", True, ""]
        body = {"data": data, "fn_index": fn, "session_hash": session, "event_data": None,
                "trigger_id": None}  # fmt: skip
        start, first = time.perf_counter(), None
        http.post("queue/join", json=body).raise_for_status()
        with http.stream("GET", "queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                kind = message["msg"]
                if kind == "process_starts":
                    queue_ms.append(1000 * (time.perf_counter() - start))
                elif kind == "process_generating" and first is None:
                    if shows_new_text(message["output"], prompt):
                        first = time.perf_counter() - start
                elif kind == "process_completed":
                    if not message.get("success", True):
                        raise RuntimeError(f"/generate failed: {message}")
                    first = first or time.perf_counter() - start  # no text: the answer
                elif kind == "close_stream":
                    break
        return first

    async def side(prompt: str) -> float:
        return await asyncio.to_thread(once, prompt)

    return side


def stream_side(url: str, checkpoint: Path, tokens: int) -> Side:
    """The playground as its page talks to it: a ``POST`` of its own stream route, the
    lines read until candidate 1 shows the first new token, then to the end."""
    reader = StreamReader(url)  # one kept-alive connection and session, as a browser

    def once(prompt: str) -> float:
        data = [str(checkpoint), prompt, tokens, 0.0, 1.0, 1, 0, "none", "", True, ""]
        start, first = time.perf_counter(), None
        for seconds, frame in reader.frames(data):  # read to the end, as the page does
            if first is None and stream_shows_new_text(frame, prompt):
                first = seconds
        return first or time.perf_counter() - start  # no text: the answer

    async def side(prompt: str) -> float:
        return await asyncio.to_thread(once, prompt)

    return side


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(procs: list[subprocess.Popen], timeout: float = 300.0) -> float:
    """Wait until the servers use under 5% of a core each over a second (what they do
    after loading in the background, a compile say, is over; an idle Gradio server polls
    its queue, some 3% of a core); returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = sum(cpu_seconds(p.pid) for p in procs)
        time.sleep(1.0)
        if sum(cpu_seconds(p.pid) for p in procs) - before < 0.05 * len(procs):
            break
    return time.monotonic() - start


async def measure(args, checkpoint: Path) -> tuple[dict[str, list[float]], dict[str, list]]:
    """Seconds to the first token of each side, each round; and the Gradio queue's share
    (ms until each playground's handler started) of the page-stream sides."""
    texts = prompts(args.warmup + args.prompts, args.chars, args.seed)
    warm, timed = texts[: args.warmup], texts[args.warmup :]
    lsp_client, lsp = await lsp_side(checkpoint, args.context_tokens)
    clients = [lsp_client]
    serve_proc, serve = serve_side(checkpoint)
    # each way into the playground has a server of its own: an engine keeps the prompt it
    # last saw, so a second side on one server would find each round's prompt ready
    (app_proc, app_url), (queue_proc, queue_url) = (start_app(checkpoint) for _ in range(2))
    procs = [serve_proc, app_proc, queue_proc]
    queue_ms: dict[str, list] = {"app, Gradio queue": []}
    sides: dict[str, Side] = {"engine": engine_side(checkpoint), "lsp": lsp, "serve": serve}
    sides["app"] = stream_side(app_url, checkpoint, args.app_tokens)
    sides["app, Gradio queue"] = page_side(
        queue_url, checkpoint, args.app_tokens, queue_ms["app, Gradio queue"]
    )
    if args.gradio_client:
        client_proc, client_url = start_app(checkpoint)
        procs.append(client_proc)
        sides["app, gradio_client"] = client_side(client_url, checkpoint)
    if args.app_python:  # another checkout's playground, the way its page comes in
        before_proc, before_url = start_app(checkpoint, args.app_python)
        procs.append(before_proc)
        if has_stream(before_url):
            sides["app before"] = stream_side(before_url, checkpoint, args.app_tokens)
        else:
            queue_ms["app before"] = []
            sides["app before"] = page_side(
                before_url, checkpoint, args.app_tokens, queue_ms["app before"]
            )
    if args.spinning_too:  # the language server as it ran before waits were passive
        spinning_client, sides["lsp, spinning waits"] = await lsp_side(
            checkpoint, args.context_tokens, "ACTIVE"
        )
        clients.append(spinning_client)
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for prompt in warm:
            for side in sides.values():
                await side(prompt)
        print(f"servers idle after {wait_until_idle(procs):.0f} s more", flush=True)
        names = list(sides)
        for r, prompt in enumerate(timed):  # rotate: no side always runs first
            for name in names[r % len(names) :] + names[: r % len(names)]:
                seconds[name].append(await sides[name](prompt))
    finally:
        for client in clients:
            await client.shutdown_async(None)
            client.exit(None)
            await client.stop()
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    warmups = len(warm)
    return seconds, {name: values[warmups:] for name, values in queue_ms.items()}


def report(
    args, checkpoint: Path, seconds: dict[str, list[float]], queue_ms: dict[str, list]
) -> None:
    print(f"checkpoint {checkpoint}; {args.prompts} prompts of {args.chars} characters, one "
          f"token each, after {args.warmup} warm-up prompts; each side's defaults")  # fmt: skip
    print(f"{'':20s} {'p50 ms':>8s} {'p90 ms':>8s} {'vs engine (median of rounds)':>30s}")
    base = seconds["engine"]
    for name, values in seconds.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        p90 = sorted(values)[max(0, math.ceil(0.9 * len(values)) - 1)]
        print(f"{name:20s} {1000 * statistics.median(values):8.1f} {1000 * p90:8.1f} "
              f"{ratio:29.2f}x")  # fmt: skip
    lsp = seconds["lsp"]
    for name in [n for n in seconds if n not in ("engine", "lsp")]:
        ratio = statistics.median(v / b for v, b in zip(seconds[name], lsp, strict=True))
        print(f"{name} / lsp: {ratio:.2f}x (median of rounds)")
    for name, values in queue_ms.items():
        print(f"{name}: Gradio's process_starts message {statistics.median(values):.1f} ms "
              f"p50 after the join (sent as the queue starts the event; a handler on the "
              f"event loop can delay its writing)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chars", type=int, default=1200, help="characters of each prompt")
    parser.add_argument("--context-tokens", type=int, default=1000,
                        help="the language server's prompt budget (it cuts at lines)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--app-tokens", type=int, default=16,
                        help="new tokens the playground's page asks for; the first one "
                        "shown is timed (a stream's first update, as a user waits for it)")  # fmt: skip
    parser.add_argument("--app-python",
                        help="also time the playground of another checkout: the Python "
                        "that has it installed (e.g. a worktree of the commit before)")  # fmt: skip
    parser.add_argument("--gradio-client", action="store_true",
                        help="also the playground through gradio_client (a server of its "
                        "own; that client looks for new messages every 50 ms)")  # fmt: skip
    parser.add_argument("--spinning-too", action="store_true",
                        help="also a language server with OMP_WAIT_POLICY=ACTIVE (spinning "
                        "OpenMP waits, as before the serving commands chose passive ones)")  # fmt: skip
    args = parser.parse_args()
    # this process's engine waits as the servers' do (codeparrot.generation.waits)
    from codeparrot.generation.waits import prefer_passive_waits

    prefer_passive_waits()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint
        if checkpoint is None:
            texts = list(stdlib_texts().values())
            checkpoint = build_lsp_checkpoint(Path(tmp) / "ckpt", texts, 1024)
        seconds, queue_ms = asyncio.run(measure(args, checkpoint))
    report(args, checkpoint, seconds, queue_ms)


if __name__ == "__main__":
    main()
