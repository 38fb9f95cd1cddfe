"""Setup of a run: check the inputs, build the model, the precision, the Accelerator, the
optimizer, the schedule and the data, and restore a resumed run; ``setup(config) -> Run``.

Tests inject tiny data through ``train_data`` and ``valid_data``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import DataError
from codeparrot.launch import has_accelerator_device, launched_alone_for_several
from codeparrot.training.attention import use_causal_attention
from codeparrot.training.config import TrainConfig
from codeparrot.training.data import (
    Batches,
    FimTransform,
    PackedStream,
    SequenceSource,
    TokenShardStream,
    pretokenize,
    shard_files,
)
from codeparrot.training.flops import Peaks, flops_per_token, peak_flops
from codeparrot.training.kernels import apply_fused_kernels, wanted_kernels
from codeparrot.training.memory import MemoryFloor, check_device_fit
from codeparrot.training.optim import lr_factor
from codeparrot.training.plan import StepPlan
from codeparrot.training.resume_state import load_state
from codeparrot.training.rundir import STATE, preflight, tokenizer_dir, with_defaults
from codeparrot.training.steps import lm_loss


class TrainState:
    """Counters and data position, kept in the checkpoint's ``state/`` (see resume_state)."""

    def __init__(self, batches: Batches, plan: StepPlan) -> None:
        self.batches = batches
        self.plan = plan
        self.step = 0
        self.tokens_seen = 0
        self.train_seconds = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tokens_seen": self.tokens_seen,
            "train_seconds": self.train_seconds,
            "data": self.batches.state_dict(),
            "plan": self.plan.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.tokens_seen = state["tokens_seen"]
        self.train_seconds = state["train_seconds"]
        self.batches.load_state_dict(state["data"])
        self.plan.load(state.get("plan"))


@dataclass
class Run:
    """Everything the loop works with, built by :func:`setup`."""

    config: TrainConfig
    accelerator: Any
    model: Any
    optimizer: Any
    scheduler: Any
    tokenizer: Any
    state: TrainState
    valid: Callable[[], SequenceSource]
    seq_length: int
    parameters: int
    flops_per_token: float
    peaks: Peaks
    resume_from: Path | None
    loss_fn: Callable[[Any, Any], Any]
    precision: Any = None  # codeparrot.precision.PrecisionChoice
    memory: MemoryFloor | None = None  # the least a step needs (training.memory)
    log: Callable[[str], None] = lambda _line: None


def _build_model(config: TrainConfig, tokenizer: Any) -> Any:
    from codeparrot.models.checkpoint import check_vocab, load_checkpoint
    from codeparrot.models.presets import build_model

    if config.init_from is not None:
        model, _tok, _meta = load_checkpoint(config.init_from, tokenizer=tokenizer)
        model.float()  # fp32 master weights, whatever dtype a checkpoint was saved in
    else:
        model = build_model(
            config.preset, tokenizer, seed=config.seed, n_positions=config.n_positions
        )
    check_vocab(tokenizer, model.config.vocab_size, where=f"--preset {config.preset}")
    if config.dropout is not None:
        import torch

        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"):
            setattr(model.config, name, config.dropout)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = config.dropout
            elif isinstance(getattr(module, "attention_dropout", None), float):
                # Qwen3 attention keeps its rate as a float (its only dropout)
                module.attention_dropout = config.dropout
    return model


def _data_sources(
    config: TrainConfig,
    tokenizer: Any,
    seq_length: int,
    accelerator: Any,
    fim: FimTransform | None = None,
) -> tuple[SequenceSource, Callable[[], SequenceSource]]:
    """Training and validation sequences; ``fim`` transforms the training ones only, so the
    validation loss stays the left-to-right loss."""
    train_files = shard_files(config.data, "train")
    valid_files = shard_files(config.data, "valid")
    if not config.pretokenized:
        train = PackedStream(
            train_files,
            tokenizer,
            seq_length,
            shuffle_buffer=config.shuffle_buffer,
            sequence_buffer=config.sequence_buffer,
            seed=config.seed,
            fim=fim,
        )
        return train, lambda: PackedStream(
            valid_files, tokenizer, seq_length, shuffle_buffer=0, loop=False
        )
    token_dir = config.output / "tokens"
    with accelerator.main_process_first():  # one process tokenizes, the others reuse it
        document_fim = fim if fim is not None and fim.mode == "document" else None
        for split, files, split_fim in (
            ("train", train_files, document_fim),
            ("valid", valid_files, None),
        ):
            pretokenize(
                files,
                tokenizer,
                token_dir / f"{split}.bin",
                progress=config.progress,
                fim=split_fim,
            )
    train = TokenShardStream(
        token_dir / "train.bin",
        seq_length,
        seed=config.seed,
        fim=fim if fim is not None and fim.mode == "context" else None,
    )
    return train, lambda: TokenShardStream(
        token_dir / "valid.bin", seq_length, shuffle=False, loop=False
    )


