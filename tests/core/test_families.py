"""The family registry (codeparrot.families): every table derived from it has every family,
families of one architecture agree on what the architecture decides, the names the records
give exist in transformers, and each test model (tests/families.py) is recognised as the
family it is built from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from codeparrot import families
from codeparrot.families import (
    FAMILIES,
    LLAMA_ATTENTION,
    QWEN_FIM,
    Family,
    FimTemplate,
    WeightLayout,
)

sys.path.insert(0, str(Path(__file__).parent.parent))
import families as test_models  # tests/families.py


def table_gaps(f: Family) -> list[str]:
    """The derived tables of the code that lack family ``f`` (or say otherwise than its
    record): empty for a family every table knows."""
    from codeparrot.fim import SPM_TRAINED, TEMPLATES
    from codeparrot.generation import lean
    from codeparrot.generation import llama as llama_decoder
    from codeparrot.models import bounds, checkpoint, lean_load
    from codeparrot.training import finetune_fim, lora

    gaps = []
    if lora.DEFAULT_TARGETS.get(f.model_type, ()) != f.lora_targets:
        gaps.append("training.lora.DEFAULT_TARGETS")
    if (f.model_type in lora.CONV1D) != bool(f.layout and f.layout.conv1d):
        gaps.append("training.lora.CONV1D")
    if (f.model_type in checkpoint.ALWAYS_SHIPPED) != f.always_shipped:
        gaps.append("models.checkpoint.ALWAYS_SHIPPED")
    if (f.model_type in bounds.LEARNED_POSITIONS) != f.learned_positions:
        gaps.append("models.bounds.LEARNED_POSITIONS")
    if f.fim is not None and f.fim not in TEMPLATES:
        gaps.append("fim.TEMPLATES")
    if f.fim is not None and f.fim_order == "spm" and f.fim.name not in SPM_TRAINED:
        gaps.append("fim.SPM_TRAINED")
    if f.fim is not None and finetune_fim.END_OF_MIDDLE.get(f.fim.name) != f.fim.end:
        gaps.append("training.finetune_fim.END_OF_MIDDLE")
    if f.decoder is None:
        return gaps
    decoder = lean.DECODERS.get(f.model_class)
    if decoder is None or f"{decoder.__module__}.{decoder.__name__}" != f.decoder:
        gaps.append("generation.lean.DECODERS")
    if f.model_type not in lean.COVERED:
        gaps.append("generation.lean.COVERED")
    if lean_load.LAYOUTS.get(f.model_type) != (f.model_class, f.layout):
        gaps.append("models.lean_load.LAYOUTS")
    llama_like = f.layout is not None and f.layout.stack == "model"
    if llama_like and f.model_class not in llama_decoder.ARCHITECTURES:
        gaps.append("generation.llama.ARCHITECTURES")
    return gaps


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_derived_table_has_the_family(family: Family) -> None:
    assert table_gaps(family) == []


def test_a_family_missing_from_the_tables_is_caught() -> None:
    """A record the tables were not derived from (as a family added beside the registry,
    not in it) is reported, table by table."""
    new = Family(
        "qwen3-coder", "Qwen3-Coder", "qwen3_moe", "Qwen3MoeForCausalLM",
        decoder="codeparrot.generation.qwen3.Qwen3Decoder",
        layout=WeightLayout("model", qk_norm=True),
        fim=FimTemplate("qwen3-coder", *QWEN_FIM.names[:3], end="<|fim_pad|>"), fim_order="spm",
        lora_targets=LLAMA_ATTENTION, always_shipped=True,
    )  # fmt: skip
    gaps = table_gaps(new)
    for table in (
        "fim.TEMPLATES",
        "fim.SPM_TRAINED",
        "training.finetune_fim.END_OF_MIDDLE",
        "training.lora.DEFAULT_TARGETS",
        "models.checkpoint.ALWAYS_SHIPPED",
        "generation.lean.DECODERS",
        "generation.lean.COVERED",
        "models.lean_load.LAYOUTS",
        "generation.llama.ARCHITECTURES",
    ):
        assert table in gaps


def test_families_of_one_architecture_agree() -> None:
    """What the architecture decides (class, decoder, layout, LoRA targets, positions) is
    the same in every family of a model type; the tokenizer's markers tell them apart."""
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)
    for model_type in {f.model_type for f in FAMILIES}:
        group = [f for f in FAMILIES if f.model_type == model_type]
        decided = {
            (f.model_class, f.decoder, f.layout, f.lora_targets, f.learned_positions,
             f.always_shipped)
            for f in group
        }  # fmt: skip
        assert len(decided) == 1, model_type
        assert sum(not f.markers for f in group) <= 1, f"{model_type}: two fallback families"


def test_a_bad_record_is_refused() -> None:
    with pytest.raises(ValueError, match="weight layout"):
        Family("x", "X", "x", "XForCausalLM", decoder="codeparrot.generation.gpt2.GPT2Decoder")
    with pytest.raises(ValueError, match="FIM order"):
        Family("x", "X", "x", "XForCausalLM", fim_order="middle-first")
    with pytest.raises(KeyError, match="known: codeparrot"):
        families.family("no-such-family")


