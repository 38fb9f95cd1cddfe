"""The playground's page: the Blocks tree and which handler each event calls.

The handlers live on :class:`codeparrot.app.ui.Playground`; this module only places the
components and wires their events to those methods. The page has two tabs: the
playground (prompt, examples, candidates on the left; checkpoint and sampling controls on
the right) and the checkpoint's training and evaluation reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gradio as gr

from codeparrot.app.config import MAX_CANDIDATES
from codeparrot.app.examples import CHAPTER_EXAMPLES, STOP_FIRST_BLOCK, STOP_MODES
from codeparrot.app.stream import APPLY_JS, page_js, run_js
from codeparrot.config import field_bounds, field_default
from codeparrot.generation.config import GenerationConfig

if TYPE_CHECKING:
    from codeparrot.app.ui import Playground

INTRO = (
    "# codeparrot playground\n"
    "Write the start of some Python, pick a checkpoint and press **Generate**: "
    "the candidates stream in as the model samples them."
)

# The hidden button whose click is /generate through Gradio's queue.
QUEUE_BUTTON = "generate-queue"

# The end of a slider over a setting declared without an upper bound (temperature).
UNBOUNDED_SLIDER_TOP = 2.0


@dataclass
class Widgets:
    """The components the handlers read or update, filled in as the page is built."""

    prompt: Any = None
    checkpoint: Any = None
    max_new_tokens: Any = None
    temperature: Any = None
    top_p: Any = None
    n: Any = None
    seed: Any = None
    stop_mode: Any = None
    stop_text: Any = None
    suffix: Any = None
    infill_note: Any = None
    cut_repetition: Any = None
    run: Any = None
    run_queue: Any = None  # hidden: Generate through Gradio's queue (/generate)
    pump: Any = None  # hidden: hands the page's stream to Gradio (codeparrot.app.stream)
    stop: Any = None
    notice: Any = None
    details: Any = None
    candidates: list[Any] = field(default_factory=list)
    card: Any = None
    refresh: Any = None
    reports: list[Any] = field(default_factory=list)  # the second tab's outputs, in order

    def generation_inputs(self) -> list[Any]:
        """Inputs of ``/generate``, in the order of :meth:`Playground.generate`'s parameters
        (:data:`~codeparrot.app.stream.GENERATION_FIELDS`)."""
        return [
            self.checkpoint,
            self.prompt,
            self.max_new_tokens,
            self.temperature,
            self.top_p,
            self.n,
            self.seed,
            self.stop_mode,
            self.stop_text,
            self.cut_repetition,
            self.suffix,
        ]

    def generation_outputs(self) -> list[Any]:
        return [self.notice, self.details, *self.candidates]

    def card_outputs(self) -> list[Any]:
        return [self.card, *self.reports]


def build_layout(playground: Playground) -> gr.Blocks:
    """The page of ``playground``, its events wired to the playground's handlers."""
    w = Widgets()
    limit = playground.max_new_tokens_limit
    with gr.Blocks(title="codeparrot playground", analytics_enabled=False) as demo:
        gr.Markdown(INTRO)
        # rendered in the right column; created first so the examples can fill them
        w.max_new_tokens = gr.Slider(
            1, limit, value=min(64, limit), step=1, label="Max new tokens", render=False
        )
        w.stop_mode = gr.Radio(
            list(STOP_MODES),
            value=STOP_FIRST_BLOCK,
            label="Stop",
            info="first block: at the HumanEval stop sequences (\\ndef, \\nclass, ...)",
            elem_id="stop-mode",
            render=False,
        )
        with gr.Tab("Playground"), gr.Row():
            with gr.Column(scale=3):
                _prompt_and_candidates(w, limit)
            with gr.Column(scale=2):
                _checkpoint_and_sampling(w, playground.choices, playground.config.max_candidates)
        with gr.Tab("Training & evaluation"):
            _reports(w)
        _wire(demo, w, playground)
    return demo


