"""One OpenAI completions request, checked: who sends it, then sizes, types and bounds.

Every request is hostile until checked. :func:`check_sender` comes first: a web page
the user happens to visit can make the browser send requests to a server on the
user's own machine (a "simple" cross-site POST, or DNS rebinding, where a foreign name
resolves to 127.0.0.1), so the ``Host`` must be a name of this server, a browser's
``Origin`` one the user allowed, and a POST's body ``application/json`` (which a page
cannot send cross-site without the CORS preflight this server refuses). :func:`parse_completion_request` reads only
sizes and values (no tokenizer, no model), so an oversized prompt or a NaN temperature
costs nothing but its JSON parsing. The sampling bounds are the ones
:class:`~codeparrot.generation.GenerationConfig` declares: the request is turned into
one, and its :class:`~codeparrot.errors.ConfigError` becomes a 400 naming the request's
own parameter. Standard library only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import CodeparrotError
from codeparrot.generation.config import GenerationConfig
from codeparrot.generation.request import (
    CompletionRequest,
    RequestError,
    RequestLimits,
    check_stop,
)
from codeparrot.serve.config import ServeConfig

# OpenAI's defaults for the completions API (not the harness's): a client that sends
# nothing gets what it would get from OpenAI.
DEFAULT_MAX_TOKENS = 16
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0

_SURROGATE = re.compile(r"[\ud800-\udfff]")

# Fields that would change what is generated and that this server cannot honour: refused
# (400 naming the field) unless given the value that asks for nothing.
NEUTRAL_FIELDS: dict[str, tuple[Any, ...]] = {
    "echo": (None, False),
    "logprobs": (None, 0, False),
    "top_logprobs": (None, 0),
    "best_of": (None, 1),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repeat_penalty": (None, 1, 1.0),
    "repetition_penalty": (None, 1, 1.0),
    "logit_bias": (None, {}),
    "typical_p": (None, 1, 1.0),
    "mirostat": (None, 0),
    "grammar": (None, ""),
    "json_schema": (None, {}),
    "response_format": (None, {"type": "text"}),
    "tools": (None, []),
    "n_probs": (None, 0),
    "n_cmpl": (None, 1),
    "lora": (None, []),
}

# Fields clients send that do not change what this server generates: accepted by name and
# ignored (docs/serve.md lists them with these reasons). Any other unknown field is a 400.
IGNORED_FIELDS: dict[str, str] = {
    "model": "one model is served; any name is accepted",
    "user": "OpenAI's end-user id, for abuse tracking",
    "samplers": "llama.cpp's sampler order; here it is fixed: top_k, min_p, top_p",
    "t_max_prompt_ms": "llama.cpp's prompt time budget (llama.cpp does not apply it either)",
    "id_slot": "llama.cpp's slot; one generation runs at a time here",
    "stream_options": "read for include_usage",
    "parallel_tool_calls": "no tools are called",
    "tool_choice": "no tools are called",
}

# Fields every endpoint reads itself.
SAMPLING_FIELDS = frozenset(
    {"temperature", "top_p", "top_k", "min_p", "n", "seed", "stop", "stream", "t_max_predict_ms"}
)
SAMPLING_FIELDS |= {"cache_prompt"}
COMPLETION_FIELDS = SAMPLING_FIELDS | {"prompt", "suffix", "max_tokens", "cut_repetition"}


class ApiError(CodeparrotError):
    """A request refused with an HTTP status and OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def allowed_host_names(config: ServeConfig) -> frozenset[str]:
    """Names a ``Host`` header may give: loopback, ``--host`` (unless a wildcard) and
    ``--allow-host``."""
    names = set(LOOPBACK_NAMES)
    for given in (config.host, *config.allowed_hosts):
        given = given.strip()
        if given.count(":") > 1 and not given.startswith("["):  # a bare IPv6 address
            given = f"[{given}]"
        name = host_name(given)
        if name is not None and name not in _WILDCARDS:
            names.add(name)
    return frozenset(names)


