"""Checked requests to engine calls, engine events to pieces of answer.

Every endpoint (OpenAI's completions and chat, llama.cpp's ``/completion`` and
``/infill``) goes through :class:`CompletionService`: fit ``max_tokens`` to the context,
start the engine's stream, apply the opt-in repetition cut and the time limit, and turn
events into :class:`Piece` objects that each endpoint's module shapes into its answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.generation.repetition import LineEndRepetitionStream
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import ApiError, ServedRequest, bad

logger = logging.getLogger(__name__)

# The engine's finish reasons in OpenAI's words ("cancelled": the client went away, or
# the time limit, which reads as "length": the answer was cut for its size).
FINISH_REASONS = {"stop": "stop", "eos": "stop", "length": "length", "cancelled": "stop"}


class GenerationLine:
    """One generation at a time and at most ``waiting`` requests waiting for their turn.

    A request that finds the line full is refused at once (503): on a small CPU machine
    a longer line only makes every client wait longer for answers it has given up on.
    """

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self._count = threading.Lock()
        self._in_line = 0
        self._running = threading.Lock()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        with self._count:
            if self._in_line > self.waiting:
                raise ApiError(
                    503,
                    f"The server is busy: a generation runs and {self.waiting} request(s) "
                    "wait for their turn. Try again in a moment.",
                    type="server_busy",
                )
            self._in_line += 1
        try:
            with self._running:
                yield
        finally:
            with self._count:
                self._in_line -= 1


@dataclass
class Piece:
    """New text of choice ``index``; ``completion`` and ``reason`` (OpenAI's finish
    reason, ``"repetition"`` where the opt-in cut took text away) on its last piece."""

    index: int
    text: str
    completion: Any | None = None
    reason: str | None = None


class CompletionService:
    """Turns checked requests into engine calls and engine events into pieces."""

    def __init__(self, config: ServeConfig, engine: Any, model_name: str) -> None:
        self.config = config
        self.engine = engine
        self.model_name = model_name
        self.created = int(time.time())
        self.line = GenerationLine(config.queue_size)

    def models(self) -> dict[str, Any]:
        model = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "codeparrot",
            "max_model_len": self.engine.context_length,
            "quantization": getattr(self.engine, "quantize", "none"),
        }
        return {"object": "list", "data": [model]}

    def check_suffix(self, request: ServedRequest) -> ServedRequest:
        """The request, whose suffix (if any) the model must be able to use (the server's
        FIM settings are the engine's, resolved at load); else a 400 naming the field."""
        if request.suffix is not None and not self.can_infill():
            raise bad(
                f"{request.suffix_field}: this checkpoint cannot fill in the middle (its "
                "tokenizer has no fill-in-the-middle tokens of a known family, or its model "
                "was trained without them; start the server with --fim-tokens to name "
                "them); send the prompt alone.",
                request.suffix_field,
            )
        return request

    def can_infill(self) -> bool:
        return self.engine.infill_template() is not None

    def fit(self, request: ServedRequest) -> ServedRequest:
        """``max_tokens`` fitted to what the context leaves after the prompt.

        ``--over-context clamp``: lowered to the room left (at least a quarter of the
        context: a prompt that leaves less loses its start, as a too-long prompt always
        did); ``refuse``: a 400 naming the field when prompt and max_tokens overflow.
        """
        if request.max_tokens == 0:  # llama.cpp's warm-up: nothing is generated
            return request
        context = self.engine.context_length
        used = self.prompt_tokens(request)
        asked = request.max_tokens
        name = request.budget_field
        refuse = self.config.over_context == "refuse" and not request.open_ended
        if refuse and used + asked > context:
            raise bad(
                f"{name} is {asked} and the prompt is {used} tokens: together more than the "
                f"model's context of {context} tokens (this server refuses rather than "
                "clamps: --over-context refuse).",
                name,
            )
        new = min(asked, self.config.max_tokens_limit, context - 1)
        room = context - used
        if new > room:
            new = max(room, min(new, max(1, context // 4)))
        generation = request.generation.replace(max_new_tokens=new)
        return dataclasses.replace(request, generation=generation)

    def prompt_tokens(self, request: ServedRequest) -> int:
        """Tokens the prompt takes in the context (with BOS and FIM sentinels)."""
        if isinstance(request.prompt, tuple):
            return len(request.prompt)
        count = self.engine.count_tokens
        used = count(request.prompt) + len(getattr(self.engine, "bos_ids", ()))
        if request.suffix is not None:
            used += count(request.suffix) + 3
        return used

    def events(self, request: ServedRequest, cancel: threading.Event) -> Iterator[Any]:
        """The engine's stream for ``request``; checks that need the tokenizer raise here."""
        reuse = {"reuse_prompt_start": request.cache_prompt}  # False: exact one-pass prefill
        try:
            if isinstance(request.prompt, tuple):
                try:
                    ids = list(request.prompt)
                    return self.engine.stream_ids(ids, request.generation, cancel, **reuse)
                except ConfigError as e:
                    raise bad(f"{request.prompt_field}: {e}.", request.prompt_field) from None
            extra = {} if request.suffix is None else {"suffix": request.suffix}
            return self.engine.stream(request.prompt, request.generation, cancel, **extra, **reuse)
        except ConfigError as e:
            raise bad(str(e)) from None

    def cuts(self, request: ServedRequest) -> bool:
        return (
            self.config.cut_repetition if request.cut_repetition is None else request.cut_repetition
        )

    def pieces(
        self, request: ServedRequest, events: Iterator[Any], cancel: threading.Event
    ) -> Generator[Piece | None, None, None]:
        """The answer's pieces: what the model wrote, through the opt-in repetition cut
        (a hold-back, so that joined pieces equal the whole cut text) and the time limit.

        None stands for new text held back (nothing to send): a moment to see whether the
        client is still there."""
        before = request.prompt if isinstance(request.prompt, str) else ""
        held: dict[int, LineEndRepetitionStream] = {}
        indents: dict[int, IndentCut] = {}
        raw: dict[int, int] = {}
        kept: dict[int, int] = {}
        timer = _TimeLimit(request.time_limit, cancel)
        finished = []
        for event in events:
            last = event.completion is not None
            text = event.delta
            if self.cuts(request):
                cut = held.setdefault(event.index, LineEndRepetitionStream(before))
                text = cut.feed(text) + (cut.finish() if last else "")
            raw[event.index] = raw.get(event.index, 0) + len(event.delta)
            kept[event.index] = kept.get(event.index, 0) + len(text)
            if request.min_indent:
                indent = indents.setdefault(event.index, IndentCut(request.min_indent))
                text = indent.feed(text) + (indent.finish() if last else "")
                if indent.stopped and request.generation.n == 1:
                    cancel.set()  # the answer is known: no more tokens
            timer.saw(event.delta)
            if not last and not text:
                if event.delta:
                    yield None
                continue
            reason = None
            if last:
                finished.append(event.completion)
                reason = FINISH_REASONS.get(event.completion.finish_reason, "stop")
                if timer.expired and event.completion.finish_reason == "cancelled":
                    reason = "length"
                if kept[event.index] < raw[event.index]:
                    reason = "repetition"
                elif event.index in indents and indents[event.index].stopped:
                    reason = "indent"
            yield Piece(event.index, text, event.completion, reason)
        log_generation(finished)

    def whole(
        self, request: ServedRequest, events: Iterator[Any], cancel: threading.Event
    ) -> list[Piece]:
        """One piece per choice, in index order: its whole text and its last piece's end."""
        texts: dict[int, list[str]] = {}
        last: dict[int, Piece] = {}
        for piece in self.pieces(request, events, cancel):
            if piece is None:
                continue
            texts.setdefault(piece.index, []).append(piece.text)
            if piece.completion is not None:
                last[piece.index] = piece
        return [
            Piece(i, "".join(texts[i]), last[i].completion, last[i].reason) for i in sorted(last)
        ]


class IndentCut:
    """llama.cpp's ``n_indent`` over a text that arrives in pieces: the text ends before
    the first line after the first whose indentation is less than ``n_indent`` (blank
    lines are judged by the next one). A line whose indentation is not yet known (only
    spaces so far) is held back."""

    def __init__(self, n_indent: int) -> None:
        self.n_indent = n_indent
        self.text = ""
        self.sent = 0
        self.scan = 0  # where to look for the next line break
        self.stopped = False

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        self.text += piece
        safe = len(self.text)
        while (nl := self.text.find("\n", self.scan)) >= 0:
            start = nl + 1
            rest = self.text[start:]
            body = rest.lstrip(" \t")
            if not body:  # its indentation is not known yet
                safe = start
                break
            self.scan = start
            if body.startswith(("\n", "\r")):
                continue
            if len(rest) - len(body) < self.n_indent:
                self.text, safe, self.stopped = self.text[:start], start, True
                break
        return self._send(safe)

    def finish(self) -> str:
        return "" if self.stopped else self._send(len(self.text))

    def _send(self, upto: int) -> str:
        piece = self.text[self.sent : upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return piece


class _TimeLimit:
    """llama.cpp's ``t_max_predict_ms``: once the time has passed and the text holds a
    line break, generation is cancelled (a suggestion of whole lines, on time)."""

    def __init__(self, seconds: float | None, cancel: threading.Event) -> None:
        self.seconds = seconds
        self.cancel = cancel
        self.started = time.monotonic()
        self.newline = False
        self.expired = False

    def saw(self, text: str) -> None:
        if self.seconds is None or self.expired:
            return
        self.newline = self.newline or "\n" in text
        if self.newline and time.monotonic() - self.started > self.seconds:
            self.expired = True
            self.cancel.set()


def log_generation(completions: list[Any]) -> None:
    """The seed and counts of a generation: a sampled answer can be drawn again."""
    if completions:
        first = completions[0]
        logger.info(
            "generated n=%d seed=%s prompt_tokens=%d new_tokens=%d in %.3f s",
            len(completions),
            first.seed,
            first.prompt_tokens,
            sum(c.new_tokens for c in completions),
            max(c.seconds for c in completions),
        )


def usage(completions: list[Any]) -> dict[str, int]:
    prompt = completions[0].prompt_tokens if completions else 0
    new = sum(c.new_tokens for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new}
