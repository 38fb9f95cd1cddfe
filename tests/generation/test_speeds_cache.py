"""Speeds a start measured, kept for the next: a second start here runs no probe and
decides as the first did; an old, foreign or broken record is measured again."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine, GenerationConfig, int8, speeds_cache
from codeparrot.generation import threads as threads_module

GREEDY = GenerationConfig(max_new_tokens=8, temperature=0.0, stop_at_eos=False)


@pytest.fixture
def kept(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "speeds"
    monkeypatch.setenv(speeds_cache.ENV, str(folder))
    return folder


@pytest.fixture
def probes(monkeypatch) -> list[str]:
    """The probes that ran, by name; they answer as a CPU where the weight-only kernel
    and int8 prompts win would (not this machine's answers, so that a kept answer shows)."""
    ran: list[str] = []

    def kernels(matrices):
        ran.append("kernels")
        return {"dynamic": 3.0, "weight-only": 1.0}

    def prompts(*args):
        ran.append("prompts")
        return {"dense": 9.0, "int8": 6.0}

    monkeypatch.setattr(int8, "measure_kernels", kernels)
    monkeypatch.setattr(int8, "measure_prompt_products", prompts)
    return ran


def _load(checkpoint: Path) -> Engine:
    return Engine.load(checkpoint, quantize="int8")


def test_a_second_start_runs_no_probe_and_decides_alike(
    tiny_checkpoint, kept, probes, monkeypatch, caplog
):
    if not (int8.kernel_supported("weight-only") and int8.kernel_supported("dynamic")):
        pytest.skip("this torch has one int8 kernel: there is no kernel probe")
    first = _load(tiny_checkpoint)
    assert probes == ["kernels", "kernels", "prompts"]  # the blocks', the output's, prompts
    assert (first.decoder.lean.int8_kernel, first.decoder.lean.int8_prompts) == (
        "weight-only",
        True,
    )
    assert len(list(kept.glob("*.json"))) == 1
    probes.clear()
    with caplog.at_level(logging.INFO, logger="codeparrot.generation.decoder"):
        second = _load(tiny_checkpoint)
    assert probes == []
    assert (second.decoder.lean.int8_kernel, second.decoder.lean.int8_prompts) == (
        "weight-only",
        True,
    )
    said = [r.getMessage() for r in caplog.records]
    assert "int8 steps: the weight-only kernel (as an earlier start here measured)" in said
    assert "int8 output: the weight-only kernel (as an earlier start here measured)" in said
    assert "int8 prompts: yes (as an earlier start here measured)" in said
    assert (
        second.generate("def f(x):", GREEDY)[0].text == first.generate("def f(x):", GREEDY)[0].text
    )
    # another thread count is another record: measured again
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)
    _load(tiny_checkpoint)
    assert probes == ["kernels", "kernels", "prompts"] and len(list(kept.glob("*.json"))) == 2


def test_a_record_older_than_a_week_is_measured_again(tiny_checkpoint, kept, probes):
    _load(tiny_checkpoint)
    (record,) = kept.glob("*.json")
    data = json.loads(record.read_text())
    for entry in data["values"].values():
        entry["at"] = time.time() - speeds_cache.MAX_AGE_SECONDS - 60
    record.write_text(json.dumps(data))
    probes.clear()
    _load(tiny_checkpoint)
    assert "prompts" in probes
    ages = [time.time() - e["at"] for e in json.loads(record.read_text())["values"].values()]
    assert max(ages) < 60  # the new answers replaced the old ones


def test_a_broken_or_foreign_record_is_measured_again(tiny_checkpoint, kept, probes, caplog):
    _load(tiny_checkpoint)
    (record,) = kept.glob("*.json")
    for text in ("{not json", json.dumps({"identity": "another machine", "values": {}})):
        record.write_text(text)
        probes.clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="codeparrot.generation.speeds_cache"):
            _load(tiny_checkpoint)
        assert "prompts" in probes
        assert any("cannot be used" in r.getMessage() for r in caplog.records)
        assert json.loads(record.read_text())["values"]  # written again


def test_turned_off_every_start_measures_and_nothing_is_written(
    tiny_checkpoint, tmp_path, monkeypatch, probes, caplog
):
    monkeypatch.setenv(speeds_cache.ENV, "0")
    _load(tiny_checkpoint)
    probes.clear()
    _load(tiny_checkpoint)
    assert "prompts" in probes
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(speeds_cache.ENV, str(blocked / "speeds"))  # under a file
    with caplog.at_level(logging.WARNING, logger="codeparrot.generation.speeds_cache"):
        engine = _load(tiny_checkpoint)
    assert engine.generate("x = ", GREEDY)[0].text is not None
    assert any("cannot be written" in r.getMessage() for r in caplog.records)


def test_the_language_server_keeps_its_prompt_speed(tiny_checkpoint, kept, monkeypatch):
    from codeparrot.lsp.server import _load as lsp_load

    timed: list[int] = []
    real = threads_module.time_prompt

    def timing(engine, threads=None):
        timed.append(threads)
        return real(engine, threads)

    monkeypatch.setattr(threads_module, "time_prompt", timing)
    first = lsp_load(tiny_checkpoint, None, 1, "int8", False)
    second = lsp_load(tiny_checkpoint, None, 1, "int8", False)
    assert timed == [1]
    assert second.prompt_ms_per_token == pytest.approx(first.prompt_ms_per_token, abs=1e-3)
    lsp_load(tiny_checkpoint, None, 1, "none", False)  # another quantization: measured
    assert timed == [1, 1]


def test_a_kept_prompt_speed_is_timed_again_every_eighth_start_the_faster_kept(kept) -> None:
    """A figure taken while other work slowed the machine gives way to a quiet one within
    eight starts; a slower one measured later does not replace a faster one."""
    figures = iter([2.0, 1.5, 3.0])  # busy, quiet, busy again
    measured: list[float] = []

    def measure() -> float:
        measured.append(next(figures))
        return measured[-1]

    answers = []
    for _ in range(17):  # a new process each time: a new record object
        speeds = speeds_cache.KeptSpeeds(kept / "model.json", "this machine")
        answers.append(speeds_cache.measured_or_kept(speeds, "p", measure, every=8, best=min)[0])
    assert measured == [2.0, 1.5, 3.0]
    assert answers == [2.0] * 8 + [1.5] * 9
