"""``bench/gpu_check.py`` on a machine without a CUDA device: a clear message, no work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_cuda_device_it_says_so_and_stops(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu_check.py"),
            "--output",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 2
    assert "no CUDA device here" in done.stderr and "run it on a machine with one" in done.stderr
    assert not (tmp_path / "r.json").exists()


def _gpu_check(monkeypatch):
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "cuda_devices", lambda: ["NVIDIA H200"])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    return module


def test_the_plan_alone_builds_no_corpus_of_its_own(monkeypatch, tmp_path, capsys):
    """The quickstart's plan builds its own corpus and tokenizer: a device call that runs
    only the plan does not spend its first minute on gpu_check's."""
    gpu_check, built = _gpu_check(monkeypatch), []
    monkeypatch.setattr(gpu_check, "materials", lambda workdir: built.append(workdir) or (1, 2))
    monkeypatch.setattr(gpu_check, "check_plan", lambda workdir: (True, "mini-qwen 36.0M"))
    monkeypatch.setattr(gpu_check, "check_train", lambda *a: (True, f"given {a[1:3]}"))
    assert gpu_check.main(["--only", "plan", "--output", str(tmp_path / "r.json")]) == 0
    assert built == [] and "materials" not in capsys.readouterr().out
    assert gpu_check.main(["--only", "plan,train"]) == 0
    assert len(built) == 1 and "given (1, 2)" in capsys.readouterr().out


def test_fsdp_is_checked_as_the_docs_ask_and_a_misspelt_check_is_named(monkeypatch, capsys):
    """``fsdp`` launches FSDP2 (``--fsdp_version 2``: what docs/training.md asks for and the
    suite checks on a CPU); Accelerate's default FSDP1 only where ``fsdp1`` is named."""
    import pytest

    gpu_check, launched = _gpu_check(monkeypatch), []
    monkeypatch.setattr(gpu_check, "check_fsdp_resume", lambda c, run, gpus: launched.append(c))
    gpu_check.check_launch(Path("w"), Path("c"), Path("t"), 1, fsdp=2)
    gpu_check.check_launch(Path("w"), Path("c"), Path("t"), 1, fsdp=1)
    assert " ".join(launched[0]).startswith("accelerate launch --num_processes 1")
    assert "--use_fsdp --fsdp_version 2" in " ".join(launched[0])
    assert "--use_fsdp --fsdp_version 1" in " ".join(launched[1])
    assert "fsdp" in gpu_check.DEFAULT_CHECKS and "fsdp1" not in gpu_check.DEFAULT_CHECKS
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "train,fsdp3"])
    assert "--only: no check named fsdp3" in capsys.readouterr().err


def test_a_command_out_of_time_keeps_what_it_printed(monkeypatch):
    import sys

    gpu_check = _gpu_check(monkeypatch)
    code = "import time; print('(a) ms/token: 1.2', flush=True); time.sleep(30)"
    ok, tail = gpu_check.run_command([sys.executable, "-c", code], timeout=3)
    assert not ok and tail.splitlines() == ["(a) ms/token: 1.2", "timed out after 3 s"]
