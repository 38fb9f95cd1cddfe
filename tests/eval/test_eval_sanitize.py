"""The evalplus-style sanitiser: what it keeps, and that `--sanitize` is applied and recorded."""

from __future__ import annotations

import json

from codeparrot.eval.config import ExecuteConfig
from codeparrot.eval.data import load_problems
from codeparrot.eval.humaneval import execute
from codeparrot.eval.sanitize import sanitize

PROGRAM = """import math
from typing import List

def helper(x):
    return x + OFFSET

OFFSET = 2

def unrelated():
    return undefined_name

@staticmethod
def f(a):
    return helper(a) * math.pi

print(f(1))
if __name__ == "__main__":
    f(2)
def g(
"""


def test_keeps_imports_and_what_the_entry_point_reaches():
    out = sanitize(PROGRAM, ["f"])
    compile(out, "<sanitized>", "exec")
    assert "import math" in out and "from typing import List" in out
    assert "def helper" in out and "OFFSET = 2" in out and "@staticmethod\ndef f(a):" in out
    assert "unrelated" not in out and "print" not in out and "__main__" not in out
    assert "def g(" not in out
    # no entry point found: every definition stays, the top-level statements still go
    kept = sanitize(PROGRAM, ["missing"])
    assert "def unrelated" in kept and "print" not in kept
    assert sanitize("def (:\n", ["f"]) == ""


def test_execute_sanitizes_when_asked_and_records_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    problem = load_problems()["HumanEval/2"]
    # right body, then the junk a model writes after it: a crashing top-level call
    completion = problem["canonical_solution"] + "\n\nprint(truncate_number(undefined))\n"
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/2", "completion": completion}) + "\n")
    plain = execute(ExecuteConfig(samples=samples, ks=(1,), workers=1), progress=False)
    assert plain["pass_at_k"] == {"pass@1": 0.0} and plain["scoring"]["sanitize"] is False
    out = tmp_path / "sanitized.jsonl"
    config = ExecuteConfig(samples=samples, output=out, ks=(1,), workers=1, sanitize=True)
    summary = execute(config, progress=False)
    assert summary["pass_at_k"] == {"pass@1": 1.0} and summary["scoring"]["sanitize"] is True
    row = json.loads(out.read_text())
    assert row["completion"] == completion and "undefined" not in row["sanitized"]
