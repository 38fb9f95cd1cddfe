"""HumanEval infilling tasks derived offline: OpenAI's counts, ids and layout; middles that pass."""

from __future__ import annotations

import random
import re

import pytest

from codeparrot.errors import DataError
from codeparrot.eval.data import load_problems
from codeparrot.eval.execution import run_programs
from codeparrot.eval.infill import derive, exact_match, infill_program
from codeparrot.eval.sandbox import detect_isolation

HUMANEVAL_KEYS = {"task_id", "prompt", "canonical_solution", "test", "entry_point"}


@pytest.fixture(scope="module")
def problems():
    return load_problems()


@pytest.fixture(scope="module")
def single(problems):
    return derive("single-line", problems)


@pytest.fixture(scope="module")
def multi(problems):
    return derive("multi-line", problems)


def test_counts_and_ids_are_openais(single, multi):
    assert len(single) == 1033
    assert len(multi) == 5815
    assert single[0]["task_id"] == "SingleLineInfilling/HumanEval/0/L0"
    assert multi[0]["task_id"] == "MultiLineInfilling/HumanEval/0/L0_L0"
    assert all(
        re.fullmatch(r"SingleLineInfilling/HumanEval/\d+/L\d+", t["task_id"]) for t in single
    )
    assert all(
        re.fullmatch(r"MultiLineInfilling/HumanEval/\d+/L(\d+)_L(\d+)", t["task_id"]) for t in multi
    )
    assert len({t["task_id"] for t in multi}) == 5815
    # Lines are numbered with the blank ones counted: HumanEval/0's line 6 is blank.
    zero = [t["task_id"].rsplit("/", 1)[1] for t in single if "/HumanEval/0/" in t["task_id"]]
    assert zero == ["L0", "L1", "L2", "L3", "L4", "L5", "L7"]
    assert all(HUMANEVAL_KEYS | {"suffix"} <= set(t) for t in single + multi)


def test_the_layout_matches_openais_published_record(problems, multi):
    # MultiLineInfilling/HumanEval/0/L0_L7 as in human-eval-infilling's data file.
    task = next(t for t in multi if t["task_id"] == "MultiLineInfilling/HumanEval/0/L0_L7")
    problem = problems["HumanEval/0"]
    assert task["prompt"] == problem["prompt"] + "\n"
    assert task["suffix"] == ""
    assert task["canonical_solution"] == problem["canonical_solution"]


def test_prompt_middle_and_suffix_rebuild_the_solution(problems, single, multi):
    for task in single + multi:
        problem = problems[task["task_id"].split("/", 1)[1].rsplit("/", 1)[0]]
        first = int(re.search(r"/L(\d+)", task["task_id"]).group(1))
        whole = task["prompt"] + task["canonical_solution"] + task["suffix"]
        extra = "\n" if first == 0 else ""
        assert whole == problem["prompt"] + extra + problem["canonical_solution"]
        middle = task["canonical_solution"]
        assert middle.endswith("\n") and middle.strip()
        assert middle.split("\n")[0].strip() and middle.rstrip("\n").split("\n")[-1].strip()
    assert all(t["canonical_solution"].count("\n") == 1 for t in single)


def test_ground_truth_middles_pass_and_empty_ones_mostly_fail(single, multi):
    rng = random.Random(0)
    tasks = rng.sample(single, 20) + rng.sample(multi, 20)
    programs = [infill_program(t, t["canonical_solution"]) for t in tasks]
    programs += [infill_program(t, "") for t in tasks]
    verdicts = run_programs(programs, isolation=detect_isolation(), workers=8)
    truth, empty = verdicts[: len(tasks)], verdicts[len(tasks) :]
    assert [t["task_id"] for t, v in zip(tasks, truth, strict=True) if not v.passed] == []
    assert sum(v.passed for v in empty) <= len(tasks) // 4


def test_single_line_middles_stop_at_the_line_end_and_keep_their_line(single):
    """Single-line tasks stop generating at a line break, which the completion leaves out;
    the program still puts the suffix on its own line, so the true line without its line
    break passes."""
    from codeparrot.eval.tasks import get_task

    assert get_task("infill-single-line").stop_sequences() == ("\n",)
    tasks = random.Random(1).sample(single, 10)
    programs = [infill_program(t, t["canonical_solution"].rstrip("\n")) for t in tasks]
    verdicts = run_programs(programs, isolation=detect_isolation(), workers=8)
    assert [t["task_id"] for t, v in zip(tasks, verdicts, strict=True) if not v.passed] == []


def test_exact_match_ignores_only_trailing_whitespace():
    reference = "        total += k\n"
    assert exact_match("        total += k", reference)
    assert exact_match("        total += k  \n\n", reference)
    assert not exact_match("    total += k\n", reference)  # indentation counts
    assert not exact_match("        total+=k\n", reference)
    assert exact_match("a\r\nb\n", "a\nb\n")
    assert not exact_match("", reference)


def test_unknown_benchmark_is_named():
    with pytest.raises(DataError, match="single-line, multi-line"):
        derive("random-span")
