"""``finetune --fim-rate``: FIM examples in the base model's own template and order.

Tiny StarCoder-family and Qwen2.5-Coder-family models in their Hub layouts
(``tests/families.py``) fine-tune with FIM; the examples the training saw carry that
family's sentinels in the order the fine-tuned model is prompted in, and the export keeps
the base's FIM status. A base without FIM tokens is refused before any work.
"""

from __future__ import annotations

import json

import pytest

from codeparrot.errors import ConfigError
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
    assert record == {"rate": 1.0, "template": record["template"], "order": order,
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
    pre, suf, mid, eot = tokenizer.convert_tokens_to_ids(["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"])
    assert example[0] == pre and example[-1] == eot
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
