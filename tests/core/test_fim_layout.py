"""The FIM sentinels and layouts that training and inference share."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models

from codeparrot.fim import FIM_MIDDLE, FIM_PAD, FIM_PREFIX, FIM_SUFFIX, SPM, FimTokens, layout

T = FimTokens(prefix=1, middle=2, suffix=3, pad=4)


def test_psm_and_spm_layouts_are_exact():
    assert layout([10, 11], [20], [30, 31], T) == [1, 10, 11, 3, 20, 2, 30, 31]
    assert layout([10, 11], [20], [30, 31], T, SPM) == [1, 3, 20, 2, 10, 11, 30, 31]
    assert layout([10], [20], [], T) == [1, 10, 3, 20, 2]
    with pytest.raises(ValueError, match="psm, spm"):
        layout([], [], [], T, "pms")


def test_sentinels_are_found_only_when_all_four_are_tokens():
    vocab = {"<|endoftext|>": 0, FIM_PREFIX: 1, FIM_MIDDLE: 2, FIM_SUFFIX: 3, FIM_PAD: 4, "a": 5}
    assert FimTokens.from_tokenizer(Tokenizer(models.WordLevel(vocab, "<|endoftext|>"))) == T
    del vocab[FIM_PAD]
    assert FimTokens.from_tokenizer(Tokenizer(models.WordLevel(vocab, "<|endoftext|>"))) is None
