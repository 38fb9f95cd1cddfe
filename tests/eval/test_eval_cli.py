"""`codeparrot eval execute`: permission, bad input by line number, outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.cli import main
from codeparrot.errors import ExecutionNotAllowed
from codeparrot.eval.config import ExecuteConfig
from codeparrot.eval.data import load_problems, read_samples
from codeparrot.eval.humaneval import execute


@pytest.fixture(scope="module")
def problems():
    return load_problems()


def write_samples(path: Path, problems: dict) -> None:
    lines = []
    for task_id in ("HumanEval/0", "HumanEval/2"):
        lines.append(
            json.dumps({"task_id": task_id, "completion": problems[task_id]["canonical_solution"]})
        )
        lines.append(json.dumps({"task_id": task_id, "completion": "    return None\n"}))
    lines[1:1] = [
        "{not json",
        json.dumps({"task_id": "HumanEval/9999", "completion": "    pass\n"}),
        json.dumps({"completion": "    pass\n"}),
        json.dumps(["a", "list"]),
        json.dumps({"task_id": "HumanEval/0", "completion": 5}),
    ]
    path.write_text("\n".join(lines) + "\n")


def test_bad_lines_reported_by_number_rest_kept(tmp_path, problems):
    path = tmp_path / "s.jsonl"
    write_samples(path, problems)
    found = read_samples(path, problems)
    assert [e.split(":")[1] for e in found.errors] == ["2", "3", "4", "5", "6"]
    assert "unknown task id 'HumanEval/9999'" in found.errors[1]
    assert "task_id" in found.errors[2]
    assert [(s.task_id, s.completion_id) for s in found.samples] == [
        ("HumanEval/0", 0),
        ("HumanEval/0", 1),
        ("HumanEval/2", 0),
        ("HumanEval/2", 1),
    ]


def test_nothing_runs_without_permission(tmp_path, problems, monkeypatch, capsys):
    monkeypatch.delenv("CODEPARROT_ALLOW_CODE_EXECUTION", raising=False)
    path = tmp_path / "s.jsonl"
    marker = tmp_path / "ran"
    path.write_text(
        json.dumps(
            {
                "task_id": "HumanEval/0",
                "completion": f"    open({str(marker)!r}, 'w')\n",
            }
        )
        + "\n"
    )
    with pytest.raises(ExecutionNotAllowed, match="--allow-code-execution"):
        execute(ExecuteConfig(samples=path))
    assert main(["eval", "execute", str(path)]) == 1
    err = capsys.readouterr().err
    assert "nothing was executed" in err and "CODEPARROT_ALLOW_CODE_EXECUTION" in err
    assert not marker.exists()
    assert not (tmp_path / "s_results.jsonl").exists()


def test_execute_scores_and_writes_results(tmp_path, problems, capsys, monkeypatch):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    path = tmp_path / "s.jsonl"
    write_samples(path, problems)
    out = tmp_path / "r.jsonl"
    assert (
        main(
            ["eval", "execute", str(path), "--output", str(out), "--ks", "1", "2", "--workers", "2"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "s.jsonl:2: not valid JSON" in printed
    assert "pass@1: 50.00%" in printed and "pass@2: 100.00%" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [True, False, True, False]
    assert set(rows[0]) == {
        "task_id",
        "completion_id",
        "completion",
        "passed",
        "result",
        "duration",
    }
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert summary["per_problem"]["HumanEval/2"] == {"samples": 2, "passed": 1}
    assert len(summary["input_errors"]) == 5
    assert summary["isolation"]["mode"] in ("root", "userns", "none")
    assert "provenance" in summary


def test_evalplus_solution_lines_score_as_evalplus_scores_them(tmp_path, problems, monkeypatch):
    """evalplus's samples (``solution``: the whole program) are scored alone: a right
    solution passes without the prompt, and a solution that leans on the prompt's import
    fails, as in evalplus; ``solution`` wins over a ``completion`` on the same line."""
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    p0 = problems["HumanEval/0"]
    right = p0["prompt"] + p0["canonical_solution"]
    # The prompt's `from typing import List` is what this needs: alone it is a NameError.
    no_import = right.replace("from typing import List\n", "")
    lines = [
        {"task_id": "HumanEval/0", "solution": right},
        {"task_id": "HumanEval/0", "solution": no_import},
        {"task_id": "HumanEval/0", "solution": "def has_close_elements(a, b):\n    return 1\n",
         "completion": p0["canonical_solution"]},
        {"task_id": "HumanEval/0", "solution": 3},
    ]  # fmt: skip
    path = tmp_path / "evalplus.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = read_samples(path, problems)
    assert [s.whole for s in found.samples] == [True, True, True]
    assert found.errors == [f"{path}:4: task_id and solution must be strings"]
    out = tmp_path / "r.jsonl"
    assert main(["eval", "execute", str(path), "--output", str(out), "--workers", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [True, False, False]
    assert "NameError" in rows[1]["result"]
    assert rows[0]["solution"] == right and "completion" not in rows[0]


def test_a_solution_cannot_fill_in_a_middle(tmp_path):
    problems = {"SingleLineInfilling/X/L0": {"prompt": "a = ", "suffix": "\n",
                                             "canonical_solution": "1", "entry_point": ""}}  # fmt: skip
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"task_id": "SingleLineInfilling/X/L0", "solution": "a = 1"}))
    found = read_samples(path, problems)
    assert not found.samples and "cannot fill in a middle" in found.errors[0]


def test_execute_loads_no_ml_library_nor_other_subcommand(tmp_path, problems):
    """Scoring a samples file needs neither torch nor transformers nor datasets, nor the
    modules of the other subcommands: the CLI imports only the one it runs."""
    path = tmp_path / "s.jsonl"
    write_samples(path, problems)
    code = (
        "import sys\n"
        "from codeparrot.cli import main\n"
        f"assert main(['eval', 'execute', {str(path)!r}, '--workers', '1']) == 0\n"
        "loaded = ('torch', 'transformers', 'datasets', 'accelerate', 'numpy', 'matplotlib',\n"
        "          'codeparrot.training', 'codeparrot.quickstart', 'codeparrot.app',\n"
        "          'codeparrot.eval.lines', 'codeparrot.eval.loss')\n"
        "print([m for m in loaded if m in sys.modules])\n"
    )
    env = os.environ | {"CODEPARROT_ALLOW_CODE_EXECUTION": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
    assert "pass@1: 50.00%" in out.stdout


def test_config_problems_name_flags():
    from codeparrot.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        ExecuteConfig(samples=Path("x"), timeout=0, workers=0, ks=(0,))
    for flag in ("--timeout", "--workers", "--ks"):
        assert flag in str(e.value)
