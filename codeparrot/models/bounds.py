"""Bounds a checkpoint must keep before anything in it is loaded (see docs/threat-model.md).

A checkpoint is small files that say how big things will be: a ``config.json`` whose
sizes decide what the model allocates, an index that names the weight files, a torch
archive whose records say how large they expand. Each check here reads only those
statements, never the things they describe, so a few kilobytes that ask for terabytes
are refused in milliseconds with a message naming the file and the value:

- :func:`check_config_sizes`: positions, vocabulary, width, layers and the MLP's size
  each within a limit no released model comes near, and the least memory they imply
  (the weights, and the tables kept per position) within the machine's memory;
- :func:`check_weight_index`: every file a ``*.index.json`` names is a plain relative
  path inside the checkpoint (no absolute path, no ``..``);
- :func:`check_torch_archive`: a ``torch.save`` zip whose records are stored, not
  compressed, and together no larger than the file;
- :func:`check_weight_dtypes`: every weight in the safetensors headers is a float (an int8
  or bool weight loaded, then failed at generation with a raw error);
  :func:`check_torch_dtypes` asks the same of a ``torch.save`` archive, from its
  pickle's opcodes (nothing is unpickled).

Standard library only (``transformers`` is imported inside :func:`family_defaults`).
"""

from __future__ import annotations

import json
import os
import pickletools
import zipfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from codeparrot.errors import CheckpointError
from codeparrot.families import learned_positions

# Far above every released model (Llama 4 Scout: 10M positions; Gemma: a 262k
# vocabulary; 16,384 wide; 126 layers), far below what a tiny file can ask a loader to
# allocate. A value above its limit is refused whatever the machine.
SIZE_LIMITS = {
    "positions": 2**24,
    "vocabulary": 2**22,
    "width": 2**16,
    "layers": 2**10,
    "intermediate": 2**20,
    "heads": 2**12,
    "kv_heads": 2**12,
    "head_dim": 2**12,
}
# The names model families give each size in config.json (GPT-2's first).
SIZE_KEYS = {
    "positions": ("n_positions", "max_position_embeddings", "n_ctx"),
    "vocabulary": ("vocab_size",),
    "width": ("n_embd", "hidden_size"),
    "layers": ("n_layer", "num_hidden_layers"),
    "intermediate": ("n_inner", "intermediate_size"),
    "heads": ("n_head", "num_attention_heads"),
    "kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
}
# The fewest bytes a weight takes in any dtype the loader uses (bfloat16, float16): the
# estimate is a floor, so only a model that cannot fit in any of them is refused.
BYTES_PER_WEIGHT = 2
# a (positions, width) table: the families' (codeparrot.families) and two more model types
LEARNED_POSITIONS = learned_positions() | {"gpt_neo", "opt"}
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
MAX_INDEX_BYTES = 64 * 2**20  # a 1,000-shard index is under 200 kB


def config_sizes(
    file: Path, config: dict[str, Any], defaults: dict[str, int] | None = None
) -> dict[str, int]:
    """The sizes ``config`` gives (see :data:`SIZE_KEYS`), each checked against its limit.

    Every name a size goes by is checked, and the largest counts (GPT-2 reads
    ``n_positions``; a forged file may put its ask under ``n_ctx``). A size the file does
    not give is the model family's default (``defaults``, else :func:`family_defaults`);
    GPT-2's ``n_inner: null`` is 4 x the width.
    """
    if defaults is None:
        defaults = family_defaults(config.get("model_type"))
    sizes: dict[str, int] = {}
    for size, keys in SIZE_KEYS.items():
        given = [_checked_size(file, key, config[key], size) for key in keys if key in config]
        values = [v for v in given if v is not None] or [defaults.get(size)]
        if values[0] is not None:
            sizes[size] = max(values)
    return sizes


