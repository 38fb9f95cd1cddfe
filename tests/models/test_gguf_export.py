"""``codeparrot export --gguf``: GPT-2 and Qwen3 checkpoints of our own tokenizer read back
from the GGUF file with the same tensors and vocabulary; what GGUF cannot express (another
architecture, a pre-tokenizer llama.cpp does not know) is refused before any file exists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("gguf")  # the `gguf` extra, in `dev` through `all`

from codeparrot.models.gguf_export import ExportConfig, ExportError, export_gguf
from codeparrot.models.presets import InitConfig, init_checkpoint
from codeparrot.tokenizer import TokenizerConfig, train_tokenizer
from tests.core.test_tokenizer import stdlib_texts, write_corpus


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Path]:
    """Our tokenizer (FIM sentinels) trained with GPT-2's split and with the code split."""
    texts = stdlib_texts(30)
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"), texts[:25], texts[25:])
    out = {}
    for split in ("gpt2", "code"):
        path = tmp_path_factory.mktemp("tok") / split
        config = TokenizerConfig(data=corpus, output=path, vocab_size=600, pre_tokenizer=split)
        train_tokenizer(config.replace(progress=False))
        out[split] = path
    return out


def checkpoint(tmp_path: Path, tokenizer: Path, preset: str) -> Path:
    out = tmp_path / preset
    init_checkpoint(InitConfig(tokenizer=tokenizer, output=out, preset=preset, n_positions=64))
    return out


def state(path: Path) -> dict:
    from safetensors.torch import load_file

    return {
        k: v.float() for f in sorted(path.glob("*.safetensors")) for k, v in load_file(f).items()
    }


@pytest.mark.parametrize(("preset", "arch"), [("tiny", "gpt2"), ("tiny-qwen", "qwen3")])
def test_a_checkpoint_reads_back_from_gguf(tokenizers, tmp_path, preset, arch) -> None:
    import gguf
    import numpy as np

    ckpt = checkpoint(tmp_path, tokenizers["gpt2"], preset)
    result = export_gguf(
        ExportConfig(checkpoint=ckpt, gguf=tmp_path / "out", types=("f32", "q8_0"))
    )
    assert [p.name for p in result.files] == ["model-f32.gguf", "model-q8_0.gguf"]
    assert result.pre_tokenizer == "gpt-2" and result.architecture == arch

    reader = gguf.GGUFReader(str(tmp_path / "out" / "model-f32.gguf"))
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == arch
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    weights = state(ckpt)
    embed = "transformer.wte.weight" if arch == "gpt2" else "model.embed_tokens.weight"
    assert np.array_equal(tensors["token_embd.weight"], weights[embed].numpy())
    assert "output.weight" not in tensors  # tied: llama.cpp reuses the embedding
    if arch == "gpt2":  # Conv1D (in, out) is written (out, in)
        qkv = weights["transformer.h.0.attn.c_attn.weight"].t().numpy()
        assert np.array_equal(tensors["blk.0.attn_qkv.weight"], qkv)
    else:
        q = weights["model.layers.0.self_attn.q_proj.weight"].numpy()
        assert np.array_equal(tensors["blk.0.attn_q.weight"], q)
        assert "blk.0.attn_k_norm.weight" in tensors
    assert len(tensors) == result.tensors

    vocab = json.loads((ckpt / "tokenizer.json").read_text())["model"]["vocab"]
    tokens = reader.fields["tokenizer.ggml.tokens"]
    listed = [bytes(tokens.parts[i]).decode() for i in tokens.data]
    assert all(listed[i] == t for t, i in vocab.items())
    # llama.cpp's /infill lays its prompt out from these ids: each the tokenizer's own
    ids = json.loads((ckpt / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in ids}
    for name, key in (("<fim_prefix>", "pre"), ("<fim_suffix>", "suf"), ("<fim_middle>", "mid"),
                      ("<fim_pad>", "pad")):  # fmt: skip
        field = reader.fields[f"tokenizer.ggml.fim_{key}_token_id"]
        assert int(field.parts[field.data[0]][0]) == ids[name], name

    q8 = gguf.GGUFReader(str(tmp_path / "out" / "model-q8_0.gguf"))
    kinds = {t.name: t.tensor_type for t in q8.tensors}
    assert kinds["token_embd.weight"] == gguf.GGMLQuantizationType.Q8_0
    modelfile = (tmp_path / "out" / "Modelfile").read_text()
    assert "FROM ./model-q8_0.gguf" in modelfile
    # Ollama's suffix prompt in SPM, the order our checkpoints complete best in
    spm = "<fim_prefix><fim_suffix>{{ .Suffix }}<fim_middle>{{ .Prompt }}"
    assert f"{{{{- if .Suffix }}}}{spm}{{{{- else }}}}{{{{ .Prompt }}}}{{{{- end }}}}" in modelfile
    assert 'PARAMETER stop "<|endoftext|>"' in modelfile


def test_a_pre_tokenizer_llama_cpp_does_not_know_is_refused(tokenizers, tmp_path) -> None:
    ckpt = checkpoint(tmp_path, tokenizers["code"], "tiny")
    out = tmp_path / "out"
    with pytest.raises(ExportError, match="--pre-tokenizer gpt2"):
        export_gguf(ExportConfig(checkpoint=ckpt, gguf=out))
    assert not out.exists() or not any(out.iterdir())


def test_an_architecture_gguf_cannot_express_is_refused_naming_it(tokenizers, tmp_path) -> None:
    ckpt = checkpoint(tmp_path, tokenizers["gpt2"], "tiny")
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "activation_function": "relu"}))
    with pytest.raises(ExportError, match="activation_function='relu'"):
        export_gguf(ExportConfig(checkpoint=other, gguf=tmp_path / "out"))
    from codeparrot.models.gguf_export import gguf_architecture

    with pytest.raises(ExportError, match="architecture 'gpt_bigcode'"):
        gguf_architecture({"model_type": "gpt_bigcode"})


def test_existing_files_are_kept_unless_forced(tokenizers, tmp_path) -> None:
    ckpt = checkpoint(tmp_path, tokenizers["gpt2"], "tiny")
    out = tmp_path / "out"
    export_gguf(ExportConfig(checkpoint=ckpt, gguf=out, types=("f16",)))
    with pytest.raises(ExportError, match="exist"):
        export_gguf(ExportConfig(checkpoint=ckpt, gguf=out, types=("f16",)))
    export_gguf(ExportConfig(checkpoint=ckpt, gguf=out, types=("f16",), force=True))
    assert sorted(p.name for p in out.iterdir()) == ["Modelfile", "model-f16.gguf"]
