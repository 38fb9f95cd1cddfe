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


# Every prefix of this ends inside an open parenthesis: cutting one line per parse (as
# the sanitiser did, over every prefix) would take as many parses as there are lines.
NO_PARSABLE_PREFIX = "f(\n" + ")(\n" * 3000


def counting_parses(monkeypatch) -> list[int]:
    from codeparrot.eval import sanitize as module

    calls = [0]
    parse = module.ast.parse

    def counted(*args, **kwargs):
        calls[0] += 1
        return parse(*args, **kwargs)

    monkeypatch.setattr(module.ast, "parse", counted)
    return calls


def test_a_long_unparsable_completion_costs_a_bounded_number_of_parses(monkeypatch):
    from codeparrot.eval.sanitize import MAX_PARSES, skipped

    calls = counting_parses(monkeypatch)
    out = sanitize("def f():\n    return 1\n" + NO_PARSABLE_PREFIX, ["f"])
    assert calls[0] <= MAX_PARSES
    assert skipped(out) and out.endswith(NO_PARSABLE_PREFIX)  # run as written
    # a completion cut mid-statement after thousands of good lines: two parses
    calls[0] = 0
    good = "".join(f"def g{i}():\n    return {i}\n" for i in range(2000))
    out = sanitize(good + "def f():\n    return g7()\nprint(f(", ["f"])
    assert calls[0] == 2 and out == "def g7():\n    return 7\n\ndef f():\n    return g7()\n"
    calls[0] = 0
    assert skipped(sanitize("x = 1\n" * 20_000, ["f"])) and calls[0] == 0  # over the size cap


def test_the_run_counts_completions_left_unsanitised(tmp_path, monkeypatch, capsys):
    from codeparrot.cli import main

    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    canonical = load_problems()["HumanEval/2"]["canonical_solution"]
    samples = tmp_path / "s.jsonl"
    lines = [canonical + "\n" + NO_PARSABLE_PREFIX[:300], canonical + "\nprint(1\n"]
    samples.write_text(
        "".join(json.dumps({"task_id": "HumanEval/2", "completion": c}) + "\n" for c in lines)
    )
    out = tmp_path / "r.jsonl"
    argv = ["eval", "execute", str(samples), "--output", str(out), "--ks", "1", "--sanitize"]
    assert main([*argv, "--workers", "1"]) == 0
    assert "left 1 completions as written" in capsys.readouterr().out
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["sanitize_skipped"] == 1 and summary["sanitize_refused"] == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["passed"] for r in rows] == [False, True]  # as written it does not parse
