"""Bad input that only the device reveals, refused before the first step with the flag to
change: fp16 without a gradient scaler, a batch larger than the device's memory, and an
out-of-memory in the first steps (said with a batch that would fit, not a CUDA traceback).

The memory estimate is a floor, not a forecast: fp32 weights and gradients, the
optimizer's moments, the activations a transformer layer keeps for its backward pass
(34·b·s·h bytes a layer in 16-bit, Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", table 2, without the attention scores that
SDPA does not keep) and the fp32 logits with their gradient. A batch is refused only when
even the floor exceeds the device.

On a CPU the device is the machine's available memory (a process over it is killed by the
kernel, with no message at all), and two things cost more than on a GPU, each measured on
the ``small`` preset (12 layers, width 768, 1,024 tokens, bf16 autocast, AMD EPYC Zen 4,
the peak resident memory of batches 2 and 12: 0.69 GiB a sequence without dropout, 2.53 GiB
with attention dropout 0.1, against this module's 0.66 and 2.49): CPU autocast casts only the matrix products' inputs, so the
activations a layer keeps are float32's; and SDPA's CPU kernel does not take dropout, so with
attention dropout the math path keeps every score in float32: the scores, the softmax, the
dropout mask and the dropped scores, 13 bytes an element (Korthikanti et al.'s 5·a·s² in
16-bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError

GIB = 1024**3
OPTIMIZER_BYTES = {"adamw": 8, "muon": 4}  # moments a parameter (Muon: one momentum buffer)
EARLY_STEPS = 6  # an out-of-memory this early is the batch, not a leak
SCORE_BYTES = 13  # an attention score on SDPA's math path: fp32 scores, softmax, mask, output


@dataclass(frozen=True)
class MemoryFloor:
    """The least a step of one process needs, in bytes, split as the message explains it."""

    fixed: int  # weights, gradients and optimizer state
    per_sequence: int  # activations and logits of one sequence of the micro-batch

    def total(self, batch: int) -> int:
        return self.fixed + batch * self.per_sequence

    def largest_batch(self, memory: int) -> int:
        """The largest micro-batch whose floor fits ``memory`` (0: none does)."""
        return max(0, (memory - self.fixed) // self.per_sequence)


def memory_floor(
    *,
    parameters: int,
    n_layer: int,
    width: int,
    vocab_size: int,
    seq_length: int,
    optimizer: str,
    mixed_precision: str,
    gradient_checkpointing: bool,
    device_type: str = "cuda",
    n_head: int = 0,
    attention_dropout: float = 0.0,
) -> MemoryFloor:
    """:class:`MemoryFloor` of a model shape, optimizer and precision on ``device_type``
    (see the module: a CPU keeps float32 activations, and every attention score where
    attention dropout sends SDPA to its math path)."""
    fixed = parameters * (4 + 4 + OPTIMIZER_BYTES.get(optimizer, 8))
    half = mixed_precision in ("bf16", "fp16") and device_type != "cpu"
    scale = 1 if half else 2  # fp32 activations: twice the bytes
    per_layer = 2 * seq_length * width if gradient_checkpointing else 34 * seq_length * width
    per_layer *= scale
    if device_type == "cpu" and attention_dropout > 0 and not gradient_checkpointing:
        per_layer += SCORE_BYTES * n_head * seq_length * seq_length
    logits = seq_length * vocab_size * (4 + 4)
    return MemoryFloor(fixed, n_layer * per_layer + logits)


def device_memory(device: Any) -> tuple[str, int] | None:
    """(name, bytes) of a CUDA device's memory, or of the memory available on this machine
    for a CPU (Linux; None where it cannot be read, and for other devices)."""
    kind = getattr(device, "type", None)
    if kind == "cpu":
        available = host_available_memory()
        return None if available is None else ("this machine's available memory", available)
    if kind != "cuda":
        return None
    import torch

    props = torch.cuda.get_device_properties(device)
    return props.name, int(props.total_memory)


def host_available_memory(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """Bytes this process may still take: the kernel's MemAvailable, or less where a cgroup
    (v2) limit is closer; None where neither can be read (not Linux)."""
    available = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            left = int(limit) - int((cgroup / "memory.current").read_text())
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return None if available is None else max(0, available)


def _fitting(config: Any, floor: MemoryFloor, memory: int) -> str:
    """The flags of a micro-batch that fits, with the accumulation that keeps the tokens a step."""
    fits = floor.largest_batch(memory)
    if fits < 1:
        return (
            "no batch fits beside the weights and optimizer state; choose a smaller --preset "
            "or --seq-length, or launch with FSDP (accelerate launch --use_fsdp --fsdp_version 2)"
        )
    accumulate = -(-config.batch_size * config.gradient_accumulation_steps // fits)
    return (
        f"--batch-size {fits} would fit (with --gradient-accumulation-steps {accumulate} for "
        f"the same tokens a step), or add --gradient-checkpointing"
    )


def check_batch_fits(config: Any, floor: MemoryFloor, device: Any, sharing: int = 1) -> None:
    """Refuse a micro-batch whose memory floor exceeds the device's memory (its share of
    it, for one of ``sharing`` processes on one machine)."""
    found = device_memory(device)
    if found is None:
        return
    name, memory = found
    memory //= max(1, sharing)
    need = floor.total(config.batch_size)
    if need <= memory:
        return
    of = f"{name}" if sharing <= 1 else f"{name}, a share of {sharing} processes"
    raise ConfigError(
        f"--batch-size {config.batch_size}: a step needs at least {need / GIB:,.1f} GiB "
        f"({floor.fixed / GIB:,.1f} GiB of weights, gradients and optimizer state, "
        f"{config.batch_size * floor.per_sequence / GIB:,.1f} GiB of activations and logits "
        f"at --seq-length {config.seq_length or 'the model context'}), more than the "
        f"{memory / GIB:,.1f} GiB of {of}; {_fitting(config, floor, memory)}"
    )


def out_of_memory_message(config: Any, floor: MemoryFloor, device: Any, step: int) -> str:
    """What to change after the device ran out of memory at ``step`` (one of the first)."""
    # a CPU's out-of-memory is an allocation the machine refused: what is free now says little
    found = device_memory(device) if getattr(device, "type", None) == "cuda" else None
    if found is None:
        half = max(1, config.batch_size // 2)
        fits = f"--batch-size {half} with --gradient-accumulation-steps " + str(
            2 * config.gradient_accumulation_steps
        )
        where = "the device"
    else:
        name, memory = found
        # the floor fitted; the peak is above it: aim at half of what the floor allows
        fitting = MemoryFloor(floor.fixed, floor.per_sequence * 2)
        fits = _fitting(config, fitting, memory)
        where = f"{name} ({memory / GIB:,.1f} GiB)"
    return (
        f"--batch-size {config.batch_size}: {where} ran out of memory in step {step}, "
        f"one of the first; {fits}"
    )


def check_fp16_scaler(mixed_precision: str, accelerator: Any) -> None:
    """fp16 gradients underflow without loss scaling: refuse fp16 where Accelerate made no
    gradient scaler (an FSDP2 or CPU setup)."""
    if mixed_precision != "fp16" or getattr(accelerator, "scaler", None) is not None:
        return
    raise ConfigError(
        "--mixed-precision fp16: this setup "
        f"({getattr(accelerator, 'distributed_type', 'unknown')}, "
        f"{getattr(accelerator, 'device', 'unknown device')}) has no gradient scaler, and "
        "fp16 gradients underflow without one; use --mixed-precision bf16 (or auto, or no)"
    )


def check_device_fit(
    config: Any, model: Any, seq_length: int, choice: Any, accelerator: Any
) -> MemoryFloor:
    """Refuse fp16 without a gradient scaler and a batch beyond the device's memory, before
    anything moves to the device; the memory floor, for an out-of-memory message later."""
    from codeparrot.models.presets import count_parameters, model_shape

    check_fp16_scaler(choice.mixed_precision, accelerator)
    shape = model_shape(model.config)
    device = accelerator.device
    floor = memory_floor(
        parameters=count_parameters(model),
        n_layer=shape.n_layer,
        width=shape.width,
        vocab_size=model.config.vocab_size,
        seq_length=seq_length,
        optimizer=config.optimizer,
        mixed_precision=choice.mixed_precision,
        gradient_checkpointing=config.gradient_checkpointing,
        device_type=getattr(device, "type", "cuda"),
        n_head=shape.n_head,
        attention_dropout=_attention_dropout(model.config),
    )
    # processes on a CPU share the machine's memory; each GPU process has its own device
    sharing = accelerator.num_processes if getattr(device, "type", None) == "cpu" else 1
    check_batch_fits(config, floor, device, sharing=sharing)
    return floor


def _attention_dropout(model_config: Any) -> float:
    for name in ("attn_pdrop", "attention_dropout"):
        value = getattr(model_config, name, None)
        if value is not None:
            return float(value)
    return 0.0
