"""The train step and the evaluation: one optimizer step over the accumulated micro-batches,
the mean validation loss, and why a run stops now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codeparrot.training.data import Batches

# Several processes compare their clocks for --max-minutes every this many steps: a run
# may pass its minutes by up to CLOCK_EVERY - 1 steps.
CLOCK_EVERY = 8

if TYPE_CHECKING:
    from codeparrot.training.setup_run import Run


def lm_loss(model: Any, ids: Any, ignore_id: int | None = None) -> Any:
    """The mean next-token loss of ``model`` on ``ids`` (the model shifts the labels).

    Tokens equal to ``ignore_id`` (FIM padding) are not predicted. Compiled as a whole with
    ``--compile``, so that the logits stay inside the graph (see the Accelerator in
    :func:`setup`)."""
    labels = ids if ignore_id is None else ids.masked_fill(ids == ignore_id, -100)
    return model(input_ids=ids, labels=labels).loss


def batch_to_device(batch: Any, device: Any) -> Any:
    """A host batch (a numpy array of token ids) as a tensor on ``device``.

    On CUDA the copy starts from pinned memory and does not wait: a copy from pageable
    memory synchronises the stream (torch waits for it to finish), so the host could not
    queue the next step while the device still runs this one. The pinned buffer is reused
    only once the copy has ended (torch's caching host allocator records it)."""
    import torch

    ids = torch.from_numpy(batch)
    if getattr(device, "type", None) == "cuda":
        return ids.pin_memory().to(device, non_blocking=True)
    return ids.to(device)


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
            ids = batch_to_device(batch, acc.device)
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


def train_step(run: Run) -> tuple[Any, Any]:
    """One optimizer step over ``gradient_accumulation_steps`` micro-batches: (loss, grad norm)."""
    import torch

    acc, cfg = run.accelerator, run.config
    total = torch.zeros((), device=acc.device)
    grad_norm = None
    for _ in range(cfg.gradient_accumulation_steps):
        ids = batch_to_device(run.state.batches.next_batch(), acc.device)
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


def stop_reason(run: Run, seconds: float) -> str | None:
    """Why to stop now (the same answer on every process), or None."""
    import torch

    cfg, state = run.config, run.state
    if state.step >= state.plan.steps:
        return "max_steps"
    if cfg.max_tokens is not None and state.tokens_seen >= cfg.max_tokens:
        return "max_tokens"
    if cfg.max_minutes is not None:
        if run.accelerator.num_processes == 1:  # no device round trip (a host sync) a step
            return "max_minutes" if seconds >= cfg.max_minutes * 60 else None
        # clocks differ between processes, so they agree through the device: a round trip
        # that waits for the queued steps, made every CLOCK_EVERY steps (the same steps on
        # every process) so that the host keeps queueing work ahead of the device between
        if state.step % CLOCK_EVERY:
            return None
        over = torch.tensor(float(seconds >= cfg.max_minutes * 60), device=run.accelerator.device)
        if float(run.accelerator.reduce(over, "max")) > 0:
            return "max_minutes"
    return None
