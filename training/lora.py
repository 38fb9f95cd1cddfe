"""LoRA fine-tuning through ``peft``: attach, train within a time budget, save or merge.

Used by ``codeparrot finetune --peft lora``. The base model's weights stay frozen; only
the low-rank matrices train (a few per cent of the parameters at most), so a model of a
few hundred million parameters fine-tunes on a laptop's CPU. The result is either an
adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``, the tokenizer
and ``codeparrot_checkpoint.json``) that every command loads on top of its base, or, with
``--merge``, a plain checkpoint.

The loop is small on purpose: packed windows of the repository's tokens in a seeded
order, AdamW on the adapter's parameters, linear warmup then cosine decay, gradient
accumulation over micro-batches sized so that the logits stay small, activations
recomputed in the backward pass (activation checkpointing), and a stop before a step that
would overrun the time budget (estimated from the steps measured so far).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.families import conv1d_model_types, lora_targets

# The projections LoRA adapts by default, per model_type (each family's record in
# codeparrot.families). Others: name them with --lora-targets.
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = lora_targets()
# model types whose projections are Conv1D (GPT-2's: weights stored input-major)
CONV1D = conv1d_model_types()
# Most logits (floats) one micro-batch may hold: 2**25 is 128 MiB in float32, so a
# 49k-token vocabulary takes one 1,024-token sequence per forward pass.
LOGITS_PER_MICRO_BATCH = 1 << 25


@dataclass(frozen=True)
class LoraSettings:
    """The adapter's shape: rank, scale (alpha / rank), dropout and the modules adapted."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    targets: tuple[str, ...] = ()  # empty: DEFAULT_TARGETS of the model's family


@dataclass(frozen=True)
class Schedule:
    """The optimisation of the adapter's parameters."""

    learning_rate: float
    warmup_steps: int
    min_lr_ratio: float
    weight_decay: float
    max_steps: int
    max_minutes: float | None
    batch_size: int
    seq_length: int
    mixed_precision: str = "no"
    seed: int = 0
    checkpoint_activations: bool = True


@dataclass
class LoopResult:
    """How the loop ended: steps done, why it stopped, the train loss per logged step, and
    the tokens trained on against those its ``max_steps`` were planned for (the counts
    ``train``'s result keeps too, for :func:`codeparrot.training.plan.undertrained_warning`)."""

    steps: int
    stopped_by: str  # "max_steps" or "max_minutes"
    seconds: float
    step_seconds: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    tokens_seen: int = 0
    designed_tokens: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_seen / self.seconds if self.seconds > 0 else 0.0


def target_modules(model: Any, targets: tuple[str, ...] = ()) -> list[str]:
    """The module names to adapt: ``targets``, else the family's defaults; each must exist."""
    model_type = getattr(model.config, "model_type", None)
    chosen = tuple(targets) or DEFAULT_TARGETS.get(str(model_type), ())
    if not chosen:
        raise ConfigError(
            f"--lora-targets: no default LoRA targets for model_type {model_type!r}; name "
            "the linear layers to adapt (e.g. --lora-targets q_proj v_proj)"
        )
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in chosen if t not in names]
    if missing:
        raise ConfigError(
            f"--lora-targets: this {model_type} model has no module named "
            f"{', '.join(missing)} (its layers include {', '.join(sorted(names)[:12])})"
        )
    return list(chosen)


def attach_lora(model: Any, settings: LoraSettings) -> Any:
    """``peft``'s LoRA model around ``model``: only the adapter's parameters train."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=target_modules(model, settings.targets),
        # GPT-2 keeps its projections as Conv1D (weights stored input-major)
        fan_in_fan_out=model.config.model_type in CONV1D,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def lr_at(step: int, schedule: Schedule) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warmup, cosine to the floor."""
    peak, floor = schedule.learning_rate, schedule.learning_rate * schedule.min_lr_ratio
    if step < schedule.warmup_steps:
        return peak * (step + 1) / schedule.warmup_steps
    span = max(1, schedule.max_steps - schedule.warmup_steps)
    progress = min(1.0, (step - schedule.warmup_steps) / span)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def would_overrun(elapsed: float, step_seconds: list[float], budget: float | None) -> bool:
    """Would one more step end after ``budget`` seconds? (Estimated from the steps so far:
    the slower of the mean and the last one, so that a slowing machine stops early.)"""
    if budget is None or not step_seconds:
        return False
    estimate = max(sum(step_seconds) / len(step_seconds), step_seconds[-1])
    return elapsed + estimate > budget


