"""The pretraining loop: ``train(config) -> TrainResult`` reads setup -> loop -> save.

Accelerate carries the model, optimizer and schedule (``prepare`` once, ``accumulate``,
``save_state``/``load_state``, trackers); the data sources of :mod:`codeparrot.training.data` are
resumable objects registered for checkpointing, so ``--resume`` restores the exact data
position along with step, schedule, optimizer and RNG states. Tests inject tiny data
through ``train_data`` and ``valid_data``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, ConfigError, DataError
from codeparrot.io import provenance, read_json
from codeparrot.launch import has_accelerator_device, launched_alone_for_several
from codeparrot.options import DEFAULT_FIM_RATE
from codeparrot.training.config import RESUMABLE_CHANGES, TrainConfig
from codeparrot.training.data import (
    Batches,
    FimTransform,
    PackedStream,
    SequenceSource,
    TokenShardStream,
    pretokenize,
    shard_files,
)
from codeparrot.training.optim import lr_factor, parameter_groups  # noqa: F401 (re-exported)
from codeparrot.training.plan import MEASURE_STEPS, SKIP_STEPS, StepPlan, decide, replan
from codeparrot.training.resume_state import check_state_files, load_state, save_state

CHECKPOINTS = "checkpoints"
STATE = "state"
METRICS = "metrics.jsonl"


@dataclass
class TrainResult:
    """What a run did; the run directory holds the latest export."""

    output: Path
    step: int
    tokens_seen: int
    parameters: int
    train_loss: float | None
    eval_loss: float | None
    perplexity: float | None
    seconds: float
    tokens_per_s: float
    stopped_by: str  # "max_steps" | "max_minutes" | "max_tokens"
    checkpoint: Path | None = None
    resumed_from: int | None = None
    precision: dict[str, Any] | None = None  # PrecisionChoice.to_dict(): asked, chosen, why
    planned_steps: int | None = None  # the steps the schedule was laid over
    seq_length: int | None = None
    designed_tokens: int | None = None  # the tokens of all --max-steps


# -- small pure helpers ----------------------------------------------------------------


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 700 else math.inf


def measure_peak_flops(
    seconds: float = 1.0, n: int = 1024, dtype: str = "bfloat16", device: str = "cpu"
) -> float:
    """FLOP/s of a square matmul in ``dtype`` on ``device`` (the MFU denominator); at
    least one timed product, however long it takes (an emulated dtype: seconds)."""
    import torch

    generator = torch.Generator().manual_seed(0)  # leaves the global RNG (dropout) alone
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=getattr(torch, dtype))
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    a @ b  # warm up
    sync()
    iters, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or iters < 1:
        a @ b
        iters += 1
        sync()
    return 2 * n**3 * iters / elapsed


PEAK_DTYPES = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}


def measure_peaks(choice: Any) -> dict[str, float]:
    """FLOP/s of the run's own precision (1 s: the MFU denominator) and of the other of
    fp32 / bf16 (briefly, in a small product: an emulated bf16 is slow to measure)."""
    own = PEAK_DTYPES[choice.mixed_precision]
    device = "cuda" if choice.device == "cuda" else "cpu"
    peaks = {own: measure_peak_flops(dtype=own, device=device)}
    other = "bfloat16" if own != "bfloat16" else "float32"
    n = 1024 if device == "cuda" or choice.bf16_fast or other == "float32" else 256
    peaks[other] = measure_peak_flops(seconds=0.2, n=n, dtype=other, device=device)
    return peaks


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


# -- run directory ---------------------------------------------------------------------


def checkpoint_dirs(output: Path) -> list[Path]:
    """Complete checkpoints of a run (with state/), oldest first."""
    root = output / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if p.is_dir() and (p / STATE).is_dir()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _check_resumable(config: TrainConfig, checkpoint: Path) -> None:
    """The resumed run must train the same model on the same data the same way."""
    from codeparrot.models.checkpoint import read_checkpoint_meta

    saved = read_checkpoint_meta(checkpoint).get("train_config")
    if saved is None:
        raise CheckpointError(f"{checkpoint}: no train_config in its metadata; cannot resume")
    now = config.to_dict()
    changed = sorted(
        k for k in now if k not in RESUMABLE_CHANGES and k in saved and saved[k] != now[k]
    )
    if changed:
        details = ", ".join(f"--{k.replace('_', '-')} {saved[k]!r} -> {now[k]!r}" for k in changed)
        raise ConfigError(
            f"--resume: the run in {config.output} was started with other settings: {details}"
        )


def tokenizer_dir(config: TrainConfig) -> Path:
    """``--tokenizer``, or the tokenizer saved with the ``--init-from`` checkpoint."""
    if config.tokenizer is not None:
        return config.tokenizer
    assert config.init_from is not None  # TrainConfig.problems() requires one of them
    return config.init_from


def _check_init_from(config: TrainConfig) -> None:
    """``--init-from`` is a causal LM, and ``--tokenizer`` (if given) is the one it was built with."""
    from codeparrot.models.checkpoint import TOKENIZER_FILES, load_tokenizer, read_model_config

    assert config.init_from is not None
    read_model_config(config.init_from)  # a missing or non-causal-LM directory fails here
    own = any((config.init_from / name).exists() for name in TOKENIZER_FILES)
    if config.tokenizer is None:
        if not own:
            raise CheckpointError(
                f"--init-from {config.init_from}: no tokenizer saved with the checkpoint; "
                "pass --tokenizer DIR"
            )
        return
    if not own or config.tokenizer.resolve() == config.init_from.resolve():
        return
    theirs = load_tokenizer(config.init_from).get_vocab()
    ours = load_tokenizer(config.tokenizer).get_vocab()
    if theirs != ours:
        differ = sum(1 for token, i in ours.items() if theirs.get(token) != i)
        raise CheckpointError(
            f"--tokenizer {config.tokenizer} is not the tokenizer of --init-from "
            f"{config.init_from} ({len(ours)} vs {len(theirs)} tokens, {differ} with another "
            "id): the checkpoint's embeddings would be read with the wrong ids. Leave out "
            "--tokenizer to use the checkpoint's own."
        )


def _preflight(config: TrainConfig) -> Path | None:
    """Every check that can fail before weights or data are touched; the checkpoint to resume."""
    if config.tokenizer is not None and not config.tokenizer.is_dir():
        raise CheckpointError(f"--tokenizer {config.tokenizer}: no such directory")
    if config.init_from is not None:
        _check_init_from(config)
    if config.resume:
        found = checkpoint_dirs(config.output)
        if not found:
            raise CheckpointError(
                f"--resume: no checkpoint with state in {config.output / CHECKPOINTS}; "
                "start a new run without --resume"
            )
        _check_resumable(config, found[-1])
        check_state_files(found[-1] / STATE)  # before anything of it is loaded
        return found[-1]
    if checkpoint_dirs(config.output) or (config.output / METRICS).exists():
        raise CheckpointError(
            f"--output {config.output} already holds a run; pass --resume to continue it "
            "or choose another --output"
        )
    return None


# -- setup -----------------------------------------------------------------------------


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
    peak_flops: float
    resume_from: Path | None
    loss_fn: Callable[[Any, Any], Any]
    precision: Any = None  # codeparrot.precision.PrecisionChoice
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


def with_defaults(config: TrainConfig) -> TrainConfig:
    """``config`` with the defaults that depend on other settings filled in (and so
    recorded with every checkpoint): the peak learning rate comes from the preset (its
    peak for the optimizer)."""
    import dataclasses

    from codeparrot.models.presets import get_preset

    if config.learning_rate is None:
        preset = get_preset(config.preset)
        lr = 5e-4 if config.init_from is not None else preset.peak_learning_rate(config.optimizer)
        config = dataclasses.replace(config, learning_rate=lr)
    if config.fim_rate is None:
        rate = DEFAULT_FIM_RATE if tokenizer_has_sentinels(tokenizer_dir(config)) else 0.0
        config = dataclasses.replace(config, fim_rate=rate)
    return config


def tokenizer_has_sentinels(directory: Path) -> bool:
    """Whether the tokenizer in ``directory`` has the FIM sentinels (False if unreadable:
    the tokenizer checks after this one say what is wrong)."""
    from tokenizers import Tokenizer

    from codeparrot.fim import FimTokens

    try:
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception:  # a missing or broken file: reported by load_tokenizer
        return False
    return FimTokens.from_tokenizer(tokenizer) is not None


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
    resume_from = _preflight(config)
    import torch
    from accelerate.utils import set_seed

    from codeparrot.models.checkpoint import load_tokenizer
    from codeparrot.models.presets import count_parameters, flops_per_token

    # 1) tokenizer, FIM and model (a missing corpus fails before the model is built)
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
    if train_data is None or valid_data is None:
        shard_files(config.data, "train")
        shard_files(config.data, "valid")
    model, seq_length = _model_and_seq_length(config, tokenizer, train_data)
    parameters = count_parameters(model)
    fpt = flops_per_token(
        model.config, count_parameters(model, exclude_position_embeddings=True), seq_length
    )
    # 2) the precision, accelerator, optimizer and schedule
    choice = _choose_precision(config, model, seq_length, resume_from)
    accelerator = _make_accelerator(config, choice.mixed_precision)
    say = log if log is not None and accelerator.is_main_process else (lambda _line: None)
    say(choice.describe())
    set_seed(config.seed)
    _ready_for_training(model, config, seq_length, accelerator.device)
    plan = StepPlan(steps=config.max_steps, max_steps=config.max_steps)
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
        saved = load_state(
            resume_from / STATE,
            accelerator=accelerator,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
        )
        state.load_state_dict(saved)
    peak = config.peak_tflops * 1e12 if config.peak_tflops else _peak_flops(choice, say)
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
        peak_flops=peak,
        resume_from=resume_from,
        loss_fn=loss_fn,
        precision=choice,
        log=say,
    )


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


def _peak_flops(choice: Any, say: Callable[[str], None]) -> float:
    """The MFU denominator: the peak of the precision the run trains in (both printed)."""
    peaks = measure_peaks(choice)
    own = PEAK_DTYPES[choice.mixed_precision]
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    shown = ", ".join(f"{short[name]} {flops / 1e9:,.1f}" for name, flops in peaks.items())
    say(f"matmul peaks (GFLOP/s): {shown}; MFU is measured against the {short[own]} peak")
    return peaks[own]


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


def lm_loss(model: Any, ids: Any, ignore_id: int | None = None) -> Any:
    """The mean next-token loss of ``model`` on ``ids`` (the model shifts the labels).

    Tokens equal to ``ignore_id`` (FIM padding) are not predicted. Compiled as a whole with
    ``--compile``, so that the logits stay inside the graph (see the Accelerator in
    :func:`setup`)."""
    labels = ids if ignore_id is None else ids.masked_fill(ids == ignore_id, -100)
    return model(input_ids=ids, labels=labels).loss


EAGER_ATTENTION_MAX_LENGTH = 512


def _tune_for_training(model: Any, config: TrainConfig, seq_length: int, device: Any) -> None:
    """Settings of the model object that only change speed, never the weights it learns.

    - transformers warns through ``logging`` when a model has no ``loss_type``, and that
      call breaks the compiled graph in two; name the default loss instead.
    - compiled on a CPU, the matmul-and-softmax ("eager") attention beats the fused SDPA
      kernel for short sequences: +12% tokens/s at 256 and +10% at 512 tokens, -4% at
      1,024, measured in one process alternating the two (RESULTS.md, Training).
      Checkpoints do not record the choice.
    """
    if getattr(model, "loss_type", None) is None:
        model.loss_type = "ForCausalLM"
    if (
        config.compile
        and device.type == "cpu"
        and seq_length <= EAGER_ATTENTION_MAX_LENGTH
        and getattr(model.config, "_attn_implementation", None) == "sdpa"
    ):
        model.set_attn_implementation("eager")


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


# -- loop ------------------------------------------------------------------------------


def evaluate(run: Run) -> float | None:
    """Mean loss over ``eval_batches`` validation batches, averaged across processes."""
    import torch

    acc = run.accelerator
    batches = Batches(run.valid(), run.config.batch_size, acc.process_index, acc.num_processes)
    run.model.eval()
    losses = []
    with torch.no_grad():
        for i, batch in enumerate(batches):
            if i >= run.config.eval_batches:
                break
            ids = torch.from_numpy(batch).to(acc.device)
            losses.append(run.model(input_ids=ids, labels=ids).loss.float().detach())
    run.model.train()
    if not losses:
        import warnings

        warnings.warn(
            f"no evaluation: the validation split holds fewer than {run.config.batch_size} x "
            f"{acc.num_processes} sequences of {run.seq_length} tokens",
            stacklevel=2,
        )
        return None
    mean = acc.gather(torch.stack(losses).mean().reshape(1)).mean()
    return float(mean)


def _train_step(run: Run) -> tuple[Any, Any]:
    """One optimizer step over ``gradient_accumulation_steps`` micro-batches: (loss, grad norm)."""
    import torch

    acc, cfg = run.accelerator, run.config
    total = torch.zeros((), device=acc.device)
    grad_norm = None
    for _ in range(cfg.gradient_accumulation_steps):
        ids = torch.from_numpy(run.state.batches.next_batch()).to(acc.device)
        with acc.accumulate(run.model):
            loss = run.loss_fn(run.model, ids)
            acc.backward(loss)
            if acc.sync_gradients:
                if cfg.max_grad_norm > 0:
                    grad_norm = acc.clip_grad_norm_(run.model.parameters(), cfg.max_grad_norm)
                run.optimizer.step()
                run.scheduler.step()
            run.optimizer.zero_grad(set_to_none=True)
        total += loss.detach().float()
    return total / cfg.gradient_accumulation_steps, grad_norm


def _stop_reason(run: Run, seconds: float) -> str | None:
    """Why to stop now (the same answer on every process), or None."""
    import torch

    cfg, state = run.config, run.state
    if state.step >= state.plan.steps:
        return "max_steps"
    if cfg.max_tokens is not None and state.tokens_seen >= cfg.max_tokens:
        return "max_tokens"
    if cfg.max_minutes is not None:
        over = torch.tensor(float(seconds >= cfg.max_minutes * 60), device=run.accelerator.device)
        if float(run.accelerator.reduce(over, "max")) > 0:  # clocks differ between processes
            return "max_minutes"
    return None


def train(
    config: TrainConfig,
    *,
    train_data: SequenceSource | None = None,
    valid_data: Callable[[], SequenceSource] | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Pretrain (or continue with ``config.resume``) and leave the latest export in ``output``.

    ``log`` receives the lines said once (precision, peaks, step plan); None: silent."""
    if config.init_from is not None:  # a Hub id ORG/NAME[@REV]: its snapshot in the cache
        from codeparrot.models.checkpoint import resolve_checkpoint

        config = config.replace(init_from=resolve_checkpoint(config.init_from))
    run = setup(config, train_data=train_data, valid_data=valid_data, log=log)
    resumed_from = run.state.step if run.resume_from is not None else None
    metrics = _start_logging(run, resumed_from)
    progress = _Progress.starting(run)
    stopped_by = _loop(run, metrics, progress)
    _finish(run, metrics, progress)
    return _result(run, progress, stopped_by, resumed_from)


