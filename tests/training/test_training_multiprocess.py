"""Two processes on CPU train with DDP (gloo) exactly like one process with twice the batch.

The command is the documented one, `accelerate launch --cpu --num_processes 2 -m codeparrot.training`.
accelerate 1.15 starts one process for it without MPI; `python -m codeparrot.training` then starts the
two with torchrun (codeparrot/launch.py), which needs nothing installed.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def write_corpus(root: Path) -> Path:
    docs = [
        f"def f{i}(a, b={i}):\n    c = a * b + {i % 9}\n    while c > {i}:\n        c -= 3\n    return c\n"
        for i in range(48)
    ]
    for split, part in (("train", docs[:40]), ("valid", docs[40:])):
        (root / split).mkdir(parents=True)
        with gzip.open(root / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"content": d}) + "\n" for d in part)
    return root


def run_training(prefix: list[str], args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [*prefix, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_two_processes_match_one_process_with_double_batch(tmp_path, tiny_checkpoint, compiled):
    import torch
    from safetensors.torch import load_file

    corpus = write_corpus(tmp_path / "corpus")
    common = [
        "--data", str(corpus), "--tokenizer", str(tiny_checkpoint),
        "--init-from", str(tiny_checkpoint), "--seq-length", "64", "--max-steps", "2",
        "--warmup-steps", "1", "--learning-rate", "1e-2", "--eval-every", "0",
        "--eval-batches", "1", "--mixed-precision", "no", "--log-with", "none",
        "--peak-tflops", "1", "--no-progress", "--shuffle-buffer", "8", "--dropout", "0",
        "--recipe", "codeparrot",
        *(["--compile"] if compiled else []),
    ]  # fmt: skip
    bindir = Path(sys.executable).parent
    run_training(
        [sys.executable, "-m", "codeparrot.training"],
        [*common, "--batch-size", "4", "--output", str(tmp_path / "one")],
        tmp_path,
    )
    # --main_process_port 0: any free port, so that concurrent test runs do not collide
    launch = [
        str(bindir / "accelerate"), "launch", "--cpu", "--num_processes", "2",
        "--main_process_port", "0", "-m", "codeparrot.training",
    ]  # fmt: skip
    run_training(
        launch, [*common, "--batch-size", "2", "--output", str(tmp_path / "two")], tmp_path
    )

    one = load_file(str(tmp_path / "one" / "model.safetensors"))
    two = load_file(str(tmp_path / "two" / "model.safetensors"))
    start = load_file(str(tiny_checkpoint / "model.safetensors"))
    assert one.keys() == two.keys()
    for name in one:
        assert torch.allclose(one[name], two[name], atol=1e-4, rtol=1e-4), name
    # Adam turns gradients that are zero up to rounding (the attention key biases) into
    # updates of up to ~lr * |g| / eps, hence atol 1e-4; a wrong data split moves weights
    # by ~lr = 1e-2. The comparison is not vacuous: two steps at lr 1e-2 moved the weights a lot more
    assert max((one[k] - start[k]).abs().max().item() for k in one) > 1e-3
    meta = json.loads((tmp_path / "two" / "codeparrot_checkpoint.json").read_text())
    assert meta["provenance"]["world_size"] == 2 and meta["tokens_seen"] == 2 * 4 * 64