def _checked_size(file: Path, key: str, value: Any, size: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(
            f"{file}: {key} is {json.dumps(value)[:40]}; it must be a positive integer"
        )
    if value > SIZE_LIMITS[size]:
        raise CheckpointError(
            f"{file}: {key} is {value:,}; codeparrot loads models of at most "
            f"{SIZE_LIMITS[size]:,} {size.replace('_', ' ')} (a config asking for more could "
            "make the loader allocate without end)"
        )
    return value


def family_defaults(model_type: Any) -> dict[str, int]:
    """The sizes transformers gives a ``model_type`` whose config.json leaves them out."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return {}
    try:
        default = CONFIG_MAPPING[model_type]().to_dict()
    except Exception:  # a family whose config needs arguments: no defaults to add
        return {}
    out = {}
    for size, keys in SIZE_KEYS.items():
        value = next((default[k] for k in keys if isinstance(default.get(k), int)), None)
        if value is not None:
            out[size] = value
    return out


def estimated_bytes(sizes: dict[str, int], *, tied: bool, learned_positions: bool) -> int:
    """The least memory the model needs once loaded: its weights, and what is kept per
    position (a learned position embedding, as GPT-2's; the int64 positions and the
    cos/sin tables the engine keeps for a rotary model)."""
    width = sizes.get("width", 1)
    heads = sizes.get("heads", 1)
    head_dim = sizes.get("head_dim", max(width // heads, 1))
    kv_heads = sizes.get("kv_heads", heads)
    attention = 2 * width * (heads + kv_heads) * head_dim  # q, o and k, v projections
    mlp = 2 * width * sizes.get("intermediate", 4 * width)  # up and down (and gate: more)
    embeddings = sizes.get("vocabulary", 1) * width * (1 if tied else 2)
    weights = embeddings + sizes.get("layers", 1) * (attention + mlp)
    per_position = 8 + 2 * BYTES_PER_WEIGHT * head_dim
    if learned_positions:
        per_position += BYTES_PER_WEIGHT * width
    return BYTES_PER_WEIGHT * weights + sizes.get("positions", 1) * per_position


def machine_memory() -> int | None:
    """Bytes of physical memory, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def refuse_custom_code(file: Path, config: dict[str, Any]) -> None:
    """Refuse a config file that asks transformers to import Python from the checkpoint."""
    if "auto_map" in config:
        raise CheckpointError(
            f"{file}: asks to run the checkpoint's own Python code (auto_map "
            f"{json.dumps(config['auto_map'])[:200]}); codeparrot never runs code from a "
            "checkpoint. Use a checkpoint whose architecture transformers ships."
        )


def check_config_sizes(
    file: Path,
    config: dict[str, Any],
    budget: int | None = None,
    *,
    defaults: dict[str, int] | None = None,
) -> dict[str, int]:
    """Refuse a config whose sizes exceed their limits or, together, ``budget`` bytes
    (default: the machine's memory); returns the sizes. Reads numbers only."""
    sizes = config_sizes(file, config, defaults)
    budget = machine_memory() if budget is None else budget
    needed = estimated_bytes(
        sizes,
        tied=config.get("tie_word_embeddings", True) is not False,
        learned_positions=config.get("model_type") in LEARNED_POSITIONS,
    )
    if budget is not None and needed > budget:
        shown = ", ".join(f"{k} {v:,}" for k, v in sizes.items())
        raise CheckpointError(
            f"{file}: a model of these sizes ({shown}) needs about {needed / 2**30:,.1f} GiB "
            f"of memory to load, more than the {budget / 2**30:,.1f} GiB available"
        )
    return sizes


def check_weight_index(directory: Path) -> None:
    """Every weight file an index names must be a relative path inside ``directory``.

    transformers joins the directory and each name: an absolute name, or one climbing
    out with ``..``, would load weights from anywhere on the machine.
    """
    for name in INDEX_FILES:
        index = directory / name
        if not index.is_file():
            continue
        if index.stat().st_size > MAX_INDEX_BYTES:
            raise CheckpointError(
                f"{index}: {index.stat().st_size:,} bytes; a weight index is at most "
                f"{MAX_INDEX_BYTES:,}"
            )
        weight_map = _weight_map(index)
        for weights in sorted(set(weight_map.values())):
            if not _inside(weights):
                raise CheckpointError(
                    f"{index}: names the weight file {weights[:200]!r}, which is not inside "
                    "the checkpoint directory (an index names files next to it, without "
                    "an absolute path or '..')"
                )
            if not (directory / weights).is_file():
                raise CheckpointError(f"{index}: names {weights!r}, which is missing")


def _weight_map(index: Path) -> dict[str, str]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{index}: not valid JSON ({e})") from e
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: has no weight_map of tensor names to file names")
    return weight_map


def _inside(name: str) -> bool:
    """A relative path that stays where it is joined, on POSIX and on Windows alike."""
    if not name or "\x00" in name:
        return False
    for path in (PurePosixPath(name), PureWindowsPath(name)):
        if path.is_absolute() or path.anchor or ".." in path.parts:
            return False
    return True


def torch_weight_files(directory: Path) -> list[Path]:
    """The ``torch.save`` files transformers would read: ``pytorch_model.bin`` or the
    shards of its index, when no safetensors weights come first."""
    if (directory / "model.safetensors").is_file() or (directory / INDEX_FILES[0]).is_file():
        return []
    index = directory / INDEX_FILES[1]
    if index.is_file():
        return [directory / name for name in sorted(set(_weight_map(index).values()))]
    single = directory / "pytorch_model.bin"
    return [single] if single.is_file() else []


def check_torch_archive(file: Path, what: str) -> None:
    """Refuse a ``torch.save`` file whose records could expand beyond the file.

    ``torch.save`` stores every record uncompressed, so each is at most the file's size
    and all of them together too; ``torch.load`` allocates what the zip's central
    directory says a record holds and inflates a compressed one into it. Only the
    central directory is read here. ``what`` names the file's role in messages.
    """
    size = file.stat().st_size
    try:
        with zipfile.ZipFile(file) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise CheckpointError(
            f"{what}: {file} is not a torch.save archive (a zip file: {e}); refusing the "
            "legacy and foreign formats, whose sizes cannot be checked before loading"
        ) from e
    total = 0
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED or record.compress_size != record.file_size:
            raise CheckpointError(
                f"{what}: {file}: record {record.filename[:100]!r} is compressed "
                f"({record.compress_size:,} bytes that expand to {record.file_size:,}); "
                "torch.save stores records uncompressed, and a compressed one is refused "
                "before it can expand"
            )
        total += record.file_size
        if record.header_offset + record.file_size > size or total > size:
            raise CheckpointError(
                f"{what}: {file}: its records claim {total:,} bytes, more than the file's "
                f"{size:,}; the file is damaged or forged"
            )


# What a weight may be stored as (safetensors' names): the floats torch computes in.
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
# Buffers some checkpoints carry as integers or booleans, which transformers does not load
# into the model (causal masks, position ids).
_INTEGER_BUFFERS = ("position_ids", "attn.bias", "attn.masked_bias")
MAX_SAFETENSORS_HEADER = 100_000_000  # safetensors' own limit


def safetensors_files(directory: Path) -> list[Path]:
    """The safetensors weight files transformers would read: the single file or the
    shards of its index (already checked by :func:`check_weight_index`)."""
    if (directory / "model.safetensors").is_file():
        return [directory / "model.safetensors"]
    index = directory / INDEX_FILES[0]
    if index.is_file():
        return [directory / name for name in sorted(set(_weight_map(index).values()))]
    return []


def safetensors_dtypes(file: Path) -> dict[str, str]:
    """Tensor name -> dtype, from the file's header only (no weights read)."""
    try:
        with open(file, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= MAX_SAFETENSORS_HEADER:
                raise CheckpointError(
                    f"{file}: a safetensors header of {size:,} bytes; the file is damaged"
                )
            header = json.loads(f.read(size))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{file}: not a safetensors file (its header: {e})") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: not a safetensors file (its header is no object)")
    return {
        str(name): str(entry.get("dtype"))
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict)
    }


