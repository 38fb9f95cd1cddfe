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
    MAX_NEW_TOKENS,
    QUANTIZE_WEIGHTS,
)


@dataclass(frozen=True)
class ServeConfig(Config):
    """An OpenAI-compatible completion endpoint (POST /v1/completions) over one checkpoint."""

    checkpoint: Path = CHECKPOINT.field()
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
    max_tokens_limit: int = MAX_NEW_TOKENS.field(512, "largest max_tokens one request may ask for")
    read_timeout: float = option(
        10.0, "seconds a client may take to send its request (or read a streamed chunk)", gt=0
    )
