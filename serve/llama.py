"""llama.cpp's server API: ``POST /completion``, ``POST /infill`` (``GET /health`` is in
:mod:`codeparrot.serve.server`), for the editor plugins that speak it (llama.vim,
llama.vscode, twinny).

Requests take llama.cpp's field names and defaults (``n_predict`` -1: as many tokens as
the context and ``--max-tokens-limit`` allow; temperature 0.8, top_k 40, top_p 0.95,
min_p 0.05; ``n_cmpl`` completions of the prompt, at most ``--max-candidates``). ``/infill`` lays out ``input_extra`` chunks, ``input_prefix`` and
``prompt`` (the text before the cursor on its line) as the prefix and ``input_suffix``
as the suffix of a fill-in-the-middle prompt. Answers have llama.cpp's shape
(``content``, ``stop``, ``stop_type``, ``timings``, ...), filtered by
``response_fields`` when given; a stream is ``data: {...}`` events without ``[DONE]``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Generator, Iterator
from typing import Any

from codeparrot.serve.request import (
    SAMPLING_FIELDS,
    ServedRequest,
    bad,
    check_fields,
    json_type,
    sampling_request,
    token_ids,
)
from codeparrot.serve.service import CompletionService, Piece

# the request contract's fields as llama.cpp names them
LLAMA_NAMES = {"max_new_tokens": "n_predict"}
LLAMA_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
LLAMA_DEFAULTS |= {"cache_prompt": True}
LLAMA_FIELDS = SAMPLING_FIELDS | {"prompt", "n_predict", "n_indent", "response_fields"}
LLAMA_FIELDS |= {"cut_repetition", "n_cmpl"}
INFILL_FIELDS = LLAMA_FIELDS | {"input_prefix", "input_suffix", "input_extra"}
MAX_EXTRA_CHUNKS = 256

# the engine's finish reasons (and the server's cuts) as llama.cpp's stop_type
STOP_TYPES = {"stop": "eos", "length": "limit", "indent": "limit", "repetition": "repetition"}


def parse_completion(service: CompletionService, data: dict[str, Any]) -> ServedRequest:
    """``POST /completion``: a prompt (text or token ids) completed."""
    check_fields(data, LLAMA_FIELDS)
    prompt = data.get("prompt")
    limit = service.config.max_prompt_chars
    if isinstance(prompt, list):
        prompt = token_ids("prompt", prompt, limit)
    else:
        _string(data, "prompt", limit, required=True)
        if not prompt:
            raise bad("prompt is empty.", "prompt")
    request = _request(service, data, prompt, None)
    return service.fit(request)


def parse_infill(service: CompletionService, data: dict[str, Any]) -> ServedRequest:
    """``POST /infill``: the middle between ``input_prefix`` + ``prompt`` and ``input_suffix``."""
    check_fields(data, INFILL_FIELDS)
    limit = service.config.max_prompt_chars
    prefix = _string(data, "input_prefix", limit)
    suffix = _string(data, "input_suffix", limit)
    middle = _string(data, "prompt", limit)
    extra = _extra(data.get("input_extra"), limit)
    if len(extra) + len(prefix) + len(middle) > limit:
        raise bad(
            f"input_extra, input_prefix and prompt hold over {limit:,} characters.", "input_extra"
        )
    if not service.can_infill():
        raise bad(
            "input_suffix: this checkpoint cannot fill in the middle (its tokenizer has no "
            "fill-in-the-middle tokens of a known family; start the server with "
            "--fim-tokens to name them); use /completion.",
            "input_suffix",
        )
    request = _request(service, data, extra + prefix + middle, suffix)
    request = dataclasses.replace(request, prompt_field="input_prefix", suffix_field="input_suffix")
    return service.fit(service.check_suffix(request))


def _request(
    service: CompletionService, data: dict[str, Any], prompt: Any, suffix: str | None
) -> ServedRequest:
    n_predict = data.get("n_predict", -1)
    if not isinstance(n_predict, int) or isinstance(n_predict, bool) or n_predict < -1:
        raise bad(
            f"n_predict must be a whole number (-1: no limit but the context's), got "
            f"{json_type(n_predict)}.",
            "n_predict",
        )
    n_indent = data.get("n_indent", 0)
    if not isinstance(n_indent, int) or isinstance(n_indent, bool) or n_indent < 0:
        raise bad(f"n_indent must be a whole number >= 0, got {json_type(n_indent)}.", "n_indent")
    fields = data.get("response_fields")
    if fields is not None and not (
        isinstance(fields, list) and all(isinstance(f, str) for f in fields)
    ):
        raise bad("response_fields must be an array of strings.", "response_fields")
    samplers = data.get("samplers")
    if samplers is not None and not (
        isinstance(samplers, list | str)
        and (isinstance(samplers, str) or all(isinstance(s, str) for s in samplers))
    ):
        raise bad("samplers must be an array of strings.", "samplers")
    if data.get("seed") == -1:  # llama.cpp's "a fresh seed"
        data = {k: v for k, v in data.items() if k != "seed"}
    data, names = _completions_asked(data)
    cut = data.get("cut_repetition")
    if cut is not None and not isinstance(cut, bool):
        raise bad(f"cut_repetition must be true or false, got {json_type(cut)}.", "cut_repetition")
    context = service.engine.context_length
    open_ended = n_predict == -1
    asked = min(context, service.config.max_tokens_limit) if open_ended else max(n_predict, 1)
    request = sampling_request(
        data,
        service.config,
        context,
        prompt,
        suffix,
        asked,
        LLAMA_DEFAULTS,
        cut=cut,
        names=names,
    )
    return dataclasses.replace(
        request,
        max_tokens=0 if n_predict == 0 else request.max_tokens,
        min_indent=n_indent,
        response_fields=tuple(fields or ()),
        open_ended=open_ended,
    )


def _completions_asked(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``n_cmpl`` (llama.cpp's completions of one prompt; llama.vscode sends its
    ``max_parallel_completions``) as the contract's ``n``, and the names its 400s use."""
    if data.get("n_cmpl") is None:
        return data, LLAMA_NAMES
    if data.get("n") is not None and data["n"] != data["n_cmpl"]:
        raise bad(
            f"n_cmpl is {json.dumps(data['n_cmpl'])[:40]} and n is {json.dumps(data['n'])[:40]}: "
            "give one of them (both ask for the number of completions).",
            "n_cmpl",
        )
    return data | {"n": data["n_cmpl"]}, LLAMA_NAMES | {"n": "n_cmpl"}


