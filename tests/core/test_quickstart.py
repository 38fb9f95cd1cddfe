"""`codeparrot quickstart` end to end on a tiny source tree with tiny budgets."""

from __future__ import annotations

import json
import shutil
import sysconfig
from pathlib import Path

import pytest

from codeparrot.cli import main
from codeparrot.errors import ConfigError
from codeparrot.quickstart import QuickstartConfig
from codeparrot.quickstart.cli import format_summary

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("src")
    for package in ("json", "email", "logging", "asyncio"):
        shutil.copytree(
            STDLIB / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return root


def _args(output: Path, source: Path, *extra: str) -> list[str]:
    return [
        "quickstart",
        "--output", str(output),
        "--source", str(source),
        "--vocab-size", "600",
        "--tokenizer-files", "50",
        "--max-steps", "3",
        "--batch-size", "2",
        "--eval-n", "2",
        "--eval-limit", "1",
        "--eval-max-new-tokens", "16",
        "--infill-sample", "2",
        "--no-compile",
        *extra,
    ]  # fmt: skip


def test_quickstart_runs_every_step_then_reuses_them(tmp_path, source_tree, capsys):
    out = tmp_path / "run"
    assert main(_args(out, source_tree, "--allow-code-execution")) == 0
    printed = capsys.readouterr().out
    assert "[4/5] Scoring HumanEval in the sandbox ..." in printed
    assert "pass@1" in printed and "codeparrot app " in printed
    assert "nats/char)" in printed  # a loss comparable across tokenizers
    assert "3 of 3 planned steps" in printed and "precision: " in printed
    assert "WARNING: this machine trained" not in printed  # it saw every planned token
    assert "HumanEval's reference solutions: " in printed  # moves before pass@k does
    # trained with FIM by default (the tokenizer has the sentinels): infilling is scored
    assert "[5/5] Scoring single-line infilling in the sandbox ..." in printed
    assert "single-line pass@1" in printed and "on 2 of OpenAI's 1,033 tasks" in printed

    state = json.loads((out / "quickstart.json").read_text())
    assert set(state["steps"]) == {"corpus", "tokenizer", "train", "eval", "infill"}
    assert state["steps"]["train"]["facts"]["step"] == 3
    assert 0 < state["steps"]["train"]["facts"]["humaneval_solutions_nats_per_char"] < 20
    summary = json.loads((out / "model" / "humaneval" / "summary.json").read_text())
    assert summary["samples"] == 2
    infill = json.loads((out / "model" / "infill-single-line" / "summary.json").read_text())
    assert infill["samples"] == 2 and "exact_match" in infill
    # the checkpoint is usable by the inference engine
    from codeparrot.generation import Engine, GenerationConfig

    engine = Engine.load(out / "model")
    (completion,) = engine.generate("def f(x):", GenerationConfig(max_new_tokens=4, seed=0))
    assert completion.prompt_tokens > 0 and completion.finish_reason in ("length", "eos", "stop")
    # trained with the recipe the quickstart documents (RESULTS.md, Recipe ablations)
    meta = json.loads((out / "model" / "codeparrot_checkpoint.json").read_text())
    trained = meta["train_config"]
    assert (trained["preset"], trained["optimizer"], trained["schedule"]) == (
        "tiny-qwen", "muon", "wsd",
    )  # fmt: skip
    assert trained["learning_rate"] == 3e-3
    assert json.loads((out / "model" / "config.json").read_text())["model_type"] == "qwen3"

    # A second run reuses every step.
    assert main(_args(out, source_tree, "--allow-code-execution")) == 0
    printed = capsys.readouterr().out
    assert printed.count(": reusing ") == 5

    # Changing a training setting redoes training and what depends on it, not the corpus.
    assert main(_args(out, source_tree, "--max-steps", "4")) == 0
    printed = capsys.readouterr().out
    assert "[1/5] Building the corpus: reusing" in printed
    assert "[3/5] Pretraining the model ..." in printed
    assert "skipped. HumanEval runs model-written code" in printed


def _trained(step: int, planned: int, tokens_per_s: float) -> dict:
    tokens = step * 16 * 256
    return {
        "steps": {
            "train": {
                "status": "done",
                "facts": {
                    "step": step, "planned_steps": planned, "max_steps": 1000,
                    "designed_tokens": 1000 * 16 * 256, "tokens_seen": tokens,
                    "tokens_per_s": tokens_per_s, "minutes": tokens / tokens_per_s / 60,
                    "parameters": 5_000_000, "eval_loss": 8.9, "perplexity": 7000.0,
                    "precision": {"mixed_precision": "no"},
                },
            }
        }
    }  # fmt: skip


def test_the_summary_warns_when_the_model_saw_under_a_quarter_of_its_tokens():
    """A slow machine (47 tokens/s, as a CPU emulating bf16 ran) reaches 10 steps in 14
    minutes: the summary says so in plain words and what to do."""
    cfg = QuickstartConfig()
    slow = format_summary(cfg, _trained(10, 10, 47.0))
    assert "10 of 10 planned steps (the recipe's 1,000, shortened to fit --max-minutes)" in slow
    assert "(47 tokens/s, fp32)" in slow
    assert "WARNING: this machine trained the model on only 0.04M of the 4.10M tokens" in slow
    assert "--max-minutes 1453" in slow
    # a quarter of the tokens or more: no warning
    fast = format_summary(cfg, _trained(250, 250, 5000.0))
    assert "250 of 250 planned steps" in fast and "WARNING" not in fast


def test_bad_values_are_named():
    with pytest.raises(ConfigError) as e:
        QuickstartConfig(vocab_size=100, eval_n=0)
    assert "--vocab-size" in str(e.value) and "--eval-n" in str(e.value)


def test_missing_source_is_a_clear_error(tmp_path, capsys):
    code = main(["quickstart", "--output", str(tmp_path / "o"), "--source", str(tmp_path / "nope")])
    assert code != 0
    assert "nope" in capsys.readouterr().err
    assert not (tmp_path / "o" / "corpus").exists()


def test_settings_that_would_fail_after_training_are_refused_first(tmp_path, source_tree, capsys):
    # the tiny preset's context is 256 tokens: 256 new tokens leave no room for a prompt
    code = main(_args(tmp_path / "o", source_tree, "--eval-max-new-tokens", "256"))
    assert code != 0
    assert "--eval-max-new-tokens 256" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_core_never_imports_a_stage_above_it():
    """The orchestrator lives in codeparrot.quickstart; of the core only the CLI table names
    the stages (and imports each inside its subcommand)."""
    import ast

    import codeparrot
    import codeparrot.quickstart

    above = ("training", "eval", "app", "lsp", "quickstart")
    core = Path(codeparrot.__path__[0])
    assert Path(codeparrot.quickstart.__path__[0]) != core / "quickstart"  # its own folder
    upward = []
    for path in sorted(core.rglob("*.py")):
        if path == core / "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level:  # relative: from its package
                package = ["codeparrot", *path.relative_to(core).parent.parts]
                base = ".".join(package[: len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
                names = [module, *(f"{module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.split(".")[:2] in (["codeparrot", s] for s in above) for n in names):
                upward.append(f"{path.relative_to(core)}:{node.lineno}")
    assert upward == []
