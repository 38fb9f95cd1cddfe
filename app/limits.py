"""What one playground request may ask for, and the line generation requests wait in.

Every request is hostile until checked: :func:`check_request` looks only at sizes and
numbers (no tokenizer, no model), so a 5 MB prompt or a NaN temperature costs nothing
but its parsing. :class:`GenerationSlots` is the generation queue: a fixed number of
generations run, a bounded number wait, first come first served, and a request that
finds the line full is refused at once. Being our own (and not Gradio's queue) it holds
only generations, so ``/stop`` and ``/model_card`` never wait behind it nor find it full.
Standard library only.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import CodeparrotError


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
) -> None:
    """Raise :class:`RequestRefused` naming the first value that is over a limit or malformed.

    Sizes come first: a huge prompt or stop list is refused before anything reads it.
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
    _check_stop_text(limits, stop_text or "")
    for name, value in (("Temperature", temperature), ("Top-p", top_p)):
        _check_finite(name, value)
    _check_count("Number of candidates", n, 1, limits.candidates)
    _check_count("Max new tokens", max_new_tokens, 1, limits.max_new_tokens)
    if seed is not None:
        _check_finite("Seed", seed)
        if seed != int(seed):
            raise RequestRefused(f"Seed must be a whole number, got {seed}.")


def _check_stop_text(limits: RequestLimits, text: str) -> None:
    # the most characters the allowed stop lines can take, with their line breaks
    if len(text) > limits.stop_sequences * (limits.stop_chars + 2):
        raise RequestRefused(
            f"The stop sequences are {len(text):,} characters; this server accepts at most "
            f"{limits.stop_sequences} of at most {limits.stop_chars} characters each."
        )
    lines = [line for line in text.splitlines() if line]
    if len(lines) > limits.stop_sequences:
        raise RequestRefused(
            f"{len(lines)} stop sequences given; this server accepts at most "
            f"{limits.stop_sequences}."
        )
    longest = max((len(line) for line in lines), default=0)
    if longest > limits.stop_chars:
        raise RequestRefused(
            f"A stop sequence is {longest:,} characters; this server accepts at most "
            f"{limits.stop_chars} each."
        )


def _check_finite(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestRefused(f"{name} must be a finite number, got {value!r}.")


def _check_count(name: str, value: Any, low: int, high: int) -> None:
    _check_finite(name, value)
    if value != int(value) or not low <= value <= high:
        raise RequestRefused(f"{name} must be a whole number in {low}..{high}, got {value}.")


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
