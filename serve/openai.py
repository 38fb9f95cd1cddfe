"""OpenAI's answer shapes: ``/v1/completions`` and ``/v1/chat/completions``, whole or
streamed as server-sent events (one ``data: {...}`` chunk per piece, then ``[DONE]``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterable
from typing import Any

from codeparrot.serve.service import Piece, usage


def envelope(model: str, kind: str) -> dict[str, Any]:
    prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
    }


def completion_response(model: str, pieces: list[Piece]) -> dict[str, Any]:
    choices = [_text_choice(p.index, p.text, p.reason) for p in pieces]
    return envelope(model, "text_completion") | {
        "choices": choices,
        "usage": usage([p.completion for p in pieces]),
    }


def completion_chunks(
    model: str, pieces: Iterable[Piece | None], include_usage: bool
) -> Generator[dict[str, Any] | None, None, None]:
    head = envelope(model, "text_completion")
    finished = []
    for piece in pieces:
        if piece is None:
            yield None
            continue
        if piece.completion is not None:
            finished.append(piece.completion)
        yield head | {"choices": [_text_choice(piece.index, piece.text, piece.reason)]}
    if include_usage:
        yield head | {"choices": [], "usage": usage(finished)}


def _text_choice(index: int, text: str, reason: str | None) -> dict[str, Any]:
    return {"text": text, "index": index, "logprobs": None, "finish_reason": reason}


def chat_response(model: str, pieces: list[Piece]) -> dict[str, Any]:
    choices = [
        {
            "index": p.index,
            "message": {"role": "assistant", "content": p.text},
            "logprobs": None,
            "finish_reason": p.reason,
        }
        for p in pieces
    ]
    return envelope(model, "chat.completion") | {
        "choices": choices,
        "usage": usage([p.completion for p in pieces]),
    }


def chat_chunks(
    model: str, pieces: Iterable[Piece | None], include_usage: bool
) -> Generator[dict[str, Any] | None, None, None]:
    """The role first (one chunk per choice, as OpenAI sends it), then the content, then a
    chunk with an empty delta and the finish reason."""
    head = envelope(model, "chat.completion.chunk")
    started: set[int] = set()
    finished = []
    for piece in pieces:
        if piece is None:
            yield None
            continue
        if piece.index not in started:
            started.add(piece.index)
            delta = {"role": "assistant", "content": ""}
            yield head | {"choices": [_chat_choice(piece.index, delta, None)]}
        if piece.text:
            yield head | {"choices": [_chat_choice(piece.index, {"content": piece.text}, None)]}
        if piece.completion is not None:
            finished.append(piece.completion)
            yield head | {"choices": [_chat_choice(piece.index, {}, piece.reason)]}
    if include_usage:
        yield head | {"choices": [], "usage": usage(finished)}


def _chat_choice(index: int, delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