def setup(
    config: TrainConfig,
    *,
    train_data: SequenceSource | None = None,
    valid_data: Callable[[], SequenceSource] | None = None,
    log: Callable[[str], None] | None = None,
) -> Run:
    """Check inputs, build model, optimizer, schedule and data, and restore a resumed run.

    ``log`` receives, on the main process, the lines a user reads once (the precision
    chosen and why, the matmul peaks, the step plan)."""
    config = with_defaults(config)
    resume_from = preflight(config)
    import torch
    from accelerate.utils import set_seed

    from codeparrot.models.presets import count_parameters

    # 1) tokenizer, FIM and model (a missing corpus fails before the model is built)
    tokenizer, fim = _tokenizer_and_fim(config)
    if train_data is None or valid_data is None:
        shard_files(config.data, "train")
        shard_files(config.data, "valid")
    model, seq_length = _model_and_seq_length(config, tokenizer, train_data)
    parameters = count_parameters(model)
    fpt = flops_per_token(model, seq_length)
    # 2) the precision, accelerator, optimizer and schedule
    choice = _choose_precision(config, model, seq_length, resume_from)
    accelerator = _make_accelerator(config, choice.mixed_precision)
    say = log if log is not None and accelerator.is_main_process else (lambda _line: None)
    say(choice.describe())
    memory = check_device_fit(config, model, seq_length, choice, accelerator)
    set_seed(config.seed)
    _ready_for_training(model, config, seq_length, accelerator.device)
    on_gpu = accelerator.device.type == "cuda"  # Liger's kernels where installed (say why not)
    kernels = wanted_kernels(config.fused_kernels, config.compile)
    apply_fused_kernels(model, accelerator.device, say if on_gpu else None, kernels)
    plan = StepPlan(
        steps=config.max_steps, max_steps=config.max_steps, recipe_steps=config.recipe_steps
    )
    optimizer, scheduler = _optimizer_and_schedule(model, config, plan, choice)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    loss_fn = lm_loss if fim is None else functools.partial(lm_loss, ignore_id=fim.tokens.pad)
    loss_fn = torch.compile(loss_fn) if config.compile else loss_fn
    # 3) the data, and where a resumed run stopped
    if train_data is None or valid_data is None:
        default_train, default_valid = _data_sources(
            config, tokenizer, seq_length, accelerator, fim
        )
        train_data = train_data or default_train
        valid_data = valid_data or default_valid
    rank, world = accelerator.process_index, accelerator.num_processes
    state = TrainState(Batches(train_data, config.batch_size, rank, world), plan)
    if resume_from is not None:
        _restore(state, resume_from, accelerator, model, optimizer, scheduler)
    peaks = peak_flops(choice, say, config.peak_tflops)
    return Run(
        config=config,
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        tokenizer=tokenizer,
        state=state,
        valid=valid_data,
        seq_length=seq_length,
        parameters=parameters,
        flops_per_token=fpt,
        peaks=peaks,
        resume_from=resume_from,
        loss_fn=loss_fn,
        precision=choice,
        memory=memory,
        log=say,
    )


def _restore(
    state: TrainState, resume_from: Path, accelerator: Any, model: Any, optimizer: Any,
    scheduler: Any,
) -> None:  # fmt: skip
    """Where a resumed run stopped: weights, optimizer, schedule, data position and plan."""
    saved = load_state(
        resume_from / STATE,
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
    )
    state.load_state_dict(saved)


def _tokenizer_and_fim(config: TrainConfig) -> tuple[Any, FimTransform | None]:
    """The run's tokenizer and its FIM transform (None at --fim-rate 0)."""
    from codeparrot.models.checkpoint import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir(config))
    fim = FimTransform.for_tokenizer(
        tokenizer,
        config.fim_rate,
        config.fim_spm_rate,
        config.fim_mode,
        config.seed,
        where=str(tokenizer_dir(config)),
        line_rate=config.fim_line_rate,
    )
    return tokenizer, fim


def _choose_precision(
    config: TrainConfig, model: Any, seq_length: int, resume_from: Path | None
) -> Any:
    """``--mixed-precision`` resolved for this machine (codeparrot.precision); a resumed run
    keeps the choice it was started with, so that it resumes bitwise exactly."""
    import warnings

    from codeparrot.models.checkpoint import read_checkpoint_meta
    from codeparrot.precision import (
        PrecisionChoice,
        choose_mixed_precision,
        model_shapes,
        slow_bf16_warning,
    )

    if resume_from is not None:
        saved = read_checkpoint_meta(resume_from).get("precision")
        if saved and saved.get("requested") == config.mixed_precision:
            return PrecisionChoice.from_dict(saved)
    c = model.config
    width = getattr(c, "hidden_size", None) or c.n_embd
    hidden = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * width
    shapes = model_shapes(width, hidden, c.vocab_size, config.batch_size * seq_length)
    choice = choose_mixed_precision(config.mixed_precision, _device_type(), shapes)
    if (warning := slow_bf16_warning(choice)) is not None:
        warnings.warn(warning, stacklevel=3)
    return choice


