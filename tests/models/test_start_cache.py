"""What a lean load keeps of transformers for the next start (codeparrot.models.start_cache):
the next load of each family answers exactly as transformers' objects did, without
importing transformers; anything it cannot keep exactly goes through transformers."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.generation import Engine, GenerationConfig
from codeparrot.models import start_cache
from codeparrot.models.start_cache import KeptConfig, KeptTokenizer, StartCache

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family

LEAN_FAMILIES = (
    "codeparrot-small", "tiny_starcoder_py", "santacoder", "starcoder2", "qwen2.5-coder",
    "deepseek-coder",
)  # fmt: skip
PROMPT = "import os\n\n\ndef join(parts, sep):\n    out = []\n    for part in parts:\n"
SUFFIX = "\n    return sep.join(out)\n"


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("start-cache-families")
    names = (*LEAN_FAMILIES, "codellama")
    return {name: build_family(name, root / name) for name in names}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "start"
    monkeypatch.setenv(start_cache.ENV, str(folder))
    return folder


def _answers(engine: Engine) -> dict:
    """What the engine derives from its tokenizer and configuration, and its greedy text
    left to right and (for a FIM family) with a suffix."""
    greedy = GenerationConfig(max_new_tokens=12, temperature=0.0, stop_at_eos=False)
    out = {
        "bos": engine.bos_ids,
        "ends": engine.end_ids,
        "special": engine.special_ids,
        "fim": engine.fim,
        "anchor": engine.detok.anchor,
        "vocab": engine.vocab_size,
        "context": engine.context_length,
        "prompt": engine.encode_prompt(PROMPT * 3, 16),
        "text": engine.generate(PROMPT, greedy)[0].text,
    }
    if engine.fim is not None:
        out["infill"] = engine.generate(PROMPT, greedy, suffix=SUFFIX)[0].text
    return out


@pytest.mark.parametrize("family", LEAN_FAMILIES)
def test_next_load_answers_as_transformers(family: str, family_dirs, cache: Path) -> None:
    first = Engine.load(family_dirs[family], quantize="none")
    assert not isinstance(first.tokenizer, KeptTokenizer)
    assert len(list(cache.glob("*.json"))) == 1
    second = Engine.load(family_dirs[family], quantize="none")
    assert isinstance(second.tokenizer, KeptTokenizer)
    assert isinstance(second.model.config, KeptConfig)
    assert _answers(second) == _answers(first)
    assert second.tokenizer._kept_real is None  # nothing asked for the real one
    # sampled too: same seed, same tokens
    sampled = GenerationConfig(max_new_tokens=10, temperature=0.8, seed=3, n=2)
    assert [c.text for c in second.generate(PROMPT, sampled)] == [
        c.text for c in first.generate(PROMPT, sampled)
    ]


def test_a_tokenizer_that_cleans_up_spaces_is_not_kept(tmp_path: Path, cache: Path, caplog) -> None:
    """A decode that cleans up spaces (forced on for a BPE) is not the backend's: every
    start loads it through transformers, and one log line says why."""
    path = build_family("codellama", tmp_path / "cl")
    config_file = path / "tokenizer_config.json"
    data = json.loads(config_file.read_text())
    data["tokenizer_class"] = "TokenizersBackend"  # CodeLlama's own class is not kept anyway
    data["clean_up_tokenization_spaces"] = True
    data["clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"] = True
    config_file.write_text(json.dumps(data))
    with caplog.at_level(logging.INFO, logger="codeparrot.models.lean_load"):
        Engine.load(path, quantize="none")
    assert "loaded through transformers at each start (its decode cleans up spaces)" in caplog.text
    assert not list(cache.glob("*.json"))
    again = Engine.load(path, quantize="none")
    assert not isinstance(again.tokenizer, KeptTokenizer)
    assert (
        again.tokenizer.decode(again.tokenizer("a , b", add_special_tokens=False)["input_ids"])
        == "a, b"
    )


def test_a_tokenizer_class_with_its_own_encoding_is_not_kept(family_dirs) -> None:
    """CodeLlama's own class lays infilling prompts out in its _encode_plus."""
    from transformers import CodeLlamaTokenizer

    real = CodeLlamaTokenizer.from_pretrained(family_dirs["codellama"])
    record, why = start_cache.tokenizer_record(real, family_dirs["codellama"])
    assert record is None and why == "CodeLlamaTokenizer computes _encode_plus itself"


def test_a_second_start_never_imports_transformers(family_dirs, cache: Path) -> None:
    """The point of keeping: a new process loads and completes without transformers."""
    # the text on the model's own weights (int8 decisions depend on timing probes); then
    # the language server's default, int8, which must not import transformers either
    script = (
        "import sys\n"
        "from codeparrot.generation import Engine, GenerationConfig\n"
        f"path = {str(family_dirs['qwen2.5-coder'])!r}\n"
        "greedy = GenerationConfig(max_new_tokens=8, temperature=0.0)\n"
        f"c = Engine.load(path, quantize='none').generate({PROMPT!r}, greedy, suffix={SUFFIX!r})[0]\n"
        f"Engine.load(path, quantize='int8').generate({PROMPT!r}, greedy, suffix={SUFFIX!r})\n"
        "print(repr(c.text)); print('transformers' in sys.modules)\n"
    )
    env = {**os.environ, start_cache.ENV: str(cache)}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    (text1, imported1), (text2, imported2) = (r.stdout.splitlines()[-2:] for r in runs)
    assert (imported1, imported2) == ("True", "False")
    assert text2 == text1


