"""Stop handling: where a candidate ends, and which of its text may be streamed yet.

Standard library only (the CLI and the playground import it for their flags and fields).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from codeparrot.errors import ConfigError

# The stop sequences of the CodeParrot / bigcode HumanEval evaluation.
HUMANEVAL_STOP_SEQUENCES: tuple[str, ...] = (
    "\nclass",
    "\ndef",
    "\n#",
    "\n@",
    "\nprint",
    "\nif",
)


def decode_escapes(text: str) -> str:
    """A stop string typed with backslash escapes (``\\n``, ``\\t``, ``\\\\``, ``\\x41``) decoded.

    Goes through latin-1 with backslashreplace so that non-ASCII text survives; a broken
    escape (a trailing backslash, say) is a :class:`ConfigError` naming the string.
    """
    try:
        return codecs.decode(text.encode("latin-1", "backslashreplace"), "unicode_escape")
    except UnicodeDecodeError as e:
        raise ConfigError(f"stop string {text!r}: broken backslash escape ({e.reason})") from e


def first_block(text: str, stop_sequences: tuple[str, ...] = HUMANEVAL_STOP_SEQUENCES) -> str:
    """The reference playground's ``first_block``: text up to the first stop sequence."""
    cut = earliest_stop(text, stop_sequences)
    return text if cut is None else text[:cut]


def earliest_stop(text: str, stops: tuple[str, ...], start: int = 0) -> int | None:
    """Index of the first stop string found in ``text[start:]``, or None."""
    best = None
    for s in stops:
        i = text.find(s, start)
        if i != -1 and (best is None or i < best):
            best = i
    return best


def held_back(text: str, stops: tuple[str, ...]) -> int:
    """Characters at the end of ``text`` that could still become the start of a stop string."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    # An incomplete UTF-8 sequence decodes to U+FFFD at the end: wait for the next token.
    if text.endswith("\ufffd"):
        hold = max(hold, 1)
    return hold


@dataclass(frozen=True)
class StopStrings:
    """The stop strings of one call, scanned incrementally as a candidate's text grows."""

    stops: tuple[str, ...]

    @property
    def longest(self) -> int:
        return max((len(s) for s in self.stops), default=0)

    def scan(self, text: str, before: int) -> tuple[int | None, int]:
        """(where a stop string starts, or None; characters that may be streamed).

        ``before`` is the length of ``text`` at the previous scan: only a stop string that
        ends in the new characters can be new. Text that could still become a stop
        string (or ends in half a UTF-8 character) is held back.
        """
        if self.stops and len(text) > before:
            cut = earliest_stop(text, self.stops, max(0, before - self.longest + 1))
            if cut is not None:
                return cut, cut
        return None, len(text) - held_back(text, self.stops)

    def final(self, text: str, emitted: int) -> int | None:
        """Where a finished candidate's final text stops (``emitted`` characters seen)."""
        if not self.stops:
            return None
        return earliest_stop(text, self.stops, max(0, emitted - 1))
