"""One OpenAI completions request, checked: sizes first, then types, then the bounds.

Every request is hostile until checked. :func:`parse_completion_request` reads only
sizes and values (no tokenizer, no model), so an oversized prompt or a NaN temperature
costs nothing but its JSON parsing. The sampling bounds are the ones
:class:`~codeparrot.generation.GenerationConfig` declares: the request is turned into
one, and its :class:`~codeparrot.errors.ConfigError` becomes a 400 naming the request's
own parameter. Standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import CodeparrotError, ConfigError
from codeparrot.generation.config import GenerationConfig
from codeparrot.lsp.serve_config import ServeConfig

# OpenAI's defaults for the completions API (not the harness's): a client that sends
# nothing gets what it would get from OpenAI.
DEFAULT_MAX_TOKENS = 16
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0

# GenerationConfig's flags, as the request names them (its errors name the flags).
_PARAMS = {
    "--max-new-tokens": "max_tokens",
    "--temperature": "temperature",
    "--top-p": "top_p",
    "--n": "n",
    "--seed": "seed",
    "--stop": "stop",
}

# Parameters whose effect this server does not have: refused rather than ignored, when
# given a value that asks for that effect.
_NEUTRAL = {
    "echo": (None, False),
    "logprobs": (None, 0),
    "best_of": (None, 1),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
}


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


@dataclass(frozen=True)
class CompletionRequest:
    """What a checked request asks for."""

    prompt: str
    suffix: str | None
    generation: GenerationConfig
    stream: bool
    include_usage: bool


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
) -> CompletionRequest:
    """Check ``data`` against the server's limits and the declared bounds.

    ``context_length`` is the model's: ``max_tokens`` must leave room for a prompt.
    Raises :class:`ApiError` (400) naming the first parameter that is wrong.
    """
    prompt = _prompt(data.get("prompt"), config)
    suffix = data.get("suffix")
    if suffix is not None:
        _text("suffix", suffix, config.max_prompt_chars)
        suffix = suffix or None  # an empty suffix asks for plain completion
    stop = _stop(data.get("stop"), config)
    _check_neutral(data)
    stream = _flag(data, "stream")
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("stream_options must be an object.", "stream_options")
    include_usage = _flag(options or {}, "include_usage", "stream_options.include_usage")
    n = data.get("n", 1)
    max_tokens = data.get("max_tokens", DEFAULT_MAX_TOKENS)
    for name, value, limit in (
        ("n", n, config.max_candidates),
        ("max_tokens", max_tokens, min(config.max_tokens_limit, context_length - 1)),
    ):
        if _is_number(value) and value > limit:
            raise bad(f"{name} is {value}; this server accepts at most {limit}.", name)
    generation = _generation_config(
        max_new_tokens=max_tokens,
        temperature=_or(data.get("temperature"), DEFAULT_TEMPERATURE),
        top_p=_or(data.get("top_p"), DEFAULT_TOP_P),
        n=n,
        seed=data.get("seed"),
        stop=stop,
    )
    return CompletionRequest(prompt, suffix, generation, stream, include_usage)


def _prompt(value: Any, config: ServeConfig) -> str:
    # OpenAI also takes a list of prompts; one is what an editor sends
    if isinstance(value, list):
        if len(value) != 1:
            raise bad(
                f"prompt is a list of {len(value)} items; this server completes one prompt "
                "per request.",
                "prompt",
            )
        value = value[0]
    if value is None:
        raise bad("prompt is required.", "prompt")
    _text("prompt", value, config.max_prompt_chars)
    if not value:
        raise bad("prompt is empty.", "prompt")
    return value


def _text(name: str, value: Any, limit: int) -> None:
    if not isinstance(value, str):
        raise bad(f"{name} must be a string, got {_json_type(value)}.", name)
    if len(value) > limit:
        raise bad(
            f"{name} is {len(value):,} characters; this server accepts at most {limit:,}.", name
        )


def _stop(value: Any, config: ServeConfig) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list):
        raise bad(f"stop must be a string or a list of strings, got {_json_type(value)}.", "stop")
    if len(stops) > config.max_stop_sequences:
        raise bad(
            f"stop has {len(stops)} strings; this server accepts at most "
            f"{config.max_stop_sequences}.",
            "stop",
        )
    for s in stops:
        if not isinstance(s, str):
            raise bad(f"stop must hold strings, got {_json_type(s)}.", "stop")
        if len(s) > config.max_stop_chars:
            raise bad(
                f"a stop string is {len(s):,} characters; this server accepts at most "
                f"{config.max_stop_chars}.",
                "stop",
            )
    return tuple(stops)


def _check_neutral(data: dict[str, Any]) -> None:
    for name, neutral in _NEUTRAL.items():
        value = data.get(name)
        if not any(value == v and type(value) is type(v) for v in neutral):
            raise bad(f"{name}={json.dumps(value)[:40]} is not supported by this server.", name)


def _flag(data: dict[str, Any], name: str, param: str | None = None) -> bool:
    value = data.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(f"{param or name} must be true or false, got {_json_type(value)}.", param or name)
    return value


def _generation_config(**values: Any) -> GenerationConfig:
    try:
        return GenerationConfig(**values)
    except ConfigError as e:
        lines = [line.strip().removeprefix("- ") for line in str(e).splitlines()[1:]]
        first = lines[0] if lines else str(e)
        flag = first.split(" ", 1)[0].rstrip(":")
        param = _PARAMS.get(flag)
        if param is not None:
            first = param + first[len(flag) :]
        raise bad(first + ".", param) from None


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)