def test_an_edited_tokenizer_file_is_loaded_again(tmp_path: Path, cache: Path) -> None:
    path = build_family("qwen2.5-coder", tmp_path / "qwen")
    Engine.load(path, quantize="none")
    config_file = path / "tokenizer_config.json"
    data = json.loads(config_file.read_text())
    data["eos_token"] = "<|im_end|>"
    config_file.write_text(json.dumps(data))
    engine = Engine.load(path, quantize="none")
    assert not isinstance(engine.tokenizer, KeptTokenizer)  # a new identity: transformers
    assert engine.tokenizer.eos_token == "<|im_end|>"
    again = Engine.load(path, quantize="none")
    assert isinstance(again.tokenizer, KeptTokenizer)
    assert (
        again.eos_token_id
        == engine.eos_token_id
        == again.tokenizer.convert_tokens_to_ids("<|im_end|>")
    )


def test_a_broken_file_is_removed_and_the_load_goes_on(family_dirs, cache: Path, caplog) -> None:
    path = family_dirs["tiny_starcoder_py"]
    Engine.load(path, quantize="none")
    (kept,) = cache.glob("*.json")
    kept.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="codeparrot.models.start_cache"):
        engine = Engine.load(path, quantize="none")
    assert "cannot be used" in caplog.text
    assert not isinstance(engine.tokenizer, KeptTokenizer)
    assert json.loads(kept.read_text())["tokenizer"]["backend"]  # written again, whole


def test_off_keeps_nothing(family_dirs, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(start_cache.ENV, "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert start_cache.cache_folder() is None
    Engine.load(family_dirs["tiny_starcoder_py"], quantize="none")
    Engine.load(family_dirs["tiny_starcoder_py"], quantize="none")
    assert not (tmp_path / "xdg").exists()


def test_the_kept_objects_hand_other_questions_to_transformers(family_dirs, cache: Path) -> None:
    from transformers import AutoConfig

    from codeparrot.models.checkpoint import load_tokenizer

    path = family_dirs["qwen2.5-coder"]
    Engine.load(path, quantize="none")
    engine = Engine.load(path, quantize="none")
    tok, config = engine.tokenizer, engine.model.config
    with pytest.raises(AttributeError):
        tok.no_such_method  # noqa: B018 (not the real one's either: nothing is loaded)
    assert tok._kept_real is None
    assert getattr(tok, "token_to_id", None) is None  # fim.token_id's probe stays cheap
    assert tok.get_vocab() == load_tokenizer(path).get_vocab()  # the real one answers
    assert config.hidden_size == AutoConfig.from_pretrained(path).hidden_size
    assert config.to_dict()["model_type"] == "qwen2"


def test_the_probes_see_a_kept_tokenizer_that_differs(family_dirs, cache: Path) -> None:
    """A kept tokenizer is only written where it matches: the probes catch a backend that
    encodes otherwise (here: without the BOS the real one's post-processor adds)."""
    from tokenizers import Tokenizer

    from codeparrot.models.checkpoint import load_tokenizer

    path = family_dirs["deepseek-coder"]
    real = load_tokenizer(path)
    record, why = start_cache.tokenizer_record(real, path)
    assert why == "" and record is not None
    assert start_cache.probe_difference(KeptTokenizer(record, path), real) == ""
    backend = Tokenizer.from_str(record["backend"])
    backend.post_processor = None
    record["backend"] = backend.to_str()
    assert "differs" in start_cache.probe_difference(KeptTokenizer(record, path), real)


def test_files_are_named_by_the_checkpoint_files(family_dirs, cache: Path) -> None:
    path = family_dirs["starcoder2"]
    a = StartCache.for_checkpoint(path)
    assert a is not None and a.file == StartCache.for_checkpoint(path).file
    (path / "notes.txt").write_text("a new file")
    assert StartCache.for_checkpoint(path).file != a.file
    (path / "notes.txt").unlink()
    assert StartCache.for_checkpoint(path).file == a.file
    os.utime(path / "model.safetensors")  # weights are not part of the name
    assert StartCache.for_checkpoint(path).file == a.file
    assert StartCache.for_checkpoint(path / "missing") is None


def test_the_model_types_known_without_transformers_are_those_it_ships() -> None:
    """refuse_unknown_model_type skips the import for the lean load's model types only,
    and each of them is one transformers ships."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from codeparrot.models.checkpoint import ALWAYS_SHIPPED
    from codeparrot.models.lean_load import ARCHITECTURES

    assert set(ARCHITECTURES) <= ALWAYS_SHIPPED
    assert all(t in CONFIG_MAPPING for t in ALWAYS_SHIPPED)


def test_a_hub_id_keeps_its_snapshot(family_dirs, cache: Path, tmp_path: Path, monkeypatch) -> None:
    """A Hub id's snapshot (files linked to the cache's blobs, as huggingface_hub lays
    them out) is kept as a directory is, offline."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--someorg--tiny-starcoder"
    snapshot, blobs = repo / "snapshots" / sha, repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, source in enumerate(sorted(family_dirs["tiny_starcoder_py"].iterdir())):
        (blobs / f"blob{i}").write_bytes(source.read_bytes())
        (snapshot / source.name).symlink_to(f"../../blobs/blob{i}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = Engine.load("someorg/tiny-starcoder", quantize="none")
    second = Engine.load("someorg/tiny-starcoder", quantize="none")
    assert isinstance(second.tokenizer, KeptTokenizer)
    assert _answers(second) == _answers(first)