def test_classes_and_lora_targets_exist_in_transformers() -> None:
    """Each record's class is what transformers builds for its model type, and has every
    module its LoRA targets name (a one-layer model on the meta device: no memory, also
    for the families without a test model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    sizes = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, n_embd=32, n_layer=1,
        n_head=4, n_positions=64, max_position_embeddings=64, rotary_dim=4, n_ctx=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    for model_type in dict.fromkeys(f.model_type for f in FAMILIES):
        f = next(f for f in FAMILIES if f.model_type == model_type)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **sizes))
        assert type(model).__name__ == f.model_class
        modules = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        assert set(f.lora_targets) <= modules, model_type


def test_each_test_model_is_built_from_its_record() -> None:
    """tests/families.py has one test model for each record that names one, built from that
    record, and none for a family the registry does not know; a family without one is
    marked untested in the capability table."""
    named = {f.test_model: f.name for f in FAMILIES if f.test_model is not None}
    assert {name: m.family for name, m in test_models.FAMILIES.items()} == named
    rows = {row.split("|")[1].strip(): row for row in families.capability_table().splitlines()}
    rows = {f.name: rows[f.title] for f in FAMILIES}
    for f in FAMILIES:
        assert ("untested" in rows[f.name]) is (f.test_model is None), f.name


@pytest.mark.parametrize("name", sorted(test_models.FAMILIES))
def test_a_test_model_is_recognised_as_its_family(name: str) -> None:
    """From its model type and its tokenizer alone, as a checkpoint is: the family, and
    the FIM template that family's record names (none where its tokenizer has none)."""
    from codeparrot.fim import detect_template, token_id

    model = test_models.FAMILIES[name]
    tokenizer = test_models.build_tokenizer(model)
    found = families.recognise(model.model_type, lambda t: token_id(tokenizer, t) is not None)
    assert found is not None and found.name == model.family
    prompter = detect_template(tokenizer)
    assert (prompter.template.name if prompter else None) == model.template


def test_recognition_falls_back_to_the_family_without_markers() -> None:
    assert families.recognise("llama", lambda t: False).name == "llama"
    assert families.recognise("llama", lambda t: t == "▁<PRE>").name == "codellama"
    assert families.recognise("gpt_bigcode", lambda t: t == "<fim-prefix>").name == "santacoder"
    assert families.recognise("no_such_type", lambda t: True) is None


def test_auto_order_is_the_records() -> None:
    """``--fim-order auto`` gives each family's order: SPM for the checkpoints trained here
    (they carry codeparrot_checkpoint.json), the template's for the Hub's."""
    from codeparrot.fim import AUTO, resolve_order

    for f in FAMILIES:
        if f.fim is not None:
            own = f.fim_order == families.SPM
            assert resolve_order(AUTO, f.fim, own_checkpoint=own) == f.fim_order, f.name


def test_loading_never_imports_decoding() -> None:
    """``codeparrot/models/`` (loading) imports nothing of ``codeparrot/generation/``
    (decoding), at the top of a module or inside a function; and the registry imports
    nothing of the project."""
    import ast

    core = Path(families.__file__).parent
    for path in [*sorted((core / "models").glob("*.py")), core / "families.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith("codeparrot.generation"), (path.name, name)
                if path.name == "families.py":
                    assert not name.startswith("codeparrot"), name


@pytest.mark.parametrize("name", sorted(test_models.FAMILIES))
def test_a_test_model_completes_as_its_record_says(tmp_path: Path, name: str) -> None:
    """What the capability table claims of a family holds for its tiny model: it loads and
    completes through the engine, on the lean decoder exactly where the record names one,
    and fills in the middle with the record's template where its tokenizer has one."""
    from codeparrot.generation import Engine, GenerationConfig
    from codeparrot.generation.lean import has_lean_decoder

    model = test_models.FAMILIES[name]
    engine = Engine.load(test_models.build_family(name, tmp_path / name), quantize="none")
    assert has_lean_decoder(engine.model) is (model.record.decoder is not None)
    config = GenerationConfig(temperature=0, max_new_tokens=4, stop_at_eos=False)
    (plain,) = engine.generate("def add(a, b):\n", config)
    assert plain.new_tokens == 4
    assert (engine.fim.template.name if engine.fim else None) == model.template
    if engine.fim is not None:  # the prompt in the template; no sentinel's text written
        pre, suf = "def add(a, b):\n    ", "\n    return c\n"
        ids, _ = engine.encode_infill(pre, suf, 4)  # the default order: auto
        assert {engine.fim.prefix, engine.fim.suffix, engine.fim.middle} <= set(ids)
        (middle,) = engine.generate(pre, config, suffix=suf)
        assert middle.finish_reason in ("eos", "length")
        assert not any(t in middle.text for t in engine.fim.template.names)
