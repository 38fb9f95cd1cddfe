"""Each code-model family's fill-in-the-middle prompt, special tokens and decoding.

The models are tiny random ones in each family's Hub layout (``tests/families.py``); the
expected prompts are written out from each family's documentation, not from our templates.
"""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.fim import PSM, SPM, detect_template, parse_fim_tokens
from codeparrot.generation import Engine, GenerationConfig
from codeparrot.generation.config import FimSettings
from codeparrot.generation.prompt import PromptBuilder

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import FAMILIES, bias_head, build_family

PRE = "def add(a, b):\n    return"
SUF = "\n\nprint(add(1, 2))\n"

# The documented prompts (bos, then the layout), sentinels written by name.
DOCUMENTED = {
    # bigcode Megatron-LM / StarCoder model card; SPM is bigcode's variant
    "tiny_starcoder_py": {
        PSM: "<fim_prefix>{pre}<fim_suffix>{suf}<fim_middle>",
        SPM: "<fim_prefix><fim_suffix>{suf}<fim_middle>{pre}",
    },
    "starcoder2": {
        PSM: "<fim_prefix>{pre}<fim_suffix>{suf}<fim_middle>",
        SPM: "<fim_prefix><fim_suffix>{suf}<fim_middle>{pre}",
    },
    "santacoder": {
        PSM: "<fim-prefix>{pre}<fim-suffix>{suf}<fim-middle>",
        SPM: "<fim-prefix><fim-suffix>{suf}<fim-middle>{pre}",
    },
    # Qwen2.5-Coder's README
    "qwen2.5-coder": {
        PSM: "<|fim_prefix|>{pre}<|fim_suffix|>{suf}<|fim_middle|>",
        SPM: "<|fim_prefix|><|fim_suffix|>{suf}<|fim_middle|>{pre}",
    },
    # DeepSeek-Coder's README (the tokenizer puts BOS first)
    "deepseek-coder": {
        PSM: "<｜begin▁of▁sentence｜><｜fim▁begin｜>{pre}<｜fim▁hole｜>{suf}<｜fim▁end｜>",
        SPM: "<｜begin▁of▁sentence｜><｜fim▁begin｜><｜fim▁hole｜>{suf}<｜fim▁end｜>{pre}",
    },
}
ORDER_OF = {  # the order a family documents ("auto")
    "tiny_starcoder_py": PSM,
    "starcoder2": PSM,
    "santacoder": PSM,
    "qwen2.5-coder": PSM,
    "deepseek-coder": PSM,
    "codellama": PSM,
}


def laid_out(engine: Engine, order: str = "auto", tokens: str = "") -> PromptBuilder:
    """The engine's prompt side as an engine loaded with these FIM settings has it."""
    prompts = copy.copy(engine.prompts)
    prompts.use_fim(FimSettings(fim_order=order, fim_tokens=tokens))
    return prompts


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Engine]:
    root = tmp_path_factory.mktemp("families")
    return {name: Engine.load(build_family(name, root / name)) for name in FAMILIES}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
@pytest.mark.parametrize("order", [PSM, SPM])
def test_fim_prompt_is_the_documented_one(engines, name: str, order: str) -> None:
    engine = engines[name]
    ids, truncated = laid_out(engine, order).encode_infill(PRE, SUF, 16)
    text = DOCUMENTED[name][order].format(pre=PRE, suf=SUF)
    expected = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert not truncated
    assert ids == expected
    assert engine.fim is not None and engine.fim.template.name == FAMILIES[name].template


