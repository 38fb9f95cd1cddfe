"""The run directory: what a run leaves in ``--output`` and the checks made on it before a
run starts (a new run needs an empty one, ``--resume`` one with a checkpoint of the same
settings), the defaults recorded with every checkpoint, and ``metrics.jsonl``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.io import read_json
from codeparrot.options import DEFAULT_FIM_RATE
from codeparrot.training.config import RESUMABLE_CHANGES, TrainConfig
from codeparrot.training.resume_state import check_state_files
from codeparrot.training.sharded import check_shardable

CHECKPOINTS = "checkpoints"
STATE = "state"
METRICS = "metrics.jsonl"


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 700 else math.inf


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


def preflight(config: TrainConfig) -> Path | None:
    """Every check that can fail before weights or data are touched; the checkpoint to resume."""
    check_shardable(config.optimizer)  # Muon under accelerate launch --use_fsdp
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
