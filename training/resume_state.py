"""The ``state/`` directory of a checkpoint: what ``--resume`` needs, stored without pickles.

Accelerate's ``save_state`` pickles the registered custom objects and ``load_state`` reads
them back with ``weights_only=False``, so a run directory from elsewhere could run code
on ``--resume``. This module writes and reads the state itself, and reads nothing it did
not write:

- ``model.safetensors``: the weights (safetensors: no code on load).
- ``optimizer.bin``, ``scheduler.bin`` (and ``scaler.bin`` with an fp16 gradient scaler):
  the state dicts, plain tensors in plain containers, read back with
  ``torch.load(weights_only=True)``, which refuses any other object (safe from torch 2.6),
  after the zip's central directory shows every record stored uncompressed and within
  the file (``torch.load`` inflates a compressed record into whatever size it claims).
- ``train_state.json`` + ``train_state.safetensors``: step, tokens seen and the data
  position; ``rng-R.json`` + ``rng-R.safetensors``: process R's random generators (Python,
  NumPy, torch CPU and CUDA). JSON holds the structure, safetensors the arrays.

:func:`check_state_files` refuses a directory holding any other file, naming it, before
anything is loaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError

MODEL = "model.safetensors"
OPTIMIZER = "optimizer.bin"
SCHEDULER = "scheduler.bin"
SCALER = "scaler.bin"
TRAIN_STATE = "train_state"
_ALLOWED = re.compile(
    r"(model\.safetensors|optimizer\.bin|scheduler\.bin|scaler\.bin"
    r"|train_state\.(json|safetensors)|rng-\d+\.(json|safetensors))"
)


def check_state_files(directory: Path) -> None:
    """Refuse a state directory holding anything this module does not write (a pickle
    from an older codeparrot or from elsewhere could run code when loaded), or a
    ``torch.save`` file whose records could expand beyond the file (see
    :func:`check_record_sizes`)."""
    if not directory.is_dir():
        raise CheckpointError(f"--resume: {directory}: no such directory")
    for path in sorted(directory.iterdir()):
        if not (path.is_file() and _ALLOWED.fullmatch(path.name)):
            raise CheckpointError(
                f"--resume: {path} is not a file codeparrot writes into a state directory "
                "(JSON, safetensors and plain-tensor files only); refusing to load a state "
                "that could run code. Delete that checkpoint directory to resume from the "
                "one before it, or start a new run."
            )
        if path.suffix == ".bin":
            check_record_sizes(path)


def check_record_sizes(path: Path) -> None:
    """A ``torch.save`` file's records must be stored uncompressed, none and all together
    larger than the file: read from the zip's central directory before ``torch.load``,
    which would allocate and inflate whatever a record claims (3 MB can ask for 3 GB)."""
    from codeparrot.models.bounds import check_torch_archive

    try:
        check_torch_archive(path, "--resume")
    except CheckpointError as e:
        raise CheckpointError(
            f"{e}. Delete that checkpoint directory to resume from the one before it."
        ) from None


# -- a tree of plain values as JSON + safetensors ---------------------------------------
# Every container is tagged, so that tuples, int-keyed dicts, NumPy arrays and tensors come
# back as the same types: {"tuple": [...]}, {"dict": [[key, value], ...]},
# {"ndarray": name}, {"tensor": name}. Lists and scalars are themselves.


def _encode(obj: Any, arrays: dict[str, Any]) -> Any:
    import numpy as np
    import torch

    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, tuple):
        return {"tuple": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, dict):
        return {"dict": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, np.ndarray | torch.Tensor):
        name = str(len(arrays))
        is_array = isinstance(obj, np.ndarray)
        arrays[name] = torch.from_numpy(np.ascontiguousarray(obj)) if is_array else obj
        return {"ndarray" if is_array else "tensor": name}
    raise TypeError(f"cannot store a {type(obj).__name__} in the resume state")


def _decode(obj: Any, arrays: dict[str, Any], where: Path) -> Any:
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, list):
        return [_decode(v, arrays, where) for v in obj]
    if isinstance(obj, dict) and len(obj) == 1:
        ((tag, value),) = obj.items()
        if tag == "tuple" and isinstance(value, list):
            return tuple(_decode(v, arrays, where) for v in value)
        if tag == "dict" and isinstance(value, list) and all(len(kv) == 2 for kv in value):
            return {_decode(k, arrays, where): _decode(v, arrays, where) for k, v in value}
        if tag in ("ndarray", "tensor") and value in arrays:
            return arrays[value].numpy() if tag == "ndarray" else arrays[value]
    raise CheckpointError(f"--resume: {where}: unexpected entry {str(obj)[:80]}")


def save_tree(obj: Any, directory: Path, stem: str) -> None:
    """``obj`` (plain values, lists, tuples, dicts, arrays, tensors) as ``stem.json`` +
    ``stem.safetensors``."""
    from safetensors.torch import save_file

    arrays: dict[str, Any] = {}
    tree = _encode(obj, arrays)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in arrays.items()},
        directory / f"{stem}.safetensors",
    )
    (directory / f"{stem}.json").write_text(json.dumps(tree), encoding="utf-8")


def load_tree(directory: Path, stem: str) -> Any:
    """What :func:`save_tree` wrote (json and safetensors only: no code runs)."""
    from safetensors.torch import load_file

    arrays = load_file(directory / f"{stem}.safetensors")
    where = directory / f"{stem}.json"
    return _decode(json.loads(where.read_text(encoding="utf-8")), arrays, where)


# -- random generators -----------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """This process's generators: the ones dropout, shuffling and sampling may draw from."""
    import random

    import numpy as np
    import torch

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import random

    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


