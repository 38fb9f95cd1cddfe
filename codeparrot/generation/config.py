"""Generation settings and the config of ``codeparrot complete``.

Standard library only: the CLI imports it for ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.options import (
    CANDIDATES,
    CHECKPOINT,
    CUDA_GRAPHS,
    DEVICE,
    DTYPE,
    DTYPES,
    FIM_ORDER,
    FIM_SUFFIX_SHARE,
    FIM_TOKENS,
    LOAD_QUANTIZE,
    MAX_NEW_TOKENS,
    MIN_P,
    QUANTIZE,
    QUANTIZE_WEIGHTS,
    REVISION,
    TEMPERATURE,
    TOP_K,
    TOP_P,
)

__all__ = [
    "DTYPES",
    "LOAD_QUANTIZE",
    "QUANTIZE",
    "CompleteConfig",
    "FimSettings",
    "GenerationConfig",
]


@dataclass(frozen=True)
class GenerationConfig(Config):
    """How to sample completions for one prompt."""

    max_new_tokens: int = MAX_NEW_TOKENS.field()
    temperature: float = TEMPERATURE.field()
    top_p: float = TOP_P.field()
    top_k: int = TOP_K.field()
    min_p: float = MIN_P.field()
    n: int = CANDIDATES.field()
    seed: int | None = option(None, "random seed (None: a fresh seed, recorded in the result)")
    stop: tuple[str, ...] = option(
        (), "stop strings: a candidate ends at the first one, which is trimmed", flag="--stop"
    )
    stop_at_eos: bool = option(True, "end a candidate at the end-of-text token", cli=False)
    heal: bool = option(
        True,
        "token healing: back the prompt up by its last token and let the first new token "
        "be any token that starts with that text (a prompt ending in a line break or half a "
        "word otherwise ends on a token the model rarely saw there)",
    )

    def problems(self) -> list[str]:
        return ["--stop strings must not be empty"] if "" in self.stop else []


@dataclass(frozen=True)
class FimSettings(Config):
    """How a prompt with a suffix (fill in the middle) is laid out: a server's or a run's
    settings, not a request's. Given to :meth:`Engine.load
    <codeparrot.generation.engine.Engine.load>` (``fim=``), which resolves them once
    against the checkpoint: the template (the ``fim_tokens`` override, else the family's),
    and the order (``auto``: the family's own)."""

    fim_order: str = FIM_ORDER.field()
    fim_suffix_share: float = FIM_SUFFIX_SHARE.field()
    fim_tokens: str = FIM_TOKENS.field()

    def problems(self) -> list[str]:
        from codeparrot.fim import parse_fim_tokens

        try:
            parse_fim_tokens(self.fim_tokens)
        except ValueError as e:
            return [str(e)]
        return []

    @classmethod
    def of(cls, config: Any) -> FimSettings:
        """The settings a front door's config holds (a field it lacks: the default)."""
        names = [f.name for f in fields(cls)]
        return cls(**{n: getattr(config, n) for n in names if hasattr(config, n)})


@dataclass(frozen=True)
class CompleteConfig(Config):
    """Complete a prompt with a checkpoint: prints the candidates (sampling flags below)."""

    checkpoint: Path = CHECKPOINT.field()
    prompt: str = option(help='the text to complete; "-" reads it from standard input')
    revision: str | None = REVISION.field()
    suffix: str | None = option(
        None,
        "fill in the middle: the text after the gap (PROMPT is the text before it); needs "
        "a checkpoint with the FIM sentinels",
    )
    suffix_file: Path | None = option(None, "read --suffix from this file", metavar="FILE")
    device: str | None = DEVICE.field()
    dtype: str = DTYPE.field()
    quantize: str = QUANTIZE_WEIGHTS.field()
    cuda_graphs: bool = CUDA_GRAPHS.field()
    stream: bool = option(False, "print text as it is generated")
    json: bool = option(False, "print the completions as JSON (text, finish reason, counts)")
    humaneval_stops: bool = option(
        False, "also stop at the HumanEval stop sequences (\\nclass, \\ndef, \\n#, ...)"
    )

    def problems(self) -> list[str]:
        out = []
        if self.prompt == "":
            out.append('PROMPT is empty (use "-" to read it from standard input)')
        if self.suffix is not None and self.suffix_file is not None:
            out.append("--suffix and --suffix-file exclude each other")
        if self.stream and self.json:
            out.append("--stream and --json exclude each other")
        from codeparrot.hub import revision_problems

        return out + revision_problems(self.checkpoint, self.revision)
