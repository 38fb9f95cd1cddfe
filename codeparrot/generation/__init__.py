"""Inference: one engine for the playground, the language server and the harness.

Import cost matters here (the CLI imports this package for ``--help``): torch and
transformers are imported inside :meth:`Engine.load` and :meth:`Engine.stream`.
"""

from codeparrot.generation.config import GenerationConfig
from codeparrot.generation.engine import (
    HUMANEVAL_STOP_SEQUENCES,
    Completion,
    Engine,
    StreamEvent,
    first_block,
)

__all__ = [
    "HUMANEVAL_STOP_SEQUENCES",
    "Completion",
    "Engine",
    "GenerationConfig",
    "StreamEvent",
    "first_block",
]
