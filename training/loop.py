"""The pretraining loop: ``train(config) -> TrainResult`` reads setup -> loop -> save.

Accelerate carries the model, optimizer and schedule (``prepare`` once, ``accumulate``,
``save_state``/``load_state``, trackers); the data sources of :mod:`codeparrot.training.data` are
resumable objects registered for checkpointing, so ``--resume`` restores the exact data
position along with step, schedule, optimizer and RNG states. The run's pieces live beside
this module: ``setup_run`` (model, optimizer, data, Accelerator), ``steps`` (the train step
and evaluation), ``saving`` (checkpoints), ``rundir`` (the run directory), ``flops`` (MFU).
Tests inject tiny data through ``train_data`` and ``valid_data``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.training.config import TrainConfig
from codeparrot.training.data import SequenceSource
from codeparrot.training.flops import measure_peak_flops, mfu  # noqa: F401 (re-exported)
from codeparrot.training.memory import EARLY_STEPS, out_of_memory_message
from codeparrot.training.optim import lr_factor, parameter_groups  # noqa: F401 (re-exported)
from codeparrot.training.plan import MEASURE_STEPS, SKIP_STEPS, decide, replan
from codeparrot.training.rundir import (  # noqa: F401 (re-exported)
    METRICS,
    MetricsLog,
    load_run_summary,
    perplexity,
    plot_loss_curve,
    read_metrics,
    with_defaults,
)
from codeparrot.training.saving import save_checkpoint
from codeparrot.training.setup_run import Run, TrainState, setup
from codeparrot.training.steps import evaluate, stop_reason, train_step
from codeparrot.training.steps import train_step as _train_step  # noqa: F401 (bench/train.py)


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
    designed_tokens: int | None = None  # the tokens of all --max-steps (or a longer plan's)
    # the rate after the first SKIP_STEPS steps (compilation, first allocations): None when
    # the run was too short to tell; ``tokens_per_s`` is the whole run's, those included
    steady_tokens_per_s: float | None = None
    compile_seconds: float | None = None  # the first steps' time beyond the steady pace
    flops_per_s: float | None = None  # model FLOP/s (6N + 12·L·d·T a token), all processes
    mfu: float | None = None  # flops_per_s over peak_flops x processes, at most 1
    peak_flops: float | None = None  # one device's measured peak (or --peak-tflops)
    datasheet_peak_flops: float | None = None  # its datasheet's dense bf16 peak, if known
    device_name: str | None = None


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
    paused: float = 0.0  # seconds spent evaluating and saving between steps
    steady_start: float | None = None  # the clock after the warm-up steps (device synced)
    steady_step: int = 0
    steady_paused: float = 0.0  # ``paused`` then
    warm_seconds: float = 0.0  # training time of the warm-up steps
    end: float | None = None  # the clock after the last step (device synced)

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

    def pause(self, seconds: float) -> None:
        """Leave ``seconds`` of evaluation and saving out of the training rates."""
        self.paused += seconds
        self.window_start += seconds

    def mark(self, run: Run, steady: bool) -> None:
        """The clock, once the device has done its queued work: where the steady rate starts
        (``steady``) or where training ended. The only device syncs outside ``--log-every``."""
        synchronize(run.accelerator.device)
        now = time.perf_counter()
        if not steady:
            self.end = now
            return
        self.steady_start, self.steady_step = now, run.state.step
        self.steady_paused = self.paused
        self.warm_seconds = now - self.start - self.paused

    def steady(self, step: int, first: int) -> tuple[float | None, float | None]:
        """(steady tokens/s, compile seconds), None where the run was too short to tell."""
        if self.steady_start is None or self.end is None or step <= self.steady_step:
            return None, None
        seconds = self.end - self.steady_start - (self.paused - self.steady_paused)
        step_s = max(seconds, 1e-9) / (step - self.steady_step)
        warm_steps = self.steady_step - first
        return self.tokens_per_step / step_s, max(0.0, self.warm_seconds - warm_steps * step_s)


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (no-op on a CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type != "cpu" and hasattr(torch, "accelerator"):
        torch.accelerator.synchronize()


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
    planner = _Planner(run, progress)
    bar = tqdm(
        total=None if planner.active else state.plan.steps,  # unknown until the plan is made
        initial=state.step,
        desc="train",
        unit="step",
        disable=not (config.progress and run.accelerator.is_local_main_process),
    )
    stopped_by = stop_reason(run, 0.0)
    while stopped_by is None:
        loss, grad_norm = _first_steps_fit(run, planner.first)
        now = progress.advance(state)
        bar.update(1)
        if state.step - planner.first == SKIP_STEPS:
            progress.mark(run, steady=True)
        if planner.observe(state.step, now):
            bar.total = state.plan.steps
            bar.refresh()
        if state.step % config.log_every == 0 or state.step == state.plan.steps:
            tokens_per_s = _log_step(run, metrics, progress, now, loss, grad_norm)
            bar.set_postfix(loss=f"{progress.last_loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
        stopped_by = stop_reason(run, state.train_seconds - progress.seconds_before)
        if stopped_by is None and config.eval_every and state.step % config.eval_every == 0:
            paused = time.perf_counter()
            _evaluate_and_save(run, metrics, progress)
            pause = time.perf_counter() - paused
            progress.pause(pause)  # tokens/s counts training only
            planner.mark += pause
    progress.mark(run, steady=False)
    bar.close()
    if stopped_by == "max_minutes" and planner.active:
        raise ConfigError(planner.unplanned(state.train_seconds - progress.seconds_before))
    return stopped_by


def _first_steps_fit(run: Run, first: int) -> tuple[Any, Any]:
    """``train_step``; an out-of-memory in the first steps is said as the batch to change."""
    import torch

    step = run.state.step + 1
    try:
        return train_step(run)
    except torch.OutOfMemoryError as e:
        if step - first > EARLY_STEPS or run.memory is None:
            raise
        message = out_of_memory_message(run.config, run.memory, run.accelerator.device, step)
        raise ConfigError(message) from e


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
        "mfu": mfu(tokens_per_s * run.flops_per_token, run.peaks.measured * acc.num_processes),
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
    tokens_per_s = done_tokens / seconds if seconds > 0 else 0.0
    steady, compile_seconds = progress.steady(state.step, resumed_from or 0)
    flops_per_s = (steady or tokens_per_s) * run.flops_per_token
    designed_steps = max(run.config.max_steps, state.plan.steps)  # a plan past the recipe's
    return TrainResult(
        output=run.config.output,
        step=state.step,
        tokens_seen=state.tokens_seen,
        parameters=run.parameters,
        train_loss=progress.last_loss,
        eval_loss=eval_loss,
        perplexity=None if eval_loss is None else perplexity(eval_loss),
        seconds=seconds,
        tokens_per_s=tokens_per_s,
        stopped_by=stopped_by,
        checkpoint=progress.last_saved,
        resumed_from=resumed_from,
        precision=run.precision.to_dict() if run.precision is not None else None,
        planned_steps=state.plan.steps,
        seq_length=run.seq_length,
        designed_tokens=designed_steps * progress.tokens_per_step,
        steady_tokens_per_s=steady,
        compile_seconds=compile_seconds,
        flops_per_s=flops_per_s,
        mfu=mfu(flops_per_s, run.peaks.measured * run.accelerator.num_processes),
        peak_flops=run.peaks.measured,
        datasheet_peak_flops=run.peaks.datasheet,
        device_name=run.peaks.device_name,
    )


def _log_eval(run: Run, metrics: MetricsLog, eval_loss: float | None) -> None:
    if eval_loss is None:
        return
    record = {"step": run.state.step, "eval_loss": eval_loss, "perplexity": perplexity(eval_loss)}
    metrics.write(record)
    run.accelerator.log(
        {"eval_loss": eval_loss, "perplexity": record["perplexity"]}, step=run.state.step
    )


__all__ = ["Run", "TrainResult", "evaluate", "lr_factor", "setup", "train"]