@pytest.mark.parametrize("name", sorted(n for n in FAMILIES if FAMILIES[n].template))
@pytest.mark.parametrize("order", [PSM, SPM])
def test_sentinel_text_in_a_files_text_stays_text(engines, name: str, order: str) -> None:
    """A prefix and suffix that spell the family's own sentinels (a file about tokenizers,
    or one written to steer the model) get no sentinel of their own: the prompt holds the
    three the layout places, once each, in its order. DeepSeek-Coder's tokenizer does not
    mark its sentinels special, so splitting special tokens' text is not enough there."""
    engine = engines[name]
    assert engine.fim is not None
    template = engine.fim.template
    # a name's leading ▁ is SentencePiece's space (CodeLlama's ▁<PRE>); DeepSeek's hold ▁
    names = (template.prefix, template.suffix, template.middle)
    spelled = "".join(" " + n[1:] if n.startswith("▁") else n for n in names)
    ids, _ = laid_out(engine, order).encode_infill(f"s = '{spelled}'\n", f"t = '{spelled}'", 16)
    sentinel = {engine.fim.prefix: "prefix", engine.fim.suffix: "suffix",
                engine.fim.middle: "middle"}  # fmt: skip
    # both orders place prefix, suffix, middle (SPM: the prefix's text after the middle)
    assert [sentinel[i] for i in ids if i in sentinel] == ["prefix", "suffix", "middle"]
    # and the spelled sentinels are all there as text
    assert engine.tokenizer.decode(ids, skip_special_tokens=True).count(spelled.strip()) == 2


def _sp_text(tokens: list[str]) -> str:
    """SentencePiece tokens back to text: ``▁`` is a space, ``<0xNN>`` a byte."""
    out = bytearray()
    for t in tokens:
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(int(t[3:5], 16))
        else:
            out += t.replace("▁", " ").encode()
    return out.decode()


@pytest.mark.parametrize("order", [PSM, SPM])
def test_codellama_prompt_is_metas(engines, order: str) -> None:
    """Meta's reference: PSM ``<s> <PRE> + encode(pre) + <SUF> + encode_infilling(suf) +
    <MID>``, SPM ``<s> <PRE> <SUF> + encode_infilling(suf) + <MID> + encode(pre)``, where
    encode puts SentencePiece's space before the text and encode_infilling does not."""
    engine = engines["codellama"]
    ids, _ = laid_out(engine, order).encode_infill(PRE, SUF, 16)
    tokens = engine.tokenizer.convert_ids_to_tokens(ids)
    mid = tokens.index("▁<MID>")
    if order == PSM:
        suf_at = tokens.index("▁<SUF>")
        assert tokens[:2] == ["<s>", "▁<PRE>"] and mid == len(tokens) - 1
        assert _sp_text(tokens[2:suf_at]) == " " + PRE
        assert _sp_text(tokens[suf_at + 1 : mid]) == SUF
    else:
        assert tokens[:3] == ["<s>", "▁<PRE>", "▁<SUF>"]
        assert _sp_text(tokens[3:mid]) == SUF
        assert _sp_text(tokens[mid + 1 :]) == " " + PRE


@pytest.mark.parametrize("name", sorted(ORDER_OF))
def test_auto_order_is_the_familys(engines, name: str) -> None:
    engine = engines[name]
    auto, _ = engine.encode_infill(PRE, SUF, 16)  # loaded with the default: auto
    assert auto == laid_out(engine, ORDER_OF[name]).encode_infill(PRE, SUF, 16)[0]
    assert engine.fim_layout.order == ORDER_OF[name]


def test_our_own_checkpoints_keep_spm(engines) -> None:
    engine = engines["tiny_starcoder_py"]
    ours = Engine(engine.model, engine.tokenizer, own_checkpoint=True)
    assert ours.fim_layout.order == SPM
    spm = laid_out(engine, SPM).encode_infill(PRE, SUF, 16)[0]
    assert ours.encode_infill(PRE, SUF, 16)[0] == spm


@pytest.mark.parametrize("name", ["codeparrot-small", "codegen", "phi-1"])
def test_no_template_is_a_clear_error_naming_the_override(engines, name: str) -> None:
    engine = engines[name]
    assert engine.fim is None
    with pytest.raises(CheckpointError, match="--fim-tokens PREFIX,SUFFIX,MIDDLE"):
        engine.encode_infill(PRE, SUF, 16)


