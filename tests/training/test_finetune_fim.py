"""``finetune --fim-rate``: FIM examples in the base model's own template and order.

Tiny StarCoder-family and Qwen2.5-Coder-family models in their Hub layouts
(``tests/families.py``) fine-tune with FIM; the examples the training saw carry that
family's sentinels in the order the fine-tuned model is prompted in, and the export keeps
the base's FIM status. A base without FIM tokens is refused before any work. Every
example, FIM or left to right, starts with the ids the engine prompts the same family with:
BOS first where the tokenizer adds it (CodeLlama, DeepSeek-Coder), none for StarCoder's
layout (the checkpoints trained here).
"""

from __future__ import annotations

import json

import pytest

from codeparrot.errors import ConfigError
from codeparrot.fim import leading_special_ids
from codeparrot.training import finetune_fim
from codeparrot.training.finetune import finetune
from tests.families import build_family
from tests.training.test_finetune import make_repository, tiny_finetune

# family: (its prefix, suffix, middle tokens, the order its fine-tuned model is prompted in)
SENTINELS = {
    "tiny_starcoder_py": (("<fim_prefix>", "<fim_suffix>", "<fim_middle>"), "spm"),
    "qwen2.5-coder": (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"), "psm"),
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("repo"))


@pytest.fixture
def seen_examples(monkeypatch):
    """Every FIM-transformed document the fine-tune encoded, as token ids."""
    seen: list[list[int]] = []
    encode = finetune_fim.FamilyFimTransform._encode

    def spy(self, texts, plans):
        out = encode(self, texts, plans)
        seen.extend(ids for ids, plan in zip(out, plans, strict=True) if plan)
        return out

    monkeypatch.setattr(finetune_fim.FamilyFimTransform, "_encode", spy)
    return seen


def assert_laid_out(example: list[int], ids: tuple[int, int, int], order: str) -> None:
    prefix, suffix, middle = ids
    assert example[0] == prefix and example.count(middle) == 1, example
    if order == "spm":
        assert example[1] == suffix  # <PRE><SUF> suffix <MID> prefix middle
    else:
        assert prefix not in example[1:] and suffix in example[1:]
        assert example.index(suffix) < example.index(middle)  # <PRE> prefix <SUF> suffix <MID>


@pytest.mark.parametrize("peft", [None, "lora"])
@pytest.mark.parametrize("name", list(SENTINELS))
def test_fim_examples_use_the_family_template_and_order(
    repository, tmp_path, seen_examples, name, peft
):
    from transformers import AutoTokenizer

    from codeparrot.generation import Engine

    base = build_family(name, tmp_path / name)
    tokenizer = AutoTokenizer.from_pretrained(base)
    names, order = SENTINELS[name]
    ids = tuple(tokenizer.convert_tokens_to_ids(n) for n in names)
    config = tiny_finetune(repository, base, tmp_path / "run", fim_rate=1.0, max_steps=2, peft=peft)
    finetune(config)
    assert seen_examples, "no FIM example was made"
    for example in seen_examples:
        assert_laid_out(example, ids, order)
    record = json.loads((tmp_path / "run" / "finetune.json").read_text())["fim"]
    template = {"tiny_starcoder_py": "starcoder", "qwen2.5-coder": "qwen"}[name]
    assert record == {"rate": 1.0, "template": template, "order": order,
                      "fim_trained": True}  # fmt: skip
    meta = json.loads((config.model_dir / "codeparrot_checkpoint.json").read_text())
    assert meta["fim_trained"] is True
    engine = Engine.load(config.model_dir, device="cpu")
    assert engine.infill_template() is not None  # the fine-tuned model still infills


def test_codellama_examples_end_the_middle_with_its_end_token(tmp_path, repository):
    from transformers import AutoTokenizer

    base = build_family("codellama", tmp_path / "codellama")
    tokenizer = AutoTokenizer.from_pretrained(base)
    transform = finetune_fim.family_transform(tokenizer, 1.0, "", 0, "codellama")
    assert transform is not None and transform.template == "codellama"
    [example] = transform.encode_documents(["def f(x):\n    return x + 1\n"], [(0,)])
    ids = tokenizer.convert_tokens_to_ids(["<s>", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"])
    bos, pre, suf, mid, eot = ids
    assert example[:2] == [bos, pre] and example[-1] == eot
    assert example.index(suf) < example.index(mid) < len(example) - 1


def test_default_rate_follows_the_base(tmp_path, repository):
    """A base that infills fine-tunes with the quickstart's rate; one that does not, with 0."""
    from codeparrot.options import DEFAULT_FIM_RATE

    runs = {}
    for name in ("qwen2.5-coder", "codegen"):
        base = build_family(name, tmp_path / name)
        config = tiny_finetune(repository, base, tmp_path / f"run-{name}", max_steps=1)
        finetune(config)
        runs[name] = json.loads((config.output / "finetune.json").read_text())["fim"]
    assert runs["qwen2.5-coder"]["rate"] == DEFAULT_FIM_RATE
    assert runs["qwen2.5-coder"]["fim_trained"] is True
    assert runs["codegen"] == {"rate": 0.0, "fim_trained": False}


def test_a_base_without_fim_tokens_is_refused_before_any_work(tmp_path, repository):
    base = build_family("codegen", tmp_path / "codegen")
    config = tiny_finetune(repository, base, tmp_path / "run", fim_rate=0.5)
    with pytest.raises(ConfigError, match=r"--fim-rate 0\.5.*--fim-tokens") as info:
        finetune(config)
    assert str(base) in str(info.value)
    assert not config.corpus_dir.exists()


def test_fim_tokens_name_an_unknown_template(tmp_path, repository):
    """--fim-tokens makes a model of no known family trainable with FIM."""
    from transformers import AutoTokenizer

    base = build_family("qwen2.5-coder", tmp_path / "qwen")
    tokenizer = AutoTokenizer.from_pretrained(base)
    spec = "<|box_start|>,<|box_end|>,<|quad_start|>,<|quad_end|>"
    transform = finetune_fim.family_transform(tokenizer, 1.0, spec, 0, "qwen")
    pre, suf, mid, end = tokenizer.convert_tokens_to_ids(spec.split(","))
    [example] = transform.encode_documents(["def f(x):\n    return x + 1\n"], [(0,)])
    assert transform.template == "custom"
    assert example[0] == pre and example[-1] == end
    assert example.index(suf) < example.index(mid)


# -- every example starts as the engine's prompt does ---------------------------------

FIM_FAMILIES = ("tiny_starcoder_py", "santacoder", "starcoder2", "qwen2.5-coder", "codellama",
                "deepseek-coder")  # fmt: skip
# a cut whose middle and suffix start with spaces: CodeLlama's bare suffix must show
PREFIX, MIDDLE, SUFFIX = "def add(a, b):\n", "    total = a + b\n", "    return total\n"


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: build_family(name, root / name) for name in (*FIM_FAMILIES, "codegen")}


@pytest.mark.parametrize("order", ["psm", "spm"])
@pytest.mark.parametrize("name", FIM_FAMILIES)
def test_a_fim_example_starts_with_the_engines_prompt(family_dirs, name, order):
    """BOS where the tokenizer adds it (CodeLlama, DeepSeek-Coder), the template's
    sentinels, the prefix and the (bare, for CodeLlama) suffix: the ids the engine prompts
    with for the same prefix, suffix and order, then the middle."""
    import dataclasses

    from codeparrot.generation import Engine
    from codeparrot.generation.config import FimSettings
    from tests.families import FAMILIES

    engine = Engine.load(family_dirs[name], device="cpu", fim=FimSettings(fim_order=order))
    tokenizer = engine.tokenizer
    transform = finetune_fim.family_transform(tokenizer, 1.0, "", 0, name)
    transform = dataclasses.replace(transform, spm_rate=float(order == "spm"))
    [example] = transform._encode(["unused"], [(order, [PREFIX, MIDDLE, SUFFIX])])
    prompt, truncated = engine.encode_infill(PREFIX, SUFFIX, 8)
    assert not truncated
    assert example[: len(prompt)] == prompt, (
        tokenizer.convert_ids_to_tokens(example[: len(prompt)]),
        tokenizer.convert_ids_to_tokens(prompt),
    )
    bos = FAMILIES[name].bos
    first = tokenizer.convert_ids_to_tokens(example[:2])
    if bos is None:  # StarCoder's layout, as the checkpoints trained here: no BOS
        assert first[0] == engine.fim.template.prefix
    else:
        assert first == [bos, engine.fim.template.prefix]
    middle = tokenizer(MIDDLE, add_special_tokens=False)["input_ids"]
    assert example[len(prompt) : len(prompt) + len(middle)] == middle


@pytest.mark.parametrize("name", [*FIM_FAMILIES, "codegen"])
def test_a_left_to_right_document_starts_with_the_engines_prompt(family_dirs, name):
    """A document left as it is starts with BOS exactly where the engine's prompt does,
    at any FIM rate (at rate 0 a family without BOS keeps its documents untouched)."""
    from codeparrot.generation import Engine

    engine = Engine.load(family_dirs[name], device="cpu")
    text = PREFIX + MIDDLE + SUFFIX
    prompt, _ = engine.encode_prompt(text, 8)
    for rate in (0.0, 1.0) if engine.fim is not None else (0.0,):
        transform = finetune_fim.family_transform(engine.tokenizer, rate, "", 0, name)
        if transform is None:
            assert rate == 0 and not engine.bos_ids
            continue
        [document] = transform._encode([text], [None])
        assert document == prompt


@pytest.mark.parametrize("peft", [None, "lora"])
def test_codellama_trains_and_is_measured_on_documents_after_bos(
    repository, family_dirs, tmp_path, monkeypatch, peft
):
    """Full and LoRA fine-tuning of a CodeLlama-shaped base: every document it trains on
    (FIM or left to right) and the token stream its loss is measured on start with ``<s>``."""
    from codeparrot.training import finetune as finetune_module

    bos = 1  # "<s>" in the CodeLlama family's vocabulary (tests/families.py)
    seen: list[list[int]] = []
    encode = finetune_fim.FamilyFimTransform._encode

    def spy(self, texts, plans):
        out = encode(self, texts, plans)
        seen.extend(out)
        return out

    measured: list[list[int]] = []
    split_tokens = finetune_module.split_tokens

    def spy_split(*args, **kwargs):
        ids = split_tokens(*args, **kwargs)
        measured.append(ids)
        return ids

    monkeypatch.setattr(finetune_fim.FamilyFimTransform, "_encode", spy)
    monkeypatch.setattr(finetune_module, "split_tokens", spy_split)
    config = tiny_finetune(
        repository, family_dirs["codellama"], tmp_path / "run", fim_rate=0.5, max_steps=1,
        peft=peft,
    )  # fmt: skip
    finetune(config)
    assert len(seen) >= 5 and all(ids[0] == bos for ids in seen)
    assert {ids[1] == 3 for ids in seen} == {True, False}  # "▁<PRE>": some FIM, some not
    eos = 2  # "</s>"
    for ids in measured:
        assert ids[0] == bos
        assert all(ids[i + 1] == bos for i, t in enumerate(ids[:-1]) if t == eos)


def test_our_own_layout_has_no_bos(tiny_checkpoint, tmp_path):
    """A checkpoint trained here (GPT-2, no post-processor BOS) keeps its documents and
    examples as they were: no transform at rate 0, nothing before the first sentinel."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    assert leading_special_ids(tokenizer) == ()
    assert finetune_fim.family_transform(tokenizer, 0.0, "", 0, "tiny") is None
