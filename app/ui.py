"""The Gradio playground: a prompt editor, sampling controls, streamed candidates.

``build_app(config)`` returns the :class:`gradio.Blocks`; ``launch(config)`` queues and
serves it. Inference goes through :class:`codeparrot.generation.Engine`; engines load
on first use and are cached per checkpoint inside the :class:`EnginePool` that
``build_app`` creates, so nothing is loaded at import and nothing is global.

Sampling runs in a thread of its own and the page gets the text gathered every
``--stream-interval`` seconds, so the model never waits for the browser. Each session
(browser tab or API client) has at most one generation that **Stop** can end.

Public API endpoints (``gradio_client``): ``/generate`` (streams), ``/model_card`` and
``/stop``.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from codeparrot.app.config import MAX_CANDIDATES, AppConfig
from codeparrot.app.examples import (
    CHAPTER_EXAMPLES,
    STOP_FIRST_BLOCK,
    STOP_MODES,
    STOP_NONE,
    STOP_SEQUENCES,
)
from codeparrot.app.model_card import ModelCard, checkpoint_label, read_model_card
from codeparrot.errors import CheckpointError, CodeparrotError
from codeparrot.generation import (
    HUMANEVAL_STOP_SEQUENCES,
    Completion,
    Engine,
    GenerationConfig,
    StreamEvent,
)

CSS = """
.candidate .cm-editor { max-height: 28em; }
#notice p { margin: 0; }
#card table { font-size: 0.9em; }
"""

INTRO = (
    "# codeparrot playground\n"
    "Write the start of some Python, pick a checkpoint and press **Generate**: "
    "the candidates stream in as the model samples them."
)


class EnginePool:
    """One :class:`Engine` per checkpoint, loaded on first use and then shared.

    Only the checkpoints given at start-up can be asked for: a client cannot make the
    server load an arbitrary path.
    """

    def __init__(
        self, checkpoints: tuple[Path, ...], device: str | None = None, compile: bool = False
    ) -> None:
        self.checkpoints = {str(p): Path(p) for p in checkpoints}
        self.device = device
        self.compile = compile  # Engine.compile_steps after loading, in the background
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def is_loaded(self, key: str) -> bool:
        return key in self._engines

    def get(self, key: str) -> Engine:
        if key not in self.checkpoints:
            raise CheckpointError(f"checkpoint {key!r} is not one this playground serves")
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = Engine.load(self.checkpoints[key], device=self.device)
                if self.compile and engine.can_compile_steps:
                    engine.compile_steps()
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
                out.append(line.replace("\\n", "\n").replace("\\t", "\t"))
        if not out:
            raise _user_error(
                "Stop mode 'stop sequences' needs at least one sequence, one per line."
            )
        return tuple(out)
    raise _user_error(f"Unknown stop mode {mode!r}; choose one of {', '.join(STOP_MODES)}.")


def _candidate_label(index: int, completion: Any | None) -> str:
    if completion is None:
        return f"candidate {index + 1} · generating…"
    return (
        f"candidate {index + 1} · {completion.new_tokens} tokens · {completion.seconds:.2f} s · "
        f"{completion.tokens_per_second:.1f} tokens/s · {completion.finish_reason}"
    )


def _truncation_notice(prompt_tokens: int, kept: int, engine: Engine, max_new_tokens: int) -> str:
    return (
        f"⚠️ **Prompt trimmed**: it is {prompt_tokens} tokens, but the model's context of "
        f"{engine.context_length} tokens leaves {engine.context_length - max_new_tokens} for the "
        f"prompt after the {max_new_tokens} new tokens. The model saw only the last {kept} tokens."
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
) -> Iterator[list[StreamEvent]]:
    """Run ``engine.stream`` in its own thread; yield the events gathered every ``interval``.

    Sampling never waits for the page: while Gradio sends one update, the next tokens are
    already being computed, and updates coalesce when the page is slower than the model.
    Whoever stops iterating must set ``cancel`` so the thread ends within one token.
    """
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def produce() -> None:
        try:
            for event in engine.stream(prompt, gen, cancel=cancel):
                events.put(event)
        except BaseException as e:  # handed to the consumer, raised there
            events.put(e)
        finally:
            events.put(_DONE)

    threading.Thread(target=produce, name="codeparrot-generate", daemon=True).start()
    finished = False
    while not finished:
        batch = [events.get()]  # block for the first event
        deadline = time.monotonic() + interval
        while batch[-1] is not _DONE and not isinstance(batch[-1], BaseException):
            try:
                batch.append(events.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    break
        # drain what is already there: coalesce when the consumer is slow
        while batch[-1] is not _DONE and not isinstance(batch[-1], BaseException):
            try:
                batch.append(events.get_nowait())
            except queue.Empty:
                break
        if isinstance(batch[-1], BaseException):
            raise batch[-1]
        finished = batch[-1] is _DONE
        yield [e for e in batch if isinstance(e, StreamEvent)]


def _session_of(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


class _CandidatesView:
    """The page's view of one generation: text so far and the finished candidates."""

    def __init__(self, prompt: str, n: int) -> None:
        self.prompt = prompt
        self.texts = [""] * n
        self.done: list[Completion | None] = [None] * n

    def add(self, event: StreamEvent) -> None:
        if event.completion is not None:
            self.texts[event.index] = event.completion.text
            self.done[event.index] = event.completion
        else:
            self.texts[event.index] += event.delta

    def details(self) -> list[dict[str, Any]]:
        out = []
        for i, (text, c) in enumerate(zip(self.texts, self.done, strict=True)):
            row: dict[str, Any] = {"candidate": i + 1, "text": text, "finish_reason": None}
            if c is not None:
                row.update(
                    finish_reason=c.finish_reason,
                    new_tokens=c.new_tokens,
                    seconds=round(c.seconds, 4),
                    tokens_per_second=round(c.tokens_per_second, 2),
                    prompt_tokens=c.prompt_tokens,
                    prompt_truncated=c.prompt_truncated,
                    seed=c.seed,
                )
            out.append(row)
        return out

    def frame(self, notice: str, *, full: bool = True) -> tuple[Any, ...]:
        """Values of (notice, details, candidate 1, ..., candidate MAX_CANDIDATES).

        A frame that is not ``full`` (mid-stream) sends only the visible editors and
        leaves the notice, the details and the hidden editors as they are.
        """
        n = len(self.texts)
        editors = [
            gr.Code(
                value=self.prompt + self.texts[i],
                label=_candidate_label(i, self.done[i]),
                visible=True,
            )
            if i < n
            else (gr.Code(value="", visible=False) if full else gr.skip())
            for i in range(MAX_CANDIDATES)
        ]
        if not full:
            return (gr.skip(), gr.skip(), *editors)
        return (gr.Markdown(notice, visible=bool(notice)), self.details(), *editors)


