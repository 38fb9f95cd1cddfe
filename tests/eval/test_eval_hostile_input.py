"""Hostile samples files: the harness writes every verdict itself and survives any line.

A samples file is as untrusted as the completions in it: a line may carry a forged
verdict, nest JSON deeper than the parser's recursion, or be gigabytes long inside a
small .gz; a completion may be too deeply nested for the sanitiser to parse. Each must
cost that line or that sample only, counted, never the run.
"""

from __future__ import annotations

import gzip
import json
import sys
import tracemalloc

import pytest

from codeparrot.cli import main
from codeparrot.eval.data import load_problems, read_samples
from codeparrot.eval.sanitize import sanitize


@pytest.fixture(scope="module")
def problems():
    return load_problems()


@pytest.fixture
def allowed(monkeypatch):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")


FORGED = {"passed": True, "result": "passed", "plus_passed": True, "exact_match": True}


def test_verdict_fields_of_input_lines_are_dropped_and_counted(tmp_path, problems, allowed, capsys):
    path = tmp_path / "s.jsonl"
    wrong = [
        {"task_id": task_id, "completion": "    return None\n", **FORGED}
        for task_id in ("HumanEval/0", "HumanEval/2")
        for _ in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in wrong))
    out = tmp_path / "r.jsonl"
    assert main(["eval", "execute", str(path), "--output", str(out), "--ks", "1"]) == 0
    printed = capsys.readouterr().out
    assert "100.00%" not in printed and "exact match" not in printed
    assert "pass@1: 0.00%" in printed
    assert "verdict fields" in printed and "6 input lines" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [False] * 6
    assert not any("plus_passed" in r or "exact_match" in r for r in rows)
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["verdict_fields_dropped"] == 6
    assert "pass_at_k_plus" not in summary and "exact_match" not in summary


def test_a_json_line_nested_too_deeply_is_a_bad_line(tmp_path, problems):
    path = tmp_path / "s.jsonl"
    good = json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"})
    path.write_text(good + "\n" + "[" * 100_000 + "]" * 100_000 + "\n" + good + "\n")
    found = read_samples(path, problems)
    assert [s.line for s in found.samples] == [1, 3]
    assert len(found.errors) == 1 and ":2: JSON nested too deeply" in found.errors[0]


def test_a_huge_line_in_a_small_gz_is_skipped_in_bounded_memory(tmp_path, problems):
    path = tmp_path / "s.jsonl.gz"
    good = json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"}).encode()
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"task_id": "HumanEval/0", "completion": "')
        block = b"x" * (1 << 20)
        for _ in range(64):  # a 64 MiB line
            fh.write(block)
        fh.write(b'"}\n' + good + b"\n")
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        found = read_samples(path, problems, max_line_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"
    assert [s.line for s in found.samples] == [2]
    assert found.errors == [f"{path}:1: line longer than {1 << 20} bytes"]


def test_a_line_at_the_cap_is_read(tmp_path, problems):
    path = tmp_path / "s.jsonl"
    line = json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"}).encode()
    path.write_bytes(line + b"\n" + line)  # the last line has no newline
    found = read_samples(path, problems, max_line_bytes=len(line))
    assert [s.line for s in found.samples] == [1, 2] and not found.errors


DEEP = "    return " + "-" * 3000 + "1\n"


@pytest.mark.parametrize("limit", [None, 100_000])
def test_the_sanitiser_turns_unparsable_code_into_a_failing_program(limit):
    before = sys.getrecursionlimit()
    try:
        if limit is not None:  # another library raised it: the parse then succeeds
            sys.setrecursionlimit(limit)
        program = sanitize("def f():\n" + DEEP, ["f"])
    finally:
        sys.setrecursionlimit(before)
    assert program.startswith("raise SyntaxError(") and "nested too deeply" in program
    assert sanitize("def f():\n    return --1\n", ["f"]) == "def f():\n    return --1\n"


def test_sanitize_survives_a_completion_too_deep_to_parse(tmp_path, problems, allowed, capsys):
    path = tmp_path / "s.jsonl"
    rows = [
        {"task_id": "HumanEval/2", "completion": DEEP},
        {"task_id": "HumanEval/2", "completion": problems["HumanEval/2"]["canonical_solution"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "r.jsonl"
    argv = ["eval", "execute", str(path), "--output", str(out), "--ks", "1", "--sanitize"]
    assert main(argv) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["passed"] for r in results] == [False, True]
    assert "could not parse this completion (nested too deeply)" in results[0]["result"]
    assert "pass@1: 50.00%" in capsys.readouterr().out


def test_the_summary_counts_the_completions_the_sanitiser_refused(
    tmp_path, problems, allowed, capsys
):
    path = tmp_path / "s.jsonl"
    canonical = problems["HumanEval/2"]["canonical_solution"]
    completions = [DEEP, canonical, DEEP, "    return 1.0\n"]
    path.write_text(
        "".join(json.dumps({"task_id": "HumanEval/2", "completion": c}) + "\n" for c in completions)
    )
    out = tmp_path / "r.jsonl"
    argv = ["eval", "execute", str(path), "--output", str(out), "--ks", "1"]
    assert main([*argv, "--sanitize"]) == 0
    assert "could not parse 2 completions" in capsys.readouterr().out
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["sanitize_refused"] == 2 and summary["samples"] == 4
    assert main(argv) == 0  # without --sanitize nothing is refused, nor counted
    assert "could not parse" not in capsys.readouterr().out
    assert "sanitize_refused" not in json.loads((tmp_path / "r.summary.json").read_text())


def test_rows_of_a_forged_line_keep_the_users_other_fields(tmp_path, problems):
    path = tmp_path / "s.jsonl"
    record = {"task_id": "HumanEval/0", "completion": "x", "model": "m", **FORGED}
    path.write_text(json.dumps(record) + "\n")
    found = read_samples(path, problems)
    assert found.forged_fields == 1
    assert found.samples[0].record == {"task_id": "HumanEval/0", "completion": "x", "model": "m"}


def test_a_truncated_gz_keeps_the_lines_before_the_damage(tmp_path, problems):
    path = tmp_path / "s.jsonl.gz"
    good = json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"}) + "\n"
    whole = gzip.compress((good * 2000).encode())
    path.write_bytes(whole[: len(whole) // 2])
    found = read_samples(path, problems)
    assert found.samples and len(found.errors) == 1
    assert "unreadable after the lines above" in found.errors[0]


@pytest.mark.parametrize(
    "task, task_id, completion",
    [
        ("humaneval", "HumanEval/0", None),
        ("infill-single-line", "SingleLineInfilling/HumanEval/0/L0",
         "    for idx, elem in enumerate(numbers):\n"),
    ],
)  # fmt: skip
def test_a_language_field_of_a_samples_line_never_reaches_the_report(
    tmp_path, problems, allowed, capsys, task, task_id, completion
):
    # the language a report groups exact matches by is the problem's, never the line's
    completion = completion or problems[task_id]["canonical_solution"]
    path = tmp_path / "s.jsonl"
    lines = [{"task_id": task_id, "completion": completion, "language": "rust"},
             {"task_id": task_id, "completion": "    pass\n"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "r.jsonl"
    argv = ["eval", "execute", str(path), "--task", task, "--output", str(out), "--ks", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "rust" not in printed and "1 input lines" in printed
    assert "pass@1: 50.00%" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert not any("language" in r for r in rows)
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert "exact_match_by_language" not in summary and summary["verdict_fields_dropped"] == 1
