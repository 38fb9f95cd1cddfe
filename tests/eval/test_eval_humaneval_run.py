"""`codeparrot eval humaneval` end to end on the tiny checkpoint, and resuming samples."""

from __future__ import annotations

import json
import threading

import pytest

from codeparrot.cli import main
from codeparrot.errors import DataError
from codeparrot.eval.config import HumanEvalConfig
from codeparrot.eval.data import load_problems, select_problems
from codeparrot.eval.humaneval import generate_samples


class CountingEngine:
    """The real engine, counting how many samples it was asked for."""

    def __init__(self, engine):
        self.engine = engine
        self.requested = 0
        self.prompts = []
        self.lock = threading.Lock()  # generation runs problems in threads

    def generate(self, prompt, config, cancel=None):
        with self.lock:
            self.requested += config.n
            self.prompts.append(prompt)
        return self.engine.generate(prompt, config, cancel)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from codeparrot.generation import Engine

    return Engine.load(tiny_checkpoint)


def test_cli_writes_the_report(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "report"
    argv = [
        "eval", "humaneval", "--checkpoint", str(tiny_checkpoint), "--output", str(out),
        "--n", "2", "--batch-size", "2", "--max-new-tokens", "8", "--limit", "2",
        "--workers", "2", "--allow-code-execution",
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "pass@1:" in printed and "pass@10" not in printed
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["task_id"] for s in samples] == ["HumanEval/0"] * 2 + ["HumanEval/1"] * 2
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["completion"] for r in results] == [s["completion"] for s in samples]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["pass_at_k"]) == {"pass@1"}
    assert summary["generation"]["temperature"] == 0.2
    assert summary["generation"]["top_p"] == 0.95
    assert summary["per_problem"]["HumanEval/1"]["samples"] == 2
    assert (out / "pass_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_interrupted_generation_resumes_without_redoing(tmp_path, tiny_checkpoint, engine):
    problems = select_problems(load_problems(), limit=2)
    config = HumanEvalConfig(
        checkpoint=tiny_checkpoint, output=tmp_path, n=5, batch_size=2, max_new_tokens=8
    )
    made = []

    def interrupt_after_three(record):
        made.append(record)
        if len(made) == 3:
            raise KeyboardInterrupt

    counting = CountingEngine(engine)
    with pytest.raises(KeyboardInterrupt):
        generate_samples(
            config, problems, engine=counting, progress=False, on_sample=interrupt_after_three
        )
    path = tmp_path / "samples.jsonl"
    first = path.read_text().splitlines()
    assert len(first) == 3
    with open(path, "a") as fh:  # a write torn by the interruption
        fh.write('{"task_id": "HumanEval/0", "compl')
    counting.requested = 0
    generate_samples(config, problems, engine=counting, progress=False)
    lines = path.read_text().splitlines()
    assert lines[:3] == first
    assert len(lines) == 10
    assert counting.requested == 7
    records = [json.loads(line) for line in lines]
    assert sum(r["task_id"] == "HumanEval/0" for r in records) == 5
    counting.requested = 0
    generate_samples(config, problems, engine=counting, progress=False)
    assert counting.requested == 0
    # the model gets each prompt whole (the engine heals its last token)
    assert set(counting.prompts) == {p["prompt"] for p in problems.values()}

    with pytest.raises(DataError, match="temperature"):
        generate_samples(config.replace(temperature=0.8), problems, engine=counting, progress=False)


def test_humaneval_refuses_before_generating(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CODEPARROT_ALLOW_CODE_EXECUTION", raising=False)
    out = tmp_path / "report"
    argv = ["eval", "humaneval", "--checkpoint", str(tiny_checkpoint), "--output", str(out)]
    assert main(argv) == 1
    assert "--allow-code-execution" in capsys.readouterr().err
    assert not out.exists()
