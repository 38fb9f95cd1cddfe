"""What one playground request may ask for, and the line generation requests wait in.

Every request is hostile until checked: :func:`check_request` looks only at sizes and
numbers (no tokenizer, no model), so a 5 MB prompt or a NaN temperature costs nothing
but its parsing. The page checks its own sizes; the values are the request contract's
(:class:`~codeparrot.generation.request.CompletionRequest`). :class:`GenerationSlots` is the generation queue: a fixed number of
generations run, a bounded number wait, first come first served, and a request that
finds the line full is refused at once. Being our own (and not Gradio's queue) it holds
only generations, so ``/stop`` and ``/model_card`` never wait behind it nor find it full.
Standard library only.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import CodeparrotError
from codeparrot.generation.request import CompletionRequest, RequestError
from codeparrot.generation.request import RequestLimits as ContractLimits


class RequestRefused(CodeparrotError):
    """A request over a limit or with a malformed value; refused before any work."""


@dataclass(frozen=True)
class RequestLimits:
    """The largest request the server accepts (see :class:`~codeparrot.app.config.AppConfig`)."""

    prompt_chars: int
    stop_sequences: int
    stop_chars: int
    candidates: int
    max_new_tokens: int

    def contract(self) -> ContractLimits:
        """These limits in the request contract's terms (the prompt's size is the page's)."""
        return ContractLimits(
            max_new_tokens=self.max_new_tokens,
            n=self.candidates,
            stop_sequences=self.stop_sequences,
            stop_chars=self.stop_chars,
        )


# The request contract's fields as the page labels them, for its refusals.
LABELS = {
    "max_new_tokens": "Max new tokens",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "n": "Number of candidates",
    "seed": "Seed",
    "stop": "The stop list",
    "prompt": "The prompt",
    "suffix": "The code after the cursor",
}


def check_request(
    limits: RequestLimits,
    *,
    prompt: Any,
    n: Any,
    max_new_tokens: Any,
    temperature: Any,
    top_p: Any,
    seed: Any,
    stop_text: Any,
    suffix: Any = "",
) -> CompletionRequest:
    """The page's values as a checked :class:`CompletionRequest` (stop strings as typed,
    one a line, before their escapes are decoded); :class:`RequestRefused` naming the
    first value that is over a limit or malformed.

    The page's own sizes come first: a huge prompt or stop text is refused before anything
    reads it. The values are the request contract's to check.
    """
    if not isinstance(prompt, str):
        raise RequestRefused("The prompt must be text.")
    if not isinstance(suffix or "", str):
        raise RequestRefused("The code after the cursor must be text.")
    size = len(prompt) + len(suffix or "")
    if size > limits.prompt_chars:
        what = "prompt and the code after the cursor are" if suffix else "prompt is"
        raise RequestRefused(
            f"The {what} {size:,} characters; this server accepts at most {limits.prompt_chars:,}."
        )
    if stop_text is not None and not isinstance(stop_text, str):
        raise RequestRefused("Stop sequences must be text, one a line.")
    text = stop_text or ""
    # the most characters the allowed stop lines can take, with their line breaks
    if len(text) > limits.stop_sequences * (limits.stop_chars + 2):
        raise RequestRefused(
            f"The stop sequences are {len(text):,} characters; this server accepts at most "
            f"{limits.stop_sequences} of at most {limits.stop_chars} characters each."
        )
    try:
        return CompletionRequest(
            prompt,
            suffix or None,
            max_new_tokens=_whole(max_new_tokens),
            temperature=temperature,
            top_p=top_p,
            n=_whole(n),
            seed=_seed(seed),
            stop=tuple(line for line in text.splitlines() if line),
            limits=limits.contract(),
        )
    except RequestError as e:
        raise RequestRefused(e.message(LABELS.get(e.field))) from None


def _whole(value: Any) -> Any:
    """A slider's whole float (``8.0``) as the int it means; anything else as it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _seed(value: Any) -> Any:
    """The page's seed: blank or negative asks for a fresh one (None)."""
    value = _whole(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return None
    return value


class GenerationSlots:
    """First come, first served: ``running`` generations at once, ``waiting`` more in line.

    ``join`` takes a place in line (or refuses when ``waiting`` requests already wait),
    ``ahead`` waits a while for the place to move up, ``leave`` gives it back; the
    caller leaves in a ``finally``, whether it ran, was stopped or went away.
    """

    def __init__(self, running: int, waiting: int) -> None:
        if running < 1 or waiting < 0:
            raise ValueError(f"running must be >= 1 and waiting >= 0, got {running}, {waiting}")
        self.running = running
        self.waiting = waiting
        self._line: deque[object] = deque()
        self._changed = threading.Condition()

    def join(self) -> object:
        """A place in line; :class:`RequestRefused` when the line is full."""
        with self._changed:
            if len(self._line) - self.running >= self.waiting:
                raise RequestRefused(
                    f"The playground is busy: {self.waiting} generation request(s) already "
                    "wait for their turn. Try again in a moment."
                )
            ticket = object()
            self._line.append(ticket)
            return ticket

    def ahead(self, ticket: object, timeout: float) -> int:
        """Generations that must end before ``ticket`` runs (0: its turn), after waiting
        at most ``timeout`` seconds for that number to reach 0."""
        with self._changed:
            self._changed.wait_for(lambda: self._ahead(ticket) == 0, timeout=timeout)
            return self._ahead(ticket)

    @property
    def in_line(self) -> int:
        """Requests holding a place: running and waiting."""
        with self._changed:
            return len(self._line)

    def leave(self, ticket: object) -> None:
        with self._changed:
            if ticket in self._line:
                self._line.remove(ticket)
                self._changed.notify_all()

    def _ahead(self, ticket: object) -> int:
        return max(0, self._line.index(ticket) - self.running + 1)
