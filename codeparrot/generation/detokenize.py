"""Incremental detokenization: the text of a candidate's new tokens, one token at a time.

Only the new token's bytes are decoded (``tokenizers``' ``DecodeStream``), so a step
costs the same at token 5 and token 500. Text already streamed never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codeparrot.generation.stopping import StopStrings


@dataclass
class Candidate:
    """The text state of one candidate of a call."""

    decoder: Any  # an incremental detokenizer (tokenizers.decoders.DecodeStream) or None
    ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: int = 0  # characters already streamed
    finish_reason: str | None = None
    stop_at: int | None = None  # character index where the text ends
    heal_len: int = 0  # characters of a healed prompt's last token, decoded with the ids
    skip: int = 0  # of those, characters not yet dropped from the streamed text
    heal_rest: str = ""  # of those, text the next tokens must still write


class Detokenizer:
    """Token ids to text for one tokenizer, incrementally where its backend allows."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        # a token decoded before the new ones, its text then dropped (see decode_anchor)
        self.anchor: int | None = decode_anchor(tokenizer)

    def new_stream(self) -> Any:
        """A fresh incremental decoder (None for a tokenizer without a fast backend)."""
        if self.backend is None:
            return None
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=False)
        if self.anchor is not None:
            stream.step(self.backend, self.anchor)  # its text is not the completion's
        return stream

    def append(self, c: Candidate, tok: int) -> None:
        """Add the text of ``tok`` to ``c.text``."""
        if c.decoder is not None:
            try:
                piece = c.decoder.step(self.backend, tok)
            except Exception:
                # byte-fallback tokenizers (the Llama family) make DecodeStream raise
                # "Invalid prefix encountered while decoding stream" where a prefix's bytes
                # decode differently once more follow: decode the whole text from now on
                c.decoder = None
                self.redecode(c)
                return
            if piece and c.skip:  # the start of a healed prompt's last token
                dropped = min(c.skip, len(piece))
                piece, c.skip = piece[dropped:], c.skip - dropped
            if piece:
                c.text += piece
        else:  # a slow tokenizer: decode everything (held back while it ends in U+FFFD)
            self.redecode(c)

    def redecode(self, c: Candidate) -> None:
        """``c.text`` decoded again from all its ids; text already streamed never changes."""
        full = self.decoded(c)
        streamed = c.text[: c.emitted]
        c.text = full if full.startswith(streamed) else streamed + full[len(streamed) :]

    def decoded(self, c: Candidate) -> str:
        """The whole text of ``c`` decoded again (without a healed prompt's end)."""
        return self.text_of(c.ids)[c.heal_len :]

    def text_of(self, ids: list[int]) -> str:
        """The text ``ids`` write after other text (with the leading space a SentencePiece
        decoder strips at the start of a whole text: CodeLlama's ``▁in`` is `` in``)."""
        if self.anchor is None:
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        text = self.tokenizer.decode([self.anchor, *ids], skip_special_tokens=False)
        return text[1:]

    def texts_of_each(self, ids: list[int]) -> list[str]:
        """``text_of([i])`` of each id: in one batch of the backend where the tokenizer's
        decode is the backend's (StarCoder's 49,152 tokens in 0.06 s against 0.36 s one by
        one: the first healed prompt waits for it), else one by one."""
        from codeparrot.models.start_cache import decodes_as_backend

        backend = self.backend
        if backend is None or not decodes_as_backend(self.tokenizer):
            return [self.text_of([i]) for i in ids]
        # a byte-level decoder writes each token's bytes after the anchor's whole "\n"
        # as alone: the anchor changes nothing there (pairs take 3.5x as long)
        if self.anchor is None or type(backend.decoder).__name__ == "ByteLevel":
            return backend.decode_batch([[i] for i in ids], skip_special_tokens=False)
        pairs = [[self.anchor, i] for i in ids]
        return [t[1:] for t in backend.decode_batch(pairs, skip_special_tokens=False)]

    def flush(self, c: Candidate, stops: StopStrings) -> None:
        """Final text of an unstopped candidate: bytes still pending in the detokenizer."""
        full = self.decoded(c).rstrip("\ufffd")
        if full != c.text and full.startswith(c.text[: c.emitted]):
            c.text = full
        c.stop_at = stops.final(c.text, c.emitted)


def decode_anchor(tokenizer: Any) -> int | None:
    """A token whose text is ``"\n"`` alone and before any other, or None.

    Decoders of the Llama family's SentencePiece tokenizers (CodeLlama, Mistral) strip the
    leading space of a whole text, so a completion decoded alone loses the space its first
    token writes (``▁in``: "in", not " in"). Decoded after this token, then dropped, every
    token keeps its text, as Meta's reference decodes an infilled middle; for byte-level
    tokenizers nothing changes.
    """
    ids = tokenizer("\n", add_special_tokens=False)["input_ids"]
    for i in reversed(ids):
        if tokenizer.decode([i, i], skip_special_tokens=False) == "\n\n":
            return int(i)
    return None
