"""int8 rows kept on disk: a second start packs the kept rows and decodes the same text."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine, GenerationConfig, int8_cache
from codeparrot.generation import gpt2 as gpt2_module

GREEDY = GenerationConfig(max_new_tokens=12, temperature=0.0, stop_at_eos=False)
PROMPT = "def add(a, b):\n    return"


@pytest.fixture(autouse=True)
def decisions_fixed(monkeypatch) -> None:
    """The load's timing probes (which int8 kernel, whether prompts read the int8 copies)
    decide alike at every load here, as on a quiet machine; under load they can flip
    between two loads, and the texts compared below with them."""
    import codeparrot.generation.int8 as int8_module

    kernel = "dynamic" if int8_module.kernel_supported("dynamic") else "weight-only"
    monkeypatch.setattr(
        gpt2_module, "choose_kernel", lambda matrices, asked="auto", what="": kernel
    )
    monkeypatch.setattr(gpt2_module, "int8_prompts_faster", lambda *args: False)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "int8"
    monkeypatch.setenv(int8_cache.ENV, str(folder))
    return folder


@pytest.fixture
def rounded(monkeypatch) -> list[int]:
    """How many matrices were rounded to int8 (not read from the cache)."""
    calls: list[int] = []
    real = gpt2_module.quantize_rows

    def counting(weight):
        calls.append(1)
        return real(weight)

    monkeypatch.setattr(gpt2_module, "quantize_rows", counting)
    return calls


def _greedy(checkpoint: Path) -> tuple[str, Engine]:
    engine = Engine.load(checkpoint, quantize="int8")
    return engine.generate(PROMPT, GREEDY)[0].text, engine


def test_a_second_start_reads_the_rows_and_decodes_the_same(tiny_checkpoint, cache, rounded):
    first, engine = _greedy(tiny_checkpoint)
    matrices = len(rounded)
    assert matrices == 4 * len(engine.decoder.lean.layers) + 1  # every block's four and the head
    assert len(list(cache.glob("*.safetensors"))) == 1
    rounded.clear()
    second, again = _greedy(tiny_checkpoint)
    assert rounded == [] and second == first
    for kept, made in zip(again.decoder.lean.int8, engine.decoder.lean.int8, strict=True):
        assert kept.keys() == made.keys()
    x = torch.randn(1, engine.decoder.lean.n_embd)
    from codeparrot.generation.int8 import int8_linear

    torch.testing.assert_close(
        int8_linear(x, again.decoder.lean.lm_head_int8),
        int8_linear(x, engine.decoder.lean.lm_head_int8),
    )


def test_new_weights_get_new_rows(tiny_checkpoint, tmp_path, cache, rounded, monkeypatch):
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "copy"
    shutil.copytree(tiny_checkpoint, copy)
    _greedy(copy)
    tensors = load_file(copy / "model.safetensors")
    tensors = {k: v * 2 if v.dim() == 2 else v for k, v in tensors.items()}
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    rounded.clear()
    text, _ = _greedy(copy)
    assert rounded  # made again from the new weights, not read
    assert len(list(cache.glob("*.safetensors"))) == 2
    monkeypatch.setenv(int8_cache.ENV, "0")
    assert _greedy(copy)[0] == text  # as without the cache


def test_a_broken_cache_file_is_replaced(tiny_checkpoint, cache, rounded, caplog):
    first, _ = _greedy(tiny_checkpoint)
    (kept,) = cache.glob("*.safetensors")
    kept.write_bytes(b"not a safetensors file")
    rounded.clear()
    with caplog.at_level(logging.WARNING, logger="codeparrot.generation.int8_cache"):
        second, _ = _greedy(tiny_checkpoint)
    assert second == first and rounded
    assert any("cannot be used" in r.getMessage() for r in caplog.records)
    assert kept.stat().st_size > 100  # written again whole


def test_the_cache_can_be_turned_off_and_a_read_only_one_is_only_logged(
    tiny_checkpoint, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv(int8_cache.ENV, "0")
    assert int8_cache.cache_folder() is None
    _greedy(tiny_checkpoint)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(int8_cache.ENV, str(blocked / "int8"))  # under a file: not writable
    with caplog.at_level(logging.WARNING, logger="codeparrot.generation.int8_cache"):
        text, _ = _greedy(tiny_checkpoint)
    assert text and any("cannot be written" in r.getMessage() for r in caplog.records)


def test_only_the_newest_files_are_kept(tmp_path, cache):
    q, s = torch.zeros(2, 4, dtype=torch.int8), torch.ones(2)
    for i in range(int8_cache.MAX_FILES + 2):
        weights = tmp_path / f"w{i}.safetensors"
        weights.write_text(str(i))
        kept = int8_cache.RowsCache.for_weights([weights], torch.float32)
        kept.store([(q, s)])
        assert kept.load([(2, 4)]) is not None
        assert kept.load([(3, 4)]) is None  # does not fit: removed
        kept.store([(q, s)])
    assert len(list(cache.glob("*.safetensors"))) == int8_cache.MAX_FILES
    assert not list(cache.glob("*.tmp"))


def test_kept_rows_come_back_in_aligned_memory_of_their_own(tmp_path, cache):
    """Compiled steps' kernels read weights with aligned loads: rows straight from the
    file's map (at any offset) crashed them."""
    weights = tmp_path / "w.safetensors"
    weights.write_text("w")
    kept = int8_cache.RowsCache.for_weights([weights], torch.float32)
    rows = [(torch.ones(3, 5, dtype=torch.int8), torch.ones(3)) for _ in range(3)]
    kept.store(rows)
    for q, s in kept.load([(3, 5)] * 3):
        assert q.data_ptr() % 64 == 0 and s.data_ptr() % 64 == 0
        q.add_(1)  # writable, and not the file's
    assert all(bool((q == 1).all()) for q, _ in kept.load([(3, 5)] * 3))
