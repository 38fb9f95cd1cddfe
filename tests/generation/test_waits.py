"""The serving commands make torch's OpenMP threads wait passively (a loaded machine's
first tokens were 10x slower with spinning waits), unless the user chose a policy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from codeparrot.generation.waits import (
    SPINS,
    TRAINING_SPINS,
    VARIABLE,
    prefer_passive_waits,
    prefer_short_spins,
)


def test_passive_unless_the_user_chose_or_torch_is_loaded(monkeypatch):
    environ: dict[str, str] = {}
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert prefer_passive_waits(environ) and environ == {VARIABLE: "PASSIVE"}
    chosen = {VARIABLE: "active"}
    assert not prefer_passive_waits(chosen) and chosen == {VARIABLE: "active"}
    assert prefer_passive_waits({VARIABLE: " passive"})
    monkeypatch.setitem(sys.modules, "torch", object())  # libgomp already read it
    late: dict[str, str] = {}
    assert not prefer_passive_waits(late) and late == {}


PROBE = """
import os, sys
import codeparrot.generation.waits as w
seen = []
real = w.prefer_passive_waits
def spy(environ=None):
    seen.append("torch" in sys.modules)
    return real(environ)
w.prefer_passive_waits = spy
from codeparrot.cli import main
try:
    main(sys.argv[1:])
except BaseException:
    pass
print(seen, os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["lsp", "--checkpoint", "/nonexistent"],
        ["serve", "--checkpoint", "/nonexistent"],
        ["app", "/nonexistent", "--port", "-1"],
    ],
    ids=["lsp", "serve", "app"],
)
def test_each_serving_command_sets_it_before_torch_loads(argv):
    """lsp, serve and app call it before anything imports torch (it would be too late)."""
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                         text=True, env=env, timeout=300)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[False] PASSIVE", out.stderr[-2000:]


def test_training_spins_briefly_unless_the_user_chose(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    environ: dict[str, str] = {}
    assert prefer_short_spins(environ) and environ == {SPINS: str(TRAINING_SPINS)}
    for chosen in ({VARIABLE: "PASSIVE"}, {SPINS: "0"}):
        kept = dict(chosen)
        assert not prefer_short_spins(kept) and kept == chosen
    monkeypatch.setitem(sys.modules, "torch", object())
    late: dict[str, str] = {}
    assert not prefer_short_spins(late) and late == {}


SPIN_PROBE = PROBE.replace("prefer_passive_waits", "prefer_short_spins").replace(
    'os.environ.get("OMP_WAIT_POLICY")', 'os.environ.get("GOMP_SPINCOUNT")'
)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--data", "/nonexistent", "--output", "/nonexistent/run"],
        ["quickstart", "--output", "/nonexistent/run", "--total-minutes", "-1"],
    ],
    ids=["train", "quickstart"],
)
def test_each_training_command_sets_its_spins_before_torch_loads(argv):
    env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, SPINS)}
    out = subprocess.run([sys.executable, "-c", SPIN_PROBE, *argv], capture_output=True,
                         text=True, env=env, timeout=300)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == f"[False] {TRAINING_SPINS}", out.stderr[-2000:]