# -- the whole state -------------------------------------------------------------------


def save_state(directory: Path, *, accelerator: Any, model: Any, optimizer: Any,
               scheduler: Any, train_state: dict[str, Any]) -> None:  # fmt: skip
    """Every process writes its generators; the main process writes the rest (DDP keeps
    weights, optimizer and schedule identical on every process)."""
    import torch
    from safetensors.torch import save_file, save_model

    from codeparrot.training import sharded

    directory.mkdir(parents=True, exist_ok=True)
    save_tree(rng_state(), directory, f"rng-{accelerator.process_index}")
    fsdp = sharded.is_fsdp(accelerator)
    if fsdp:  # a collective: every process takes part, the main one gets the tensors
        model_state, optimizer_state = sharded.gather_full_state(model, optimizer)
    if not accelerator.is_main_process:
        return
    if fsdp:
        weights = sharded.export_state_dict(accelerator.unwrap_model(model), model_state)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(directory / MODEL))
        torch.save(optimizer_state, directory / OPTIMIZER)
    else:
        save_model(accelerator.unwrap_model(model), str(directory / MODEL))
        torch.save(optimizer.state_dict(), directory / OPTIMIZER)
    torch.save(scheduler.state_dict(), directory / SCHEDULER)
    if accelerator.scaler is not None:
        torch.save(accelerator.scaler.state_dict(), directory / SCALER)
    save_tree({**train_state, "accelerator_step": accelerator.step}, directory, TRAIN_STATE)


def load_state(directory: Path, *, accelerator: Any, model: Any, optimizer: Any,
               scheduler: Any) -> dict[str, Any]:  # fmt: skip
    """Restore what :func:`save_state` wrote; returns the train state (step, data position).

    Checks the directory's files first; any load failure is a :class:`CheckpointError`."""
    import torch
    from safetensors.torch import load_model

    from codeparrot.training import sharded

    check_state_files(directory)
    try:
        if sharded.is_fsdp(accelerator):
            _load_sharded(directory, accelerator, model, optimizer)
        else:
            load_model(accelerator.unwrap_model(model), str(directory / MODEL), strict=True)
            optimizer.load_state_dict(
                torch.load(directory / OPTIMIZER, map_location="cpu", weights_only=True)
            )
        scheduler.load_state_dict(torch.load(directory / SCHEDULER, weights_only=True))
        if accelerator.scaler is not None:
            accelerator.scaler.load_state_dict(torch.load(directory / SCALER, weights_only=True))
        set_rng_state(load_tree(directory, f"rng-{accelerator.process_index}"))
        train_state = load_tree(directory, TRAIN_STATE)
        accelerator.step = train_state.pop("accelerator_step")
    except CheckpointError:
        raise
    except Exception as e:  # torch, safetensors and json raise many types
        raise CheckpointError(
            f"--resume: the state in {directory} cannot be loaded ({e}); "
            "delete that checkpoint directory to resume from the one before it"
        ) from e
    return train_state


def _load_sharded(directory: Path, accelerator: Any, model: Any, optimizer: Any) -> None:
    """The full state dicts read on the main process and broadcast into every shard."""
    import torch
    from safetensors.torch import load_file

    from codeparrot.training import sharded

    model_state: dict[str, Any] = {}
    optimizer_state: dict[str, Any] = {}
    if accelerator.is_main_process:
        weights = load_file(str(directory / MODEL))
        model_state = sharded.with_tied(accelerator.unwrap_model(model), weights)
        optimizer_state = torch.load(directory / OPTIMIZER, map_location="cpu", weights_only=True)
    sharded.load_full_state(model, optimizer, model_state, optimizer_state)
