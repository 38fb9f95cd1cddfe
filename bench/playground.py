"""Cost of serving generation through the playground, as ratios to the engine alone.

Same prompt, seed and sampling settings, in one process, interleaved and repeated:

- ``engine``: ``Engine.generate`` called directly, in a worker thread (the baseline);
- ``app, stream every token``: a generation of ``codeparrot app`` (its own process) as
  its page asks for it (a ``POST`` of its own stream route, ``codeparrot/generate``, read
  to the end), with ``--stream-interval 0`` (one page update per token of each candidate);
- ``app, stream every 50 ms``: the same with the default ``--stream-interval 0.05``;
- ``app, every 50 ms, Gradio queue``: that server's ``/generate`` joined to Gradio's queue,
  its event stream read to the end (the page's fallback);
- ``app, every 50 ms, gradio_client``: the same endpoint read through ``gradio_client``,
  which looks for new messages every 50 ms (its figures move with that polling);
- ``before, ...`` (``--app-python PY``): the same of another checkout's playground (its
  page's way in: Gradio's queue where it has no stream of its own).

Prints tokens/s of each and its ratio to the engine, and the app's time to the first
streamed text. Without ``--checkpoint`` a random 4-layer, 256-wide GPT-2 with a 2k BPE
trained on a few stdlib files is built in a temporary directory.

    .venv/bin/python bench/playground.py [--checkpoint DIR] [--n 2] [--max-new-tokens 64] [--repeats 7]
        [--app-python OTHER_CHECKOUT/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

PROMPT = 'def area_of_rectangle(a: float, b: float):\n    """Return the area of the rectangle."""\n'


def build_checkpoint(out: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedTokenizerFast

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / f).read_text() for f in ("textwrap.py", "heapq.py", "shlex.py", "glob.py")]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=256, n_embd=256, n_layer=4, n_head=4,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def wait_for_client(url: str, process: subprocess.Popen, timeout: float = 180.0):
    from gradio_client import Client

    deadline = time.monotonic() + timeout
    while True:
        try:
            return Client(url, verbose=False)
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the app at {url} did not start") from None
            time.sleep(0.5)


def shows_new_text(output: dict[str, Any], prompt: str) -> bool:
    """Does a streamed update of ``/generate`` put text after the prompt in candidate 1's
    editor? (The first update of a stream is whole values, later ones Gradio's edits;
    the editor's value comes stripped of blank space at its ends.)"""
    shown_prompt = (None, prompt, prompt.strip())

    def new_text(value: Any) -> bool:  # a whole update or a plain value
        return (value.get("value") if isinstance(value, dict) else value) not in shown_prompt

    update = output.get("data", [None] * 3)[2]
    if not isinstance(update, list):  # the stream's first message: whole values
        return new_text(update)
    for op, path, value in update:  # Gradio's edits of the last value
        if op == "append" and path in ([], ["value"]) and value:
            return True
        if op in ("replace", "add") and path in ([], ["value"]) and new_text(value):
            return True
    return False


class PageReader:
    """``/generate`` as the playground's page calls it: joined to Gradio's queue, then its
    event stream read (no polling), on one kept-alive connection and session."""

    def __init__(self, url: str) -> None:
        import httpx

        config = httpx.get(url + "config", timeout=60).json()
        prefix = config.get("api_prefix", "/gradio_api").strip("/")
        self.fn = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "generate")
        self.http = httpx.Client(base_url=f"{url}{prefix}/", timeout=300)
        self.session = uuid.uuid4().hex

    def messages(self, data: list[Any]) -> Any:
        """Yield (seconds since the join, message) for each message of one event."""
        body = {"data": data, "fn_index": self.fn, "session_hash": self.session,
                "event_data": None, "trigger_id": None}  # fmt: skip
        start = time.perf_counter()
        self.http.post("queue/join", json=body).raise_for_status()
        with self.http.stream("GET", "queue/data", params={"session_hash": self.session}) as s:
            for line in s.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    yield time.perf_counter() - start, message
                    if message["msg"] == "close_stream":
                        return


