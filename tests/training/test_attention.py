"""Training attention: SDPA told the batch is causal and handed no mask, whatever
transformers would build; the same loss; nothing of it in the checkpoint."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest


class Tok:
    eos_token_id = 0

    def __len__(self) -> int:
        return 512


@pytest.fixture
def sdpa_calls(monkeypatch):
    """(mask given, is_causal) of every SDPA call; transformers made to build its mask, as
    it does under torch.compile before torch 2.14."""
    import torch.nn.functional as F
    import transformers.masking_utils as masking

    calls, real = [], F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        calls.append((attn_mask is not None, is_causal))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                    scale=scale, **kw)  # fmt: skip

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(masking, "_ignore_causal_mask_sdpa", lambda *a, **k: False)
    return calls


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen"])
def test_the_trained_model_attends_causally_without_a_mask(sdpa_calls, preset, tmp_path):
    import torch

    from codeparrot.models.presets import build_model
    from codeparrot.training.attention import NAME, use_causal_attention

    model = build_model(preset, Tok())
    ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        masked = model(input_ids=ids, labels=ids).loss
    assert sdpa_calls and all(mask and not causal for mask, causal in sdpa_calls)
    sdpa_calls.clear()
    use_causal_attention(model)
    with torch.no_grad():
        causal = model(input_ids=ids, labels=ids).loss
    assert sdpa_calls and all(not mask and causal for mask, causal in sdpa_calls)
    assert torch.allclose(masked, causal, atol=1e-5)
    model.save_pretrained(tmp_path)
    assert NAME not in (tmp_path / "config.json").read_text()
    load = f"from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained({str(tmp_path)!r})"
    assert subprocess.run([sys.executable, "-c", load], capture_output=True).returncode == 0


def test_training_picks_eager_only_for_short_compiled_cpu_runs():
    import torch

    from codeparrot.models.presets import build_model
    from codeparrot.training.attention import NAME
    from codeparrot.training.setup_run import _tune_for_training

    cases = {
        (True, "cpu", 256): "eager",
        (True, "cpu", 1024): NAME,
        (False, "cpu", 256): NAME,
        (True, "cuda", 256): NAME,
    }
    for (compiled, device, length), expected in cases.items():
        model = build_model("tiny", Tok())
        config = SimpleNamespace(compile=compiled)
        _tune_for_training(model, config, length, torch.device(device))
        assert model.config._attn_implementation == expected, (compiled, device, length)


def test_a_compiled_run_leaves_out_the_fused_cross_entropy_unless_asked():
    from codeparrot.training.kernels import COMPILED_KERNELS, wanted_kernels

    assert wanted_kernels(None, compiled=False) is None  # all
    assert wanted_kernels(None, compiled=True) == COMPILED_KERNELS
    assert "fused_linear_cross_entropy" not in COMPILED_KERNELS
    asked = ("rms_norm", "fused_linear_cross_entropy")
    assert wanted_kernels(asked, compiled=True) == asked
