"""Checkpoints: ``checkpoints/step-N`` (export + Accelerate state) built aside and renamed
into place, the run's latest export beside it, old checkpoints pruned."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from codeparrot.io import provenance
from codeparrot.training.config import TrainConfig
from codeparrot.training.resume_state import save_state
from codeparrot.training.rundir import CHECKPOINTS, STATE, perplexity, tokenizer_has_sentinels
from codeparrot.training.sharded import export_weights

if TYPE_CHECKING:
    from codeparrot.training.setup_run import Run


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
    export = export_weights(acc, run.model)  # under FSDP a collective; None otherwise
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
        write_checkpoint_files(model, run.tokenizer, tmp, meta, state_dict=export)
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
