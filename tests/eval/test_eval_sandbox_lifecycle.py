"""The harness side of the sandbox: mode detection, loud degradation, zygote restarts."""

from __future__ import annotations

import os
import signal

import pytest

from codeparrot.eval.sandbox import Isolation, Sandbox, SandboxError, detect_isolation

GOOD = "def f(x):\n    return x + 1\n"
TEST = "assert f(1) == 2\n"


def test_weak_mode_is_announced_loudly():
    with pytest.warns(RuntimeWarning, match="SANDBOX IS WEAKER") as record:
        isolation = detect_isolation("none")
    assert isolation.mode == "none"
    assert any("no network isolation" in str(w.message) for w in record)
    assert "no network isolation" in isolation.to_dict()["missing"]


def test_unknown_mode_is_an_error():
    with pytest.raises(SandboxError, match="unknown sandbox mode"):
        detect_isolation("chroot")


def test_a_dead_zygote_costs_one_sample_then_restarts():
    isolation = detect_isolation()
    with Sandbox(isolation, slot=3) as box:
        assert box.run(GOOD, TEST, "f").passed
        os.killpg(box._proc.pid, signal.SIGKILL)
        box._proc.wait()
        lost = box.run(GOOD, TEST, "f")
        assert not lost.passed and "sandbox error" in lost.result
        assert box.run(GOOD, TEST, "f").passed


def test_closing_stops_the_zygote():
    box = Sandbox(Isolation(detect_isolation().mode), slot=4)
    box.start()
    proc = box._proc
    box.close()
    assert proc.poll() is not None


@pytest.mark.parametrize("mode", ["root", "userns", "none"])
def test_samples_of_one_zygote_do_not_share_state(mode):
    """The zygote imports common modules once; every sample still starts from a clean
    copy: its own random seed, and nothing a previous sample changed."""
    if mode not in {"none", detect_isolation().mode}:
        pytest.skip(f"mode {mode} is not the one that works here")
    program = (
        "import random, typing, math\n"
        "seen = getattr(math, 'seen_by_an_earlier_sample', False)\n"
        "math.seen_by_an_earlier_sample = True\n"
        "def f():\n    return (random.random(), seen)\n"
    )
    values = set()
    with Sandbox(Isolation(mode), slot=5) as box:
        for _ in range(3):
            verdict = box.run(program, "value, seen = f()\nassert False, (value, seen)", "f")
            assert verdict.result.startswith("failed: AssertionError ("), verdict.result
            value, seen = verdict.result.removeprefix("failed: AssertionError ")[1:-1].split(", ")
            assert seen == "False"
            values.add(value)
    assert len(values) == 3


def test_a_text_asked_for_by_several_workers_at_once_is_compiled_once(monkeypatch):
    import builtins
    import threading
    import time

    from codeparrot.eval import bytecode

    calls = []

    def slow_compile(*args, **kwargs):
        calls.append(args[1])
        time.sleep(0.05)  # long enough for every worker to ask before it is done
        return builtins.compile(*args, **kwargs)

    monkeypatch.setattr(bytecode, "compile", slow_compile, raising=False)
    compiled = bytecode.CompiledCode()
    frames = []
    threads = [
        threading.Thread(target=lambda: frames.append(compiled.frame("x = 1\n", "<test>")))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["<test>"]
    assert len(set(frames)) == 1 and frames[0].startswith(bytecode.BYTECODE)
