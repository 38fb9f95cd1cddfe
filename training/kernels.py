"""Fused GPU kernels from a maintained library for the Qwen3 and Llama blocks.

Liger Kernel (the ``gpu`` extra: ``pip install 'codeparrot[gpu]'``) replaces RMSNorm,
rotary embeddings, SwiGLU and the output layer with its loss (a fused linear
cross-entropy that never holds the full logits) by Triton kernels, in place on a built
model. The parameters keep their names and the config its class, so a saved model loads
with ``AutoModelForCausalLM`` as before. Where the device is not CUDA, the library is not
installed, or the architecture has no Liger patch (GPT-2), nothing changes and the reason
is given.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

# model_type -> the Liger function that patches it
PATCHES = {"qwen3": "apply_liger_kernel_to_qwen3", "llama": "apply_liger_kernel_to_llama"}
# model_type -> (its transformers module, the classes Liger swaps in it for models built
# later). This model's modules are patched in place, so the classes are put back; the rotary
# embedding stays Liger's for the process (attention looks the function up in the module).
MODELING = {
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", ("Qwen3RMSNorm", "Qwen3MLP")),
    "llama": ("transformers.models.llama.modeling_llama", ("LlamaRMSNorm", "LlamaMLP")),
}
KERNELS = ("rms_norm", "rope", "swiglu", "fused_linear_cross_entropy")
# A compiled run's default: the fused linear cross-entropy does not trace under
# torch.compile (liger-kernel 0.8.5 with torch 2.11 on an H200: its addmm with out_dtype
# fails in dynamo's fake tensors) and reads a count back to the host at every step.
COMPILED_KERNELS = ("rms_norm", "rope", "swiglu")


def wanted_kernels(asked: Sequence[str] | None, compiled: bool) -> Sequence[str] | None:
    """The kernels a run applies: those asked, else all (None), or :data:`COMPILED_KERNELS`
    for a compiled run."""
    if asked is not None:
        return asked
    return COMPILED_KERNELS if compiled else None


def fused_kernels_unavailable(model: Any, device: Any) -> str | None:
    """Why :func:`apply_fused_kernels` would change nothing (None: it would apply them)."""
    kind = getattr(device, "type", str(device))
    if kind != "cuda":
        return f"fused kernels run on CUDA only (the device is {kind})"
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in PATCHES:
        return f"no fused kernels for the {model_type} architecture (only {', '.join(PATCHES)})"
    try:
        importlib.import_module("liger_kernel.transformers")
    except ImportError:
        return "liger-kernel is not installed (pip install 'codeparrot[gpu]')"
    return None


def apply_fused_kernels(
    model: Any, device: Any, log: Any = None, kernels: Sequence[str] | None = None
) -> list[str]:
    """Patch ``model`` in place with Liger's kernels where they apply; the kernels applied
    (``[]`` where none were, with the reason given to ``log``).

    ``kernels`` names the ones wanted, of :data:`KERNELS` (None: all; ``["none"]``: none).
    Liger's rotary embedding replaces transformers' function for every model of the
    architecture in this process; its classes are put back (see :data:`MODELING`).
    """
    wanted = [k for k in KERNELS if kernels is None or k in kernels]
    reason = fused_kernels_unavailable(model, device) if wanted else "--fused-kernels none"
    if reason is not None:
        if log is not None:
            log(f"fused kernels: none ({reason})")
        return []
    liger = importlib.import_module("liger_kernel.transformers")
    patch = getattr(liger, PATCHES[model.config.model_type])
    module_name, classes = MODELING[model.config.model_type]
    module = importlib.import_module(module_name)
    saved = {name: getattr(module, name) for name in classes}
    try:
        patch(model=model, **{kernel: kernel in wanted for kernel in KERNELS})
    finally:  # models built later in this process (the engine's, a benchmark's) stay stock
        for name, value in saved.items():
            setattr(module, name, value)
    if log is not None:
        log(f"fused kernels (Liger): {', '.join(wanted)}")
    return wanted


__all__ = [
    "COMPILED_KERNELS",
    "KERNELS",
    "apply_fused_kernels",
    "fused_kernels_unavailable",
    "wanted_kernels",
]
