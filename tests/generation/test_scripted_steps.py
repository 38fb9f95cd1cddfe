"""The Llama family's one-token steps as one TorchScript function give the eager steps'
logits to the bit, on the float weights and on the weight-only int8 kernel, for every
variant the blocks compute (biases, LayerNorm and a plain MLP, a sliding window,
Qwen3's normed queries and keys, grouped keys/values, several rows)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine
from codeparrot.generation.int8 import kernel_supported

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family

sys.path.insert(0, str(Path(__file__).parent))
from test_lean_families import _mistral, peaked

FAMILIES = ("codeparrot-qwen3", "qwen2.5-coder", "starcoder2", "codellama")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scripted-families")
    dirs = {name: build_family(name, root / name) for name in FAMILIES}
    dirs["mistral-window"] = _mistral(root / "mistral-window", dirs["codellama"])
    return dirs


def _steps(decoder, scripted: bool, int8: bool, rows: int) -> list[torch.Tensor]:
    """Logits of a 7-token prompt's rows and then 9 one-token steps (past Mistral's
    window), eager or scripted; the GPT-2 family's tests use it too."""
    decoder._scripted = {} if scripted else {int8: None}  # None: the eager step
    torch.manual_seed(0)
    prompt = torch.randint(3, 40, (rows, 7))
    cache = decoder.new_cache(rows, 16)
    with torch.inference_mode():
        out = [decoder.forward(prompt, cache)]
        for t in range(9):
            nxt = torch.tensor([[5 + t + r] for r in range(rows)])
            out.append(decoder.step(nxt, cache, int8=int8))
    return out


@pytest.mark.parametrize("name", [*FAMILIES, "mistral-window"])
@pytest.mark.parametrize("int8", [False, True])
def test_scripted_steps_give_the_eager_logits(family_dirs, name: str, int8: bool) -> None:
    if int8 and not kernel_supported("weight-only"):
        pytest.skip("no weight-only int8 kernel here")
    engine = peaked(Engine.load(family_dirs[name], dtype="float32", quantize="none"))
    decoder = engine.decoder.lean
    if int8:
        decoder.quantize_int8("weight-only")
    for rows in (1, 3):
        eager = _steps(decoder, False, int8, rows)
        scripted = _steps(decoder, True, int8, rows)
        assert decoder._scripted[int8] is not None  # the scripted function ran
        for a, b in zip(eager, scripted, strict=True):
            assert torch.equal(a, b)
        assert not torch.equal(eager[-1], eager[-2])  # the steps moved


def test_the_dynamic_kernel_keeps_the_eager_step(family_dirs) -> None:
    if not kernel_supported("dynamic"):
        pytest.skip("no dynamic int8 kernel here")
    engine = Engine.load(family_dirs["codeparrot-qwen3"], dtype="float32", quantize="none")
    decoder = engine.decoder.lean
    decoder.quantize_int8("dynamic")
    _steps(decoder, True, True, 1)
    assert decoder._scripted[True] is None and decoder._scripted_step(False) is not None
