"""The Gradio playground: a prompt editor, sampling controls, streamed candidates.

``build_app(config)`` returns the :class:`gradio.Blocks`; ``launch(config)`` queues and
serves it. :class:`Playground` holds the state and the event handlers (one method per
event); :mod:`codeparrot.app.layout` draws the page and wires its events to them.
Inference goes through :class:`codeparrot.generation.Engine`; engines load on first use
and are cached per checkpoint inside the playground's :class:`EnginePool`, so nothing is
loaded at import and nothing is global.

``/generate``'s handler runs on Gradio's event loop; sampling runs in a thread of its own
and the page gets the text gathered every ``--stream-interval`` seconds, so the model
never waits for the browser. Each session
(browser tab or API client) has at most one generation that **Stop** can end.

The page itself streams a generation through a route of its own beside Gradio's queue
(:mod:`codeparrot.app.stream`), answered by the same :meth:`Playground.frames`.

Public API endpoints (``gradio_client``): ``/generate`` (streams), ``/model_card`` and
``/stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import gradio as gr

from codeparrot.app.config import AppConfig
from codeparrot.app.examples import STOP_FIRST_BLOCK, STOP_MODES, STOP_NONE, STOP_SEQUENCES
from codeparrot.app.frames import CandidatesView, PageRecords
from codeparrot.app.limits import GenerationSlots, RequestLimits, RequestRefused, check_request
from codeparrot.app.model_card import ModelCard, checkpoint_label, read_model_card
from codeparrot.errors import CheckpointError, CodeparrotError, ConfigError
from codeparrot.generation import (
    HUMANEVAL_STOP_SEQUENCES,
    Engine,
    GenerationConfig,
    StreamEvent,
    decode_escapes,
)
from codeparrot.hub import ModelRef

log = logging.getLogger(__name__)

# What an API client or the page sees when something unexpected fails (the log has more).
INTERNAL_ERROR = "Generation failed on the server (the server's log has the details)."
# How often a request waiting for a generation slot looks whether the page is still there.
WAIT_POLL_SECONDS = 0.5

CSS = """
.candidate .cm-editor { max-height: 28em; }
#notice p { margin: 0; }
#card table { font-size: 0.9em; }
"""


class EnginePool:
    """One :class:`Engine` per checkpoint, loaded on first use and then shared.

    Only the checkpoints given at start-up can be asked for: a client cannot make the
    server load an arbitrary path.
    """

    def __init__(
        self,
        checkpoints: tuple[ModelRef | Path, ...],
        device: str | None = None,
        compile: bool = False,
    ) -> None:
        refs = [ModelRef.parse(c) for c in checkpoints]
        self.checkpoints = {ref.name: ref for ref in refs}  # the picker's values: the names
        self.device = device
        self.compile = compile  # Engine.compile_steps after loading, in the background
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def is_loaded(self, key: str) -> bool:
        return key in self._engines

    def get(self, key: str) -> Engine:
        if key not in self.checkpoints:
            raise CheckpointError(f"checkpoint {key!r} is not one this playground serves")
        engine = self._engines.get(key)  # loaded: no wait behind another one's load
        if engine is not None:
            return engine
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                # the server profile: calls from many threads, tuned as serve's
                engine = Engine.load(
                    self.checkpoints[key],
                    device=self.device,
                    profile="server",
                    compile=self.compile,
                )
                self._engines[key] = engine
            return engine


def _user_error(message: str) -> gr.Error:
    """An error shown to the user (and raised to API clients) without a server traceback."""
    return gr.Error(message, print_exception=False)


def stop_sequences(mode: str, text: str) -> tuple[str, ...]:
    """The stop strings of a stop mode; ``text`` holds one sequence a line, ``\\n`` escaped."""
    if mode == STOP_FIRST_BLOCK:
        return HUMANEVAL_STOP_SEQUENCES
    if mode == STOP_NONE:
        return ()
    if mode == STOP_SEQUENCES:
        out = []
        for line in (text or "").splitlines():
            if line:
                try:  # the one decoder of typed stop strings (codeparrot complete --stop too)
                    out.append(decode_escapes(line))
                except ConfigError as e:
                    raise _user_error(f"{e}.") from e
        if not out:
            raise _user_error(
                "Stop mode 'stop sequences' needs at least one sequence, one per line."
            )
        return tuple(out)
    raise _user_error(f"Unknown stop mode {mode!r}; choose one of {', '.join(STOP_MODES)}.")


def _truncation_notice(prompt_tokens: int, kept: int, engine: Engine, max_new_tokens: int) -> str:
    return (
        f"⚠️ **Prompt trimmed**: it is {prompt_tokens} tokens, but the model's context of "
        f"{engine.context_length} tokens leaves {engine.context_length - max_new_tokens} for the "
        f"prompt after the {max_new_tokens} new tokens. The model saw only the last {kept} tokens."
    )


def _infill_trimmed_notice(engine: Engine, max_new_tokens: int) -> str:
    room = engine.context_length - max_new_tokens
    return (
        f"⚠️ **Prompt trimmed**: the code before and after the cursor is more than the "
        f"{room} tokens the model's context of {engine.context_length} leaves after the "
        f"{max_new_tokens} new tokens. The model saw the whole lines nearest the cursor."
    )


FILLS_IN = (
    "This checkpoint fills in the middle: the candidates are written between the prompt "
    "and this code."
)
NO_SENTINELS = (
    "⚠️ This checkpoint cannot fill in the middle: no fill-in-the-middle sentinels of a "
    "known family (StarCoder's `<fim_prefix>`, SantaCoder's `<fim-prefix>`, Qwen2.5-Coder's "
    "`<|fim_prefix|>`, CodeLlama's `▁<PRE>`, DeepSeek-Coder's `<｜fim▁begin｜>`) in its "
    "tokenizer, or a model trained without them. The code after the cursor is not used, the candidates continue the "
    "prompt alone."
)


class _RunningGenerations:
    """The cancel flag of the generation each session is running (one at most)."""

    def __init__(self) -> None:
        self._flags: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def start(self, session: str) -> threading.Event:
        flag = threading.Event()
        with self._lock:
            self._flags[session] = flag
        return flag

    def finish(self, session: str, flag: threading.Event) -> None:
        with self._lock:
            if self._flags.get(session) is flag:
                del self._flags[session]

    def cancel(self, session: str) -> bool:
        with self._lock:
            flag = self._flags.get(session)
        if flag is not None:
            flag.set()
        return flag is not None


_DONE = object()


def _events_in_background(
    engine: Engine,
    prompt: str,
    gen: GenerationConfig,
    cancel: threading.Event,
    interval: float,
    suffix: str | None = None,
) -> AsyncIterator[list[StreamEvent]]:
    """Start ``engine.stream`` in its own thread now; yield its events in batches, at most
    one batch every ``interval`` seconds once text shows, on the running event loop
    (Gradio's: each batch reaches the handler without a hop through a worker thread).

    Sampling never waits for the page: while Gradio sends one update, the next tokens are
    already being computed, and updates coalesce when the page is slower than the model.
    An event that comes after a quiet ``interval`` is yielded at once. The first text a
    user sees is the exception: the first batch waits at most ``interval`` for the first
    token (else it is empty: the page learns that the generation has started), so that
    one update, not two, is on its way to the page; until a batch has text that shows
    (more than blank space: the indentation after a prompt's last line does not), each
    event goes out at once, and sampling waits (at most ``interval``) for the reader to
    come back and the event loop to have had its turns to send the update, which then
    goes out without the next tokens' work sharing the interpreter with it. Whoever
    stops iterating must set ``cancel`` so the thread ends within one token.
    """
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Any] = asyncio.Queue()
    sync = _FirstText()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is shutting down
            cancel.set()

    def produce() -> None:
        try:
            stream = (
                engine.stream(prompt, gen, cancel=cancel)
                if suffix is None
                else engine.stream(prompt, gen, cancel=cancel, suffix=suffix)
            )
            for event in stream:
                put(event)
                if not sync.shown.is_set():  # until text shows: in step with the reader
                    sync.back.wait(timeout=interval)
                    sync.back.clear()
        except BaseException as e:  # handed to the consumer, raised there
            put(e)
        finally:
            put(_DONE)

    threading.Thread(target=produce, name="codeparrot-generate", daemon=True).start()
    return _batches(events, interval, sync)


class _FirstText:
    """Between the sampling thread and the reader, until the first text shows."""

    def __init__(self) -> None:
        self.back = threading.Event()  # the reader came back after a batch, its update sent
        self.shown = threading.Event()  # a batch with text that shows went out


# Event-loop turns an update before the first text gets before sampling goes on: Gradio
# comes back for the next update as soon as it has queued one, before its event stream
# has written it (measured: the write then waited ~2 ms for the interpreter).
SEND_TURNS = 4


def _shows(batch: list[Any]) -> bool:
    return any(
        isinstance(e, StreamEvent) and (e.delta.strip() or e.completion is not None) for e in batch
    )


async def _batches(
    events: asyncio.Queue[Any], interval: float, sync: _FirstText | None = None
) -> AsyncIterator[list[StreamEvent]]:
    """The events of :func:`_events_in_background`'s thread, batched (see there); tells
    ``sync`` when the reader comes back after a batch and when text has shown."""
    loop = asyncio.get_running_loop()

    def ends(item: Any) -> bool:
        return item is _DONE or isinstance(item, BaseException)

    async def get(timeout: float | None) -> Any:  # asyncio.TimeoutError after `timeout`
        try:
            return events.get_nowait()
        except asyncio.QueueEmpty:
            if timeout is not None and timeout <= 0:
                raise asyncio.TimeoutError from None
        return await asyncio.wait_for(events.get(), timeout)

    last = -float("inf")  # when the last batch went out, once text shows
    finished = shown = False
    try:
        batch = [await get(interval)]  # the first token, or an empty batch after `interval`
    except asyncio.TimeoutError:
        yield []
        batch = [await get(None)]
    while not finished:
        # no sooner than `interval` after the last batch: gather what comes until then
        while not ends(batch[-1]) and (left := last + interval - loop.time()) > 0:
            try:
                batch.append(await get(left))
            except asyncio.TimeoutError:
                break
        # drain what is already there: coalesce when the consumer is slow
        while not ends(batch[-1]):
            try:
                batch.append(events.get_nowait())
            except asyncio.QueueEmpty:
                break
        if isinstance(batch[-1], BaseException):
            raise batch[-1]
        finished = batch[-1] is _DONE
        was_shown, shown = shown, shown or _shows(batch)
        last = loop.time() if shown else last
        yield [e for e in batch if isinstance(e, StreamEvent)]
        if sync is not None and not was_shown:
            for _ in range(SEND_TURNS):
                await asyncio.sleep(0)
            if shown:
                sync.shown.set()
            sync.back.set()
        if not finished:
            batch = [await get(None)]  # wait for the next event


def _session_of(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


class Playground:
    """The playground's state and its event handlers; :mod:`codeparrot.app.layout` draws it.

    Each public method is the handler of one event of the page (and, where it has an
    ``api_name``, one endpoint of the API). Nothing here builds components other than the
    updates the handlers return.
    """

    def __init__(self, config: AppConfig, pool: EnginePool | None = None) -> None:
        """``pool``: the engines to serve (default: one :class:`EnginePool` over
        ``config.checkpoints``); anything with ``checkpoints``, ``is_loaded`` and ``get``."""
        self.config = config
        self.pool = pool or EnginePool(
            config.served_checkpoints, device=config.device, compile=config.compile
        )
        self.running = _RunningGenerations()
        self.pages = PageRecords()
        self._waiting_threads: anyio.CapacityLimiter | None = None
        self.choices = _checkpoint_choices(config.served_checkpoints)
        self.slots = GenerationSlots(config.concurrency, config.queue_size)
        self.limits = RequestLimits(
            prompt_chars=config.max_prompt_chars,
            stop_sequences=config.max_stop_sequences,
            stop_chars=config.max_stop_chars,
            candidates=config.max_candidates,
            max_new_tokens=config.max_new_tokens_limit,
        )

    @property
    def max_new_tokens_limit(self) -> int:
        return self.config.max_new_tokens_limit

    def model_card(self, checkpoint: str) -> tuple[Any, ...]:
        """Facts of a checkpoint: the card, the training curve, the HumanEval report."""
        if checkpoint not in self.pool.checkpoints:
            raise _user_error(f"Checkpoint {checkpoint!r} is not one this playground serves.")
        card = read_model_card(checkpoint)
        return (
            card.summary_markdown(),
            card.summary_markdown(),
            *_curve_outputs(card),
            card.humaneval_markdown(),
            gr.Image(
                value=_open_image(card.humaneval_plot), visible=card.humaneval_plot is not None
            ),
        )

    def fit_max_new_tokens(self, checkpoint: str, current: float) -> Any:
        """Keep the slider below the checkpoint's context (read from its config.json)."""
        limit = self.max_new_tokens_limit
        context = read_model_card(checkpoint).context_length if checkpoint else None
        top = min(limit, context - 1) if context and context > 1 else limit
        return gr.Slider(maximum=top, value=min(int(current or 1), top))

    async def generate(
        self,
        checkpoint: str,
        prompt: str,
        max_new_tokens: float,
        temperature: float,
        top_p: float,
        n: float,
        seed: float | None,
        stop_mode: str,
        stop_text: str,
        cut_repetition: bool = True,
        suffix: str = "",
        request: gr.Request | None = None,
    ) -> AsyncIterator[tuple[Any, ...]]:
        """Stream candidates: yields (notice, details, candidate 1, ..., candidate 8).

        ``/generate`` through Gradio's queue (``gradio_client``, and the page where its
        own stream, :mod:`codeparrot.app.stream`, is not used): :meth:`frames` of the
        request's session.
        """
        frames = self.frames(  # closed at once when the page goes away: its slot freed
            _session_of(request),
            checkpoint,
            prompt,
            max_new_tokens,
            temperature,
            top_p,
            n,
            seed,
            stop_mode,
            stop_text,
            cut_repetition,
            suffix,
        )
        async with contextlib.aclosing(frames):
            async for frame in frames:
                yield frame

    async def frames(
        self,
        session: str,
        checkpoint: str,
        prompt: str,
        max_new_tokens: float,
        temperature: float,
        top_p: float,
        n: float,
        seed: float | None,
        stop_mode: str,
        stop_text: str,
        cut_repetition: bool = True,
        suffix: str = "",
    ) -> AsyncIterator[tuple[Any, ...]]:
        """The frames of one generation of ``session`` (a page or an API client; Stop of
        that session ends it), whichever way they reach the page.

        The request is checked, then waits for a generation slot, then runs; nothing is
        tokenized before the checks pass. Errors are raised as :class:`gradio.Error`
        with one short line; unexpected ones leave their traceback in the server's log
        only.

        It runs on the server's event loop (an async generator: no worker-thread hop per
        update); what blocks (waiting in line, loading a checkpoint) goes to a thread.
        """
        try:
            gen = self._generation_config(
                prompt, max_new_tokens, temperature, top_p, n, seed, stop_mode, stop_text, suffix
            )
            ticket = self.slots.join()
        except CodeparrotError as e:
            raise _user_error(str(e)) from None
        view = CandidatesView(
            prompt,
            gen.n,
            cut=bool(cut_repetition),
            suffix=suffix or "",
            page=self.pages.get(session),
        )
        cancel = self.running.start(session)
        ended = False
        try:
            async for frame in self._wait_for_turn(ticket, view, cancel):
                yield frame
            if not cancel.is_set():
                async for frame in self._run(checkpoint, view, gen, cancel):
                    yield frame
            ended = True
        except CodeparrotError as e:
            raise _user_error(str(e)) from None
        except gr.Error:
            raise
        except Exception:
            log.exception("generation failed (checkpoint %s)", checkpoint)
            raise _user_error(INTERNAL_ERROR) from None
        finally:
            cancel.set()  # the page went away or stopped: end the generation thread too
            self.running.finish(session, cancel)
            self.slots.leave(ticket)
            # what the page shows, known only if the last frame reached it
            self.pages.put(session, view.page if ended else None)

    def infill_note(self, checkpoint: str) -> str:
        """What ``checkpoint`` does with the code after the cursor, for beside that box:
        the loaded engine's answer, else its tokenizer files' (no model is loaded)."""
        if checkpoint not in self.pool.checkpoints:
            return ""
        if self.pool.is_loaded(checkpoint):
            fim: bool | None = self.pool.get(checkpoint).fim is not None
        else:
            fim = read_model_card(checkpoint).fill_in_the_middle
        if fim is None:
            return ""
        return FILLS_IN if fim else NO_SENTINELS

    def stop(self, request: gr.Request) -> None:
        """End the generation of this browser tab (or API client session) within a token,
        or take it out of the line if it is still waiting."""
        self.running.cancel(_session_of(request))

    def _generation_config(
        self,
        prompt: str,
        max_new_tokens: float,
        temperature: float,
        top_p: float,
        n: float,
        seed: float | None,
        stop_mode: str,
        stop_text: str,
        suffix: str = "",
    ) -> GenerationConfig:
        """The request's sampling settings, checked against the limits; raises
        :class:`CodeparrotError` naming the bad value."""
        request = check_request(
            self.limits,
            prompt=prompt,
            n=n,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop_text=stop_text,
            suffix=suffix,
        )
        if not prompt.strip() and not (suffix or "").strip():
            raise RequestRefused(
                "The prompt is empty: type the start of some code or pick an example."
            )
        return request.generation(stop=stop_sequences(stop_mode, stop_text))

    async def _wait_for_turn(
        self, ticket: object, view: CandidatesView, cancel: threading.Event
    ) -> AsyncIterator[tuple[Any, ...]]:
        """Wait in line for a generation slot, telling the page how many are ahead.

        Yielding while waiting lets Gradio notice a page that went away; /stop ends
        the wait.
        """
        shown = 0
        while not cancel.is_set():
            ahead = self.slots.ahead(ticket, timeout=0)
            if ahead:  # wait in a thread (a slot that frees wakes it at once)
                ahead = await anyio.to_thread.run_sync(
                    self.slots.ahead, ticket, WAIT_POLL_SECONDS, limiter=self._waiting()
                )
            if ahead == 0:
                return
            if ahead != shown:
                shown = ahead
                yield view.frame(f"⏳ Waiting for a free slot: {ahead} generation(s) ahead.")
        yield view.frame("Stopped before it started.")

    def _waiting(self) -> anyio.CapacityLimiter:
        """Threads for the requests waiting in line (made on the event loop, once)."""
        if self._waiting_threads is None:
            self._waiting_threads = anyio.CapacityLimiter(thread_budget(self.config))
        return self._waiting_threads

    async def _run(
        self,
        checkpoint: str,
        view: CandidatesView,
        gen: GenerationConfig,
        cancel: threading.Event,
    ) -> AsyncIterator[tuple[Any, ...]]:
        """Load (first use), fit the prompt to the context, then stream the candidates.

        With a suffix and a checkpoint that has the FIM sentinels the model writes the
        middle; without the sentinels it continues the prompt and the notice says so.
        """
        if not self.pool.is_loaded(checkpoint):
            yield view.frame(f"Loading `{checkpoint_label(Path(checkpoint))}` (first use)…")
            engine = await anyio.to_thread.run_sync(self.pool.get, checkpoint)
        else:
            engine = self.pool.get(checkpoint)
        fit = functools.partial(_fit_prompt, engine, view, gen.max_new_tokens)
        if len(view.prompt) + len(view.suffix) <= TOKENIZE_ON_THE_LOOP_CHARS:
            suffix, notice = fit()
        else:  # a long prompt is tokenized in a thread: the loop serves the other pages
            suffix, notice = await anyio.to_thread.run_sync(fit)
        # the page's first update waits for the first token (at most an interval) and
        # carries it: one update through Gradio on its way, not two
        batches = _events_in_background(
            engine, view.prompt, gen, cancel, self.config.stream_interval, suffix=suffix
        )
        full = True
        async for batch in batches:
            for event in batch:
                view.add(event)
            yield view.frame(notice, full=full)
            full = False
        yield view.frame(notice, every_prop=True)  # mends any frame the page did not get


# Characters of prompt and suffix tokenized on the event loop (a fraction of a millisecond)
TOKENIZE_ON_THE_LOOP_CHARS = 8_000


def _fit_prompt(
    engine: Engine, view: CandidatesView, max_new_tokens: int
) -> tuple[str | None, str]:
    """(the suffix the model gets, the notice): the prompt fitted to the context; without
    FIM sentinels the suffix is dropped (and ``view`` no longer shows it)."""
    suffix = view.suffix if view.suffix.strip() else None
    if suffix is not None and engine.fim is None:
        suffix, view.suffix = None, ""
        notice = NO_SENTINELS
    elif suffix is not None:
        _, truncated = engine.encode_infill(view.prompt, suffix, max_new_tokens)
        notice = _infill_trimmed_notice(engine, max_new_tokens) if truncated else ""
    else:
        ids, truncated = engine.encode_prompt(view.prompt, max_new_tokens)
        notice = ""
        if truncated:
            notice = _truncation_notice(
                engine.count_tokens(view.prompt), len(ids), engine, max_new_tokens
            )
    return suffix, notice


def build_app(config: AppConfig) -> gr.Blocks:
    """The playground over ``config.checkpoints`` (not yet queued or launched)."""
    from codeparrot.app.layout import build_layout

    return build_layout(Playground(config))


def _checkpoint_choices(checkpoints: tuple[ModelRef, ...]) -> list[tuple[str, str]]:
    labels = [checkpoint_label(Path(ref.name)) for ref in checkpoints]
    out = []
    for ref, label in zip(checkpoints, labels, strict=True):
        if labels.count(label) > 1:
            label = ref.name
        out.append((label, ref.name))
    return out


def _open_image(path: Path | None) -> Any:
    if path is None:
        return None
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.copy()
    except OSError:
        return None


def _curve_outputs(card: ModelCard) -> tuple[Any, Any, str]:
    """(image, line plot, note) for the training curve: the PNG if written, else metrics."""
    if card.loss_curve is not None:
        image = _open_image(card.loss_curve)
        if image is not None:
            return gr.Image(value=image, visible=True), gr.LinePlot(visible=False), ""
    rows = [
        {"step": m["step"], "series": key, "value": value}
        for m in card.metrics
        for key, value in m.items()
        if "loss" in key
    ]
    if rows:
        import pandas as pd

        return (
            gr.Image(value=None, visible=False),
            gr.LinePlot(value=pd.DataFrame(rows), visible=True),
            f"From `{card.run_dir / 'metrics.jsonl'}` ({len(card.metrics)} logged steps).",
        )
    return (
        gr.Image(value=None, visible=False),
        gr.LinePlot(visible=False),
        "No training curve beside this checkpoint (`loss_curve.png` or `metrics.jsonl`).",
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch(config: AppConfig, *, block: bool = True) -> tuple[gr.Blocks, str]:
    """Queue and serve the playground. Returns (app, local URL); ``block`` waits forever.

    Raises :class:`CheckpointError` when none of the checkpoints is a directory (a page
    with nothing to run would only confuse); missing ones among others show a notice.
    """
    if not any(read_model_card(r.name).exists for r in config.served_checkpoints):  # dirs, Hub ids
        listed = ", ".join(r.name for r in config.served_checkpoints)
        raise CheckpointError(
            f"--checkpoint: none of these is a directory or a Hub model: {listed}"
        )
    return serve(Playground(config), block=block)


def serve(playground: Playground, *, block: bool = True) -> tuple[gr.Blocks, str]:
    """Queue and serve the page of ``playground``. Returns (app, local URL)."""
    from codeparrot.app.layout import build_layout
    from codeparrot.app.stream import stream_route

    config = playground.config
    demo = build_layout(playground)
    # The generation line is the playground's own (GenerationSlots): Gradio's queue only
    # hands events to threads, so it has no size of its own to fill, and its REST routes
    # stay closed (a direct call would skip the line and leave a generator half-run).
    demo.queue(api_open=False, max_size=None, default_concurrency_limit=None)
    port = config.port or free_port(config.host)
    demo.launch(
        # the page's own stream of /generate beside Gradio's routes (FastAPI's `routes`)
        app_kwargs={"routes": [stream_route(playground)]},
        server_name=config.host,
        server_port=port,
        prevent_thread_lock=not block,
        max_threads=thread_budget(config),
        show_error=False,  # gr.Error messages still reach clients; tracebacks stay in the log
        quiet=not block,
        css=CSS,
        theme=gr.themes.Soft(),
    )
    first = playground.choices[0][1] if playground.choices else None
    if config.load_at_start and first is not None and read_model_card(first).exists:
        _load_in_background(playground.pool, first)
    return demo, demo.local_url or f"http://{config.host}:{port}/"


def thread_budget(config: AppConfig) -> int:
    """Worker threads: a generation waiting in line holds one; room for /stop and the card."""
    return max(40, config.concurrency + config.queue_size + 16)


def _load_in_background(pool: Any, key: str) -> threading.Thread:
    """Load the engine of ``key`` (the page's first choice) in a thread, so that the first
    generation finds it ready; one that comes meanwhile waits for the same load. A load
    that fails is logged, and the first generation tries again and says why."""

    def load() -> None:
        try:
            pool.get(key)
        except Exception:
            log.exception("loading %s at start failed", key)

    thread = threading.Thread(target=load, name="codeparrot-load", daemon=True)
    thread.start()
    return thread
