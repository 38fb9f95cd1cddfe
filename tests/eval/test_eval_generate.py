"""`eval generate`: no execution permission, resumable to the same file, data-parallel under `accelerate launch`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.cli import main
from codeparrot.eval.config import GenerateConfig
from codeparrot.eval.data import load_problems, select_problems
from codeparrot.eval.humaneval import generate_samples


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from codeparrot.generation import Engine

    return Engine.load(tiny_checkpoint)


def test_generate_needs_no_permission_and_records_settings(
    tiny_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("CODEPARROT_ALLOW_CODE_EXECUTION", raising=False)
    out = tmp_path / "gen"
    argv = ["eval", "generate", "--checkpoint", str(tiny_checkpoint), "--output", str(out),
            "--n", "2", "--batch-size", "2", "--max-new-tokens", "4", "--limit", "2"]  # fmt: skip
    assert main(argv) == 0
    assert "4 samples of 2 problems" in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["HumanEval/0"] * 2 + ["HumanEval/1"] * 2
    meta = json.loads((out / "samples.meta.json").read_text())
    assert meta["generation"]["task"] == "humaneval"
    assert meta["generation"]["max_new_tokens"] == 4
    assert not (out / "results.jsonl").exists()


def test_interrupted_generation_resumes_to_the_same_file(tmp_path, tiny_checkpoint, engine):
    problems = select_problems(load_problems(), limit=3)
    settings = dict(
        checkpoint=tiny_checkpoint, n=4, batch_size=2, max_new_tokens=8, temperature=0.8
    )
    whole = generate_samples(GenerateConfig(output=tmp_path / "whole", **settings), problems,
                             engine=engine, progress=False)  # fmt: skip
    config = GenerateConfig(output=tmp_path / "resumed", **settings)
    made = []

    def stop_after_half(record):  # a kill: samples reach the disk a batch at a time
        made.append(record)
        if len(made) == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_samples(config, problems, engine=engine, progress=False, on_sample=stop_after_half)
    path = tmp_path / "resumed" / "samples.jsonl"
    assert len(path.read_text().splitlines()) == 6
    generate_samples(config, problems, engine=engine, progress=False)
    assert path.read_text() == whole.read_text()
    assert len(path.read_text().splitlines()) == 12


def test_problems_in_threads_write_the_file_one_thread_writes(tmp_path, tiny_checkpoint, engine):
    """--threads changes how fast, never what: the same samples in the same order."""
    problems = select_problems(load_problems(), limit=5)
    settings = dict(
        checkpoint=tiny_checkpoint, n=3, batch_size=2, max_new_tokens=8, temperature=0.8
    )
    one = generate_samples(GenerateConfig(output=tmp_path / "one", threads=1, **settings),
                           problems, engine=engine, progress=False)  # fmt: skip
    three = generate_samples(GenerateConfig(output=tmp_path / "three", threads=3, **settings),
                             problems, engine=engine, progress=False)  # fmt: skip
    assert len(one.read_text().splitlines()) == 15
    assert three.read_text() == one.read_text()


def test_default_threads_use_the_idle_core_on_a_cpu_only():
    from types import SimpleNamespace

    from codeparrot.eval.humaneval import default_threads

    cores = len(os.sched_getaffinity(0))
    assert default_threads(SimpleNamespace(device="cpu")) == min(2, cores)
    assert default_threads(SimpleNamespace(device="cpu"), world=cores) == 1  # one per process
    assert default_threads(SimpleNamespace(device="cuda:0")) == 1


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_two_processes_write_the_file_one_process_writes(tmp_path, tiny_checkpoint):
    common = ["generate", "--checkpoint", str(tiny_checkpoint), "--n", "3", "--batch-size", "2",
              "--max-new-tokens", "12", "--limit", "5", "--temperature", "0.8", "--device", "cpu"]  # fmt: skip
    run(
        [sys.executable, "-m", "codeparrot.eval", *common, "--output", str(tmp_path / "one")],
        tmp_path,
    )
    accelerate = str(Path(sys.executable).parent / "accelerate")
    launch = [accelerate, "launch", "--cpu", "--num_processes", "2", "--main_process_port", "0",
              "-m", "codeparrot.eval"]  # fmt: skip
    two_processes = run([*launch, *common, "--output", str(tmp_path / "two")], tmp_path)
    assert "starting 2 with torchrun" in two_processes.stderr
    one = (tmp_path / "one" / "samples.jsonl").read_text()
    two = (tmp_path / "two" / "samples.jsonl").read_text()
    assert len(one.splitlines()) == 15
    assert two == one
    assert not list((tmp_path / "two").glob("samples.shard-*"))


def test_humaneval_refuses_a_launcher_group(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = ["eval", "humaneval", "--checkpoint", str(tiny_checkpoint), "--output",
            str(tmp_path / "out"), "--allow-code-execution"]  # fmt: skip
    assert main(argv) == 2  # a usage error, like other config errors
    assert "eval generate" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_default_max_new_tokens_fits_a_small_context(tiny_checkpoint, tmp_path, monkeypatch):
    """With no --max-new-tokens, a model whose context is under 512 tokens (the quickstart's
    is 256) gets half its context rather than an error: the reference's 256 would leave no
    room for the prompt."""
    from codeparrot.models.checkpoint import context_length, read_model_config

    monkeypatch.delenv("CODEPARROT_ALLOW_CODE_EXECUTION", raising=False)
    context = context_length(read_model_config(tiny_checkpoint))
    assert context < 512  # the fixture is what this test is about
    out = tmp_path / "gen"
    argv = ["eval", "generate", "--checkpoint", str(tiny_checkpoint), "--output", str(out),
            "--n", "1", "--batch-size", "1", "--limit", "1", "--temperature", "0"]  # fmt: skip
    assert main(argv) == 0
    meta = json.loads((out / "samples.meta.json").read_text())
    assert meta["generation"]["max_new_tokens"] == context // 2


def test_samples_made_with_other_stop_sequences_are_not_resumed(tiny_checkpoint, tmp_path):
    """A samples file from a version whose task stopped elsewhere is refused, not mixed in."""
    from codeparrot.errors import DataError

    problems = select_problems(load_problems(), limit=1)
    config = GenerateConfig(checkpoint=tiny_checkpoint, output=tmp_path, n=1, batch_size=1,
                            max_new_tokens=4, temperature=0.0)  # fmt: skip
    generate_samples(config, problems, progress=False)
    meta_path = tmp_path / "samples.meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["generation"]["stop"]  # HumanEval's stop sequences are recorded
    meta["generation"]["stop"] = ["\n"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="stop"):
        generate_samples(config.replace(n=2), problems, progress=False)


def test_a_seeded_sample_of_problems_is_spread_and_repeatable():
    """--sample K draws K problems across the set (not the first K), the same for a seed."""
    problems = load_problems()
    drawn = select_problems(problems, sample=10, seed=3)
    assert len(drawn) == 10
    assert drawn == select_problems(problems, sample=10, seed=3)
    assert drawn != select_problems(problems, sample=10, seed=4)
    assert list(drawn) != list(problems)[:10]
    order = list(problems)
    assert [order.index(t) for t in drawn] == sorted(order.index(t) for t in drawn)