STREAM_PATH = "codeparrot/generate"  # codeparrot.app.stream's route: the page's own stream
# The inputs of a generation by name, in the order of the page's inputs of /generate.
FIELDS = ("checkpoint", "prompt", "max_new_tokens", "temperature", "top_p", "n", "seed",
          "stop_mode", "stop_text", "cut_repetition", "suffix")  # fmt: skip


def has_stream(url: str) -> bool:
    """Does the playground at ``url`` have the page's own stream (an earlier one has not)?"""
    import httpx

    return httpx.post(url + STREAM_PATH, content=b"{}", timeout=60).status_code not in (404, 405)


def stream_shows_new_text(frame: dict[str, Any], prompt: str) -> bool:
    """Does a line of the page's stream put text after the prompt in candidate 1's editor
    (output 2: a whole value, an update or the text it gained)?"""
    value = frame.get("2")
    if isinstance(value, dict) and "__append__" in value:
        return bool(value["__append__"])
    value = value.get("value") if isinstance(value, dict) else value
    return value not in (None, prompt, prompt.strip())


class StreamReader:
    """``/generate`` as the playground's page calls it: a ``POST`` of its own stream
    route, the lines read to the end, on one kept-alive connection and session."""

    def __init__(self, url: str) -> None:
        import httpx

        self.http = httpx.Client(base_url=url, timeout=300)
        self.session = uuid.uuid4().hex

    def frames(self, data: list[Any]) -> Any:
        """Yield (seconds since the request, the outputs that changed) for each line."""
        body = {"session_hash": self.session, "inputs": dict(zip(FIELDS, data, strict=True))}
        start = time.perf_counter()
        with self.http.stream("POST", STREAM_PATH, json=body) as answer:
            if answer.status_code != 200:
                raise RuntimeError(f"{STREAM_PATH} refused: {answer.read()!r}")
            for line in answer.iter_lines():
                message = json.loads(line)
                if "error" in message:
                    raise RuntimeError(f"{STREAM_PATH} failed: {message['error']}")
                yield time.perf_counter() - start, message["frame"]


def start_servers(checkpoint: Path, app_python: str | None) -> dict[str, tuple[Any, Any]]:
    """label -> (process, gradio_client) of each variant's ``codeparrot app``, in its own
    process, as a user runs it."""
    from codeparrot.app.ui import free_port

    servers = {}
    variants = [("app, stream every token", 0.0, sys.executable)]
    variants += [("app, stream every 50 ms", 0.05, sys.executable)]
    if app_python:  # another checkout's playground, the same variants
        variants += [(f"before, {label[5:]}", i, app_python) for label, i, _ in variants]
    for label, interval, python in variants:
        port = free_port()
        command = [python, "-m", "codeparrot", "app", "--checkpoint", str(checkpoint)]
        command += ["--port", str(port), "--stream-interval", str(interval)]
        command += ["--no-compile"]  # the engine baseline runs eager steps too
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        servers[label] = (process, wait_for_client(f"http://127.0.0.1:{port}/", process))
    return servers


def report(args: argparse.Namespace, checkpoint: Path, results: dict[str, list]) -> None:
    rates = {k: [t / s for t, s, _ in rows] for k, rows in results.items()}
    print(f"checkpoint {checkpoint}, n={args.n}, max_new_tokens={args.max_new_tokens}, "
          f"median of {args.repeats} rounds")  # fmt: skip
    print(f"{'':36s} {'tokens/s':>9s} {'vs engine':>9s} {'first text':>10s}")
    for name, rows in results.items():
        # ratio within each round (same machine load), then the median over rounds
        ratio = statistics.median(a / b for a, b in zip(rates[name], rates["engine"], strict=True))
        first = statistics.median(f for _, _, f in rows)
        first_text = "" if first != first else f"{1000 * first:.0f} ms"
        print(f"{name:36s} {statistics.median(rates[name]):9.1f} {ratio:8.2f}x {first_text:>10s}")


Run = tuple[int, float, float]  # new tokens, seconds, seconds to the first text


