"""Generation settings and the config of ``codeparrot complete``.

Standard library only: the CLI imports it for ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option

DTYPES = ("auto", "float32", "bfloat16", "float16")

# Weight formats of the one-token steps: the model's own, or int8 weight-only copies
# (GPT-2 checkpoints on a CPU; see codeparrot.generation.gpt2). ``Engine.load`` also takes
# "auto": int8 where it applies, the model's own weights elsewhere.
QUANTIZE = ("none", "int8")
LOAD_QUANTIZE = ("none", "int8", "auto")

DTYPE_CHOICES = DTYPES


@dataclass(frozen=True)
class GenerationConfig(Config):
    """How to sample completions for one prompt."""

    max_new_tokens: int = option(64, "most tokens to generate per candidate")
    temperature: float = option(0.2, "sampling temperature; 0 means greedy decoding")
    top_p: float = option(0.95, "nucleus sampling: keep the smallest set of tokens with this mass")
    top_k: int = option(0, "keep only the k most likely tokens (0: no limit)")
    n: int = option(1, "number of candidates sampled for the prompt, in one batch")
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
        out = []
        if not 1 <= self.max_new_tokens <= 4096:
            out.append(f"--max-new-tokens must be in 1..4096, got {self.max_new_tokens}")
        if self.temperature < 0:
            out.append(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            out.append(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            out.append(f"--top-k must be >= 0, got {self.top_k}")
        if not 1 <= self.n <= 1024:
            out.append(f"--n must be in 1..1024, got {self.n}")
        if any(s == "" for s in self.stop):
            out.append("--stop strings must not be empty")
        return out


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
