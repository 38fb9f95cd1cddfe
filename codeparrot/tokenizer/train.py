"""Train a byte-level BPE on the corpus and save it as a ``transformers`` tokenizer directory.

The recipe of CodeParrot's tokenizer: a byte-level BPE with an initial alphabet of the 256
byte symbols so that any text is encodable without an unknown token, ``<|endoftext|>`` as
the special token that is bos, eos and unk, and a byte-level decoder so that
``decode(encode(x)) == x`` for every string. Where the reference used GPT-2's pre-tokenizer,
the default here is a code-aware one (``pretokenizer.py``: names with their underscores,
indentation runs whole, a line break kept with the line before); ``pre_tokenizer="gpt2"``
gives the reference's.

Beyond the recipe, the four fill-in-the-middle sentinels (``codeparrot.fim.SENTINELS``,
StarCoder's names) are special tokens of every tokenizer made here, with the ids 1-4 right
after ``<|endoftext|>``; a model trained with ``fim_rate`` 0 simply never sees them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError
from codeparrot.fim import SENTINELS
from codeparrot.io import atomic_directory, provenance, write_json
from codeparrot.tokenizer.config import END_OF_TEXT, TokenizerConfig
from codeparrot.tokenizer.corpus import (
    StreamStats,
    batched,
    corpus_shards,
    read_manifest,
    stream_contents,
)
from codeparrot.tokenizer.pretokenizer import build_pre_tokenizer, pre_tokenizer_pattern

# Files handed to the Rust trainer per Python call: large enough that the per-call
# overhead vanishes, small enough that memory stays flat.
TRAIN_BATCH_FILES = 1000
METADATA_FILE = "codeparrot_tokenizer.json"


def new_byte_level_bpe(pre_tokenizer: str = "code") -> Any:
    """An untrained ``tokenizers.Tokenizer``: the named pre-tokenizer, byte-level decoding."""
    from tokenizers import Tokenizer, decoders, models

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = build_pre_tokenizer(pre_tokenizer)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_byte_level_bpe(
    batches: Iterable[list[str]],
    vocab_size: int,
    min_frequency: int = 2,
    show_progress: bool = False,
    pre_tokenizer: str = "code",
) -> Any:
    """Train a byte-level BPE on batches of texts; returns a ``tokenizers.Tokenizer``."""
    from tokenizers import pre_tokenizers, trainers

    tokenizer = new_byte_level_bpe(pre_tokenizer)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[END_OF_TEXT, *SENTINELS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(batches, trainer=trainer)
    return tokenizer


def wrap_for_transformers(tokenizer: Any, model_max_length: int) -> Any:
    """A fast ``transformers`` tokenizer around a trained ``tokenizers.Tokenizer``.

    Not ``GPT2TokenizerFast``: in transformers 5 that class rebuilds its pipeline from the
    vocabulary and merges with GPT-2's pre-tokenizer when loaded, silently dropping ours.
    The generic fast tokenizer records ``tokenizer_class: TokenizersBackend`` and loads
    ``tokenizer.json`` as saved, so ``AutoTokenizer`` tokenizes exactly as the trained
    object does (checked by the tests).
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        unk_token=END_OF_TEXT,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def train_tokenizer(config: TokenizerConfig) -> Path:
    """Train on the first ``config.files`` files of ``config.data``'s train split.

    Writes ``config.output`` atomically: a ``save_pretrained`` directory plus
    ``codeparrot_tokenizer.json`` (config, corpus manifest and its provenance, counts,
    provenance). Returns the output directory.
    """
    output = Path(config.output)
    if output.exists() and not config.overwrite:
        raise DataError(f"{output} already exists (pass --overwrite to replace it)")
    shards = corpus_shards(config.data, "train")
    manifest = read_manifest(config.data)

    stats = StreamStats()
    contents = stream_contents(shards, config.files, stats)
    batches = batched(contents, TRAIN_BATCH_FILES)
    first = next(batches, None)
    if first is None:
        raise DataError(f"{Path(config.data) / 'train'}: empty corpus (its shards hold no files)")

    def all_batches() -> Iterable[list[str]]:
        yield first
        yield from batches

    started = time.perf_counter()
    tokenizer = train_byte_level_bpe(
        all_batches(),
        config.vocab_size,
        config.min_frequency,
        show_progress=config.progress,
        pre_tokenizer=config.pre_tokenizer,
    )
    seconds = time.perf_counter() - started
    if stats.chars == 0:
        raise DataError(
            f"{Path(config.data) / 'train'}: empty corpus ({stats.files} files, all of them empty)"
        )

    wrapped = wrap_for_transformers(tokenizer, config.model_max_length)
    manifest_path = Path(config.data) / "manifest.json"
    metadata = {
        "config": config.to_dict(),
        "vocab_size": tokenizer.get_vocab_size(),
        # The split regex itself, so a later change of the pattern cannot hide what was used.
        "pre_tokenizer": {
            "name": config.pre_tokenizer,
            "split_pattern": pre_tokenizer_pattern(config.pre_tokenizer),
        },
        "corpus": {
            "data": str(Path(config.data).resolve()),
            "manifest_path": str(manifest_path.resolve()) if manifest is not None else None,
            "manifest_provenance": (manifest or {}).get("provenance"),
            "shards_read": stats.shards_read,
            "files": stats.files,
            "chars": stats.chars,
            # Fewer files than asked for means the whole train split was used.
            "whole_split": stats.files < config.files,
        },
        "training_seconds": round(seconds, 3),
        "provenance": provenance(config),
    }
    with atomic_directory(output, overwrite=config.overwrite) as tmp:
        wrapped.save_pretrained(tmp)
        write_json(tmp / METADATA_FILE, metadata)
    return output
