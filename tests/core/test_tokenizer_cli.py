"""`codeparrot tokenizer train|report` end to end, as a user runs them."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from codeparrot.cli import main


def write_corpus(root: Path, train: list[str], valid: list[str]) -> Path:
    for split, texts in (("train", train), ("valid", valid)):
        (root / split).mkdir(parents=True, exist_ok=True)
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            for i, text in enumerate(texts):
                fh.write(json.dumps({"path": f"f{i}.py", "content": text, "hash": str(i)}) + "\n")
    (root / "manifest.json").write_text(json.dumps({"provenance": {"created": "cli-test"}}))
    return root


def stdlib_texts(n: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if 2_000 < p.stat().st_size < 40_000)
    return [p.read_text(encoding="utf-8") for p in files[:n]]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "codeparrot", *args], capture_output=True, text=True, timeout=300
    )


def test_train_in_a_subprocess_then_report_json(tmp_path, capsys):
    texts = stdlib_texts(25)
    data = write_corpus(tmp_path / "corpus", texts[:22], texts[22:])
    out = tmp_path / "tok"
    done = run_cli(
        "tokenizer", "train", "--data", str(data), "--output", str(out),
        "--vocab-size", "600", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}: vocab 600, trained on 22 files" in done.stdout

    # The report in-process (one subprocess start is slow enough on 2 busy cores).
    assert main(["tokenizer", "report", "--tokenizer", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vocab_size"] == 600
    assert report["heldout"]["files"] == 3
    assert report["gpt2"]["ratio"] > 0


def test_report_prints_a_table(tmp_path, capsys):
    texts = stdlib_texts(12)
    data = write_corpus(tmp_path / "corpus", texts[:10], texts[10:])
    out = tmp_path / "tok"
    args = ["--data", str(data), "--output", str(out), "--vocab-size", "400", "--no-progress"]
    assert main(["tokenizer", "train", *args]) == 0
    assert main(["tokenizer", "report", "--tokenizer", str(out), str(data / "valid")]) == 0
    table = capsys.readouterr().out
    assert "held-out files         2 (" in table
    assert "GPT-2 tokens / ours" in table


def test_bad_input_exits_with_a_message_naming_the_problem(tmp_path, capsys):
    assert main(["tokenizer", "train", "--data", str(tmp_path), "--output", str(tmp_path / "t"),
                 "--vocab-size", "100"]) == 2  # fmt: skip
    assert "--vocab-size must be at least 257" in capsys.readouterr().err

    empty = write_corpus(tmp_path / "empty", [], [])
    code = main(["tokenizer", "train", "--data", str(empty), "--output", str(tmp_path / "t"),
                 "--no-progress"])  # fmt: skip
    assert code == 1
    assert "empty corpus" in capsys.readouterr().err

    assert main(["tokenizer", "report", "--tokenizer", str(tmp_path / "missing")]) == 1
    assert "no such tokenizer directory" in capsys.readouterr().err


def test_help_lists_both_actions(capsys):
    try:
        main(["tokenizer", "--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    # each action listed on a line of its own (the description names "report" too)
    assert re.search(r"^\s+train\s", out, re.M) and re.search(r"^\s+report\s", out, re.M)