def refuse_non_floats(file: Path, dtypes: dict[str, str], floats: frozenset[str]) -> None:
    """A :class:`CheckpointError` naming the first tensor of ``dtypes`` (name -> the
    file format's dtype name) that is not in ``floats`` and is no integer buffer."""
    for name, dtype in dtypes.items():
        if dtype in floats or name.endswith(_INTEGER_BUFFERS):
            continue
        raise CheckpointError(
            f"{file}: tensor {name[:200]!r} is stored as {dtype[:40]}; a weight must be a "
            f"float ({', '.join(sorted(floats))}). Quantised checkpoints are not "
            "loaded: use the float weights (`--quantize int8` quantises them at load)"
        )


def check_weight_dtypes(directory: Path) -> None:
    """Every weight of the checkpoint's safetensors files is stored as a float."""
    for file in safetensors_files(directory):
        refuse_non_floats(file, safetensors_dtypes(file), FLOAT_DTYPES)


# torch.save's storage classes (in its pickle's persistent ids) of the float dtypes
FLOAT_STORAGES = frozenset({"FloatStorage", "HalfStorage", "BFloat16Storage", "DoubleStorage"})
_STRINGS = frozenset({"BINUNICODE", "SHORT_BINUNICODE", "UNICODE", "BINUNICODE8"})
_GETS = frozenset({"BINGET", "LONG_BINGET", "GET"})
_PUTS = frozenset({"BINPUT", "LONG_BINPUT", "PUT"})