def _string(data: dict[str, Any], name: str, limit: int, *, required: bool = False) -> str:
    value = data.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise bad(f"{name} must be a string, got {json_type(value)}.", name)
    if len(value) > limit:
        raise bad(
            f"{name} is {len(value):,} characters; this server accepts at most {limit:,}.", name
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise bad(f"{name} holds a lone UTF-16 surrogate, which is not text.", name)
    return value


def _extra(value: Any, limit: int) -> str:
    """``input_extra``: [{"text": ..., "filename": ...}] (other keys, such as llama.vim's
    ``time``, ignored), as text placed before the prefix, each chunk ending a line."""
    if value is None:
        return ""
    if not isinstance(value, list):
        raise bad(
            f"input_extra must be an array of objects, got {json_type(value)}.", "input_extra"
        )
    if len(value) > MAX_EXTRA_CHUNKS:
        raise bad(
            f"input_extra has {len(value)} chunks; at most {MAX_EXTRA_CHUNKS}.", "input_extra"
        )
    texts = []
    for i, chunk in enumerate(value):
        if not isinstance(chunk, dict):
            raise bad(f"input_extra[{i}] must be an object, got {json_type(chunk)}.", "input_extra")
        for key in ("text", "filename"):
            if key in chunk and not isinstance(chunk[key], str):
                raise bad(
                    f"input_extra[{i}].{key} must be a string, got {json_type(chunk[key])}.",
                    "input_extra",
                )
        text = _string(chunk, "text", limit) if "text" in chunk else ""
        texts.append(text if not text or text.endswith("\n") else text + "\n")
    return "".join(texts)


def response(
    service: CompletionService, request: ServedRequest, pieces: list[Piece]
) -> dict[str, Any] | list[dict[str, Any]]:
    """llama.cpp's whole answer, filtered by ``response_fields``: one object, or for
    several completions (``n_cmpl``) an array of them in ``index`` order, as llama.cpp
    answers a request with several results."""
    if not pieces:  # n_predict 0: a warm-up, nothing generated
        pieces = [Piece(0, "", None, "length")]
    answers = [_filtered(_final(service, request, p, p.text), request) for p in pieces]
    return answers if request.generation.n > 1 else answers[0]


def chunks(
    service: CompletionService, request: ServedRequest, pieces: Iterator[Piece | None]
) -> Generator[dict[str, Any] | None, None, None]:
    """A stream: ``{"content", "stop": false}`` per piece, then the final answer's fields."""
    for piece in pieces:
        if piece is None:
            yield None
        elif piece.completion is None:
            yield {"index": piece.index, "content": piece.text, "stop": False}
        else:
            yield _filtered(_final(service, request, piece, piece.text), request)


def _final(
    service: CompletionService, request: ServedRequest, piece: Piece, content: str
) -> dict[str, Any]:
    done = piece.completion
    prompt_n = done.prompt_tokens - done.prompt_cached_tokens if done else 0
    prompt_ms = 1000 * done.prompt_seconds if done else 0.0
    predicted_n = done.new_tokens if done else 0
    predicted_ms = 1000 * (done.seconds - done.prompt_seconds) if done else 0.0
    reason = piece.reason or "length"
    stop_type = "eos" if done and done.finish_reason == "eos" else STOP_TYPES.get(reason, "limit")
    if done and done.finish_reason == "stop":
        stop_type = "word"
    return {
        "index": piece.index,
        "content": content,
        "stop": True,
        "model": service.model_name,
        "stop_type": stop_type,
        "stopping_word": "",
        "tokens_predicted": predicted_n,
        "tokens_evaluated": done.prompt_tokens if done else 0,
        "tokens_cached": done.prompt_cached_tokens if done else 0,
        "truncated": bool(done and done.prompt_truncated),
        "has_new_line": "\n" in content,
        "timings": {
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms else 0.0,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": 1000 * predicted_n / predicted_ms if predicted_ms else 0.0,
        },
    }


def _filtered(answer: dict[str, Any], request: ServedRequest) -> dict[str, Any]:
    """Only the ``response_fields`` asked for, each under its own path (``timings/prompt_n``),
    as llama.cpp answers them; a path that names nothing is left out."""
    fields = request.response_fields
    if not fields:
        return answer
    out = {}
    for path in fields:
        value: Any = answer
        for key in path.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            out[path] = value
    return out