@dataclass
class _Progress:
    """What the loop keeps between steps: the clock, the throughput window, the last results."""

    tokens_per_step: int
    start: float  # perf_counter() when this process started training
    seconds_before: float  # training time of the run before a resume
    window_start: float
    window_tokens: int = 0
    last_loss: float | None = None
    eval_loss: float | None = None
    last_saved: Path | None = None

    @classmethod
    def starting(cls, run: Run) -> _Progress:
        cfg, acc = run.config, run.accelerator
        tokens = cfg.batch_size * acc.num_processes * cfg.gradient_accumulation_steps
        start = time.perf_counter()
        return cls(tokens * run.seq_length, start, run.state.train_seconds, start)

    def advance(self, state: TrainState) -> float:
        """Count one optimizer step; returns the time now."""
        state.step += 1
        state.tokens_seen += self.tokens_per_step
        self.window_tokens += self.tokens_per_step
        now = time.perf_counter()
        state.train_seconds = self.seconds_before + (now - self.start)
        return now


def _start_logging(run: Run, resumed_from: int | None) -> MetricsLog:
    """``metrics.jsonl`` (cut back to the checkpoint of a resumed run) and the trackers."""
    config, acc = run.config, run.accelerator
    metrics = MetricsLog(config.output / METRICS, enabled=acc.is_main_process)
    if resumed_from is not None:
        metrics.truncate_after(resumed_from)  # steps logged after the checkpoint are redone
    tracker_config = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in config.to_dict().items()
        if isinstance(v, int | float | str | bool | Path)
    }
    if run.precision is not None:
        tracker_config["precision"] = run.precision.mixed_precision  # what "auto" chose
    acc.init_trackers("train", config=tracker_config)
    return metrics


