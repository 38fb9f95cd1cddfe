"""int8 rows of a checkpoint's matrices, kept on disk from one start to the next.

Quantizing a model's matrices for the int8 steps (:meth:`GPT2Decoder.quantize_int8
<codeparrot.generation.gpt2.GPT2Decoder.quantize_int8>`) has two parts: rounding every
weight to int8 with a scale per row, and packing the rows into the kernel's layout. The
first depends only on the weights, so its result is kept in a safetensors file (int8 rows
and float32 scales; never a pickle) for the next start: 0.15 of 0.76 s for a 164M model on
2 cores, 0.8 s of a 0.5B model's start (RESULTS.md). The packing, which depends on the CPU
and torch, is done at every start.

A file belongs to one set of weight files, named by their paths, sizes, modification
times and inodes, and to the model's dtype: replacing a checkpoint's weights makes a new
file. The newest :data:`MAX_FILES` files are kept. ``CODEPARROT_INT8_CACHE`` names the
folder (default ``$XDG_CACHE_HOME/codeparrot/int8``, else ``~/.cache/codeparrot/int8``);
``CODEPARROT_INT8_CACHE=0`` turns the cache off. A file that cannot be read or does not
fit is removed and the rows are made again; a cache that cannot be written is logged and
loading goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from codeparrot import kept_files

logger = logging.getLogger(__name__)

ENV = "CODEPARROT_INT8_CACHE"
FORMAT = 1  # of the rows (int8.quantize_rows): a new format makes new files
MAX_FILES = 4


def cache_folder() -> Path | None:
    """Where the files are kept (``None``: the cache is off)."""
    return kept_files.cache_folder(ENV, "int8")


class RowsCache:
    """The cache file of one set of weights: :meth:`load` its rows, :meth:`store` them."""

    def __init__(self, file: Path, identity: str) -> None:
        self.file = file
        self.identity = identity  # what the weights are, as recorded in the file

    @classmethod
    def for_weights(cls, weight_files: list[Path], dtype: Any) -> RowsCache | None:
        """The cache of the model whose weights are ``weight_files`` (safetensors) in
        ``dtype``; ``None`` when the cache is off or a file cannot be looked at."""
        folder = cache_folder()
        if folder is None or not weight_files:
            return None
        try:
            stats = [(str(f.resolve()), *kept_files.file_stats(f)) for f in weight_files]
        except OSError:
            return None
        identity = json.dumps({"format": FORMAT, "dtype": str(dtype), "weights": stats})
        name = hashlib.blake2b(identity.encode(), digest_size=16).hexdigest()
        return cls(folder / f"{name}.safetensors", identity)

    def load(self, shapes: list[tuple[int, int]]) -> list[tuple[Any, Any]] | None:
        """The kept (int8 rows, float32 scales) of matrices of ``shapes``, in order;
        ``None`` when there are none, or none that fit (that file is then removed)."""
        import torch
        from safetensors import safe_open

        if not self.file.is_file():
            return None
        try:
            with safe_open(str(self.file), framework="pt", device="cpu") as f:
                if (f.metadata() or {}).get("identity") != self.identity:
                    raise ValueError("written for other weights")
                rows = [(f.get_tensor(f"q{i}"), f.get_tensor(f"s{i}")) for i in range(len(shapes))]
        except Exception as e:  # safetensors raises its own types for a broken file
            logger.warning("int8 cache %s cannot be used (%s): making the rows again", self.file, e)
            self.file.unlink(missing_ok=True)
            return None
        for (q, s), shape in zip(rows, shapes, strict=True):
            if q.dtype != torch.int8 or tuple(q.shape) != shape or tuple(s.shape) != shape[:1]:
                logger.warning(
                    "int8 cache %s does not fit the model: making the rows again", self.file
                )
                self.file.unlink(missing_ok=True)
                return None
        os.utime(self.file)  # recently used: kept when older files are removed
        # copies in torch's own (aligned) memory: the file's tensors sit at any offset of
        # its map, and compiled steps' kernels assume aligned weights (a crash otherwise)
        return [(q.clone(), s.to(torch.float32, copy=True)) for q, s in rows]

    def store(self, rows: list[tuple[Any, Any]]) -> None:
        """Keep ``rows`` (written to a temporary file, then renamed) and remove all but
        the newest :data:`MAX_FILES` files; a failure is logged, never raised."""
        from safetensors.torch import save_file

        tensors = {}
        for i, (q, s) in enumerate(rows):
            tensors[f"q{i}"], tensors[f"s{i}"] = q.contiguous(), s.float().contiguous()
        try:
            kept_files.write_then_rename(
                self.file,
                lambda tmp: save_file(tensors, tmp, metadata={"identity": self.identity}),
                MAX_FILES,
            )
        except OSError as e:
            logger.warning("int8 cache %s cannot be written (%s)", self.file, e)
