"""The playground's "cut repetition" checkbox, through ``gradio_client``.

The engine here replays a degenerate completion the quickstart model really produced
(``sympy.polys.polys.polys…``), so what is cut is known exactly.
"""

from __future__ import annotations

import pytest

from codeparrot.generation import Completion, StreamEvent

gradio_client = pytest.importorskip("gradio_client")

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:Warning", "ignore:The copy keyword is deprecated:Warning"
)

PROMPT = "import sympy\n\nx = sympy."
LOOP = ["polys", "."] * 6 + ["Poly"]  # polys.polys.polys.polys.polys.polys.Poly
HONEST = ["symbols", "('x')", "\n"]


class ReplayEngine:
    """Candidate 0 replays ``LOOP``, candidate 1 ``HONEST``, one piece an event."""

    context_length = 256

    def encode_prompt(self, prompt, max_new_tokens):
        return [0, 1, 2], False

    def count_tokens(self, text):
        return 3

    def stream(self, prompt, config, cancel=None):
        scripts = [LOOP, HONEST][: config.n]
        for step in range(max(len(s) for s in scripts)):
            for i, script in enumerate(scripts):
                if step < len(script):
                    yield StreamEvent(i, script[step])
        for i, script in enumerate(scripts):
            text = "".join(script)
            yield StreamEvent(i, "", Completion(text, "length", 3, len(script), 0.01, seed=0))


def generate(client, playground, **kw):
    args = dict(max_new_tokens=16, temperature=0.2, top_p=0.95, n=2, seed=0,
                stop_mode="none", stop_text="")  # fmt: skip
    args.update(kw)
    checkpoint = next(iter(playground.pool.checkpoints))
    job = client.submit(checkpoint, PROMPT, *args.values(), api_name="/generate")
    job.result()
    return job.outputs()


def test_cut_repetition_is_on_by_default_and_cuts_only_the_loop(served):
    url, playground = served(ReplayEngine())
    client = gradio_client.Client(url, verbose=False)
    outputs = generate(client, playground)  # the checkbox is not sent: its default applies
    details = outputs[-1][1]
    assert details[0]["text"] == "polys.polys" and details[0]["repetition_cut"] is True
    assert details[1]["text"] == "".join(HONEST) and details[1]["repetition_cut"] is False
    looped, honest = outputs[-1][2], outputs[-1][3]
    assert looped["value"] == PROMPT + "polys.polys"
    assert "cut at a repetition" in looped["label"] and "cut at" not in honest["label"]
    # mid-stream frames never show a third "polys" either (a frame's editor is an update,
    # or its text as a plain value mid-stream)
    shown = [o[2] if isinstance(o[2], str) else o[2]["value"] for o in outputs if o[2]]
    assert all("polys.polys.polys" not in text for text in shown)


def test_unticked_shows_the_candidates_as_sampled(served):
    url, playground = served(ReplayEngine())
    client = gradio_client.Client(url, verbose=False)
    details = generate(client, playground, cut_repetition=False)[-1][1]
    assert details[0]["text"] == "".join(LOOP) and details[0]["repetition_cut"] is False
