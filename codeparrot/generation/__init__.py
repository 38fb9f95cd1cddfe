"""Inference: one engine for the playground, the language server and the harness.

Import cost matters here (the CLI imports this package for ``--help``): torch and
transformers are imported inside :meth:`Engine.load` and :meth:`Engine.stream`.

The package by job: ``config`` (a request's settings, and the engine's FIM settings given
at load), ``sampling`` (the next token from logits),
``stopping`` (stop strings, ``first_block``, held-back text, the escape decoder of typed
stop strings) and ``engine`` (loading, prompts, token healing, fill in the middle,
streaming).
"""

from codeparrot.generation.config import FimSettings, GenerationConfig
from codeparrot.generation.engine import Completion, Engine, StreamEvent
from codeparrot.generation.stopping import HUMANEVAL_STOP_SEQUENCES, decode_escapes, first_block

__all__ = [
    "HUMANEVAL_STOP_SEQUENCES",
    "Completion",
    "Engine",
    "FimSettings",
    "GenerationConfig",
    "StreamEvent",
    "decode_escapes",
    "first_block",
]