def host_name(header: str) -> str | None:
    """The name of a ``Host`` header without its port (``[::1]`` keeps its brackets);
    None when the header is not ``name``, ``name:port``, ``[v6]`` or ``[v6]:port``."""
    header = header.strip().lower()
    if header.startswith("["):
        name, _, port = header.partition("]")
        name += "]"
        if port and not (port.startswith(":") and port[1:].isdigit()):
            return None
    else:
        name, colon, port = header.partition(":")
        if colon and not port.isdigit():
            return None
    name = name.rstrip(".") if len(name) > 1 else name
    return name or None


def check_sender(
    config: ServeConfig, host: str | None, origin: str | None, fetch_site: str | None
) -> str | None:
    """Refuse a request not meant for this server, or sent by a page the user did not allow.

    ``host``, ``origin`` and ``fetch_site`` are the request's ``Host``, ``Origin`` and
    ``Sec-Fetch-Site`` headers. Returns the origin to answer with CORS headers (an allowed
    one), else None. Raises 421 for a foreign ``Host`` and 403 for a foreign page.
    """
    if host is None or host_name(host) not in allowed_host_names(config):
        shown = "none" if host is None else repr(host[:100])
        raise ApiError(
            421,
            f"The Host header ({shown}) is not a name of this server; it answers "
            "localhost, 127.0.0.1, [::1], its --host and the names given with --allow-host "
            "(a foreign name pointing at this machine is how DNS rebinding reaches it).",
            type="forbidden",
        )
    allowed = {o.lower() for o in config.allowed_origins}
    if origin is not None:
        if origin.strip().lower() in allowed:
            return origin.strip()
        raise ApiError(
            403,
            f"Requests from the web page of origin {origin[:100]!r} are refused: this server "
            "answers browsers only for the origins given with --allow-origin "
            f"({', '.join(config.allowed_origins) or 'none are'}).",
            type="forbidden",
        )
    if fetch_site is not None and fetch_site.strip().lower() in ("cross-site", "same-site"):
        raise ApiError(
            403,
            f"A request a browser sent for another site (Sec-Fetch-Site: {fetch_site[:40]}) "
            "is refused.",
            type="forbidden",
        )
    return None


def check_json_content_type(value: str | None) -> None:
    """A POST body must be declared ``application/json`` (UTF-8): 415 otherwise.

    A web page can send ``text/plain`` or a form to any address without asking first;
    ``application/json`` needs a CORS preflight, which only allowed origins pass.
    """
    media, *params = [part.strip().lower() for part in (value or "").split(";")]
    charsets = [p.partition("=")[2].strip('" ') for p in params if p.startswith("charset=")]
    if media == "application/json" and all(c in ("utf-8", "utf8") for c in charsets):
        return
    shown = "none" if value is None else repr(value[:80])
    raise ApiError(
        415,
        f"The Content-Type header ({shown}) must be application/json (UTF-8): send the "
        "request body as JSON with that header.",
    )


@dataclass(frozen=True)
class ServedRequest:
    """What a checked request asks for, with what the server needs to answer it.

    ``prompt`` is text, or token ids taken as they are. ``max_tokens`` is what the
    client asked for; ``generation.max_new_tokens`` what the server will generate once
    the request is fitted to the context. ``cut_repetition`` None leaves it to the server.
    """

    prompt: str | tuple[int, ...]
    suffix: str | None
    generation: GenerationConfig
    stream: bool
    include_usage: bool
    max_tokens: int = DEFAULT_MAX_TOKENS
    cut_repetition: bool | None = None
    time_limit: float | None = None  # seconds (t_max_predict_ms), see :mod:`serve.service`
    min_indent: int = 0  # llama.cpp's n_indent (0: off), see :class:`serve.service.IndentCut`
    response_fields: tuple[str, ...] = ()  # llama.cpp's: the answer's fields to send
    open_ended: bool = False  # llama.cpp's n_predict -1: as many as fit, never refused
    # llama.cpp's cache_prompt: may the prompt reuse a kept prompt's start (the prefill
    # then splits the prompt elsewhere than one pass does, and greedy text can change)
    cache_prompt: bool = False
    # the request's own names of the prompt, the suffix and max_tokens, for its errors
    prompt_field: str = "prompt"
    suffix_field: str = "suffix"
    budget_field: str = "max_tokens"


def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body, or a 400 saying what is wrong with it."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"The request body is not valid JSON ({e}).") from None
    except RecursionError:
        raise bad("The request body is nested too deeply.") from None
    if not isinstance(data, dict):
        raise bad(f"The request body must be a JSON object, got {type(data).__name__}.")
    return data