def _device_type() -> str:
    """The device Accelerate will train on: cuda, another accelerator, or the CPU."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if not has_accelerator_device():
        return "cpu"
    return str(torch.accelerator.current_accelerator().type)


def _model_and_seq_length(
    config: TrainConfig, tokenizer: Any, train_data: SequenceSource | None
) -> tuple[Any, int]:
    """The model to train and the sequence length, checked against its positions."""
    from codeparrot.models.checkpoint import check_sequence_length
    from codeparrot.models.presets import model_context

    model = _build_model(config, tokenizer)
    n_positions = model_context(model.config)
    seq_length = config.seq_length or n_positions
    check_sequence_length(seq_length, n_positions, where=f"model of --preset {config.preset}")
    if train_data is not None and train_data.seq_length != seq_length:
        raise DataError(f"train_data packs {train_data.seq_length} tokens, expected {seq_length}")
    return model, seq_length


def _make_accelerator(config: TrainConfig, mixed_precision: str) -> Any:
    """The run's Accelerator (device, mixed precision, accumulation, tracker, run directory)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import ProjectConfiguration

    _warn_single_cpu_process()
    # Accelerate keeps its state in a process-wide singleton: a second run in the same
    # process (the quickstart, finetune, tests) with other settings would be refused. Each
    # run owns its settings, so forget the previous run's (the process group, kept in
    # PartialState, stays).
    AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(
        # Without an accelerator device, say so: under torchrun (`accelerate launch
        # --multi_gpu`, `torchrun --nproc_per_node N`) Accelerate then forms a gloo DDP
        # group on CPU instead of N unrelated single-process runs.
        cpu=not has_accelerator_device(),
        mixed_precision=mixed_precision,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        log_with=None if config.log_with == "none" else config.log_with,
        project_config=ProjectConfiguration(
            project_dir=str(config.output), logging_dir=str(config.output / "logs")
        ),
        step_scheduler_with_optimizer=False,  # stepped once per optimizer step, whatever the world size
        # --compile is applied to the loss function (lm_loss), not to the model: a compiled
        # model returns its logits as a graph output, and autograd then fills a zero gradient
        # of the whole logits tensor on every backward.
        dynamo_backend="no",
    )


def _ready_for_training(model: Any, config: TrainConfig, seq_length: int, device: Any) -> None:
    """Gradient checkpointing, training mode and the speed settings of the model object."""
    if config.gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
        model.config.use_cache = False
    model.train()  # from_pretrained returns a model in eval mode (dropout off)
    _tune_for_training(model, config, seq_length, device)


def _optimizer_and_schedule(
    model: Any, config: TrainConfig, plan: StepPlan, choice: Any
) -> tuple[Any, Any]:
    """``--optimizer`` (AdamW or Muon, no decay on biases and norms) and ``--schedule``,
    laid over ``plan.steps`` (read at every step: a time budget may shorten it)."""
    import torch

    from codeparrot.precision import newton_schulz_dtype
    from codeparrot.training.optim import build_optimizer

    optimizer = build_optimizer(
        model,
        name=config.optimizer,
        lr=config.learning_rate,
        weight_decay=config.weight_decay,
        betas=(config.adam_beta1, config.adam_beta2),
        newton_schulz_dtype=newton_schulz_dtype(choice),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(
            step,
            warmup_steps=config.warmup_steps,
            max_steps=plan.steps,
            min_lr_ratio=config.min_lr_ratio,
            schedule=config.schedule,
            decay_fraction=config.decay_fraction,
        ),
    )
    return optimizer, scheduler


EAGER_ATTENTION_MAX_LENGTH = 512


def _tune_for_training(model: Any, config: TrainConfig, seq_length: int, device: Any) -> None:
    """Settings of the model object that only change speed, never the weights it learns.

    - transformers warns through ``logging`` when a model has no ``loss_type``, and that
      call breaks the compiled graph in two; name the default loss instead.
    - compiled on a CPU, the matmul-and-softmax ("eager") attention beats the fused SDPA
      kernel for short sequences: +12% tokens/s at 256 and +10% at 512 tokens, -4% at
      1,024, measured in one process alternating the two (RESULTS.md, Training).
      Checkpoints do not record the choice.
    - otherwise SDPA is told the batch is causal and given no mask
      (:mod:`codeparrot.training.attention`): compiled on torch before 2.14, transformers
      hands it a full mask, which GPU kernels cannot skip half of.
    """
    if getattr(model, "loss_type", None) is None:
        model.loss_type = "ForCausalLM"
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    if config.compile and device.type == "cpu" and seq_length <= EAGER_ATTENTION_MAX_LENGTH:
        model.set_attn_implementation("eager")
    else:
        use_causal_attention(model)


def _warn_single_cpu_process() -> None:
    """`accelerate launch --cpu --num_processes N SCRIPT` starts N processes only through MPI.

    `-m codeparrot.training` starts them itself (codeparrot/launch.py); another entry point lands here alone.
    """
    if launched_alone_for_several(os.environ, accelerator_device=has_accelerator_device()):
        import warnings

        warnings.warn(
            "`accelerate launch --cpu --num_processes N` without --mpirun_hostfile starts ONE "
            "process; `accelerate launch --cpu --num_processes N -m codeparrot.training ...` starts N "
            "(through torchrun), as does `torchrun --nproc_per_node N -m codeparrot.training ...`",
            stacklevel=3,
        )
