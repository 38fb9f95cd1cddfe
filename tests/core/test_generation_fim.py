"""Fill in the middle through the engine: a 2-layer model that learnt one snippet fills it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.errors import CodeparrotError
from codeparrot.fim import PSM, SENTINELS, SPM, FimTokens, layout
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.config import FimSettings

PREFIX = "def add(a, b):\n    "
MIDDLE = "return a + b"
SUFFIX = "\n\n\nprint(add(1, 2))\n"
SNIPPET = PREFIX + MIDDLE + SUFFIX


def build_fim_checkpoint(out: Path, steps: int = 300) -> Path:
    """A tokenizer with the sentinels and a GPT-2 trained on the snippet in both layouts."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from conftest import stdlib_sources

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", *SENTINELS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([SNIPPET, *stdlib_sources()[:2]], trainer=trainer)
    eos = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=eos, eos_token=eos, unk_token=eos, model_max_length=128
    )
    fim = FimTokens.from_tokenizer(tokenizer)
    assert fim is not None

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    p, m, s = encode(PREFIX), encode(MIDDLE), encode(SUFFIX)
    rows = [[*layout(p, s, m, fim, order), tokenizer.eos_token_id] for order in (PSM, SPM)]
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=128, n_embd=64, n_layer=2, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    batch = torch.tensor(rows)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: a second thread only waits on a busy machine
    try:
        for _ in range(steps):
            loss = model(input_ids=batch, labels=batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < 0.05, loss.item()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def fim_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fim_checkpoint(tmp_path_factory.mktemp("fim") / "checkpoint")


GREEDY = GenerationConfig(temperature=0, max_new_tokens=20, n=2)


@pytest.mark.parametrize("quantize", ["none", "int8"])
@pytest.mark.parametrize("order", [PSM, SPM])
def test_engine_fills_the_middle_exactly(fim_checkpoint, quantize, order):
    engine = Engine.load(
        fim_checkpoint, device="cpu", quantize=quantize, fim=FimSettings(fim_order=order)
    )
    assert engine.fim is not None
    config = GREEDY
    out = engine.generate(PREFIX, config, suffix=SUFFIX)
    assert [c.text for c in out] == [MIDDLE, MIDDLE]
    assert all(c.finish_reason == "eos" for c in out)
    streamed = "".join(e.delta for e in engine.stream(PREFIX, config.replace(n=1), suffix=SUFFIX))
    assert streamed == MIDDLE
    # without the suffix the same model has no middle to write: the suffix is really used
    assert engine.generate(PREFIX, config.replace(n=1))[0].text != MIDDLE


def test_compiled_steps_fill_the_same_middle(fim_checkpoint):
    engine = Engine.load(fim_checkpoint, device="cpu", quantize="int8")
    engine.compile_steps(background=False)
    (c,) = engine.generate(PREFIX, GREEDY.replace(n=1), suffix=SUFFIX)
    assert c.text == MIDDLE


def test_sentinel_text_in_a_prompt_is_text(fim_checkpoint):
    engine = Engine.load(fim_checkpoint, device="cpu")
    fim = engine.fim
    ids, truncated = engine.encode_infill("x = '<fim_middle>'\n", "<fim_suffix><|endoftext|>", 8)
    assert not truncated
    assert [i for i in ids if i in fim.ids] == [fim.prefix, fim.suffix, fim.middle]
    assert engine.eos_token_id not in ids


def test_long_prefix_and_suffix_are_cut_at_line_boundaries(fim_checkpoint):
    engine = Engine.load(fim_checkpoint, device="cpu")
    prefix = "".join(f"a{i} = {i}\n" for i in range(200)) + PREFIX
    suffix = SUFFIX + "".join(f"b{i} = {i}\n" for i in range(200))
    ids, truncated = engine.encode_infill(prefix, suffix, 20)
    assert truncated and len(ids) <= engine.context_length - 20
    fim = engine.fim
    p = ids[1 : ids.index(fim.suffix)]
    s = ids[ids.index(fim.suffix) + 1 : ids.index(fim.middle)]
    kept_prefix, kept_suffix = engine.tokenizer.decode(p), engine.tokenizer.decode(s)
    assert prefix.endswith(kept_prefix) and prefix[: -len(kept_prefix)].endswith("\n")
    assert kept_prefix.endswith(PREFIX) and len(kept_prefix) > len(PREFIX)
    assert suffix.startswith(kept_suffix) and kept_suffix.endswith("\n")
    assert kept_suffix.startswith(SUFFIX) and len(kept_suffix) > len(SUFFIX)
    (c,) = engine.generate(prefix, GREEDY.replace(n=1), suffix=suffix)
    assert c.prompt_truncated


def test_the_suffix_keeps_at_most_its_share_of_a_full_budget(fim_checkpoint):
    """Over the context, the suffix keeps at most ``fim_suffix_share`` of the budget (the
    language server's split) and the prefix the rest: the code before the gap, which
    holds the signature and docstring, is not starved by the code after it."""
    prefix = "".join(f"a{i} = {i}\n" for i in range(200)) + PREFIX
    suffix = SUFFIX + "".join(f"b{i} = {i}\n" for i in range(200))
    kept = {}
    for share in (0.25, 0.5):
        engine = Engine.load(fim_checkpoint, device="cpu", fim=FimSettings(fim_suffix_share=share))
        budget = engine.context_length - 20 - 3
        ids, truncated = engine.encode_infill(prefix, suffix, 20)
        fim = engine.fim
        suffix_ids = ids[ids.index(fim.suffix) + 1 : ids.index(fim.middle)]
        assert truncated and 0 < len(suffix_ids) <= int(budget * share)
        assert len(ids) - 3 > budget - int(budget * share) - 8  # the prefix takes the rest
        kept[share] = len(suffix_ids)
    assert kept[0.25] < kept[0.5]
    # the engine's default is the editor's
    assert Engine.load(fim_checkpoint, device="cpu").fim_layout.suffix_share == 0.25


def test_a_suffix_needs_a_checkpoint_with_sentinels(tiny_checkpoint, fim_checkpoint):
    engine = Engine.load(tiny_checkpoint)
    assert engine.fim is None
    with pytest.raises(CodeparrotError, match="fill-in-the-middle sentinels"):
        engine.generate("def f():\n", GREEDY, suffix="\n")
    cli = [sys.executable, "-m", "codeparrot", "complete", "--temperature", "0", "--device", "cpu"]
    proc = subprocess.run(
        [*cli, "--checkpoint", str(tiny_checkpoint), "--suffix", "\\n", "def f():"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "fill-in-the-middle sentinels" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [*cli, "--checkpoint", str(fim_checkpoint), "--suffix", SUFFIX, PREFIX],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == MIDDLE + "\n"


def test_healing_backs_up_the_prefix_only_where_it_runs_into_the_middle(fim_checkpoint):
    mid_word = "def add(a, b):\n    ret"
    for order in (PSM, SPM):
        engine = Engine.load(fim_checkpoint, device="cpu", fim=FimSettings(fim_order=order))
        fim = engine.fim
        config = GenerationConfig()
        ids, _truncated, healed = engine.prompts.infill_prompt(
            mid_word, SUFFIX, config, engine.healer.heal
        )
        plain, _ = engine.encode_infill(mid_word, SUFFIX, config.max_new_tokens)
        assert healed is not None and mid_word.endswith(healed[0])
        assert len(ids) == len(plain) - 1  # the prefix's last token, and only it, is gone
        assert ids.count(fim.middle) == ids.count(fim.suffix) == 1
        # every allowed first token of the middle starts with the removed text
        assert all(engine.tokenizer.decode([t]).startswith(healed[0]) for t in healed[1])
    # PSM: a prefix ending in whitespace keeps its last token (the suffix lies in between)
    engine = Engine.load(fim_checkpoint, device="cpu", fim=FimSettings(fim_order=PSM))
    _ids, _t, healed = engine.prompts.infill_prompt(
        PREFIX, SUFFIX, GenerationConfig(), engine.healer.heal
    )
    assert healed is None
    _ids, _t, healed = engine.prompts.infill_prompt(
        PREFIX, SUFFIX, GenerationConfig(heal=False), engine.healer.heal
    )
    assert healed is None


def _with_meta(src: Path, dst: Path, meta: dict) -> Path:
    import json
    import shutil

    shutil.copytree(src, dst)
    (dst / "codeparrot_checkpoint.json").write_text(json.dumps(meta))
    return dst


def test_a_model_trained_without_fim_gets_no_suffix_despite_the_sentinels(fim_checkpoint, tmp_path):
    """A tokenizer with the sentinels is not enough: `train --fim-rate 0` never taught the
    model what they mean, so the engine refuses a suffix (and the editor sends none)."""
    plain = _with_meta(fim_checkpoint, tmp_path / "plain", {"train_config": {"fim_rate": 0.0}})
    engine = Engine.load(plain, device="cpu")
    assert engine.sentinels is not None and engine.fim is None
    with pytest.raises(CodeparrotError, match="trained without fill-in-the-middle"):
        engine.generate(PREFIX, GREEDY, suffix=SUFFIX)
    # the sentinels still end a completion and are never written as text
    assert engine.end_ids_for(GREEDY) >= engine.sentinels.ids
    trained = _with_meta(fim_checkpoint, tmp_path / "fim", {"train_config": {"fim_rate": 0.5}})
    assert Engine.load(trained, device="cpu").fim is not None


def test_what_a_checkpoint_learnt_is_read_from_its_metadata(tmp_path):
    from codeparrot.models.checkpoint import trained_to_infill

    assert trained_to_infill({}) is None  # foreign: the tokenizer decides
    assert trained_to_infill({"fim_trained": False, "train_config": {"fim_rate": 0.5}}) is False
    assert trained_to_infill({"train_config": {"fim_rate": 0.5}}) is True
    base = tmp_path / "base"
    base.mkdir()
    (base / "codeparrot_checkpoint.json").write_text('{"fim_trained": true}')
    tuned = {"train_config": {"fim_rate": 0.0, "init_from": str(base)}}
    assert trained_to_infill(tuned) is True  # fine-tuned without FIM keeps what it learnt
    assert trained_to_infill({"train_config": {"fim_rate": 0.0, "init_from": None}}) is False