def test_override_names_the_tokens(engines) -> None:
    """llm-ls style: any model whose tokenizer has the tokens, named by hand."""
    engine = engines["qwen2.5-coder"]
    spec = "<|fim_prefix|>,<|fim_suffix|>,<|fim_middle|>,<|fim_pad|>"
    custom = laid_out(engine, PSM, spec)
    ids, _ = custom.encode_infill(PRE, SUF, 16)
    assert ids == laid_out(engine, PSM).encode_infill(PRE, SUF, 16)[0]
    assert custom.infill_template().template.name == "custom"
    with pytest.raises(Exception, match="no single token '<nope>'"):
        laid_out(engine, PSM, "<nope>,<|fim_suffix|>,<|fim_middle|>").encode_infill(PRE, SUF, 16)
    with pytest.raises(ValueError, match="PREFIX,SUFFIX,MIDDLE"):
        parse_fim_tokens("<a>,<b>")


def test_the_fim_settings_are_resolved_once_per_load(engines, monkeypatch) -> None:
    """``--fim-tokens`` is parsed and ``--fim-order auto`` resolved when the engine is
    loaded, not at each request (each keystroke, in an editor)."""
    from codeparrot.generation import prompt

    calls = {"detect_template": 0, "resolve_order": 0}

    def counted(name: str):
        real = getattr(prompt, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(prompt, name, call)

    counted("detect_template")
    counted("resolve_order")
    spec = "<|fim_prefix|>,<|fim_suffix|>,<|fim_middle|>,<|fim_pad|>"
    settings = FimSettings(fim_order="auto", fim_tokens=spec)
    engine = Engine.load(engines["qwen2.5-coder"].path, fim=settings)
    # at load: the tokenizer's own template, then the override; the order once
    assert calls == {"detect_template": 2, "resolve_order": 1}
    greedy = GenerationConfig(max_new_tokens=2, temperature=0)
    for _ in range(3):
        engine.encode_infill(PRE, SUF, 16)
        engine.generate(PRE, greedy, suffix=SUF)
    assert calls == {"detect_template": 2, "resolve_order": 1}
    assert engine.fim_layout.order == PSM and engine.fim_layout.settings == settings
    assert engine.infill_template().template.name == "custom"


def test_fim_tokens_the_tokenizer_lacks_are_refused_at_load(engines, capsys, caplog) -> None:
    import logging

    import torch

    from codeparrot.cli import main

    path = engines["qwen2.5-coder"].path
    bad = "<nope>,<|fim_suffix|>,<|fim_middle|>"
    with pytest.raises(ConfigError, match=r"--fim-tokens '<nope>,.*no single token '<nope>'"):
        Engine.load(path, fim=FimSettings(fim_tokens=bad))
    with pytest.raises(ConfigError, match=r"--fim-tokens '<a>,<b>': expected PREFIX,SUFFIX"):
        FimSettings(fim_tokens="<a>,<b>")
    # int8 does not apply to CodeGen, and an editor's load falls back to its own weights:
    # not for tokens its tokenizer lacks, which fail either way (refused once, no retry)
    threads = torch.get_num_threads()  # the editor profile sets them
    try:
        with caplog.at_level(logging.INFO), pytest.raises(ConfigError, match="--fim-tokens"):
            Engine.load(
                engines["codegen"].path, quantize="int8", profile="editor", threads=threads,
                fim=FimSettings(fim_tokens=bad),
            )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert not [r for r in caplog.records if "does not apply" in r.getMessage()]
    # the command line says so before any completion, whether or not a suffix is given
    argv = ["complete", "--checkpoint", str(path), "--fim-tokens", bad, "def f():"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--fim-tokens '<nope>," in err and "Traceback" not in err


def test_fim_pad_is_not_required(engines) -> None:
    tokenizer = engines["deepseek-coder"].tokenizer  # no pad sentinel at all
    assert detect_template(tokenizer).template.name == "deepseek"


@pytest.mark.parametrize("name", ["codellama", "deepseek-coder"])
def test_bos_starts_left_to_right_prompts_where_the_tokenizer_adds_it(engines, name) -> None:
    engine = engines[name]
    ids, _ = engine.encode_prompt("x = 1", 16)
    assert ids[0] == engine.tokenizer.bos_token_id
    assert ids == engine.tokenizer("x = 1")["input_ids"]


def test_bos_asked_for_by_tokenizer_config_is_added_once(tmp_path, caplog) -> None:
    """DeepSeek-Coder's layout: a byte-level tokenizer.json with no BOS post-processor, and
    a tokenizer_config.json naming LlamaTokenizerFast with add_bos_token. transformers 5
    loads it as TokenizersBackend, which leaves the BOS out; the loader puts it back."""
    import json
    import logging

    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from codeparrot.models.checkpoint import load_tokenizer

    path = build_family("deepseek-coder", tmp_path / "deepseek")
    bos = FAMILIES["deepseek-coder"].bos
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    bos_id = raw.token_to_id(bos)
    assert bos_id not in raw.encode("x = 1").ids  # the file itself adds none
    assert bos_id not in AutoTokenizer.from_pretrained(path)("x = 1")["input_ids"]
    with caplog.at_level(logging.INFO, logger="codeparrot.models.checkpoint"):
        tokenizer = load_tokenizer(path)
    assert tokenizer("x = 1")["input_ids"] == [bos_id, *raw.encode("x = 1").ids]
    assert tokenizer("x = 1", add_special_tokens=False)["input_ids"] == raw.encode("x = 1").ids
    assert any("add_bos_token" in r.getMessage() for r in caplog.records)
    assert load_tokenizer(path)("x")["input_ids"].count(bos_id) == 1
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("add_bos_token")
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert bos_id not in load_tokenizer(path)("x = 1")["input_ids"]


def test_a_post_processor_bos_is_not_doubled_by_add_bos_token(tmp_path) -> None:
    import json

    from codeparrot.models.checkpoint import load_tokenizer

    path = build_family("codellama", tmp_path / "codellama")  # BOS in its post-processor
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["add_bos_token"] = True
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tokenizer = load_tokenizer(path)
    assert tokenizer("x = 1")["input_ids"].count(tokenizer.bos_token_id) == 1


def test_codellama_class_never_makes_a_prompt_layout_of_the_text(engines) -> None:
    """CodeLlama's tokenizer class (the Hub's tokenizer_class) appends ``<FILL_ME>`` to
    the vocabulary, one id past the model's rows (the model was refused), and turns it in
    any text it encodes into an infilling prompt, raising on two. The user's text stays
    text: only the engine's template places the sentinels."""
    engine = engines["codellama"]
    assert type(engine.tokenizer).__name__ == "CodeLlamaTokenizer"
    assert len(engine.tokenizer) <= engine.model.config.vocab_size
    fim = engine.fim
    sentinels = {fim.prefix, fim.suffix, fim.middle}
    ids, _ = engine.encode_prompt("a = '<FILL_ME>'\nb = '<FILL_ME>'\n", 64)
    assert not sentinels & set(ids)
    ids, *_ = laid_out(engine, PSM).encode_infill("a = '<FILL_ME>'\nb = ", "\nc = 3\n", 64)
    assert [i for i in ids if i in sentinels] == [fim.prefix, fim.suffix, fim.middle]
    assert "<FILL_ME>" in engine.tokenizer.decode(ids)
    assert engine.generate("x = '<FILL_ME>' + '<FILL_ME>'", GenerationConfig(max_new_tokens=2))


@pytest.mark.parametrize("name", ["codeparrot-small", "tiny_starcoder_py", "qwen2.5-coder"])
def test_no_bos_where_the_tokenizer_adds_none(engines, name) -> None:
    engine = engines[name]
    ids, _ = engine.encode_prompt("x = 1", 16)
    assert ids == engine.tokenizer("x = 1", add_special_tokens=False)["input_ids"]


def test_every_end_id_of_the_generation_config_ends(engines) -> None:
    engine = engines["qwen2.5-coder"]
    im_end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert engine.model.generation_config.eos_token_id == [engine.eos_token_id, im_end]
    assert im_end in engine.end_ids_for(GenerationConfig())


STOPPERS = {
    "codellama": "▁<EOT>",
    "deepseek-coder": "<｜fim▁begin｜>",  # not special in its tokenizer: a template token
    "qwen2.5-coder": "<|file_sep|>",
    "starcoder2": "<file_sep>",
    "santacoder": "<fim-pad>",
    "codegen": "<|endoftext|>",
    "phi-1": "<|endoftext|>",
}


@pytest.mark.parametrize("name", sorted(STOPPERS))
def test_a_sampled_special_token_ends_the_completion_and_is_never_text(
    tmp_path: Path, name: str
) -> None:
    """The model writes two ordinary tokens, then the special one, then more text: the
    completion holds the two tokens' text and nothing of the special token's (through the
    transformers forward: the lean decoder does not call the head module)."""
    loaded = Engine.load(build_family(name, tmp_path / name), lean_load=False)
    engine = Engine(loaded.model, loaded.tokenizer, lean_gpt2=False)
    tok = engine.tokenizer
    special = tok.convert_tokens_to_ids(STOPPERS[name])
    word = tok("x", add_special_tokens=False)["input_ids"][-1]
    bias_head(engine.model, {special: 1e4})
    suffix = SUF if engine.fim is not None else None
    config = GenerationConfig(max_new_tokens=8, temperature=0.0, heal=False)
    out = engine.generate(PRE, config, suffix=suffix)[0]
    assert (out.text, out.finish_reason, out.new_tokens) == ("", "eos", 0)
    # now it writes "x" first: the text stops before the special token
    bias_head(engine.model, {special: 1e4, word: 2e4})
    seen = []

    def forward_hook(module, args, output):  # after one "x", the special token
        seen.append(1)
        if len(seen) > 1:
            output[..., word] = -1e9
        return output

    engine.model.get_output_embeddings().register_forward_hook(forward_hook)
    out = engine.generate(PRE, config, suffix=suffix)[0]
    assert out.finish_reason == "eos" and out.new_tokens == 1
    assert out.text == tok.decode([word])
    assert STOPPERS[name] not in out.text and "<" not in out.text


def test_byte_fallback_streams_never_crash(engines) -> None:
    """300 random 24-token streams through CodeLlama's byte-fallback tokenizer: tokenizers'
    DecodeStream raises on many ("Invalid prefix", a byte after text that a later byte
    turns invalid); the engine goes on, with the text the whole decode has up to its first
    invalid byte (after which the stream may keep characters the whole decode replaces)."""
    from codeparrot.generation.detokenize import Candidate as _Candidate

    engine = engines["codellama"]
    rng = random.Random(0)
    special = set(engine.special_ids)
    ordinary = [i for i in range(len(engine.tokenizer)) if i not in special]
    newline = engine.tokenizer.convert_tokens_to_ids("<0x0A>")
    for _ in range(300):
        ids = [rng.choice(ordinary) for _ in range(24)]
        c = _Candidate(engine.detok.new_stream())
        for tok in ids:
            c.ids.append(tok)
            engine.detok.append(c, tok)
        # the text these ids write after other text: the decoder strips the leading space
        # of a whole text only
        whole = engine.tokenizer.decode([newline, *ids])[1:]
        assert c.text.startswith(whole.split("\ufffd")[0])
