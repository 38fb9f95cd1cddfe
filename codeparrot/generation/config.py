"""Config of ``codeparrot complete`` (standard library only: the CLI imports it for --help)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class CompleteConfig(Config):
    """Complete a prompt with a checkpoint: prints the candidates (sampling flags below)."""

    checkpoint: Path = option(help="checkpoint directory (ours, or any local HF causal LM)")
    prompt: str = option(help='the text to complete; "-" reads it from standard input')
    device: str | None = option(None, "torch device (default: cuda when available, else cpu)")
    dtype: str = option(
        "auto", "weights' dtype (auto: bf16 on GPU, fp32 on CPU)", choices=DTYPE_CHOICES
    )
    quantize: str = option(
        "none",
        "int8: decode with int8 copies of the weights (GPT-2 on a CPU, ~2x faster steps, "
        "logits within about 1 in 100); auto: int8 where it applies",
        choices=("none", "int8", "auto"),
    )
    stream: bool = option(False, "print text as it is generated")
    json: bool = option(False, "print the completions as JSON (text, finish reason, counts)")
    humaneval_stops: bool = option(
        False, "also stop at the HumanEval stop sequences (\\nclass, \\ndef, \\n#, ...)"
    )

    def problems(self) -> list[str]:
        out = []
        if self.prompt == "":
            out.append('PROMPT is empty (use "-" to read it from standard input)')
        if self.stream and self.json:
            out.append("--stream and --json exclude each other")
        return out
