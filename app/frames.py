"""What ``/generate`` sends the page: frames of the candidates as they grow.

A frame is the values of the event's outputs (notice, details, candidate 1, ...,
candidate MAX_CANDIDATES) in the form the page shows them: ``/generate`` is wired with
Gradio's pre- and postprocessing off, which hand every input and every output to a worker
thread and back, one at a time (11 inputs, then 10 outputs a frame), on the way of the
first token. The handler checks its inputs itself
(:func:`~codeparrot.app.limits.check_request`) and gives its outputs as the components'
postprocessing would: :func:`page_code`, :func:`page_markdown`, JSON-ready details.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

import gradio as gr

from codeparrot.app.config import MAX_CANDIDATES
from codeparrot.generation import Completion, StreamEvent
from codeparrot.generation.repetition import cut_repetition

# What the page of a session shows, as the last frame of /generate set it: whether the
# notice is visible, and each candidate editor's (label, visible).
PageProps = tuple[bool, tuple[tuple[str | None, bool], ...]]


class PageRecords:
    """:data:`PageProps` per session, the ``size`` most recent: the first frame of a
    generation updates only the properties that differ from what the page shows (each
    property update costs Gradio a component built anew). A session not recorded, or
    whose last generation did not end normally, gets every property."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._props: dict[str, PageProps] = {}
        self._lock = threading.Lock()

    def get(self, session: str) -> PageProps | None:
        with self._lock:
            return self._props.get(session) if session else None

    def put(self, session: str, props: PageProps | None) -> None:
        with self._lock:
            self._props.pop(session, None)
            if session and props is not None:
                self._props[session] = props  # the newest last
                while len(self._props) > self.size:
                    del self._props[next(iter(self._props))]


class CandidatesView:
    """The page's view of one generation: text so far and the finished candidates.

    In infill mode each editor shows prompt + middle + ``suffix``.

    With ``cut`` each candidate is shown cut before its first degenerate repetition
    (:func:`~codeparrot.generation.repetition.cut_repetition`, the prompt being the text
    above and before it); the details say which were cut.
    """

    def __init__(
        self,
        prompt: str,
        n: int,
        cut: bool = False,
        suffix: str = "",
        page: PageProps | None = None,
    ) -> None:
        self.prompt = prompt
        self.suffix = suffix  # shown after each candidate: the middle grows in place
        self.cut = cut
        self.texts = [""] * n
        self.done: list[Completion | None] = [None] * n
        # (notice, details, editor labels) as the last frame sent them
        self._sent: tuple[str, list[dict[str, Any]], list[str]] | None = None
        self.page = page  # what the page shows (None: not known), kept up to date

    def shown(self, index: int) -> str:
        """Candidate ``index`` as the page shows it."""
        text = self.texts[index]
        return cut_repetition(text, before=self.prompt, above=self.prompt) if self.cut else text

    def add(self, event: StreamEvent) -> None:
        if event.completion is not None:
            self.texts[event.index] = event.completion.text
            self.done[event.index] = event.completion
        else:
            self.texts[event.index] += event.delta

    def details(self) -> list[dict[str, Any]]:
        out = []
        for i, c in enumerate(self.done):
            text = self.shown(i)
            row: dict[str, Any] = {
                "candidate": i + 1,
                "text": text,
                "finish_reason": None,
                "repetition_cut": text != self.texts[i],
            }
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

    def frame(self, notice: str, *, full: bool = True, every_prop: bool = False) -> tuple[Any, ...]:
        """Values of (notice, details, candidate 1, ..., candidate MAX_CANDIDATES), in the
        form the page shows them (``/generate`` skips Gradio's postprocessing, see
        :func:`page_code`).

        A frame that is not ``full`` (mid-stream) gives the notice and the details as the
        last full frame sent them and only the editors' texts, as plain values: Gradio
        handles a plain value several times faster than an update of a component's
        properties (or a ``gr.skip()``, which it handles as one), and this frame is on
        the way of every token to the page. An editor whose label changed (its
        candidate finished) still gets an update. A full frame updates the properties
        (notice and editors shown or hidden, labels) that differ from :attr:`page`, all
        of them with ``every_prop`` or where the page is not known.
        """
        n = len(self.texts)
        shown = [self.shown(i) for i in range(n)]
        labels = [candidate_label(i, self.done[i], shown[i] != self.texts[i]) for i in range(n)]
        texts = [page_code(self.prompt + shown[i] + self.suffix) for i in range(n)]
        if not full and self._sent is not None:
            sent_notice, sent_details, sent_labels = self._sent
            editors = [
                texts[i]
                if labels[i] == sent_labels[i]
                else gr.update(value=texts[i], label=labels[i])
                for i in range(n)
            ]
            self._sent = (sent_notice, sent_details, labels)
            if self.page is not None:
                self.page = (
                    self.page[0],
                    (*((label, True) for label in labels), *self.page[1][n:]),
                )
            return (sent_notice, sent_details, *editors, *[""] * (MAX_CANDIDATES - n))
        details = self.details()
        notice = page_markdown(notice)
        self._sent = (notice, details, labels)
        known = None if every_prop else self.page
        props = [(labels[i], True) if i < n else (None, False) for i in range(MAX_CANDIDATES)]
        if known is not None:  # a hidden editor keeps the label it had
            props = [(known[1][i][0], False) if i >= n else p for i, p in enumerate(props)]
        editors = [
            (texts[i] if i < n else "")
            if known is not None and known[1][i] == props[i]
            else gr.update(value=texts[i], label=labels[i], visible=True)
            if i < n
            else gr.update(value="", visible=False)
            for i in range(MAX_CANDIDATES)
        ]
        self.page = (bool(notice), tuple(props))
        if known is not None and known[0] == bool(notice):
            return (notice, details, *editors)
        return (gr.update(value=notice, visible=bool(notice)), details, *editors)


def candidate_label(index: int, completion: Any | None, cut: bool = False) -> str:
    if completion is None:
        return f"candidate {index + 1} · generating…"
    return (
        f"candidate {index + 1} · {completion.new_tokens} tokens · {completion.seconds:.2f} s · "
        f"{completion.tokens_per_second:.1f} tokens/s · "
        + ("cut at a repetition · " if cut else "")
        + completion.finish_reason
    )


def page_code(text: str) -> str:
    """``text`` as a ``gr.Code`` shows it (its postprocessing strips the ends)."""
    return text.strip()


def page_markdown(text: str) -> str:
    """``text`` as a ``gr.Markdown`` shows it (its postprocessing: ``inspect.cleandoc``)."""
    return inspect.cleandoc(text)