def app_runners(
    servers: dict[str, tuple[Any, Any]], checkpoint: str, settings: dict[str, Any]
) -> dict[str, Any]:
    """label -> a call that runs one generation through that way into a playground."""
    # checkpoint, prompt, max new tokens, temperature, top_p, n, seed, stop mode,
    # stop text, cut repetition, suffix
    data = [checkpoint, PROMPT, *settings.values(), 0, "none", "", True, ""]

    def run_client(client) -> Run:
        start = time.perf_counter()
        first = math.nan
        job = client.submit(*data[:-2], api_name="/generate")
        for update in job:
            editor = update[2]  # candidate 1: prompt + text so far (an update, or the text)
            text = editor if isinstance(editor, str) else editor.get("value") or ""
            if math.isnan(first) and len(text) > len(PROMPT.strip()):
                first = time.perf_counter() - start
        details = job.outputs()[-1][1]
        return sum(c["new_tokens"] for c in details), time.perf_counter() - start, first

    def run_stream(reader: StreamReader) -> Run:
        first, details, seconds = math.nan, None, math.nan
        for seconds, frame in reader.frames(data):
            if math.isnan(first) and stream_shows_new_text(frame, PROMPT):
                first = seconds
            details = frame.get("1", details)
        return sum(c["new_tokens"] for c in details), seconds, first

    def run_page(reader: PageReader) -> Run:
        first = math.nan
        for seconds, message in reader.messages(data):
            if message["msg"] == "process_generating" and math.isnan(first):
                if shows_new_text(message["output"], PROMPT):
                    first = seconds
            elif message["msg"] == "process_completed":
                if not message.get("success", True):
                    raise RuntimeError(f"/generate failed: {message}")
                details = message["output"]["data"][1]
                return sum(c["new_tokens"] for c in details), seconds, first
        raise RuntimeError("/generate ended without an answer")

    runners = {}
    for label, (_, client) in servers.items():
        url = client.src if client.src.endswith("/") else client.src + "/"
        every = label.replace("stream every", "every")
        if has_stream(url):  # the page's own stream; Gradio's queue is its fallback
            runners[label] = lambda r=StreamReader(url): run_stream(r)
            if "50 ms" in label:
                runners[every + ", Gradio queue"] = lambda r=PageReader(url): run_page(r)
        else:
            runners[label] = lambda r=PageReader(url): run_page(r)
        if "50 ms" in label:  # the same endpoint through gradio_client's 50 ms polling
            runners[every + ", gradio_client"] = lambda c=client: run_client(c)
    return runners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--app-python",
                        help="also the playground of another checkout (the Python that has "
                        "it installed, e.g. a worktree of the commit before), the same "
                        "variants")  # fmt: skip
    args = parser.parse_args()

    from codeparrot.generation import Engine, GenerationConfig

    tmp = tempfile.TemporaryDirectory()
    checkpoint = args.checkpoint or build_checkpoint(Path(tmp.name) / "checkpoint")
    settings = dict(max_new_tokens=args.max_new_tokens, temperature=0.8, top_p=0.95, n=args.n)
    engine = Engine.load(checkpoint)

    def run_engine() -> tuple[int, float, float]:
        # In a worker thread, as the app runs it: on a loaded CPU, torch's intra-op threads
        # behave very differently in the main thread (measured here: 30x slower).
        out: list[tuple[int, float, float]] = []

        def work() -> None:
            start = time.perf_counter()
            done = engine.generate(PROMPT, GenerationConfig(seed=0, stop=(), **settings))
            out.append((sum(c.new_tokens for c in done), time.perf_counter() - start, math.nan))

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return out[0]

    servers = start_servers(checkpoint, args.app_python)

    runners = {"engine": run_engine, **app_runners(servers, str(checkpoint), settings)}
    for runner in runners.values():  # warm-up: load, first calls
        runner()
    results: dict[str, list[tuple[int, float, float]]] = {k: [] for k in runners}
    names = list(runners)
    for r in range(args.repeats):  # rotate the order: no variant always runs first
        for name in names[r % len(names) :] + names[: r % len(names)]:
            results[name].append(runners[name]())
    for process, _client in servers.values():
        process.terminate()
        process.wait(timeout=30)

    report(args, checkpoint, results)


if __name__ == "__main__":
    main()