def build_app(config: AppConfig) -> gr.Blocks:
    """The playground over ``config.checkpoints`` (not yet queued or launched)."""
    pool = EnginePool(config.checkpoints, device=config.device, compile=config.compile)
    running = _RunningGenerations()
    choices = _checkpoint_choices(config.checkpoints)
    limit = config.max_new_tokens_limit

    def model_card(checkpoint: str) -> tuple[Any, ...]:
        """Facts of a checkpoint: the card, the training curve, the HumanEval report."""
        if checkpoint not in pool.checkpoints:
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

    def fit_max_new_tokens(checkpoint: str, current: float) -> Any:
        """Keep the slider below the checkpoint's context (read from its config.json)."""
        context = read_model_card(checkpoint).context_length if checkpoint else None
        top = min(limit, context - 1) if context and context > 1 else limit
        return gr.Slider(maximum=top, value=min(int(current or 1), top))

    def generate(
        checkpoint: str,
        prompt: str,
        max_new_tokens: float,
        temperature: float,
        top_p: float,
        n: float,
        seed: float | None,
        stop_mode: str,
        stop_text: str,
        request: gr.Request,
    ) -> Iterator[tuple[Any, ...]]:
        """Stream candidates: yields (notice, details, candidate 1, ..., candidate 8)."""
        if not prompt or not prompt.strip():
            raise _user_error(
                "The prompt is empty: type the start of some code or pick an example."
            )
        n = int(n)
        max_new_tokens = int(max_new_tokens)
        if not 1 <= n <= MAX_CANDIDATES:
            raise _user_error(f"Number of candidates must be in 1..{MAX_CANDIDATES}, got {n}.")
        if not 1 <= max_new_tokens <= limit:
            raise _user_error(f"Max new tokens must be in 1..{limit}, got {max_new_tokens}.")
        try:
            gen = GenerationConfig(
                max_new_tokens=max_new_tokens,
                temperature=float(temperature),
                top_p=float(top_p),
                n=n,
                seed=None if seed is None or int(seed) < 0 else int(seed),
                stop=stop_sequences(stop_mode, stop_text),
            )
        except CodeparrotError as e:
            raise _user_error(str(e)) from e
        view = _CandidatesView(prompt, n)
        if not pool.is_loaded(checkpoint):
            yield view.frame(f"Loading `{checkpoint_label(Path(checkpoint))}` (first use)…")
        try:
            engine = pool.get(checkpoint)
            ids, truncated = engine.encode_prompt(prompt, max_new_tokens)
        except CodeparrotError as e:
            raise _user_error(str(e)) from e
        notice = ""
        if truncated:
            notice = _truncation_notice(
                engine.count_tokens(prompt), len(ids), engine, max_new_tokens
            )
        yield view.frame(notice)
        session = _session_of(request)
        cancel = running.start(session)
        try:
            for batch in _events_in_background(engine, prompt, gen, cancel, config.stream_interval):
                for event in batch:
                    view.add(event)
                yield view.frame(notice, full=False)
        except CodeparrotError as e:
            raise _user_error(str(e)) from e
        finally:
            cancel.set()  # the page went away or stopped: end the generation thread too
            running.finish(session, cancel)
        yield view.frame(notice)

    def stop_generation(request: gr.Request) -> None:
        """End the generation of this browser tab (or API client session) within a token."""
        running.cancel(_session_of(request))

    default = choices[0][1] if choices else None
    with gr.Blocks(title="codeparrot playground", analytics_enabled=False) as demo:
        gr.Markdown(INTRO)
        # rendered in the right column; created first so the examples can fill them
        max_new_tokens = gr.Slider(
            1, limit, value=min(64, limit), step=1, label="Max new tokens", render=False
        )
        stop_mode = gr.Radio(
            list(STOP_MODES),
            value=STOP_FIRST_BLOCK,
            label="Stop",
            info="first block: at the HumanEval stop sequences (\\ndef, \\nclass, ...)",
            elem_id="stop-mode",
            render=False,
        )
        with gr.Tab("Playground"), gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Code(
                    value=CHAPTER_EXAMPLES[0].prompt,
                    language="python",
                    label="Prompt",
                    lines=7,
                    interactive=True,
                    elem_id="prompt",
                )
                gr.Examples(
                    examples=[
                        [e.prompt, e.stop_mode, min(e.max_new_tokens, limit)]
                        for e in CHAPTER_EXAMPLES
                    ],
                    inputs=[prompt, stop_mode, max_new_tokens],
                    example_labels=[e.label for e in CHAPTER_EXAMPLES],
                    label="Examples from the CodeParrot chapter",
                )
                with gr.Row():
                    run = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
                notice = gr.Markdown("", visible=False, elem_id="notice")
                candidates = [
                    gr.Code(
                        language="python",
                        label=f"candidate {i + 1}",
                        interactive=False,
                        visible=i == 0,
                        elem_classes=["candidate"],
                        elem_id=f"candidate-{i + 1}",
                    )
                    for i in range(MAX_CANDIDATES)
                ]
                with gr.Accordion("Details (JSON)", open=False):
                    details = gr.JSON(label="Candidates")
            with gr.Column(scale=2):
                checkpoint = gr.Dropdown(
                    choices=choices,
                    value=default,
                    label="Checkpoint",
                    interactive=True,
                    elem_id="checkpoint",
                )
                card_md = gr.Markdown(elem_id="card")
                with gr.Row():
                    max_new_tokens.render()
                    n = gr.Slider(1, MAX_CANDIDATES, value=1, step=1, label="Candidates")
                with gr.Row():
                    temperature = gr.Slider(
                        0.0, 2.0, value=0.2, step=0.05, label="Temperature (0: greedy)"
                    )
                    top_p = gr.Slider(0.05, 1.0, value=0.95, step=0.01, label="Top-p")
                stop_mode.render()
                with gr.Row():
                    stop_text = gr.Textbox(
                        value="\\ndef\n\\nclass",
                        lines=2,
                        label="Stop sequences (one a line, \\n: newline)",
                        scale=2,
                    )
                    seed = gr.Number(
                        value=-1, precision=0, label="Seed (-1: random)", elem_id="seed", scale=1
                    )
        with gr.Tab("Training & evaluation"):
            facts_md = gr.Markdown()
            curve_image = gr.Image(label="Training loss", interactive=False, visible=False)
            curve_plot = gr.LinePlot(
                x="step",
                y="value",
                color="series",
                y_title="loss (nats/token)",
                label="Training curve",
                visible=False,
            )
            curve_md = gr.Markdown()
            gr.Markdown("### HumanEval")
            humaneval_md = gr.Markdown()
            humaneval_image = gr.Image(label="pass@k", interactive=False, visible=False)
            refresh = gr.Button("Reload the reports")

        card_outputs = [
            card_md,
            facts_md,
            curve_image,
            curve_plot,
            curve_md,
            humaneval_md,
            humaneval_image,
        ]
        checkpoint.change(
            model_card, checkpoint, card_outputs, api_name="model_card", concurrency_limit=None
        )
        for trigger in (refresh.click, demo.load):
            trigger(
                model_card,
                checkpoint,
                card_outputs,
                api_visibility="private",
                concurrency_limit=None,
            )
        for trigger in (checkpoint.change, demo.load):
            trigger(
                fit_max_new_tokens,
                [checkpoint, max_new_tokens],
                max_new_tokens,
                api_visibility="private",
                concurrency_limit=None,
            )
        run.click(
            generate,
            [checkpoint, prompt, max_new_tokens, temperature, top_p, n, seed, stop_mode, stop_text],
            [notice, details, *candidates],
            api_name="generate",
            concurrency_limit=config.concurrency,
            concurrency_id="generate",
        )
        # Stop must not wait behind the generation it stops: no concurrency limit.
        stop_button.click(stop_generation, None, None, api_name="stop", concurrency_limit=None)
    return demo


def _checkpoint_choices(checkpoints: tuple[Path, ...]) -> list[tuple[str, str]]:
    labels = [checkpoint_label(p) for p in checkpoints]
    out = []
    for path, label in zip(checkpoints, labels, strict=True):
        if labels.count(label) > 1:
            label = str(path)
        out.append((label, str(path)))
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
    if not any(Path(p).is_dir() for p in config.checkpoints):
        listed = ", ".join(str(p) for p in config.checkpoints)
        raise CheckpointError(f"--checkpoint: none of these is a directory: {listed}")
    demo = build_app(config)
    demo.queue(default_concurrency_limit=config.concurrency, max_size=config.queue_size)
    port = config.port or free_port(config.host)
    demo.launch(
        server_name=config.host,
        server_port=port,
        prevent_thread_lock=not block,
        show_error=True,
        quiet=not block,
        css=CSS,
        theme=gr.themes.Soft(),
    )
    return demo, demo.local_url or f"http://{config.host}:{port}/"
