"""SIGKILL a training process at a random step, `--resume`: the same weights as one run."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def write_corpus(root: Path) -> Path:
    docs = [f"def g{i}(n):\n    return [k * {i} for k in range(n)]\n" for i in range(60)]
    for split, part in (("train", docs[:50]), ("valid", docs[50:])):
        (root / split).mkdir(parents=True)
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"content": d}) + "\n" for d in part)
    return root


def latest_step(run: Path) -> int:
    steps = [int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("step-*")]
    return max(steps, default=0)


def _step(line: str) -> int | None:
    """The step of a metrics line (None for the line a kill tore)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError):
        return None


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_sigkill_then_resume_gives_the_uninterrupted_weights(tmp_path, tiny_checkpoint, compiled):
    from safetensors.torch import load_file

    corpus = write_corpus(tmp_path / "corpus")
    args = [
        sys.executable, "-m", "codeparrot.training", "--data", str(corpus),
        "--tokenizer", str(tiny_checkpoint), "--init-from", str(tiny_checkpoint),
        "--seq-length", "32", "--batch-size", "2", "--max-steps", "30", "--warmup-steps", "3",
        "--eval-every", "2", "--eval-batches", "1", "--keep-checkpoints", "2",
        "--mixed-precision", "bf16", "--log-with", "none", "--peak-tflops", "1",
        "--no-progress", "--shuffle-buffer", "8", "--log-every", "1", "--recipe", "codeparrot",
        *(["--compile"] if compiled else []),
    ]  # fmt: skip
    full = tmp_path / "full"
    subprocess.run(
        [*args, "--output", str(full)], env=ENV, check=True, capture_output=True, timeout=600
    )

    killed = tmp_path / "killed"
    kill_after = random.Random().randrange(4, 16)  # any step; the checkpoint may be mid-write
    proc = subprocess.Popen(
        [*args, "--output", str(killed)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    while latest_step(killed) < kill_after and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    stopped_at = latest_step(killed)
    assert 0 < stopped_at < 30
    kept = [line for line in (killed / "metrics.jsonl").read_text().splitlines()
            if _step(line) is not None and _step(line) <= stopped_at]  # fmt: skip
    assert kept

    resumed = subprocess.run(
        [*args, "--output", str(killed), "--resume"], env=ENV, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = load_file(str(full / "model.safetensors"))
    b = load_file(str(killed / "model.safetensors"))
    differ = [k for k in a if not a[k].equal(b[k])]
    assert not differ, f"killed after step {kill_after} (checkpoint {stopped_at}): {differ}"
    meta = json.loads((killed / "codeparrot_checkpoint.json").read_text())
    assert (
        meta["step"] == 30
        and meta["eval_loss"]
        == json.loads((full / "codeparrot_checkpoint.json").read_text())["eval_loss"]
    )
    steps = [json.loads(x)["step"] for x in (killed / "metrics.jsonl").read_text().splitlines()]
    train_steps = [
        s
        for s, x in zip(steps, (killed / "metrics.jsonl").read_text().splitlines(), strict=True)
        if '"loss"' in x
    ]
    assert train_steps == list(range(1, 31))  # lines logged after the checkpoint were redone once
    # resumed from the latest checkpoint: the steps before it were not trained (and logged,
    # with their own times) again
    assert (killed / "metrics.jsonl").read_text().splitlines()[: len(kept)] == kept
