"""Infilling tasks through the registry: scored as prompt + middle + suffix, with exact match."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeparrot.cli import main
from codeparrot.eval.config import ExecuteConfig, GenerateConfig
from codeparrot.eval.humaneval import execute
from codeparrot.eval.tasks import load_task


def test_execute_scores_middles_with_pass_and_exact_match(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    problems = load_task("infill-single-line").problems
    assert len(problems) == 1033
    task_id = "SingleLineInfilling/HumanEval/0/L3"  # a line with code after it
    middle = problems[task_id]["canonical_solution"]
    assert problems[task_id]["suffix"]
    samples = tmp_path / "s.jsonl"
    rows = [
        {"task_id": task_id, "completion": middle},
        {"task_id": task_id, "completion": middle.rstrip("\n") + "  \n\n"},  # same text
        {"task_id": task_id, "completion": "    return 0.0\n"},
        # as generation writes it: stopped at the line break, which is left out
        {"task_id": task_id, "completion": middle.rstrip("\n")},
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = ExecuteConfig(samples=samples, task="infill-single-line", ks=(1,), workers=2)
    summary = execute(config, progress=False)
    results = [json.loads(line) for line in (tmp_path / "s_results.jsonl").read_text().splitlines()]
    assert [(r["passed"], r["exact_match"]) for r in results] == [
        (True, True),
        (True, True),
        (False, False),
        (True, True),
    ]
    assert summary["exact_match"] == 3 / 4
    assert summary["pass_at_k"]["pass@1"] == 3 / 4


def test_a_checkpoint_without_sentinels_is_refused_before_generating(
    tiny_checkpoint, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["eval", "generate", "--task", "infill-single-line", "--checkpoint",
            str(tiny_checkpoint), "--output", str(out), "--limit", "1", "--n", "1"]  # fmt: skip
    assert main(argv) == 1
    assert "fill-in-the-middle sentinels" in capsys.readouterr().err
    assert not (out / "samples.jsonl").exists()


def build_fim_tokenizer_checkpoint(out: Path) -> Path:
    """A random 2-layer GPT-2 whose tokenizer has the FIM sentinels (untrained: plumbing only)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from codeparrot.fim import SENTINELS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", *SENTINELS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["def f(x):\n    return x + 1\n" * 20], trainer=trainer)
    eos = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=eos, eos_token=eos, unk_token=eos, model_max_length=512
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=512, n_embd=32, n_layer=2, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_infill_end_to_end_sends_the_suffix(tmp_path, monkeypatch):
    from codeparrot.generation import Engine

    checkpoint = build_fim_tokenizer_checkpoint(tmp_path / "fim")
    seen = []
    real_load = Engine.load

    class Recording:
        """The run's engine (loaded with the run's FIM settings), its calls recorded."""

        def __init__(self, engine: Engine) -> None:
            self.engine, self.fim, self.fim_layout = engine, engine.fim, engine.fim_layout

        def generate(self, prompt, config, **kwargs):
            seen.append((prompt, kwargs.get("suffix"), self.fim_layout.suffix_share))
            return self.engine.generate(prompt, config, **kwargs)

    def load(*args, **kwargs):
        return Recording(real_load(*args, **kwargs))

    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    out = tmp_path / "out"
    argv = ["eval", "humaneval", "--task", "infill-single-line", "--checkpoint", str(checkpoint),
            "--output", str(out), "--limit", "2", "--n", "1", "--batch-size", "1",
            "--max-new-tokens", "4", "--ks", "1", "--workers", "2",
            "--fim-suffix-share", "0.5"]  # fmt: skip
    assert main(argv) == 0
    tasks = load_task("infill-single-line").problems
    ids = ["SingleLineInfilling/HumanEval/0/L0", "SingleLineInfilling/HumanEval/0/L1"]
    # two tasks in two threads: either may reach the engine first
    assert sorted(seen) == sorted((tasks[t]["prompt"], tasks[t]["suffix"], 0.5) for t in ids)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ids
    assert all("exact_match" in r for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert "exact_match" in summary and "pass@1" in summary["pass_at_k"]
    assert summary["generation"]["task"] == "infill-single-line"
    assert summary["generation"]["fim_suffix_share"] == 0.5


def test_eval_infill_is_the_humaneval_run_of_an_infilling_task(tmp_path, monkeypatch):
    from codeparrot.eval import humaneval
    from codeparrot.eval.config import InfillConfig

    config = InfillConfig(checkpoint=tmp_path / "ckpt", task="multi-line")
    converted = config.humaneval_config()
    assert converted.task == "infill-multi-line" and converted.temperature == 0.0
    assert converted.n == 1 and converted.output_dir() == tmp_path / "ckpt" / "infill-multi-line"

    checkpoint = build_fim_tokenizer_checkpoint(tmp_path / "fim")
    seen = []
    real = humaneval.run
    monkeypatch.setattr(humaneval, "run", lambda cfg: seen.append(cfg) or real(cfg))
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    out = tmp_path / "out"
    argv = ["eval", "infill", "--checkpoint", str(checkpoint), "--output", str(out),
            "--limit", "1", "--max-new-tokens", "4", "--ks", "1", "--workers", "1"]  # fmt: skip
    assert main(argv) == 0
    assert seen[0].task == "infill-single-line"
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["SingleLineInfilling/HumanEval/0/L0"]


def test_syntax_samples_replace_a_middle_that_breaks_the_program(tmp_path, monkeypatch):
    from codeparrot.eval import humaneval
    from codeparrot.generation.engine import Completion, StreamEvent

    task_id = "SingleLineInfilling/HumanEval/0/L3"
    reference = load_task("infill-single-line").problems[task_id]["canonical_solution"]
    calls = []

    class Scripted:
        fim = object()

        def generate(self, prompt, config, cancel=None, **kwargs):
            calls.append((config.n, config.temperature, kwargs.get("suffix") is not None))
            texts = ["                if x:"] if config.n == 1 else [
                "                if y:", reference.rstrip("\n"), "                d = 0"
            ]  # fmt: skip
            return [Completion(t, "stop", 5, 3, 0.1, seed=config.seed) for t in texts]

        def stream(self, prompt, config, cancel=None, **kwargs):
            for i, made in enumerate(self.generate(prompt, config, cancel, **kwargs)):
                yield StreamEvent(i, made.text, made)

    monkeypatch.setattr(humaneval, "_load_engine", lambda config, group: Scripted())
    out = tmp_path / "out"
    argv = ["eval", "generate", "--task", "infill-single-line", "--checkpoint", str(tmp_path),
            "--output", str(out), "--problems", task_id, "--n", "1", "--temperature", "0",
            "--max-new-tokens", "8", "--syntax-samples", "3"]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    # the greedy middle opens a block the suffix never indents under: the draws that parse
    # are the reference and "d = 0", one each; the first drawn wins the tie
    assert [r["completion"] for r in rows] == [reference.rstrip("\n")]
    assert calls == [(1, 0.0, True), (3, 0.8, True)]
    meta = json.loads((out / "samples.meta.json").read_text())
    assert meta["generation"]["syntax_samples"] == 3


def test_an_engine_given_to_an_infilling_run_must_have_its_fim_settings(tmp_path):
    """What the summary records is what laid the prompts out: an engine loaded with other
    FIM settings than the run's is refused before any sample is made."""
    from codeparrot.errors import ConfigError
    from codeparrot.eval.humaneval import generate
    from codeparrot.generation import Engine
    from codeparrot.generation.config import FimSettings

    checkpoint = build_fim_tokenizer_checkpoint(tmp_path / "fim")
    engine = Engine.load(checkpoint, fim=FimSettings(fim_suffix_share=0.5))
    config = GenerateConfig(
        task="infill-single-line", checkpoint=checkpoint, output=tmp_path / "out", limit=1,
        n=1, batch_size=1, max_new_tokens=4,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"--fim-suffix-share 0\.25: the engine given was"):
        generate(config, engine=engine, progress=False)
    assert not list((tmp_path / "out").glob("*.jsonl"))
    summary = generate(config.replace(fim_suffix_share=0.5), engine=engine, progress=False)
    assert summary["samples"] == 1