def typical_step_seconds(step_seconds: list[float]) -> float | None:
    """Median seconds of a step, the first (with its one-off warm-up) left out if others ran."""
    steps = sorted(step_seconds[1:] or step_seconds)
    return steps[len(steps) // 2] if steps else None


def micro_batch_size(batch_size: int, seq_length: int, vocab_size: int) -> int:
    """Sequences per forward pass: the batch, or fewer so that the logits stay small."""
    return max(1, min(batch_size, LOGITS_PER_MICRO_BATCH // max(1, seq_length * vocab_size)))


def packed_windows(ids: list[int], seq_length: int) -> list[list[int]]:
    """Consecutive full windows of ``seq_length`` tokens (a short tail is dropped, unless
    it is all there is)."""
    windows = [ids[i : i + seq_length] for i in range(0, len(ids) - seq_length + 1, seq_length)]
    if not windows and len(ids) >= 2:
        windows = [ids]
    return windows


def _batches(windows: list[list[int]], batch_size: int, seed: int) -> Any:
    """Endless batches of windows, reshuffled (seeded) at each pass."""
    rng = random.Random(seed)
    order: list[int] = []
    while True:
        batch = []
        while len(batch) < batch_size:
            if not order:
                order = list(range(len(windows)))
                rng.shuffle(order)
            batch.append(windows[order.pop()])
        yield batch


def _checkpoint_activations(model: Any) -> None:
    """Recompute each block's activations in the backward pass: LoRA's gradients still need
    every layer's activations of the frozen base, most of the memory at 1,024 tokens."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        return
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # its name from transformers 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def train_adapter(
    model: Any,
    train_ids: list[int],
    schedule: Schedule,
    log: Callable[[str], None] | None = None,
) -> LoopResult:
    """Train the LoRA model on ``train_ids`` until ``max_steps`` or the time budget."""
    import torch

    say = log or (lambda _msg: None)
    windows = packed_windows(train_ids, schedule.seq_length)
    if not windows:
        raise ConfigError("fine-tuning needs at least 2 training tokens")
    torch.manual_seed(schedule.seed)
    if schedule.checkpoint_activations:
        _checkpoint_activations(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=schedule.learning_rate, weight_decay=schedule.weight_decay
    )
    micro = micro_batch_size(schedule.batch_size, schedule.seq_length, model.config.vocab_size)
    autocast = schedule.mixed_precision in ("bf16", "fp16")
    dtype = torch.bfloat16 if schedule.mixed_precision == "bf16" else torch.float16
    budget = schedule.max_minutes * 60 if schedule.max_minutes else None
    batches = _batches(windows, schedule.batch_size, schedule.seed)
    designed = schedule.max_steps * schedule.batch_size * len(windows[0])
    result = LoopResult(steps=0, stopped_by="max_steps", seconds=0.0, designed_tokens=designed)
    started = time.perf_counter()
    model.train()
    for step in range(schedule.max_steps):
        if would_overrun(time.perf_counter() - started, result.step_seconds, budget):
            result.stopped_by = "max_minutes"
            break
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, schedule)
        batch = next(batches)
        total = 0.0
        for i in range(0, len(batch), micro):
            x = torch.tensor(batch[i : i + micro], dtype=torch.long)  # (b, T)
            with torch.autocast("cpu", dtype=dtype, enabled=autocast and x.device.type == "cpu"):
                loss = model(input_ids=x, labels=x).loss
            (loss * x.shape[0] / len(batch)).backward()
            total += float(loss.detach()) * x.shape[0] / len(batch)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        result.steps = step + 1
        result.tokens_seen += sum(len(window) for window in batch)
        result.step_seconds.append(time.perf_counter() - t0)
        result.losses.append(total)
        if step == 0 or (step + 1) % max(1, schedule.max_steps // 10) == 0:
            say(f"step {step + 1}/{schedule.max_steps}: loss {total:.4f}")
    result.seconds = time.perf_counter() - started
    model.eval()
    return result


def save_adapter(
    model: Any,
    tokenizer: Any,
    output: Path,
    meta: dict[str, Any],
    *,
    base: str,
    revision: str | None = None,
) -> Path:
    """Write the adapter (safetensors), the tokenizer and the metadata, atomically.

    ``base`` is what the adapter records as its base model: a Hub id (with ``revision``)
    or a local directory, which the loader finds again when it loads the adapter.
    """
    from codeparrot.io import atomic_directory, write_json
    from codeparrot.models.checkpoint import CHECKPOINT_META

    config = model.peft_config["default"]
    config.base_model_name_or_path = base
    config.revision = revision
    with atomic_directory(output, overwrite=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "README.md").unlink(missing_ok=True)  # peft's empty model-card template
        tokenizer.save_pretrained(tmp)
        write_json(tmp / CHECKPOINT_META, meta)
    return output


def save_merged(model: Any, tokenizer: Any, output: Path, meta: dict[str, Any]) -> Path:
    """Merge the adapter into the base weights and save a plain checkpoint."""
    from codeparrot.models.checkpoint import save_checkpoint

    merged = model.merge_and_unload()
    return save_checkpoint(merged, tokenizer, output, meta, overwrite=True)


def _adapter_meta(
    config: Any,
    result: LoopResult,
    base_name: str,
    settings: LoraSettings,
    peft_model: Any,
    trainable: int,
) -> dict[str, Any]:
    """What the adapter's checkpoint records of its training."""
    from codeparrot.io import provenance

    return {
        "step": result.steps,
        "stopped_by": result.stopped_by,
        "train_loss": result.losses[-1] if result.losses else None,
        "train_seconds": result.seconds,
        "seconds_per_step": typical_step_seconds(result.step_seconds),
        "base_model": base_name,
        "peft": {
            "method": "lora",
            **asdict(settings),
            "targets": sorted(peft_model.peft_config["default"].target_modules),
            "trainable_parameters": trainable,
        },
        "train_config": config.to_dict(),
        "provenance": provenance(config),
    }  # fmt: skip


def finetune_lora(
    config: Any,
    base: Path,
    train_ids: list[int],
    *,
    steps: int,
    seq_length: int,
    log: Callable[[str], None] | None = None,
    fim_trained: bool | None = None,
) -> tuple[LoopResult, str]:
    """``finetune --peft lora``: train an adapter of ``base`` and save it (or merge it)
    into ``config.model_dir``; returns how the loop ended (steps, what stopped it, the
    tokens seen) and the autocast dtype ``--mixed-precision`` chose: no, bf16 or fp16.

    ``train_ids`` may hold FIM examples in the base's template (``finetune --fim-rate``);
    ``fim_trained`` is the fill-in-the-middle status the adapter records (None: its base's
    record, if it has one).
    """
    from codeparrot.hub import resolve_model
    from codeparrot.models.checkpoint import load_checkpoint, trained_to_infill
    from codeparrot.precision import choose_mixed_precision

    model, tokenizer, base_meta = load_checkpoint(base, seq_length=seq_length)
    settings = LoraSettings(
        rank=config.lora_rank,
        alpha=config.lora_alpha,
        dropout=config.lora_dropout,
        targets=tuple(config.lora_targets),
    )
    peft_model = attach_lora(model, settings)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    if log:
        log(f"LoRA rank {settings.rank}: {trainable:,} of {total:,} parameters train")
    choice = choose_mixed_precision(
        config.mixed_precision, next(peft_model.parameters()).device.type
    )
    if log:
        log(choice.describe())
    schedule = Schedule(
        learning_rate=config.learning_rate,
        warmup_steps=min(config.warmup_steps, max(0, steps // 5)),
        min_lr_ratio=config.min_lr_ratio,
        weight_decay=config.weight_decay,
        max_steps=steps,
        max_minutes=config.max_minutes,
        batch_size=config.batch_size,
        seq_length=seq_length,
        mixed_precision=choice.mixed_precision,
        seed=config.seed,
        checkpoint_activations=config.activation_checkpointing,
    )
    result = train_adapter(peft_model, train_ids, schedule, log)
    ref = resolve_model(config.checkpoint, config.revision)
    meta = _adapter_meta(config, result, ref.name, settings, peft_model, trainable)
    fim = trained_to_infill(base_meta) if fim_trained is None else fim_trained
    if fim is not None:
        meta["fim_trained"] = fim
    if config.merge:
        save_merged(peft_model, tokenizer, config.model_dir, meta)
    else:
        base_name = ref.hub_id or str(ref.path.resolve())
        save_adapter(
            peft_model, tokenizer, config.model_dir, meta, base=base_name, revision=ref.revision
        )
    return result, choice.mixed_precision


__all__ = [
    "DEFAULT_TARGETS",
    "LoopResult",
    "LoraSettings",
    "Schedule",
    "attach_lora",
    "finetune_lora",
    "lr_at",
    "micro_batch_size",
    "save_adapter",
    "save_merged",
    "target_modules",
    "train_adapter",
    "would_overrun",
]