def parse_completion_request(
    data: dict[str, Any], config: ServeConfig, context_length: int
) -> ServedRequest:
    """Check an OpenAI completions request against the server's limits and the declared
    bounds; ``max_tokens`` is fitted to the context later, once the prompt's tokens are
    counted (:meth:`~codeparrot.serve.server.CompletionService.fit`).

    Raises :class:`ApiError` (400) naming the first field that is wrong.
    """
    check_fields(data, COMPLETION_FIELDS)
    prompt = _prompt(data.get("prompt"), config)
    suffix = data.get("suffix")
    if suffix is not None:
        _text("suffix", suffix, config.max_prompt_chars)
        suffix = suffix or None  # an empty suffix asks for plain completion
    if suffix is not None and isinstance(prompt, tuple):
        raise bad(
            "suffix: a prompt of token ids is completed as it is; send the prompt as text "
            "to fill in the middle.",
            "suffix",
        )
    cut = data.get("cut_repetition")
    if cut is not None and not isinstance(cut, bool):
        raise bad(f"cut_repetition must be true or false, got {json_type(cut)}.", "cut_repetition")
    max_tokens = data.get("max_tokens")
    return sampling_request(
        data, config, context_length, prompt, suffix, max_tokens, OPENAI_DEFAULTS, cut=cut
    )


# Sampling settings a request leaves out: OpenAI's (not the harness's), so a client that
# sends nothing gets what it would get from OpenAI; llama.cpp's endpoints take llama.cpp's.
OPENAI_DEFAULTS = {"temperature": DEFAULT_TEMPERATURE, "top_p": DEFAULT_TOP_P, "top_k": 0}
OPENAI_DEFAULTS |= {"min_p": 0.0, "cache_prompt": False}


# The request contract's fields (codeparrot.generation.request) as OpenAI's API names them;
# the other endpoints give their own map (llama.cpp's n_predict, chat's messages).
OPENAI_NAMES = {"max_new_tokens": "max_tokens"}


def sampling_request(
    data: dict[str, Any],
    config: ServeConfig,
    context_length: int,
    prompt: str | tuple[int, ...],
    suffix: str | None,
    max_tokens: Any,
    defaults: dict[str, Any],
    *,
    cut: bool | None = None,
    names: dict[str, str] = OPENAI_NAMES,
) -> ServedRequest:
    """The sampling fields every endpoint shares, checked by the request contract;
    ``max_tokens`` is the request's own (None: :data:`DEFAULT_MAX_TOKENS`); ``names`` maps
    the contract's field names to the endpoint's, for its 400s."""
    stop = _stop(data.get("stop"), config)
    stream = _flag(data, "stream")
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("stream_options must be an object.", "stream_options")
    include_usage = _flag(options or {}, "include_usage", "stream_options.include_usage")
    asked = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    limit = config.max_tokens_limit
    clamped = asked
    if config.over_context == "clamp" and _is_whole(asked) and asked > limit:
        clamped = limit  # lowered, not refused: the answer ends with finish_reason "length"
    completion = _contract(
        names,
        prompt=prompt,
        suffix=suffix,
        max_new_tokens=clamped,
        temperature=_or(data.get("temperature"), defaults["temperature"]),
        top_p=_or(data.get("top_p"), defaults["top_p"]),
        top_k=_or(data.get("top_k"), defaults["top_k"]),
        min_p=_or(data.get("min_p"), defaults["min_p"]),
        n=data.get("n", 1),
        seed=data.get("seed"),
        stop=stop,
        limits=request_limits(config),
    )
    generation = completion.generation(max_new_tokens=max(1, min(clamped, context_length - 1)))
    time_limit = _time_limit(data.get("t_max_predict_ms"))
    cache_prompt = _flag(data, "cache_prompt", default=defaults["cache_prompt"])
    return ServedRequest(
        prompt, suffix, generation, stream, include_usage, asked, cut, time_limit,
        budget_field=names.get("max_new_tokens", "max_new_tokens"), cache_prompt=cache_prompt,
    )  # fmt: skip