def _prompt_and_candidates(w: Widgets, limit: int) -> None:
    """Left column: the prompt, the chapter's examples, the buttons and the candidates."""
    w.prompt = gr.Code(
        value=CHAPTER_EXAMPLES[0].prompt,
        language="python",
        label="Prompt",
        lines=7,
        interactive=True,
        elem_id="prompt",
    )
    w.suffix = gr.Code(
        value="",
        language="python",
        label="Code after the cursor (optional: the model fills in the middle)",
        lines=3,
        interactive=True,
        elem_id="suffix",
    )
    w.infill_note = gr.Markdown("", elem_id="infill-note")
    gr.Examples(
        examples=[[e.prompt, e.stop_mode, min(e.max_new_tokens, limit)] for e in CHAPTER_EXAMPLES],
        inputs=[w.prompt, w.stop_mode, w.max_new_tokens],
        example_labels=[e.label for e in CHAPTER_EXAMPLES],
        label="Examples from the CodeParrot chapter",
    )
    with gr.Row():
        w.run = gr.Button("Generate", variant="primary", elem_id="generate")
        w.stop = gr.Button("Stop", variant="stop", elem_id="stop")
        w.run_queue = gr.Button("Generate", elem_id=QUEUE_BUTTON, visible="hidden")
    w.pump = gr.HTML("", js_on_load=page_js(f"#{QUEUE_BUTTON}"), visible="hidden", elem_id="pump")
    w.notice = gr.Markdown("", visible=False, elem_id="notice")
    w.candidates = [
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
        w.details = gr.JSON(label="Candidates")


def _checkpoint_and_sampling(
    w: Widgets, choices: list[tuple[str, str]], max_candidates: int
) -> None:
    """Right column: the checkpoint picker with its card, and the sampling settings."""
    w.checkpoint = gr.Dropdown(
        choices=choices,
        value=choices[0][1] if choices else None,
        label="Checkpoint",
        interactive=True,
        elem_id="checkpoint",
    )
    w.card = gr.Markdown(elem_id="card")
    with gr.Row():
        w.max_new_tokens.render()
        w.n = gr.Slider(1, max_candidates, value=1, step=1, label="Candidates")
    with gr.Row():
        w.temperature = _sampling_slider("temperature", "Temperature (0: greedy)", step=0.05)
        w.top_p = _sampling_slider("top_p", "Top-p", step=0.01)
    w.stop_mode.render()
    with gr.Row():
        w.stop_text = gr.Textbox(
            value="\\ndef\n\\nclass",
            lines=2,
            label="Stop sequences (one a line, \\n: newline)",
            scale=2,
        )
        w.seed = gr.Number(
            # no precision: a non-integer seed reaches the handler, which says what is wrong
            value=-1,
            step=1,
            label="Seed (-1: random)",
            elem_id="seed",
            scale=1,
        )
    w.cut_repetition = gr.Checkbox(
        value=True,
        label="Cut repetition",
        info="show each candidate up to where it starts repeating itself or the prompt",
        elem_id="cut-repetition",
    )


def _sampling_slider(name: str, label: str, step: float) -> gr.Slider:
    """A slider over :class:`GenerationConfig`'s field ``name``: its declared bounds and
    default (an exclusive bound starts one step in; no upper bound ends at
    :data:`UNBOUNDED_SLIDER_TOP`)."""
    bounds = field_bounds(GenerationConfig, name)
    low = bounds.minimum if bounds.minimum is not None else 0.0
    if bounds.gt is not None:
        low += step
    high = bounds.maximum if bounds.maximum is not None else UNBOUNDED_SLIDER_TOP
    default = field_default(GenerationConfig, name)
    return gr.Slider(low, high, value=default, step=step, label=label)


def _reports(w: Widgets) -> None:
    """Second tab: the checkpoint's facts, training curve and HumanEval report."""
    facts = gr.Markdown()
    curve_image = gr.Image(label="Training loss", interactive=False, visible=False)
    curve_plot = gr.LinePlot(
        x="step",
        y="value",
        color="series",
        y_title="loss (nats/token)",
        label="Training curve",
        visible=False,
    )
    curve_note = gr.Markdown()
    gr.Markdown("### HumanEval")
    humaneval = gr.Markdown()
    humaneval_image = gr.Image(label="pass@k", interactive=False, visible=False)
    w.refresh = gr.Button("Reload the reports")
    w.reports = [facts, curve_image, curve_plot, curve_note, humaneval, humaneval_image]


def _wire(demo: gr.Blocks, w: Widgets, playground: Playground) -> None:
    """Each event to its handler.

    Generation waits in the playground's own line (:class:`~codeparrot.app.limits.GenerationSlots`),
    so Gradio runs every event at once: ``/stop`` and ``/model_card`` never wait behind a
    generation, and skip Gradio's queue altogether when the page calls them.
    """
    quick = {"concurrency_limit": None, "queue": False}
    w.checkpoint.change(
        playground.model_card, w.checkpoint, w.card_outputs(), api_name="model_card", **quick
    )
    for trigger in (w.refresh.click, demo.load):
        trigger(
            playground.model_card,
            w.checkpoint,
            w.card_outputs(),
            api_visibility="private",
            **quick,
        )
    for trigger in (w.checkpoint.change, demo.load):
        trigger(
            playground.fit_max_new_tokens,
            [w.checkpoint, w.max_new_tokens],
            w.max_new_tokens,
            api_visibility="private",
            **quick,
        )
    for trigger in (w.checkpoint.change, demo.load):
        trigger(
            playground.infill_note,
            w.checkpoint,
            w.infill_note,
            api_visibility="private",
            **quick,
        )
    # Generate streams through the page's own request (codeparrot.app.stream), each
    # frame handed to Gradio by the pump's JavaScript-only event; the hidden button is
    # /generate through Gradio's queue: the page's fallback, and the API's endpoint
    w.run.click(None, w.generation_inputs(), None, js=run_js(f"#{QUEUE_BUTTON}"))
    w.pump.apply(
        None, None, w.generation_outputs(), js=APPLY_JS, trigger_mode="always_last", **quick
    )
    w.run_queue.click(
        playground.generate,
        w.generation_inputs(),
        w.generation_outputs(),
        api_name="generate",
        concurrency_limit=None,
        # the handler checks its inputs and gives its outputs as the page shows them
        # (codeparrot.app.ui.page_code): no worker-thread hop per input and output
        preprocess=False,
        postprocess=False,
    )
    w.stop.click(playground.stop, None, None, api_name="stop", **quick)
