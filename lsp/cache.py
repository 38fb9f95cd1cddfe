"""A small LRU of suggestions that also serves a user typing through one.

An entry remembers the text before the cursor (its last ``PREFIX_KEY`` characters),
the text after it (its first ``SUFFIX_KEY`` characters) and the suggestion. A later
request hits the entry when its text after the cursor is the same and its text before
the cursor is the entry's plus the first characters of the suggestion: the user typed
them, and the rest of the suggestion is still good, with no model call.

Used from the event loop only (no locking).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

PREFIX_KEY = 1024
SUFFIX_KEY = 256


@dataclass(frozen=True)
class _Entry:
    prefix: str
    suggestion: str


class SuggestionCache:
    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def put(self, uri: str, prefix: str, suffix: str, suggestion: str) -> None:
        if self.size <= 0:
            return
        key = (uri, prefix[-PREFIX_KEY:], suffix[:SUFFIX_KEY])
        self._entries[key] = _Entry(key[1], suggestion)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def get(self, uri: str, prefix: str, suffix: str) -> str | None:
        """The suggestion for this cursor: an exact hit or the rest of one typed into."""
        if self.size <= 0:
            return None
        key = (uri, prefix[-PREFIX_KEY:], suffix[:SUFFIX_KEY])
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry.suggestion
        suffix_key = key[2]
        for (e_uri, e_prefix, e_suffix), entry in reversed(self._entries.items()):
            if e_uri != uri or e_suffix != suffix_key:
                continue
            rest = _typed_through(prefix, e_prefix, entry.suggestion)
            if rest:
                self.hits += 1
                return rest
        self.misses += 1
        return None


def _typed_through(prefix: str, old_prefix: str, suggestion: str) -> str | None:
    """What is left of ``suggestion`` if ``prefix`` is ``old_prefix`` + its first chars.

    ``old_prefix`` is a key: the whole text before the old cursor when shorter than
    ``PREFIX_KEY``, else its last ``PREFIX_KEY`` characters.
    """
    whole = len(old_prefix) < PREFIX_KEY
    for n in range(1, len(suggestion)):
        typed = suggestion[:n]
        if not prefix.endswith(typed):
            continue
        before = prefix[: len(prefix) - n]
        if (before == old_prefix) if whole else before.endswith(old_prefix):
            rest = suggestion[n:]
            return rest if rest.strip() else None
    return None
