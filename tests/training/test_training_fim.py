"""Fill in the middle in the training data: spans, layouts, rates, both data paths, resume."""

from __future__ import annotations

import gzip
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codeparrot.errors import ConfigError
from codeparrot.fim import PSM, SPM, FimTokens, layout
from codeparrot.training import TrainConfig, train
from codeparrot.training.data import (
    FimTransform,
    PackedStream,
    TokenShardStream,
    encode_batch,
    pretokenize,
    shard_files,
    split_at_characters,
    split_at_lines,
)

DOCS = [
    f"def function_{i}(x, y={i}):\n    total = x + y * {i % 7}\n    return total\n" * (1 + i % 3)
    for i in range(40)
]


def write_corpus(root: Path, train_docs: list[str], valid_docs: list[str]) -> Path:
    for split, docs in (("train", train_docs), ("valid", valid_docs)):
        (root / split).mkdir(parents=True, exist_ok=True)
        half = len(docs) // 2 or 1
        for s, part in enumerate((docs[:half], docs[half:])):
            if part:
                with gzip.open(root / split / f"shard-{s:05d}.jsonl.gz", "wt") as fh:
                    fh.writelines(json.dumps({"content": d}) + "\n" for d in part)
    return root


@pytest.fixture(scope="module")
def fim_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer GPT-2 with a tokenizer made the way `codeparrot tokenizer train` makes one."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config

    from codeparrot.tokenizer.train import train_byte_level_bpe, wrap_for_transformers

    tokenizer = wrap_for_transformers(train_byte_level_bpe([DOCS * 3], 400), 256)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("fim") / "checkpoint"
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tokenizer(fim_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(fim_checkpoint)


@pytest.fixture(scope="module")
def tokens(tokenizer) -> FimTokens:
    found = FimTokens.from_tokenizer(tokenizer)
    assert found is not None
    return found


def transform(tokenizer, **changes) -> FimTransform:
    settings_ = {"rate": 1.0, "spm_rate": 0.5, "mode": "context", "seed": 3}
    settings_.update(changes)
    made = FimTransform.for_tokenizer(tokenizer, where="test", **settings_)
    assert made is not None
    return made


# -- spans and layouts ------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200), seed=st.integers(0, 2**32 - 1))
def test_character_spans_round_trip(text, seed):
    prefix, middle, suffix = split_at_characters(text, np.random.default_rng(seed))
    assert prefix + middle + suffix == text


def test_spans_cover_every_cut_including_empty_pieces():
    rng = np.random.default_rng(0)
    cuts = {tuple(map(len, split_at_characters("abc", rng))) for _ in range(400)}
    assert cuts == {(a, b - a, 3 - b) for a in range(4) for b in range(a, 4)}


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="ab \n\r", max_size=80), seed=st.integers(0, 2**32 - 1))
def test_line_spans_round_trip_and_end_at_a_line_end(text, seed):
    prefix, middle, suffix = split_at_lines(text, np.random.default_rng(seed))
    assert prefix + middle + suffix == text
    if text.strip():
        assert middle.strip(), "a line span holds some of a non-blank line"
        # the middle runs to a line end: the suffix starts a line (or the text is over)
        assert suffix == "" or middle.endswith(("\n", "\r"))


def test_line_spans_start_at_a_line_start_or_inside_a_line():
    text = "def f(x):\n    y = x + 1\n\n    return y\n"
    rng = np.random.default_rng(0)
    cuts = [split_at_lines(text, rng) for _ in range(400)]
    whole = [m for p, m, s in cuts if p == "" or p.endswith("\n")]
    rest = [m for p, m, s in cuts if p and not p.endswith("\n")]
    assert "    y = x + 1\n" in whole and "    return y\n" in whole  # a whole line
    assert any(m.startswith("1\n") or m.startswith("+ 1\n") for m in rest)  # a line's rest
    assert any(m.count("\n") >= 2 for m in whole)  # and lines after it
    assert not any(m.startswith("\n") and p.endswith("\n") for p, m, s in cuts)
    assert 0.45 < len(whole) / 400 < 0.7  # half, and the draws inside a line at its start