def request_limits(config: ServeConfig) -> RequestLimits:
    """The largest request ``serve`` accepts, in the contract's terms."""
    return RequestLimits(
        max_new_tokens=config.max_tokens_limit,
        n=config.max_candidates,
        stop_sequences=config.max_stop_sequences,
        stop_chars=config.max_stop_chars,
    )


def _contract(names: dict[str, str], **values: Any) -> CompletionRequest:
    """The request contract built from ``values``; its refusal is a 400 naming the field
    as the endpoint does (``names``)."""
    try:
        return CompletionRequest(**values)
    except RequestError as e:
        name = names.get(e.field, e.field)
        raise bad(e.message(name), name) from None


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time_limit(value: Any) -> float | None:
    """``t_max_predict_ms`` (llama.cpp's): seconds, or None for none (0 or absent)."""
    if value is None:
        return None
    if not _is_number(value) or value < 0:
        raise bad(
            f"t_max_predict_ms must be a number of milliseconds >= 0, got {json_type(value)}.",
            "t_max_predict_ms",
        )
    return value / 1000 if value > 0 else None


def check_fields(data: dict[str, Any], known: frozenset[str] | set[str]) -> None:
    """Refuse an unknown field, or a known one asking for an effect this server lacks."""
    for name, value in data.items():
        if name in known or name in IGNORED_FIELDS:
            continue
        neutral = NEUTRAL_FIELDS.get(name)
        if neutral is None:
            raise bad(
                f"{name[:60]} is not a field this server knows; it refuses what it would "
                "otherwise silently ignore (docs/serve.md lists the fields it accepts).",
                name[:60],
            )
        if not any(value == v and type(value) is type(v) for v in neutral):
            raise bad(f"{name}={json.dumps(value)[:40]} is not supported by this server.", name)


def _prompt(value: Any, config: ServeConfig) -> str | tuple[int, ...]:
    """Text, or token ids: OpenAI's prompt may be a string, a list of token ids, or a
    list of one of either (a list of several prompts is refused: one per request)."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]
    if isinstance(value, list):
        return token_ids("prompt", value, config.max_prompt_chars)
    if value is None:
        raise bad("prompt is required.", "prompt")
    _text("prompt", value, config.max_prompt_chars)
    if not value:
        raise bad("prompt is empty.", "prompt")
    return value


def token_ids(name: str, value: list[Any], limit: int) -> tuple[int, ...]:
    """A prompt of token ids: whole numbers >= 0 (the vocabulary is checked by the engine)."""
    if not value:
        raise bad(f"{name} is an empty list.", name)
    if len(value) > limit:
        raise bad(
            f"{name} has {len(value):,} token ids; this server accepts at most {limit:,}.", name
        )
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise bad(
                f"{name} is a list, so it must hold token ids (whole numbers >= 0) or be one "
                f"string; it holds {json_type(item)}.",
                name,
            )
    return tuple(value)


def _text(name: str, value: Any, limit: int) -> None:
    if not isinstance(value, str):
        raise bad(f"{name} must be a string, got {json_type(value)}.", name)
    if len(value) > limit:
        raise bad(
            f"{name} is {len(value):,} characters; this server accepts at most {limit:,}.", name
        )
    _unicode(name, value)


def _unicode(name: str, value: str) -> None:
    """JSON can spell half of a UTF-16 pair (``"\\ud800"``), which is no character at all."""
    lone = _SURROGATE.search(value)
    if lone is not None:
        raise bad(
            f"{name} holds a lone UTF-16 surrogate (\\u{ord(lone.group()):04x} at character "
            f"{lone.start()}), which is not text; send valid Unicode.",
            name,
        )


def _stop(value: Any, config: ServeConfig) -> tuple[str, ...]:
    """OpenAI's ``stop``: a string or a list of them; their count and sizes are the
    contract's to check (:func:`~codeparrot.generation.request.check_stop`)."""
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list):
        raise bad(f"stop must be a string or a list of strings, got {json_type(value)}.", "stop")
    try:  # before the strings are read: a long list is refused by its length
        check_stop(stops, request_limits(config))
    except RequestError as e:
        raise bad(e.message(), "stop") from None
    for s in stops:
        _unicode("stop", s)
    return tuple(stops)


def _flag(
    data: dict[str, Any], name: str, param: str | None = None, *, default: bool = False
) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(f"{param or name} must be true or false, got {json_type(value)}.", param or name)
    return value


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)
