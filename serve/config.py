"""Settings of ``codeparrot serve``: the model, the address and the largest request accepted.

Standard library only: the CLI imports it for ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option
from codeparrot.options import (
    CANDIDATES,
    CHECKPOINT,
    DEVICE,
    DTYPE,
    FIM_ORDER,
    FIM_TOKENS,
    MAX_NEW_TOKENS,
    QUANTIZE_WEIGHTS,
    REVISION,
)


@dataclass(frozen=True)
class ServeConfig(Config):
    """An HTTP server over one checkpoint: OpenAI's and llama.cpp's completion APIs."""

    checkpoint: Path = CHECKPOINT.field()
    revision: str | None = REVISION.field()
    host: str = option(
        "127.0.0.1", "address to listen on (0.0.0.0 exposes the model to the whole network)"
    )
    port: int = option(8000, "port to listen on (0: any free port)", ge=0, le=65535)
    model_name: str | None = option(
        None, "model id reported by /v1/models and in responses (default: the directory's name)"
    )
    device: str | None = DEVICE.field()
    dtype: str = DTYPE.field()
    quantize: str = QUANTIZE_WEIGHTS.field(
        "auto", "weights of the one-token steps: auto (int8 where it applies), none or int8"
    )
    fim_order: str = FIM_ORDER.field()
    fim_tokens: str = FIM_TOKENS.field()
    cut_repetition: bool = option(
        False,
        "cut every completion before a short string repeated 4 or more times at a line end "
        "(`for q in = = = =`, `x.unkunkunk`), as the editor and the playground do, with "
        'finish_reason "repetition" where it cut; off: the API returns what the model '
        "wrote (a request's own cut_repetition field overrides this)",
    )
    over_context: str = option(
        "clamp",
        "a max_tokens beyond what the context leaves after the prompt (or beyond "
        "--max-tokens-limit): clamp lowers it and the answer ends with finish_reason "
        '"length"; refuse answers 400 naming max_tokens, as vLLM does',
        choices=("clamp", "refuse"),
    )
    chat_template: str = option(
        "auto",
        "how /v1/chat/completions turns messages into a prompt: checkpoint (the tokenizer's "
        "own chat template; a checkpoint without one refuses chat), plain (the documented "
        "plain template, for base models) or auto (the checkpoint's when it has one, else "
        "plain)",
        choices=("auto", "checkpoint", "plain"),
    )
    queue_size: int = option(
        8,
        "requests allowed to wait while one generates; more are refused at once with 503",
        ge=0,
        le=1024,
    )
    max_body_bytes: int = option(
        1_000_000,
        "largest request body accepted; a larger Content-Length is refused before reading",
        ge=1024,
    )
    max_prompt_chars: int = option(
        100_000,
        "longest prompt, and longest suffix, accepted in characters (refused before tokenizing)",
        ge=1,
    )
    max_stop_sequences: int = option(16, "most stop strings one request may give", ge=0)
    max_stop_chars: int = option(200, "longest stop string accepted, in characters", ge=1)
    max_candidates: int = CANDIDATES.field(8, "most completions one request may ask for (n)")
    max_tokens_limit: int = MAX_NEW_TOKENS.field(
        512, "most tokens one request generates (see --over-context for a larger max_tokens)"
    )
    read_timeout: float = option(
        10.0, "seconds one read or write may wait (a streamed chunk the client does not take)", gt=0
    )
    request_deadline: float = option(
        10.0,
        "seconds a client has to send a whole request, headers and body; a slower one is cut "
        "off however steadily it trickles bytes",
        gt=0,
    )
    max_connections: int = option(
        32,
        "connections served at once; more are refused at once with 503",
        ge=1,
        le=4096,
    )
    allowed_hosts: tuple[str, ...] = option(
        (),
        "names a client may give in its Host header besides localhost, 127.0.0.1, [::1] and "
        "--host (with --host 0.0.0.0, the names the machine is reached by); others get 421",
        flag="--allow-host",
        metavar="NAME",
    )
    allowed_origins: tuple[str, ...] = option(
        (),
        "web origins (e.g. http://localhost:3000) whose pages may call the server; a request "
        "from any other page is refused with 403, and CORS is off without one",
        flag="--allow-origin",
        metavar="ORIGIN",
    )

    def problems(self) -> list[str]:
        found = []
        for origin in self.allowed_origins:
            if origin != origin.strip().rstrip("/") or "://" not in origin or origin == "null":
                found.append(
                    f"--allow-origin {origin!r}: give an origin as a browser sends it, "
                    "scheme://host[:port] without a path (e.g. http://localhost:3000)"
                )
        for name in self.allowed_hosts:
            if not name or any(c in name for c in "/ @"):
                found.append(
                    f"--allow-host {name!r}: give a host name or address, no scheme or path"
                )
        from codeparrot.fim import parse_fim_tokens
        from codeparrot.hub import revision_problems

        found += revision_problems(self.checkpoint, self.revision)

        try:
            parse_fim_tokens(self.fim_tokens)
        except ValueError as e:
            found.append(str(e))
        return found