def test_line_rate_chooses_line_spans_and_is_part_of_the_signature(tokenizer, tokens):
    text = "x = 1\n" + "".join(f"value_{i} = compute({i}, 'abcdefgh')\n" for i in range(12))
    n = 400
    lines = transform(tokenizer, line_rate=1.0, spm_rate=0.0, mode="document")
    chars = transform(tokenizer, spm_rate=0.0, mode="document")
    for fim, expect_line_ends in ((lines, True), (chars, False)):
        out = fim.encode_documents([text] * n, [(0, 0, i) for i in range(n)])
        middles = [tokenizer.decode(ids[ids.index(tokens.middle) + 1 :]) for ids in out]
        at_line_end = sum(m.endswith("\n") for m in middles)
        assert (at_line_end == n) if expect_line_ends else (at_line_end < n / 4)
    assert lines.signature()["line_rate"] == 1.0 and "line_rate" not in chars.signature()


@pytest.mark.parametrize("order", [PSM, SPM])
def test_document_layouts_are_exact(tokenizer, tokens, order):
    fim = transform(tokenizer, spm_rate=1.0 if order == SPM else 0.0, mode="document")
    text = DOCS[5]
    (ids,) = fim.encode_documents([text], [(0, 1, 2)])
    rng = fim.rng(0, 1, 2)
    rng.random(), rng.random()  # the rate and order draws come first
    prefix, middle, suffix = split_at_characters(text, rng)
    p, m, s = encode_batch(tokenizer, [prefix, middle, suffix])
    assert ids == layout(p, s, m, tokens, order)
    if order == PSM:
        expected = f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>{middle}"
    else:
        expected = f"<fim_prefix><fim_suffix>{suffix}<fim_middle>{prefix}{middle}"
    assert tokenizer.decode(ids) == expected


def test_a_document_is_drawn_from_its_position_only(tokenizer):
    fim = transform(tokenizer, rate=0.5, mode="document")
    alone = fim.encode_documents([DOCS[3]], [(0, 0, 7)])
    together = fim.encode_documents([DOCS[1], DOCS[3]], [(0, 0, 6), (0, 0, 7)])
    assert together[1] == alone[0]


