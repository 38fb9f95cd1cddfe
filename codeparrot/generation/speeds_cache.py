"""Speeds a start measured on this machine, kept for the next start of the same model.

A CPU start times a few things before it decodes: which int8 kernel multiplies one row
faster, by the blocks' matrices and by the output projection
(:func:`~codeparrot.generation.int8.choose_kernel`), whether prompts read the int8
copies (:meth:`~codeparrot.generation.gpt2.GPT2Decoder.choose_int8_prompts`), and, in the
language server, how long a prompt token takes (:func:`~codeparrot.generation.threads.
time_prompt`). That is ~0.3 s of a 164M model's start on 2 cores. Each answer is kept in
a small JSON file for the next start of a model of the same shapes, on the same CPU, with
the same torch and the same number of threads, and is measured again once it is older
than :data:`MAX_AGE_SECONDS`.

The kernel and int8-prompt probes time their two sides alternately, so that other work on
the machine slows both alike; the prompt speed, an absolute figure, is what a busy machine
makes wrong (slower: the suffix window the language server keeps is then smaller), so it
is timed again every few starts and the faster figure kept (:func:`measured_or_kept`).
Keeping answers only under a low load average was tried and dropped: starts one after
another kept a 2-core machine's 1-minute load above its cores, and nothing was kept.

``CODEPARROT_SPEEDS_CACHE`` names the folder (default ``$XDG_CACHE_HOME/codeparrot/
speeds``, else ``~/.cache/codeparrot/speeds``); ``CODEPARROT_SPEEDS_CACHE=0`` turns it off,
so that every start measures. A file that cannot be read is removed; one that cannot be
written is logged and the start goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

from codeparrot import kept_files

logger = logging.getLogger(__name__)

ENV = "CODEPARROT_SPEEDS_CACHE"
FORMAT = 1
MAX_FILES = 16
# a week: the answers depend on the CPU, torch and the model, which the file's name holds;
# what the age guards against is a figure that was off for a reason no one saw
MAX_AGE_SECONDS = 7 * 24 * 3600


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_identity() -> dict[str, Any]:
    """What names this CPU: its model name and flags (Linux ``/proc/cpuinfo``), the
    machine type, and the cores this process may use."""
    from codeparrot.precision import cpu_flags

    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = usable_cores()
    flags = hashlib.blake2b(" ".join(sorted(cpu_flags())).encode(), digest_size=8).hexdigest()
    return {"name": name, "flags": flags, "machine": platform.machine(), "cores": cores}


class KeptSpeeds:
    """The kept answers of one model on this machine: :meth:`get` one, :meth:`put` one."""

    def __init__(self, file: Path, identity: str) -> None:
        self.file = file
        self.identity = identity
        self._values: dict[str, dict[str, Any]] | None = None

    @classmethod
    def for_model(cls, model: Any, bf16: bool) -> KeptSpeeds | None:
        """The record of ``model`` (its class, and its parameters' names, shapes and
        dtypes) here, with ``bf16`` prompts or not and torch's current thread count;
        ``None`` when the cache is off."""
        import torch

        folder = kept_files.cache_folder(ENV, "speeds")
        if folder is None:
            return None
        shapes = [(n, tuple(p.shape), str(p.dtype)) for n, p in model.named_parameters()]
        identity = json.dumps(
            {
                "format": FORMAT,
                "model": type(model).__name__,
                "parameters": hashlib.blake2b(repr(shapes).encode(), digest_size=16).hexdigest(),
                "bf16": bf16,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "cpu": cpu_identity(),
            },
            sort_keys=True,
        )
        name = hashlib.blake2b(identity.encode(), digest_size=16).hexdigest()
        return cls(folder / f"{name}.json", identity)

    def get(self, name: str) -> Any:
        """The kept answer ``name``, or ``None`` where there is none younger than
        :data:`MAX_AGE_SECONDS`."""
        entry = self.entry(name)
        return None if entry is None else entry.get("value")

    def entry(self, name: str) -> dict[str, Any] | None:
        """The kept answer ``name`` with what is known of it (``value``, ``at`` the time
        it was measured, ``uses`` the starts that took it since), or ``None`` where there
        is none younger than :data:`MAX_AGE_SECONDS`."""
        entry = self._read().get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("at"), (int, float)):
            return None
        if not 0 <= time.time() - entry["at"] <= MAX_AGE_SECONDS:
            return None
        return entry

    def put(self, name: str, value: Any, at: float | None = None, uses: int = 0) -> None:
        """Keep ``value`` (JSON) as the answer ``name``, measured at ``at`` (default: now)
        and taken by ``uses`` starts since; a failure to write is logged, never raised."""
        values = dict(self._read())
        values[name] = {"value": value, "at": time.time() if at is None else at, "uses": uses}
        self._values = values
        record = {"identity": self.identity, "values": values}
        try:
            kept_files.write_then_rename(
                self.file,
                lambda tmp: Path(tmp).write_text(json.dumps(record), encoding="utf-8"),
                MAX_FILES,
            )
        except OSError as e:
            logger.warning("speeds cache %s cannot be written (%s)", self.file, e)

    def _read(self) -> dict[str, dict[str, Any]]:
        if self._values is None:
            self._values = {}
            if self.file.is_file():
                try:
                    record = json.loads(self.file.read_text(encoding="utf-8"))
                    if record.get("identity") != self.identity:
                        raise ValueError("written for another model or machine")
                    if not isinstance(record.get("values"), dict):
                        raise ValueError("no values")
                    self._values = record["values"]
                except (OSError, ValueError, AttributeError) as e:
                    logger.warning("speeds cache %s cannot be used (%s): measuring", self.file, e)
                    self.file.unlink(missing_ok=True)
        return self._values


def measured_or_kept(
    kept: KeptSpeeds | None,
    name: str,
    measure: Any,
    every: int = 0,
    best: Any = None,
) -> tuple[Any, bool]:
    """``(answer, was_kept)``: the kept answer ``name``, else ``measure()``'s, kept.

    ``every`` (> 0): the kept answer is measured again at every ``every``-th start that
    would take it, and ``best(new, kept)`` is kept, with the time of whichever it is: an
    answer that other work on the machine made worse is replaced within ``every`` starts,
    and one measured on a quiet machine stays until it is a week old."""
    entry = kept.entry(name) if kept is not None else None
    if entry is not None and kept is not None:
        uses = int(entry.get("uses", 0)) + 1 if isinstance(entry.get("uses", 0), int) else 1
        if every <= 0 or uses % every:
            if every > 0:
                kept.put(name, entry.get("value"), at=entry["at"], uses=uses)
            return entry.get("value"), True
        value = measure()
        chosen = best(value, entry.get("value")) if best is not None else value
        kept.put(name, chosen, at=entry["at"] if chosen == entry.get("value") else None)
        return chosen, False
    value = measure()
    if kept is not None:
        kept.put(name, value)
    return value, False
