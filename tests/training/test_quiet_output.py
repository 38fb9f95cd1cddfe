"""A normal `train` and `finetune` run prints no warning from the libraries underneath."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
# What transformers, torch, accelerate and Python's warnings module print when they warn.
WARNING = re.compile(r"warn|\[transformers\]|deprecat|token indices sequence length", re.I)


def codeparrot(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "codeparrot", *args],
        cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_train_then_finetune_print_no_library_warning(tmp_path, tiny_checkpoint):
    # documents far longer than the 256-token context: a tokenizer that believed in a
    # longer context would be called with them and warn
    docs = [f"def g{i}(n):\n    return [k * {i} for k in range(n)]\n" * 40 for i in range(40)]
    for split, part in (("train", docs[:32]), ("valid", docs[32:])):
        (tmp_path / "corpus" / split).mkdir(parents=True)
        with gzip.open(tmp_path / "corpus" / split / "shard-00000.jsonl.gz", "wt") as fh:
            fh.writelines(json.dumps({"content": d}) + "\n" for d in part)
    repo = tmp_path / "repo" / "pkg"
    repo.mkdir(parents=True)
    for name in ("textwrap.py", "heapq.py", "bisect.py", "fnmatch.py", "glob.py", "shlex.py"):
        shutil.copyfile(Path(sysconfig.get_paths()["stdlib"]) / name, repo / name)

    common = ("--max-steps", "2", "--seq-length", "64", "--log-with", "none", "--no-progress")
    stderr = codeparrot(
        "train", "--data", "corpus", "--tokenizer", str(tiny_checkpoint), "--init-from",
        str(tiny_checkpoint), "--output", "run", "--batch-size", "2", "--eval-batches", "1",
        "--peak-tflops", "1", "--recipe", "codeparrot", *common, cwd=tmp_path,
    )  # fmt: skip
    stderr += codeparrot(
        "finetune", "repo", "--checkpoint", "run", "--output", "ft", "--eval-tokens", "500",
        "--workers", "1", *common, cwd=tmp_path,
    )  # fmt: skip
    assert [line for line in stderr.splitlines() if WARNING.search(line)] == []

    from transformers import AutoTokenizer

    for exported in ("run", "ft/model"):
        tokenizer = AutoTokenizer.from_pretrained(tmp_path / exported)
        assert tokenizer.model_max_length == 256  # the tiny checkpoint's n_positions
