"""Model card facts read from the artefacts beside a checkpoint (no model loaded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from codeparrot.app.model_card import checkpoint_label, read_metrics, read_model_card


def test_foreign_checkpoint_counts_parameters_from_the_weights(tiny_checkpoint: Path):
    from transformers import AutoModelForCausalLM

    card = read_model_card(tiny_checkpoint)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    assert card.exists and card.parameters_source == "safetensors"
    assert card.parameters == model.num_parameters()
    assert card.context_length == model.config.n_positions
    assert card.tokens_seen is None and card.pass_at_k == {} and card.run_dir is None
    text = card.summary_markdown()
    assert "no report beside this checkpoint" in text and "tokens trained | unknown" in text


def test_training_facts_and_report_are_shown(tmp_path: Path):
    ck = tmp_path / "run"
    ck.mkdir()
    (ck / "config.json").write_text(json.dumps({"n_positions": 1024}))
    facts = {"step": 20, "tokens_seen": 2_500_000_000, "parameters": 111_000_000, "eval_loss": 1.5}
    (ck / "codeparrot_checkpoint.json").write_text(json.dumps(facts))
    (ck / "humaneval").mkdir()
    summary = {
        "pass_at_k": {"pass@10": 0.0657, "pass@1": 0.038, "pass@100": 0.1278},
        "problems": 164,
        "samples": 32_800,
        "solved": 2,
        "per_problem": {
            "HumanEval/0": {"samples": 200, "passed": 13},
            "HumanEval/1": {"samples": 200, "passed": 0},
            "HumanEval/2": {"samples": 200, "passed": 200},
        },
        "generation": {"n": 200, "temperature": 0.2, "top_p": 0.95},
    }
    (ck / "humaneval" / "summary.json").write_text(json.dumps(summary))

    card = read_model_card(ck)
    assert card.parameters == 111_000_000 and card.parameters_source == "checkpoint"
    text = card.summary_markdown()
    assert "111.0M (111,000,000)" in text and "2.5B (2,500,000,000)" in text
    assert "| eval loss | 1.500 |" in text and "| perplexity | unknown |" in text
    # pass@k rows in order of k
    assert text.index("pass@1 |") < text.index("pass@10 |") < text.index("pass@100 |")
    assert "| HumanEval pass@100 | 12.78% |" in text
    report = card.humaneval_markdown()
    assert "| problems | 164 |" in report and "| samples | 32,800 |" in report
    assert "n=200, temperature=0.2" in report
    assert "`HumanEval/0` (13/200), `HumanEval/2` (200/200)." in report
    assert "HumanEval/1`" not in report


def test_intermediate_checkpoint_finds_the_runs_curve(tmp_path: Path):
    run = tmp_path / "myrun"
    step = run / "checkpoints" / "step-000500"
    step.mkdir(parents=True)
    lines = [json.dumps({"step": s, "loss": 9.0 - s / 100}) for s in (100, 200, 300)]
    (run / "metrics.jsonl").write_text("\n".join([*lines, "{not json", '{"loss": 1.0}']) + "\n")

    card = read_model_card(step)
    assert checkpoint_label(step) == "myrun/step-000500" and card.name == "myrun/step-000500"
    assert card.run_dir == run and card.loss_curve is None
    assert [m["loss"] for m in card.metrics] == [8.0, 7.0, 6.0]
    assert any("skipped 2 unreadable line(s)" in p for p in card.problems)
    assert "skipped 2" in card.summary_markdown()


def test_missing_and_broken_checkpoints_say_so(tmp_path: Path, tiny_checkpoint: Path):
    missing = read_model_card(tmp_path / "gone")
    assert not missing.exists and "no such directory" in missing.summary_markdown()

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "codeparrot_checkpoint.json").write_text("{truncated")
    (broken / "model.safetensors").write_bytes(b"\x00" * 4)
    card = read_model_card(broken)
    assert card.parameters is None
    assert any("codeparrot_checkpoint.json is unreadable" in p for p in card.problems)
    assert "| parameters | unknown |" in card.summary_markdown()


def test_read_metrics_of_a_missing_file_is_empty(tmp_path: Path):
    assert read_metrics(tmp_path / "metrics.jsonl") == ()