def torch_archive_storages(file: Path) -> dict[str, str]:
    """Tensor name -> storage class (``FloatStorage``, ``CharStorage``, ...) of a
    ``torch.save`` archive, read from its pickle's opcodes: nothing is unpickled and no
    torch is imported. A state dict's pickle names each tensor's key, then its rebuild
    function, then its storage's class; memoised references are followed."""
    try:
        with zipfile.ZipFile(file) as archive:
            pickles = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "data.pkl"]
            data = archive.read(pickles[0]) if len(pickles) == 1 else b""
        if not data:
            raise ValueError(f"{len(pickles)} data.pkl records, not 1")
        memo: dict[Any, tuple[str, str]] = {}
        out: dict[str, str] = {}
        last_string = tensor = None
        value: tuple[str, str] | None = None
        for op, arg, _pos in pickletools.genops(data):
            if op.name in _PUTS or op.name == "MEMOIZE":
                if value is not None:
                    memo[len(memo) if op.name == "MEMOIZE" else arg] = value
                continue
            value = None
            if op.name in _STRINGS:
                value = ("str", str(arg))
            elif op.name == "GLOBAL":
                value = ("global", str(arg))
            elif op.name in _GETS:
                value = memo.get(arg)
            if value is None:
                continue
            if value[0] == "str":
                last_string = value[1]
                continue
            module, _, name = value[1].partition(" ")
            if name.startswith("_rebuild_"):
                tensor = last_string
            elif module == "torch" and name.endswith("Storage") and tensor is not None:
                out.setdefault(tensor, name)
                tensor = None
        return out
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as e:
        raise CheckpointError(f"{file}: its pickle of tensors cannot be read ({e})") from e


def check_torch_dtypes(file: Path) -> None:
    """Every weight of a ``torch.save`` archive (checked by :func:`check_torch_archive`
    first) is stored as a float, as :func:`check_weight_dtypes` asks of safetensors."""
    refuse_non_floats(file, torch_archive_storages(file), FLOAT_STORAGES)


def check_checkpoint_bounds(
    directory: Path,
    config_file: Path,
    config: dict[str, Any],
    *,
    defaults: dict[str, int] | None = None,
) -> None:
    """Every bound above for a checkpoint directory whose ``config.json`` is ``config``
    (``defaults``: the family's sizes where known, else :func:`family_defaults`)."""
    check_config_sizes(config_file, config, defaults=defaults)
    check_weight_index(directory)
    check_weight_dtypes(directory)
    for weights in torch_weight_files(directory):
        check_torch_archive(weights, f"checkpoint {directory}")
        check_torch_dtypes(weights)
