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