def binomial_ok(hits: int, n: int, p: float) -> bool:
    """Within 5 standard deviations (false alarm odds below 1e-6)."""
    return abs(hits - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_rates_are_respected_over_many_draws(tokenizer, tokens):
    fim = transform(tokenizer, rate=0.3, spm_rate=0.25, mode="document")
    n, text = 3000, DOCS[2]
    out = fim.encode_documents([text] * n, [(0, 0, i) for i in range(n)])
    fim_docs = [ids for ids in out if ids[0] == tokens.prefix]
    # <fim_prefix><fim_suffix> starts SPM, and PSM with an empty prefix (1% of cuts here).
    spm = [ids for ids in fim_docs if ids[1] == tokens.suffix]
    assert binomial_ok(len(fim_docs), n, 0.3)
    assert binomial_ok(len(spm), len(fim_docs), 0.25)
    plain = encode_batch(tokenizer, [text])[0]
    assert all(ids == plain for ids in out if ids[0] != tokens.prefix)
    assert FimTransform.for_tokenizer(tokenizer, 0.0, 0.5, "context", 0, where="t") is None


def test_special_token_text_in_the_corpus_stays_text(tmp_path, tokenizer, tokens):
    text = 'START = "<fim_prefix>"  # and <|endoftext|> and <fim_middle>\n'
    (ids,) = encode_batch(tokenizer, [text])
    assert not (tokens.ids | {tokenizer.eos_token_id}) & set(ids)
    assert tokenizer.decode(ids) == text
    files = shard_files(write_corpus(tmp_path / "c", [text, DOCS[0]], [text]), "train")
    stream = PackedStream(files, tokenizer, 16, shuffle_buffer=0, loop=False)
    flat = [t for _ in range(4) for t in stream.next_sequence().tolist()]
    assert flat[: len(ids) + 1] == [*ids, tokenizer.eos_token_id]  # the text's only EOS
    assert not tokens.ids & set(flat)


# -- context level ----------------------------------------------------------------------


def test_context_transform_lays_out_each_piece_and_keeps_the_length(tokenizer, tokens):
    fim = transform(tokenizer, spm_rate=0.0)
    eos = tokenizer.eos_token_id
    a, b = encode_batch(tokenizer, ["def a():\n    return 1\n", "import os\nx = os.sep\n"])
    seq = np.asarray([*a, eos, *b, eos, *a[:3]], dtype=np.int64)
    out = fim.transform_sequence(seq, 11)
    assert out.shape == seq.shape and out.dtype == seq.dtype
    ids = out.tolist()
    # Every piece is a PSM example (rate 1); the EOS separators stay; the tail is cut.
    assert ids[0] == tokens.prefix
    first_eos = ids.index(eos)
    text = tokenizer.decode(ids[:first_eos])
    head, rest = text.removeprefix("<fim_prefix>").split("<fim_suffix>")
    suffix, middle = rest.split("<fim_middle>")
    assert head + middle + suffix == "def a():\n    return 1\n"
    assert ids[first_eos + 1] == tokens.prefix
    assert np.array_equal(fim.transform_sequence(seq, 11), out)  # drawn from the position
    assert np.array_equal(transform(tokenizer, rate=1e-9).transform_sequence(seq, 11), seq)


def test_a_sequence_that_comes_out_shorter_is_padded(tokenizer, tokens):
    fim = transform(tokenizer)
    space = tokenizer.convert_tokens_to_ids("Ġ")
    seq = np.asarray([space] * 40, dtype=np.int64)  # re-encodes into fewer tokens
    out = fim.transform_sequence(seq, 0).tolist()
    assert len(out) == 40 and out[-1] == tokens.pad and out[0] == tokens.prefix
    body = out[: out.index(tokens.pad)]
    assert tokenizer.decode([t for t in body if t not in tokens.ids]) == " " * 40


def test_padding_is_not_predicted(fim_checkpoint, tokens):
    import torch
    from transformers import AutoModelForCausalLM

    from codeparrot.training.steps import lm_loss

    model = AutoModelForCausalLM.from_pretrained(fim_checkpoint)
    ids = torch.tensor([[5, 6, 7, 8, tokens.pad, tokens.pad]])
    masked = model(input_ids=ids, labels=torch.tensor([[5, 6, 7, 8, -100, -100]])).loss
    assert torch.equal(lm_loss(model, ids, ignore_id=tokens.pad), masked)
    assert not torch.equal(lm_loss(model, ids), masked)


# -- both data paths --------------------------------------------------------------------


@pytest.fixture
def files(tmp_path) -> list[Path]:
    return shard_files(write_corpus(tmp_path / "corpus", DOCS, DOCS[:4]), "train")


def drain(source, n: int) -> list[list[int]]:
    return [source.next_sequence().tolist() for _ in range(n)]


@pytest.mark.parametrize(
    ("mode", "line_rate"), [("document", 0.0), ("context", 0.0), ("context", 0.5)]
)
def test_packed_stream_transforms_and_resumes_exactly(files, tokenizer, tokens, mode, line_rate):
    def stream() -> PackedStream:
        fim = transform(tokenizer, rate=0.5, mode=mode, line_rate=line_rate)
        return PackedStream(files, tokenizer, 48, shuffle_buffer=8, sequence_buffer=6, fim=fim)

    a = stream()
    before = drain(a, 23)
    state = pickle.loads(pickle.dumps(a.state_dict()))
    b = stream()
    b.load_state_dict(state)
    assert drain(a, 60) == drain(b, 60)
    assert any(tokens.prefix in s for s in before)
    assert drain(stream(), 23) == before  # seeded
    plain = PackedStream(files, tokenizer, 48, shuffle_buffer=8, sequence_buffer=6)
    assert not any(tokens.ids & set(s) for s in drain(plain, 23))


def test_pretokenized_paths_transform_and_resume_exactly(files, tokenizer, tokens, tmp_path):
    doc_fim = transform(tokenizer, rate=0.5, mode="document")
    plain_meta = pretokenize(files, tokenizer, tmp_path / "plain.bin")
    meta = pretokenize(files, tokenizer, tmp_path / "doc.bin", fim=doc_fim)
    assert meta["source"]["fim"] == doc_fim.signature()
    assert meta["tokens"] > plain_meta["tokens"]  # the sentinels
    flat = np.memmap(tmp_path / "doc.bin", dtype=meta["dtype"], mode="r").tolist()
    assert flat.count(tokens.prefix) == flat.count(tokens.middle) > 0
    assert flat.count(tokenizer.eos_token_id) == len(DOCS)

    def stream() -> TokenShardStream:
        return TokenShardStream(tmp_path / "plain.bin", 32, seed=1, fim=transform(tokenizer))

    a = stream()
    drain(a, 7)
    b = stream()
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    rest = drain(a, 40)  # past the end of an epoch
    assert rest == drain(b, 40)
    assert all(s[0] == tokens.prefix or s[0] == tokenizer.eos_token_id for s in rest)


# -- training ---------------------------------------------------------------------------


def tiny_config(corpus: Path, checkpoint: Path, output: Path, **changes) -> TrainConfig:
    settings_ = dict(
        data=corpus, tokenizer=checkpoint, init_from=checkpoint, output=output, seq_length=64,
        batch_size=4, max_steps=6, warmup_steps=2, learning_rate=3e-3, eval_every=3,
        eval_batches=2, log_every=1, shuffle_buffer=16, mixed_precision="no", log_with="none",
        peak_tflops=1.0, progress=False, fim_rate=0.5, sequence_buffer=16,
    )  # fmt: skip
    settings_.update(changes)
    return TrainConfig.from_recipe("codeparrot", **settings_)


def read_weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


@pytest.mark.parametrize(
    ("mode", "pretokenized", "line_rate"),
    [("context", False, 0.0), ("document", True, 0.0), ("context", True, 0.5)],
    ids=["stream", "tokens", "tokens-line-ends"],
)
def test_resume_with_fim_continues_exactly(tmp_path, fim_checkpoint, mode, pretokenized, line_rate):
    corpus = write_corpus(tmp_path / "corpus", DOCS, DOCS)
    run = {"fim_mode": mode, "pretokenized": pretokenized, "fim_line_rate": line_rate}
    full = train(tiny_config(corpus, fim_checkpoint, tmp_path / "full", **run))
    stopped = train(
        tiny_config(corpus, fim_checkpoint, tmp_path / "split", max_tokens=3 * 4 * 64, **run)
    )
    assert stopped.step == 3
    resumed = train(tiny_config(corpus, fim_checkpoint, tmp_path / "split", resume=True, **run))
    assert resumed.resumed_from == 3 and resumed.step == 6
    a, b = read_weights(tmp_path / "full"), read_weights(tmp_path / "split")
    assert all(a[k].equal(b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert resumed.eval_loss == full.eval_loss


def test_fim_needs_a_tokenizer_with_sentinels(tmp_path, tiny_checkpoint):
    corpus = write_corpus(tmp_path / "corpus", DOCS, DOCS[:4])
    config = tiny_config(corpus, tiny_checkpoint, tmp_path / "run", init_from=None)
    with pytest.raises(ConfigError, match=f"tokenizer {tiny_checkpoint} has no fill-in-the-middle"):
        train(config)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_fim_is_on_by_default_where_the_tokenizer_has_the_sentinels(
    tmp_path: Path, fim_checkpoint, tiny_checkpoint
):
    from codeparrot.options import DEFAULT_FIM_RATE
    from codeparrot.training.rundir import with_defaults

    with_sentinels = TrainConfig(data=tmp_path, output=tmp_path / "run", tokenizer=fim_checkpoint)
    assert with_sentinels.fim_rate is None  # "the default", resolved and recorded per run
    assert with_defaults(with_sentinels).fim_rate == DEFAULT_FIM_RATE > 0
    without = TrainConfig(data=tmp_path, output=tmp_path / "run", tokenizer=tiny_checkpoint)
    assert with_defaults(without).fim_rate == 0.0  # an older tokenizer keeps working
    assert with_defaults(without.replace(fim_rate=0.0)).fim_rate == 0.0


def test_fim_settings_are_checked(tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        TrainConfig(
            data=tmp_path,
            output=tmp_path / "run",
            tokenizer=tmp_path,
            fim_rate=1.5,
            fim_spm_rate=-0.1,
            fim_mode="file",
        )
    message = str(err.value)
    for flag in ("--fim-rate must be in [0, 1], got 1.5", "--fim-spm-rate", "--fim-mode"):
        assert flag in message


def test_the_checkpoint_records_whether_its_model_learnt_fim(tmp_path, fim_checkpoint):
    """The engine reads this to decide whether a suffix may be sent (a tokenizer with the
    sentinels is not enough); fine-tuning without FIM keeps what the base model learnt."""
    from codeparrot.models.checkpoint import read_checkpoint_meta

    corpus = write_corpus(tmp_path / "corpus", DOCS, DOCS)
    short = {"max_steps": 2, "eval_every": 2}
    train(tiny_config(corpus, fim_checkpoint, tmp_path / "fim", init_from=None, **short))
    train(tiny_config(corpus, fim_checkpoint, tmp_path / "plain", init_from=None, fim_rate=0.0,
                      **short))  # fmt: skip
    tuned = tiny_config(corpus, tmp_path / "fim", tmp_path / "tuned", fim_rate=0.0, **short)
    train(tuned)
    learnt = {
        k: read_checkpoint_meta(tmp_path / k)["fim_trained"] for k in ("fim", "plain", "tuned")
    }
    assert learnt == {"fim": True, "plain": False, "tuned": True}
