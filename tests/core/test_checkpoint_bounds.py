"""A checkpoint's small files cannot make the loader allocate without end or read weights
from outside the checkpoint: sizes in config.json, the weight index, torch archives."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError
from codeparrot.models.bounds import check_config_sizes, check_torch_archive
from codeparrot.models.checkpoint import load_checkpoint, validate_checkpoint


def edit_config(directory: Path, **changes) -> None:
    file = directory / "config.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | changes), encoding="utf-8")


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory, tiny_checkpoint) -> Path:
    """A 1-layer, 32-wide Qwen3 with the tiny checkpoint's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("qwen3") / "checkpoint"
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def copy(checkpoint: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / name))


# -- sizes in config.json --------------------------------------------------------------


def test_qwen3_with_two_to_the_31_positions_is_refused_before_loading(tiny_qwen3, tmp_path):
    """It passed every check, then tried to allocate 17 GB for its position table."""
    checkpoint = copy(tiny_qwen3, tmp_path)
    validate_checkpoint(checkpoint)  # as built, it loads
    edit_config(checkpoint, max_position_embeddings=2**31)
    for load in (validate_checkpoint, load_checkpoint):
        with pytest.raises(CheckpointError) as info:
            load(checkpoint)
        assert "max_position_embeddings is 2,147,483,648" in str(info.value)
        assert "config.json" in str(info.value)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"n_positions": 2**31}, "n_positions"),
        ({"n_ctx": 2**40}, "n_ctx"),  # GPT-2 reads n_positions: every name is checked
        ({"vocab_size": 2**30}, "vocab_size"),
        ({"n_embd": 2**20}, "n_embd"),
        ({"n_layer": 10**6}, "n_layer"),
        ({"n_inner": 2**40}, "n_inner"),
        ({"n_layer": "2"}, "n_layer"),
        ({"vocab_size": True}, "vocab_size"),
        ({"n_positions": -1}, "n_positions"),
    ],
)
def test_a_size_beyond_its_limit_or_not_an_integer_is_refused(
    tiny_checkpoint, tmp_path, changes, named
):
    checkpoint = copy(tiny_checkpoint, tmp_path)
    edit_config(checkpoint, **changes)
    with pytest.raises(CheckpointError) as info:
        validate_checkpoint(checkpoint)
    assert f"{named} is" in str(info.value)


def test_sizes_within_limits_but_beyond_memory_are_refused(tmp_path):
    """Each size allowed, together 4 TiB of weights: more than any machine it runs on."""
    config = {"model_type": "gpt2", "n_embd": 16384, "n_layer": 1024, "n_head": 128}
    with pytest.raises(CheckpointError) as info:
        check_config_sizes(tmp_path / "config.json", config)
    assert "GiB of memory" in str(info.value) and "width 16,384" in str(info.value)
    small = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 256}
    assert check_config_sizes(tmp_path / "config.json", small)["width"] == 64
    with pytest.raises(CheckpointError):  # the same small model against a 1 MiB budget
        check_config_sizes(tmp_path / "config.json", small | {"vocab_size": 50257}, 2**20)


# -- the weight index ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_checkpoint) -> Path:
    """The tiny checkpoint with its weights in shards named by model.safetensors.index.json."""
    from transformers import AutoModelForCausalLM

    out = Path(shutil.copytree(tiny_checkpoint, tmp_path_factory.mktemp("sharded") / "c"))
    (out / "model.safetensors").unlink()
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    model.save_pretrained(out, max_shard_size="100KB")
    assert (out / "model.safetensors.index.json").is_file()
    return out


def point_shard_at(checkpoint: Path, target: str) -> str:
    """Rename one shard in the index to ``target``; returns the shard's file name."""
    index_file = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    index["weight_map"] = {k: (target if v == shard else v) for k, v in index["weight_map"].items()}
    index_file.write_text(json.dumps(index), encoding="utf-8")
    return shard


def test_sharded_checkpoint_loads(sharded):
    model, _tokenizer, _meta = load_checkpoint(sharded)
    assert model.config.n_layer == 2


@pytest.mark.parametrize("where", ["absolute", "parent", "nested parent"])
def test_index_naming_a_file_outside_the_checkpoint_is_refused(sharded, tmp_path, where):
    """Such an index loaded, and generated with, weights from anywhere on the machine."""
    checkpoint = copy(sharded, tmp_path, "checkpoint")
    outside = tmp_path / "elsewhere.safetensors"
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    shard_bytes = (checkpoint / shard).read_bytes()
    outside.write_bytes(shard_bytes)  # a real shard: the load would succeed
    target = {
        "absolute": str(outside),
        "parent": "../elsewhere.safetensors",
        "nested parent": "sub/../../elsewhere.safetensors",
    }[where]
    point_shard_at(checkpoint, target)
    for load in (validate_checkpoint, load_checkpoint):
        with pytest.raises(CheckpointError) as info:
            load(checkpoint)
        message = str(info.value)
        assert "model.safetensors.index.json" in message and target in message
        assert "not inside the checkpoint" in message


def test_index_naming_a_missing_shard_is_refused(sharded, tmp_path):
    checkpoint = copy(sharded, tmp_path)
    point_shard_at(checkpoint, "model-99999-of-99999.safetensors")
    with pytest.raises(CheckpointError, match=r"model-99999-of-99999\.safetensors.*missing"):
        validate_checkpoint(checkpoint)


