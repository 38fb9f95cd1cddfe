"""``TrainConfig``: everything one pretraining run depends on (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.options import (
    BATCH_SIZE,
    DEFAULT_FIM_RATE,
    DROPOUT,
    FIM_LINE_RATE,
    FIM_MODE,
    FIM_RATE,
    FIM_SPM_RATE,
    LEARNING_RATE,
    MAX_MINUTES,
    MAX_STEPS,
    MIN_LR_RATIO,
    MIXED_PRECISION,
    N_POSITIONS,
    OPTIMIZER,
    PRESET,
    SCHEDULE,
    SEQ_LENGTH,
    TRACKER,
    WARMUP_STEPS,
    WEIGHT_DECAY,
)
from codeparrot.options import PRESET_NAMES as PRESET_NAMES  # re-exported
from codeparrot.training.kernels import KERNELS


@dataclass(frozen=True)
class Recipe:
    """The training settings that decide what model a run makes (not its budget, paths or
    logging): what ``codeparrot train --recipe NAME|FILE`` starts from, flags given override.
    Recipes are commented YAML files (``training/recipes/*.yaml``, read by
    :func:`codeparrot.training.recipes.load_recipe`); ``extra`` holds any further
    :class:`TrainConfig` field a recipe sets (a learning rate, warmup, steps)."""

    preset: str
    optimizer: str
    schedule: str
    batch_size: int
    pretokenized: bool
    fim_rate: float | None  # None: DEFAULT_FIM_RATE when the tokenizer has the sentinels
    name: str = ""
    description: str = ""
    extra: tuple[tuple[str, Any], ...] = ()

    def settings(self) -> dict[str, Any]:
        """The :class:`TrainConfig` fields this recipe sets."""
        core = {k: getattr(self, k) for k in RECIPE_FIELDS}
        return {**core, **dict(self.extra)}

    def describe(self) -> str:
        """``"tiny-qwen, muon, wsd, batch 16, pretokenized windows, FIM 0.9 ..."``"""
        if self.fim_rate is None:
            fim = f"FIM {DEFAULT_FIM_RATE} (with a tokenizer's FIM sentinels)"
        else:
            fim = f"FIM {self.fim_rate}" if self.fim_rate else "no FIM"
        data = "pretokenized windows" if self.pretokenized else "streamed packing"
        more = "".join(f", {k.replace('_', ' ')} {v}" for k, v in self.extra)
        return (
            f"{self.preset}, {self.optimizer}, {self.schedule}, batch {self.batch_size}, "
            f"{data}, {fim}{more}"
        )


# The fields every recipe sets.
RECIPE_FIELDS = ("preset", "optimizer", "schedule", "batch_size", "pretokenized", "fim_rate")

# What `codeparrot quickstart` trains and TrainConfig's defaults: the same values as
# training/recipes/quickstart.yaml (a test keeps the two equal), which says why.
QUICKSTART_RECIPE = Recipe(
    preset="tiny-qwen",
    optimizer="muon",
    schedule="wsd",
    batch_size=16,
    pretokenized=True,
    fim_rate=None,
    name="quickstart",
)
DEFAULT_RECIPE = "quickstart"

# Fields that may change between an interrupted run and its --resume: budgets and logging.
RESUMABLE_CHANGES = frozenset(
    {
        "resume",
        "output",
        "max_minutes",
        "max_tokens",
        "log_every",
        "log_with",
        "progress",
        "peak_tflops",
        "keep_checkpoints",
        "compile",
        "fused_kernels",
        "push_to_hub",
    }
)


@dataclass(frozen=True)
class TrainConfig(Config):
    """Pretrain a model preset on a corpus with Hugging Face Accelerate.

    The defaults are the quickstart's recipe (:data:`QUICKSTART_RECIPE`);
    :meth:`from_recipe` starts from another. The learning-rate schedule spans
    ``max_steps``; ``max_minutes`` and ``max_tokens`` are budgets that stop earlier (a
    stopped run can be continued with ``--resume``).
    """

    data: Path = option(help="corpus directory with train/*.jsonl.gz and valid/*.jsonl.gz")
    output: Path = option(help="run directory: latest export, checkpoints/, metrics, logs")
    tokenizer: Path | None = option(
        None, "tokenizer directory (AutoTokenizer.from_pretrained; default: --init-from's own)"
    )
    preset: str = PRESET.field(QUICKSTART_RECIPE.preset)
    init_from: Path | None = option(
        None, "start from this checkpoint's weights instead of a fresh preset"
    )
    dropout: float | None = DROPOUT.field()
    n_positions: int | None = N_POSITIONS.field(
        help="context length of a fresh preset (default: the preset's; not with --init-from)"
    )
    seq_length: int | None = SEQ_LENGTH.field()
    batch_size: int = BATCH_SIZE.field(QUICKSTART_RECIPE.batch_size)
    gradient_accumulation_steps: int = option(1, "micro-batches per optimizer step", ge=1)
    learning_rate: float | None = LEARNING_RATE.field(
        help="peak learning rate (default: the preset's: tiny and tiny-qwen 2e-3, or 3e-3 with "
        "--optimizer muon; "
        "small 5e-4, large 2e-4; "
        "5e-4 with --init-from)",
    )
    optimizer: str = OPTIMIZER.field(QUICKSTART_RECIPE.optimizer)
    schedule: str = SCHEDULE.field(QUICKSTART_RECIPE.schedule)
    decay_fraction: float = option(
        0.2, "wsd: share of --max-steps spent decaying to the floor", gt=0, le=1
    )
    min_lr_ratio: float = MIN_LR_RATIO.field()
    warmup_steps: int = WARMUP_STEPS.field()
    weight_decay: float = WEIGHT_DECAY.field()
    adam_beta1: float = option(0.9, "AdamW beta1", ge=0, lt=1)
    adam_beta2: float = option(0.95, "AdamW beta2", ge=0, lt=1)
    max_grad_norm: float = option(1.0, "clip the gradient norm to this (0: no clipping)", ge=0)
    max_steps: int = MAX_STEPS.field()
    recipe_steps: int | None = option(
        None,
        "the recipe's own step count where --max-steps is only a ceiling that --max-minutes "
        "fills up to: the plan's line reports the steps against it (default: --max-steps)",
        ge=1,
    )
    max_minutes: float | None = MAX_MINUTES.field()
    plan: bool = option(
        True,
        "with --max-minutes: time the first steps and lay the learning-rate schedule over "
        "the steps the budget holds, so the run ends annealed (--no-plan: over --max-steps, "
        "and the clock stops the run wherever it is)",
    )
    max_tokens: int | None = option(None, "stop once this many training tokens were seen", ge=1)
    mixed_precision: str = MIXED_PRECISION.field()
    compile: bool = option(
        False, "torch.compile the forward pass and loss (slow start, faster steps)"
    )
    fused_kernels: tuple[str, ...] | None = option(
        None,
        "on CUDA with liger-kernel installed (the gpu extra), the fused kernels a Qwen3 or "
        f"Llama model gets, of {', '.join(KERNELS)} (default: all, and with --compile all "
        "but fused_linear_cross_entropy, which does not compile; none: none)",
        choices=(*KERNELS, "none"),
        metavar="KERNEL",
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute activations in the backward pass instead of keeping them (less memory, more compute)",
    )
    pretokenized: bool = option(
        QUICKSTART_RECIPE.pretokenized,
        "tokenize the corpus once into memmapped token shards (RUN/tokens) and train from them",
    )
    shuffle_buffer: int = option(
        1000, "documents held in the streaming shuffle buffer (0: no shuffle)", ge=0
    )
    sequence_buffer: int = option(
        4096,
        "packed sequences held in a second streaming shuffle buffer, so that the windows of "
        "one long document do not fill whole batches (0: none; saved in each checkpoint)",
        ge=0,
    )
    fim_rate: float | None = FIM_RATE.field(QUICKSTART_RECIPE.fim_rate)
    fim_spm_rate: float = FIM_SPM_RATE.field()
    fim_line_rate: float = FIM_LINE_RATE.field()
    fim_mode: str = FIM_MODE.field()
    eval_every: int = option(
        500, "evaluate and save a checkpoint every N steps (0: only at the end)", ge=0
    )
    eval_batches: int = option(20, "validation batches per evaluation", ge=1)
    keep_checkpoints: int = option(
        3, "intermediate checkpoints kept in RUN/checkpoints (0: all)", ge=0
    )
    log_every: int = option(10, "write metrics every N steps", ge=1)
    log_with: str = TRACKER.field()
    peak_tflops: float | None = option(
        None, "peak TFLOP/s for MFU (default: a bf16 matmul measured at start)", gt=0
    )
    seed: int = option(42, "seed of the initialisation, data order and dropout")
    resume: bool = option(False, "continue from the latest checkpoint in --output")
    progress: bool = option(True, "show a progress bar")
    push_to_hub: str | None = option(
        None,
        "after training, push the run's export to this Hub model repository, on a branch "
        "named after --output (needs huggingface_hub, a token and the network; checked first)",
        metavar="NAME",
    )

    @classmethod
    def from_recipe(cls, recipe: str | Path | Recipe, **settings: Any) -> TrainConfig:
        """A config starting from a recipe (a name, a YAML file or a :class:`Recipe`),
        ``settings`` over it."""
        if not isinstance(recipe, Recipe):
            from codeparrot.training.recipes import load_recipe

            recipe = load_recipe(recipe)
        return cls(**{**recipe.settings(), **settings})

    def problems(self) -> list[str]:
        out = []
        if self.tokenizer is None and self.init_from is None:
            out.append(
                "--tokenizer is required unless --init-from names a checkpoint (its own is used)"
            )
        if self.fused_kernels and "none" in self.fused_kernels and len(self.fused_kernels) > 1:
            out.append("--fused-kernels: 'none' goes alone, not with kernels to apply")
        if self.n_positions is not None and self.init_from is not None:
            out.append("--n-positions sets a fresh preset's context; --init-from keeps its own")
        return out
