"""The playground's model card says which families' checkpoints fill in the middle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from codeparrot.app.model_card import has_fim_sentinels

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import FAMILIES, build_tokenizer


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_card_knows_each_familys_fim_tokens(tmp_path: Path, name: str) -> None:
    family = FAMILIES[name]
    build_tokenizer(family).save_pretrained(tmp_path)
    assert has_fim_sentinels(tmp_path) is (family.template is not None)