# -- torch archives (pytorch_model.bin) ------------------------------------------------


def recompressed(source: Path, target: Path, method: int = zipfile.ZIP_DEFLATED) -> None:
    """``source``'s records, each written again with ``method``."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", method) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))


@pytest.fixture(scope="module")
def bin_checkpoint(tmp_path_factory, tiny_checkpoint) -> Path:
    """The tiny checkpoint with its weights as pytorch_model.bin (torch.save)."""
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(shutil.copytree(tiny_checkpoint, tmp_path_factory.mktemp("bin") / "c"))
    (out / "model.safetensors").unlink()
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    torch.save(model.state_dict(), out / "pytorch_model.bin")
    return out


def test_torch_weights_load_and_a_compressed_record_is_refused(bin_checkpoint, tmp_path):
    model, _tokenizer, _meta = load_checkpoint(bin_checkpoint)
    assert model.config.n_layer == 2
    checkpoint = copy(bin_checkpoint, tmp_path)
    recompressed(bin_checkpoint / "pytorch_model.bin", checkpoint / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: record .* is compressed"):
        validate_checkpoint(checkpoint)


def test_archive_whose_records_claim_more_than_the_file_is_refused(tmp_path):
    archive = tmp_path / "weights.bin"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        for i in range(4):
            z.writestr(f"w/data/{i}", b"x" * 1000)
    check_torch_archive(archive, "test")  # as written: within the file
    data = bytearray(archive.read_bytes())
    # the central directory's sizes of the first record, compressed and not: 1000 -> 10**8
    at = data.rfind(b"PK\x01\x02", 0, data.rfind(b"w/data/1"))
    data[at + 20 : at + 28] = (10**8).to_bytes(4, "little") * 2
    archive.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="more than the file"):
        check_torch_archive(archive, "test")
    (tmp_path / "legacy.bin").write_bytes(b"\x80\x02" + b"\x00" * 100)  # not a zip
    with pytest.raises(CheckpointError, match=r"not a torch\.save archive"):
        check_torch_archive(tmp_path / "legacy.bin", "test")


# -- weight dtypes -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "bool", "int32"])
def test_a_weight_that_is_no_float_is_refused_naming_the_tensor(tiny_checkpoint, tmp_path, dtype):
    """An int8 or bool weight passed the checks and failed at generation (raw RuntimeError)."""
    import torch
    from safetensors.torch import load_file, save_file

    from codeparrot.generation import Engine

    checkpoint = copy(tiny_checkpoint, tmp_path)
    weights = load_file(checkpoint / "model.safetensors")
    name = next(k for k in sorted(weights) if k.endswith("mlp.c_fc.weight"))
    weights[name] = weights[name].to(getattr(torch, dtype))
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    for load in (validate_checkpoint, load_checkpoint, Engine.load):
        with pytest.raises(CheckpointError) as info:
            load(checkpoint)
        assert name in str(info.value) and "must be a float" in str(info.value)


def test_a_shard_with_an_integer_weight_is_refused(sharded, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    checkpoint = copy(sharded, tmp_path)
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    name, shard = sorted(index["weight_map"].items())[-1]
    weights = load_file(checkpoint / shard)
    weights[name] = weights[name].to(torch.uint8)
    save_file(weights, checkpoint / shard, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"tensor '{name}' is stored as U8"):
        validate_checkpoint(checkpoint)


def test_a_torch_archive_weight_that_is_no_float_is_refused_naming_the_tensor(
    bin_checkpoint, tmp_path
):
    """pytorch_model.bin's dtypes are read from its pickle's opcodes (nothing unpickled)."""
    import torch

    from codeparrot.models.bounds import torch_archive_storages

    checkpoint = copy(bin_checkpoint, tmp_path)
    weights = torch.load(checkpoint / "pytorch_model.bin", weights_only=True)
    storages = torch_archive_storages(checkpoint / "pytorch_model.bin")
    assert set(storages) == set(weights) and set(storages.values()) == {"FloatStorage"}
    validate_checkpoint(checkpoint)  # the float archive passes
    name = next(k for k in sorted(weights) if k.endswith("mlp.c_fc.weight"))
    weights[name] = weights[name].to(torch.int8)
    torch.save(weights, checkpoint / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=f"tensor '{name}' is stored as CharStorage"):
        validate_checkpoint(checkpoint)
    # a memoised storage class (the second bf16 tensor) is followed too
    mixed = {"a": torch.zeros(2, dtype=torch.bfloat16), "b": torch.zeros(2, dtype=torch.bool),
             "c": torch.zeros(2, dtype=torch.bfloat16), "d": torch.zeros(1, dtype=torch.bool)}  # fmt: skip
    torch.save(mixed, tmp_path / "mixed.bin")
    assert torch_archive_storages(tmp_path / "mixed.bin") == {
        "a": "BFloat16Storage", "b": "BoolStorage", "c": "BFloat16Storage", "d": "BoolStorage"
    }  # fmt: skip


def test_a_damaged_safetensors_header_is_refused(tiny_checkpoint, tmp_path):
    checkpoint = copy(tiny_checkpoint, tmp_path)
    (checkpoint / "model.safetensors").write_bytes((2**62).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="safetensors header"):
        validate_checkpoint(checkpoint)
