"""The healing table (every ordinary token's text) is built in one batch where the
tokenizer's decode is its backend's, and equals the one-by-one decode of every family."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from codeparrot.generation import Engine

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family


def one_by_one(engine: Engine) -> tuple:
    special = set(engine.special_ids) | (engine.sentinels.ids if engine.sentinels else set())
    pairs = sorted(
        (engine.detok.text_of([i]), i) for i in range(engine.vocab_size) if i not in special
    )
    return [t for t, _ in pairs], [i for _, i in pairs]


@pytest.mark.parametrize("family", ["tiny_starcoder_py", "codellama", "deepseek-coder"])
def test_the_batch_table_is_the_one_by_one_table(family: str, tmp_path: Path) -> None:
    engine = Engine.load(build_family(family, tmp_path / family), quantize="none")
    texts, order = engine.healer.token_table()
    assert (texts, order) == one_by_one(engine)
    if family == "codellama":  # decoded after the anchor: "▁in" keeps its space
        assert engine.detok.anchor is not None and any(t.startswith(" ") for t in texts)


def test_a_decode_that_cleans_up_spaces_goes_one_by_one(tmp_path: Path, monkeypatch) -> None:
    """Where transformers' decode is not the backend's (spaces cleaned up), each token is
    decoded as the tokenizer does."""
    monkeypatch.setenv("CODEPARROT_START_CACHE", "0")
    path = build_family("codellama", tmp_path / "cl")
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["clean_up_tokenization_spaces"] = True
    config["clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"] = True
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    engine = Engine.load(path, quantize="none")
    texts, order = engine.healer.token_table()
    assert (texts, order) == one_by_one(engine)


@pytest.mark.parametrize("family", ["tiny_starcoder_py", "codellama"])
def test_healing_allows_exactly_the_tokens_that_go_on_writing_the_text(
    family: str, tmp_path: Path
) -> None:
    """Those whose text starts with the rest, and those whose text is a shorter start of
    it where the tokenizer splits the rest there when more text follows, as a scan of the
    whole vocabulary finds them."""
    from codeparrot.generation.healing import HEAL_FOLLOWERS

    engine = Engine.load(build_family(family, tmp_path / family), quantize="none")
    texts, order = engine.healer.token_table()
    rests = ["s", " ", "  ", "re", " re", "ret", "(", "()", "\n", "\n    ", "\n        "]
    rests += ["in", "zzz-none", *[t for t in texts if len(t) > 2][::40]]
    for rest in rests:
        split = {engine.prompts.encode_text(rest + f, bare=True)[0] for f in HEAL_FOLLOWERS}
        expected = [
            i
            for t, i in zip(texts, order, strict=True)
            if t.startswith(rest)
            or (t and len(t) < len(rest) and rest.startswith(t) and i in split)
        ]
        assert sorted(engine.healer.healing_ids(rest)) == sorted(expected), rest


def test_healing_never_splits_a_token_the_tokenizer_keeps_whole(tmp_path: Path) -> None:
    """A shorter start the tokenizer never splits off is not offered: a model that wrote
    "(" where the prompt had "()" would see a split it never saw in training. A line's
    indentation before a word is split (one space goes with the word), so the shorter
    indentation stays allowed."""
    engine = Engine.load(build_family("tiny_starcoder_py", tmp_path / "sc"), quantize="none")
    texts, _ = engine.healer.token_table()
    assert "()" in texts and "(" in texts
    assert [engine.detok.text_of([i]) for i in engine.healer.healing_ids("()")] == [
        t for t in texts if t.startswith("()")
    ]
    indent = "\n        "
    assert indent in texts and indent[:-1] in texts
    assert (
        engine.prompts.encode_text(indent + "return", bare=True)[0]
        == engine.prompts.encode_text(indent[:-1], bare=True)[0]
    )
    allowed = [engine.detok.text_of([i]) for i in engine.healer.healing_ids(indent)]
    assert indent[:-1] in allowed
