"""Infilling tasks through the registry: scored as prompt + middle + suffix, with exact match."""

from __future__ import annotations

import inspect
import json

import pytest

from codeparrot.cli import main
from codeparrot.eval.config import ExecuteConfig
from codeparrot.eval.humaneval import execute
from codeparrot.eval.tasks import load_task


def test_execute_scores_middles_with_pass_and_exact_match(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    problems = load_task("infill-single-line").problems
    assert len(problems) == 1033
    task_id = "SingleLineInfilling/HumanEval/2/L0"
    middle = problems[task_id]["canonical_solution"]
    samples = tmp_path / "s.jsonl"
    rows = [
        {"task_id": task_id, "completion": middle},
        {"task_id": task_id, "completion": middle.rstrip("\n") + "  \n\n"},  # same text
        {"task_id": task_id, "completion": "    return 0.0\n"},
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = ExecuteConfig(samples=samples, task="infill-single-line", ks=(1,), workers=2)
    summary = execute(config, progress=False)
    results = [json.loads(line) for line in (tmp_path / "s_results.jsonl").read_text().splitlines()]
    assert [(r["passed"], r["exact_match"]) for r in results] == [
        (True, True),
        (True, True),
        (False, False),
    ]
    assert summary["exact_match"] == 2 / 3
    assert summary["pass_at_k"]["pass@1"] == 2 / 3


def test_generation_without_a_suffix_engine_is_a_clear_error(tiny_checkpoint, tmp_path, capsys):
    from codeparrot.generation import Engine

    if "suffix" in inspect.signature(Engine.generate).parameters:
        pytest.skip("the engine completes with a suffix: nothing to refuse")
    out = tmp_path / "out"
    argv = ["eval", "generate", "--task", "infill-single-line", "--checkpoint",
            str(tiny_checkpoint), "--output", str(out), "--limit", "1", "--n", "1"]  # fmt: skip
    assert main(argv) == 1
    assert "suffix" in capsys.readouterr().err
    assert not (out / "samples.jsonl").exists() or not (out / "samples.jsonl").read_text()
