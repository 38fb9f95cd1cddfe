"""GPT-2's and GPTBigCode's one-token steps as one TorchScript function give the eager
steps' logits to the bit, on the float weights and on both int8 kernels, for every
variant the blocks compute (GPT-2's Conv1D matrices and per-layer attention scaling,
GPTBigCode's multi-query and interleaved projections, several rows)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from codeparrot.generation import Engine
from codeparrot.generation.bigcode import GPTBigCodeDecoder
from codeparrot.generation.gpt2 import GPT2Decoder
from codeparrot.generation.int8 import kernel_supported

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import build_family

sys.path.insert(0, str(Path(__file__).parent))
from test_lean_families import peaked
from test_scripted_steps import _steps

VARIANTS = ("codeparrot-small", "gpt2-layer-scaled", "tiny_starcoder_py", "bigcode-interleaved")


def _variant(out: Path, like: Path, **change: object) -> Path:
    """``like``'s model with its config changed, random weights, its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(like)
    for key, value in change.items():
        setattr(config, key, value)
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(like).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scripted-gpt2")
    made = {
        name: build_family(name, root / name) for name in ("codeparrot-small", "tiny_starcoder_py")
    }
    made["gpt2-layer-scaled"] = _variant(
        root / "gpt2-layer-scaled", made["codeparrot-small"], scale_attn_by_inverse_layer_idx=True
    )
    made["bigcode-interleaved"] = _variant(
        root / "bigcode-interleaved", made["tiny_starcoder_py"], multi_query=False
    )
    made["gpt2-exact-gelu"] = _variant(
        root / "gpt2-exact-gelu", made["codeparrot-small"], activation_function="gelu"
    )
    return made


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("kernel", [None, "weight-only", "dynamic"])
def test_scripted_steps_give_the_eager_logits(dirs, name: str, kernel: str | None) -> None:
    if kernel is not None and not kernel_supported(kernel):
        pytest.skip(f"no {kernel} int8 kernel here")
    engine = peaked(Engine.load(dirs[name], dtype="float32", quantize="none"))
    decoder = engine.decoder.lean
    bigcode = name in ("tiny_starcoder_py", "bigcode-interleaved")
    assert isinstance(decoder, GPT2Decoder) and isinstance(decoder, GPTBigCodeDecoder) == bigcode
    int8 = kernel is not None
    if int8:
        decoder.quantize_int8(kernel)
    for rows in (1, 3):
        eager = _steps(decoder, False, int8, rows)
        scripted = _steps(decoder, True, int8, rows)
        assert decoder._scripted[int8] is not None  # the scripted function ran
        for a, b in zip(eager, scripted, strict=True):
            assert torch.equal(a, b)
        assert not torch.equal(eager[-1], eager[-2])  # the steps moved


def test_an_activation_it_does_not_compute_keeps_the_eager_step(dirs) -> None:
    engine = Engine.load(dirs["gpt2-exact-gelu"], dtype="float32", quantize="none")
    decoder = engine.decoder.lean
    _steps(decoder, True, False, 1)
    assert decoder._scripted[False] is None


@pytest.mark.parametrize("name", ["codeparrot-small", "tiny_starcoder_py"])
def test_the_editor_profile_scripts_the_step_at_load(dirs, name: str) -> None:
    """The first completion does not wait for TorchScript: the editor's load made it."""
    if not kernel_supported("weight-only") and not kernel_supported("dynamic"):
        pytest.skip("no int8 kernel here")
    engine = Engine.load(dirs[name], quantize="int8", profile="editor", threads=1)
    assert engine.decoder.lean._scripted.get(True) is not None
