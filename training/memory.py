"""Bad input that only the device reveals, refused before the first step with the flag to
change: fp16 without a gradient scaler, a batch larger than the device's memory, and an
out-of-memory in the first steps (said with a batch that would fit, not a CUDA traceback).

The memory estimate is a floor, not a forecast: fp32 weights and gradients, the
optimizer's moments, the activations a transformer layer keeps for its backward pass
(34·b·s·h bytes a layer in 16-bit, Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", table 2, without the attention scores that
SDPA does not keep) and the fp32 logits with their gradient. A batch is refused only when
even the floor exceeds the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codeparrot.errors import ConfigError

GIB = 1024**3
OPTIMIZER_BYTES = {"adamw": 8, "muon": 4}  # moments a parameter (Muon: one momentum buffer)
EARLY_STEPS = 6  # an out-of-memory this early is the batch, not a leak


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
) -> MemoryFloor:
    """:class:`MemoryFloor` of a model shape, optimizer and precision (see the module)."""
    fixed = parameters * (4 + 4 + OPTIMIZER_BYTES.get(optimizer, 8))
    scale = 1 if mixed_precision in ("bf16", "fp16") else 2  # fp32 activations: twice the bytes
    per_layer = 2 * seq_length * width if gradient_checkpointing else 34 * seq_length * width
    logits = seq_length * vocab_size * (4 + 4)
    return MemoryFloor(fixed, n_layer * per_layer * scale + logits)


def device_memory(device: Any) -> tuple[str, int] | None:
    """(name, total bytes) of a CUDA device; None elsewhere (a CPU's memory is the host's)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    props = torch.cuda.get_device_properties(device)
    return props.name, int(props.total_memory)


def _fitting(config: Any, floor: MemoryFloor, memory: int) -> str:
    """The flags of a micro-batch that fits, with the accumulation that keeps the tokens a step."""
    fits = floor.largest_batch(memory)
    if fits < 1:
        return (
            "no batch fits beside the weights and optimizer state; choose a smaller --preset "
            "or --seq-length, or launch with FSDP (accelerate launch --use_fsdp)"
        )
    accumulate = -(-config.batch_size * config.gradient_accumulation_steps // fits)
    return (
        f"--batch-size {fits} would fit (with --gradient-accumulation-steps {accumulate} for "
        f"the same tokens a step), or add --gradient-checkpointing"
    )


def check_batch_fits(config: Any, floor: MemoryFloor, device: Any) -> None:
    """Refuse a micro-batch whose memory floor exceeds the device's memory."""
    found = device_memory(device)
    if found is None:
        return
    name, memory = found
    need = floor.total(config.batch_size)
    if need <= memory:
        return
    raise ConfigError(
        f"--batch-size {config.batch_size}: a step needs at least {need / GIB:,.1f} GiB "
        f"({floor.fixed / GIB:,.1f} GiB of weights, gradients and optimizer state, "
        f"{config.batch_size * floor.per_sequence / GIB:,.1f} GiB of activations and logits "
        f"at --seq-length {config.seq_length or 'the model context'}), more than the "
        f"{memory / GIB:,.1f} GiB of {name}; {_fitting(config, floor, memory)}"
    )


def out_of_memory_message(config: Any, floor: MemoryFloor, device: Any, step: int) -> str:
    """What to change after the device ran out of memory at ``step`` (one of the first)."""
    found = device_memory(device)
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
    floor = memory_floor(
        parameters=count_parameters(model),
        n_layer=shape.n_layer,
        width=shape.width,
        vocab_size=model.config.vocab_size,
        seq_length=seq_length,
        optimizer=config.optimizer,
        mixed_precision=choice.mixed_precision,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    check_batch_fits(config, floor, accelerator.device)
    return floor