def _loop(run: Run, metrics: MetricsLog, progress: _Progress) -> str:
    """Optimizer steps until a budget runs out, evaluating and saving every ``eval_every``;
    returns why it stopped."""
    from tqdm.auto import tqdm

    config, state = run.config, run.state
    bar = tqdm(
        total=state.plan.steps,
        initial=state.step,
        desc="train",
        unit="step",
        disable=not (config.progress and run.accelerator.is_local_main_process),
    )
    stopped_by = _stop_reason(run, 0.0)
    planner = _Planner(run, progress)
    while stopped_by is None:
        loss, grad_norm = _train_step(run)
        now = progress.advance(state)
        bar.update(1)
        if planner.observe(state.step, now):
            bar.total = state.plan.steps
            bar.refresh()
        if state.step % config.log_every == 0 or state.step == state.plan.steps:
            tokens_per_s = _log_step(run, metrics, progress, now, loss, grad_norm)
            bar.set_postfix(loss=f"{progress.last_loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
        stopped_by = _stop_reason(run, state.train_seconds - progress.seconds_before)
        if stopped_by is None and config.eval_every and state.step % config.eval_every == 0:
            paused = time.perf_counter()
            _evaluate_and_save(run, metrics, progress)
            pause = time.perf_counter() - paused
            progress.window_start += pause  # tokens/s counts training only
            planner.mark += pause
    bar.close()
    if stopped_by == "max_minutes" and planner.active:
        raise ConfigError(planner.unplanned(state.train_seconds - progress.seconds_before))
    return stopped_by


class _Planner:
    """Times the first steps of a run with ``--max-minutes`` and lays the schedule over
    the steps the budget holds (training.plan); then keeps timing, and shortens the plan
    when the machine slows down (lengthens it only in WSD's stable phase: the learning rate
    must not rise again). A resumed run keeps its saved plan. With ``--no-plan`` it does
    nothing: the schedule spans ``--max-steps`` and the clock stops the run wherever it is."""

    def __init__(self, run: Run, progress: _Progress) -> None:
        self.run, self.progress = run, progress
        cfg, plan = run.config, run.state.plan
        self.first = run.state.step
        budgeted = cfg.max_minutes is not None and cfg.plan  # --no-plan: the clock stops it
        self.active = budgeted and not plan.planned  # no plan yet
        self.watching = budgeted
        # the clock when timing began (moved on past evaluations): the pace is the mean since,
        # so that a passing burst of other work on the machine does not cut the plan short
        self.mark = 0.0
        self.mark_step = 0
        self.said = math.inf  # the plan last told

    def observe(self, step: int, now: float) -> bool:
        """Count one step done at ``now``; True when the plan was just made or changed."""
        if not self.watching:
            return False
        done_here = step - self.first
        if done_here == SKIP_STEPS:
            self.mark, self.mark_step = now, step
        if done_here < SKIP_STEPS + MEASURE_STEPS or (step - self.mark_step) % MEASURE_STEPS:
            return False
        cfg, plan = self.run.config, self.run.state.plan
        assert cfg.max_minutes is not None
        figures = {
            "budget_minutes": cfg.max_minutes,
            "elapsed_s": now - self.progress.start,
            "done": step,
            "step_s": self._pace(step, now),
            "eval_every": cfg.eval_every,
            "eval_batches": cfg.eval_batches,
        }
        if self.active:  # the first plan
            self.active = False
            decide(plan, **figures, warmup_steps=cfg.warmup_steps)
        elif not replan(plan, **figures, lengthen=self._stable(step)):
            return False
        if abs(plan.steps - self.said) > 0.05 * plan.steps:  # the first plan, and 5% changes
            self.said = plan.steps
            self.run.log(plan.describe())
        return True

    def _stable(self, step: int) -> bool:
        """Whether a WSD schedule is still at its peak after ``step`` (a longer plan then
        changes no learning rate already used or about to be)."""
        cfg, steps = self.run.config, self.run.state.plan.steps
        return cfg.schedule == "wsd" and step + 1 < steps - round(cfg.decay_fraction * steps)

    def _pace(self, step: int, now: float) -> float:
        """Seconds a step since timing began, the slowest process's (one plan for all)."""
        import torch

        acc = self.run.accelerator
        pace = torch.tensor((now - self.mark) / (step - self.mark_step), device=acc.device)
        return float(acc.reduce(pace, "max"))

    def unplanned(self, seconds: float) -> str:
        """Why a budget that ran out before the steps were timed is too short."""
        cfg, steps = self.run.config, self.run.state.step - self.first
        return (
            f"--max-minutes {cfg.max_minutes:g} ran out after {steps} step(s), before this "
            f"machine's step time could be measured ({seconds / max(steps, 1):.1f} s a step "
            f"so far, compilation and data loading included): too short to lay out the "
            f"schedule, whose warm-up alone is {cfg.warmup_steps} steps; give more minutes"
        )


def _log_step(
    run: Run, metrics: MetricsLog, progress: _Progress, now: float, loss: Any, grad_norm: Any
) -> float:
    """One ``metrics.jsonl`` record and tracker entry; starts a new throughput window and
    returns the last one's tokens/s."""
    acc, state = run.accelerator, run.state
    progress.last_loss = float(acc.reduce(loss, "mean"))
    tokens_per_s = progress.window_tokens / max(now - progress.window_start, 1e-9)
    record = {
        "step": state.step,
        "loss": progress.last_loss,
        "lr": run.scheduler.get_last_lr()[0],
        "grad_norm": None if grad_norm is None else float(grad_norm),
        "tokens_seen": state.tokens_seen,
        "tokens_per_s": tokens_per_s,
        "flops_per_s": tokens_per_s * run.flops_per_token,
        "mfu": tokens_per_s * run.flops_per_token / run.peak_flops,
        "elapsed_s": state.train_seconds,
    }
    metrics.write(record)
    acc.log({k: v for k, v in record.items() if k != "step" and v is not None}, step=state.step)
    progress.window_start, progress.window_tokens = now, 0
    return tokens_per_s


def _evaluate_and_save(run: Run, metrics: MetricsLog, progress: _Progress) -> None:
    progress.eval_loss = evaluate(run)
    _log_eval(run, metrics, progress.eval_loss)
    progress.last_saved = save_checkpoint(run, progress.eval_loss, progress.last_loss)


def _finish(run: Run, metrics: MetricsLog, progress: _Progress) -> None:
    """Evaluate and save the last step (unless just done), plot the losses, close trackers."""
    acc, step = run.accelerator, run.state.step
    saved = progress.last_saved
    if saved is None or not saved.name.endswith(f"{step:06d}"):
        _evaluate_and_save(run, metrics, progress)
    if acc.is_main_process:
        plot_loss_curve(run.config.output / METRICS, run.config.output / "loss_curve.png")
    acc.wait_for_everyone()
    acc.end_training()


def _result(
    run: Run, progress: _Progress, stopped_by: str, resumed_from: int | None
) -> TrainResult:
    state = run.state
    seconds = state.train_seconds - progress.seconds_before
    done_tokens = (state.step - (resumed_from or 0)) * progress.tokens_per_step
    eval_loss = progress.eval_loss
    return TrainResult(
        output=run.config.output,
        step=state.step,
        tokens_seen=state.tokens_seen,
        parameters=run.parameters,
        train_loss=progress.last_loss,
        eval_loss=eval_loss,
        perplexity=None if eval_loss is None else perplexity(eval_loss),
        seconds=seconds,
        tokens_per_s=done_tokens / seconds if seconds > 0 else 0.0,
        stopped_by=stopped_by,
        checkpoint=progress.last_saved,
        resumed_from=resumed_from,
        precision=run.precision.to_dict() if run.precision is not None else None,
        planned_steps=state.plan.steps,
        seq_length=run.seq_length,
        designed_tokens=run.config.max_steps * progress.tokens_per_step,
    )


def _log_eval(run: Run, metrics: MetricsLog, eval_loss: float | None) -> None:
    if eval_loss is None:
        return
    record = {"step": run.state.step, "eval_loss": eval_loss, "perplexity": perplexity(eval_loss)}
    metrics.write(record)
    run.accelerator.log(
        {"eval_loss": eval_loss, "perplexity": record["perplexity"]}, step=run.state.step
    )


# -- save ------------------------------------------------------------------------------


def save_checkpoint(run: Run, eval_loss: float | None, train_loss: float | None) -> Path:
    """``checkpoints/step-N`` (export + Accelerate state) built aside, renamed into place,
    copied as the run's latest export; old checkpoints beyond the retention limit go."""
    from codeparrot.models.checkpoint import export_into, write_checkpoint_files

    acc, cfg, state = run.accelerator, run.config, run.state
    root = cfg.output / CHECKPOINTS
    final = root / f"step-{state.step:06d}"
    tmp = root / f".step-{state.step:06d}.partial"
    if acc.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    acc.wait_for_everyone()
    save_state(
        tmp / STATE,
        accelerator=acc,
        model=run.model,
        optimizer=run.optimizer,
        scheduler=run.scheduler,
        train_state=state.state_dict(),
    )
    acc.wait_for_everyone()
    if acc.is_main_process:
        meta = {
            "step": state.step,
            "tokens_seen": state.tokens_seen,
            "parameters": run.parameters,
            "preset": cfg.preset,
            "seq_length": run.seq_length,
            "train_loss": train_loss,
            "eval_loss": eval_loss,
            "perplexity": None if eval_loss is None else perplexity(eval_loss),
            "train_config": cfg.to_dict(),
            "precision": run.precision.to_dict() if run.precision is not None else None,
            "plan": state.plan.to_dict(),
            "fim_trained": learnt_fim(cfg),
            "provenance": provenance(cfg, world_size=acc.num_processes),
        }
        model = acc.unwrap_model(run.model)
        write_checkpoint_files(model, run.tokenizer, tmp, meta)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        export_into(final, cfg.output)
        _prune(root, cfg.keep_checkpoints)
    acc.wait_for_everyone()
    return final


def learnt_fim(cfg: TrainConfig) -> bool:
    """Whether the saved model learnt fill-in-the-middle: this run trained with FIM examples,
    or the checkpoint it started from had (a foreign one: if its tokenizer has the sentinels)."""
    from codeparrot.models.checkpoint import read_checkpoint_meta, trained_to_infill

    if cfg.fim_rate:
        return True
    if cfg.init_from is None:
        return False
    base = trained_to_infill(read_checkpoint_meta(cfg.init_from))
    return tokenizer_has_sentinels(Path(cfg.init_from)) if base is None else base


def _prune(root: Path, keep: int) -> None:
    if keep <= 0:
        return
    found = sorted(
        (p for p in root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[1])
    )
    for old in found[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


class MetricsLog:
    """``metrics.jsonl``: one JSON object per logged step or evaluation (main process only)."""

    def __init__(self, path: Path, *, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (written after the checkpoint a resumed run restarts from)."""
        if not self.enabled or not self.path.exists():
            return
        keep = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    keep.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by a kill
        from codeparrot.io import atomic_open

        with atomic_open(self.path, "w") as fh:
            fh.write("".join(line + "\n" for line in keep))


def read_metrics(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def plot_loss_curve(metrics_file: Path, out: Path) -> Path | None:
    """Training and validation loss against tokens seen, as a PNG (None without data)."""
    records = read_metrics(metrics_file)
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    valid = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
    if not train and not valid:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codeparrot.io import atomic_open

    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train, strict=True), label="train loss")
    if valid:
        ax.plot(*zip(*valid, strict=True), "o-", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"{out.parent.name}: loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_open(out, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)
    return out


def load_run_summary(output: Path) -> dict[str, Any]:
    """The latest export's ``codeparrot_checkpoint.json`` of a run directory."""
    from codeparrot.models.checkpoint import CHECKPOINT_META

    path = output / CHECKPOINT_META
    if not path.exists():
        raise CheckpointError(f"{output}: no {CHECKPOINT_META}; not a finished run")
    return read_json(path)


__all__ = ["Run", "TrainResult", "evaluate", "lr_factor", "setup", "train"]
