"""``TrainConfig``: everything one pretraining run depends on (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option
from codeparrot.models.presets import n_positions_problem

PRESET_NAMES = ("tiny", "small", "large")  # codeparrot.models.presets.PRESETS, kept import-free
TRACKERS = ("tensorboard", "wandb", "trackio", "none")
FIM_MODES = ("document", "context")  # where the FIM transform applies: before or after packing

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
        "push_to_hub",
    }
)


@dataclass(frozen=True)
class TrainConfig(Config):
    """Pretrain a GPT-2 preset on a corpus with Hugging Face Accelerate.

    The learning-rate schedule spans ``max_steps``; ``max_minutes`` and ``max_tokens`` are
    budgets that stop earlier (a stopped run can be continued with ``--resume``).
    """

    data: Path = option(help="corpus directory with train/*.jsonl.gz and valid/*.jsonl.gz")
    output: Path = option(help="run directory: latest export, checkpoints/, metrics, logs")
    tokenizer: Path | None = option(
        None, "tokenizer directory (AutoTokenizer.from_pretrained; default: --init-from's own)"
    )
    preset: str = option("tiny", "model shape", choices=PRESET_NAMES)
    init_from: Path | None = option(
        None, "start from this checkpoint's weights instead of a fresh preset"
    )
    dropout: float | None = option(
        None,
        "set residual, embedding and attention dropout (default: the preset's or checkpoint's)",
    )
    n_positions: int | None = option(
        None, "context length of a fresh preset (default: the preset's; not with --init-from)"
    )
    seq_length: int | None = option(None, "tokens per packed sequence (default: model positions)")
    batch_size: int = option(8, "sequences per process per micro-batch")
    gradient_accumulation_steps: int = option(1, "micro-batches per optimizer step")
    learning_rate: float | None = option(
        None,
        "peak learning rate (default: the preset's: tiny 2e-3, small 5e-4, large 2e-4; "
        "5e-4 with --init-from)",
    )
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of the peak")
    warmup_steps: int = option(100, "linear warmup steps before the cosine decay")
    weight_decay: float = option(0.1, "AdamW weight decay (weights only, not biases or norms)")
    adam_beta1: float = option(0.9, "AdamW beta1")
    adam_beta2: float = option(0.95, "AdamW beta2")
    max_grad_norm: float = option(1.0, "clip the gradient norm to this (0: no clipping)")
    max_steps: int = option(1000, "optimizer steps; the cosine schedule ends here")
    max_minutes: float | None = option(None, "stop after this many minutes of training")
    max_tokens: int | None = option(None, "stop once this many training tokens were seen")
    mixed_precision: str = option(
        "bf16", "autocast dtype (bf16 works on CPU)", choices=("no", "bf16", "fp16")
    )
    compile: bool = option(
        False, "torch.compile the forward pass and loss (slow start, faster steps)"
    )
    gradient_checkpointing: bool = option(False, "recompute activations in backward (~20% slower)")
    pretokenized: bool = option(
        False,
        "tokenize the corpus once into memmapped token shards (RUN/tokens) and train from them",
    )
    shuffle_buffer: int = option(
        1000, "documents held in the streaming shuffle buffer (0: no shuffle)"
    )
    sequence_buffer: int = option(
        4096,
        "packed sequences held in a second streaming shuffle buffer, so that the windows of "
        "one long document do not fill whole batches (0: none; saved in each checkpoint)",
    )
    fim_rate: float = option(
        0.0,
        "share of documents (--fim-mode document) or packed sequences (context) turned into "
        "fill-in-the-middle examples (0: left to right only; needs a tokenizer with the FIM "
        "sentinels)",
    )
    fim_spm_rate: float = option(
        0.5, "share of the fill-in-the-middle examples laid out suffix-first (SPM), not PSM"
    )
    fim_mode: str = option(
        "context",
        "apply fill-in-the-middle to each document before packing, or to each document piece "
        "of a packed sequence after it (Bavarian et al. 2022 found context-level better)",
        choices=FIM_MODES,
    )
    eval_every: int = option(
        500, "evaluate and save a checkpoint every N steps (0: only at the end)"
    )
    eval_batches: int = option(20, "validation batches per evaluation")
    keep_checkpoints: int = option(3, "intermediate checkpoints kept in RUN/checkpoints (0: all)")
    log_every: int = option(10, "write metrics every N steps")
    log_with: str = option("tensorboard", "experiment tracker", choices=TRACKERS)
    peak_tflops: float | None = option(
        None, "peak TFLOP/s for MFU (default: a bf16 matmul measured at start)"
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

    def problems(self) -> list[str]:
        out = []
        if self.tokenizer is None and self.init_from is None:
            out.append(
                "--tokenizer is required unless --init-from names a checkpoint (its own is used)"
            )
        if self.preset not in PRESET_NAMES:
            out.append(f"--preset must be one of {', '.join(PRESET_NAMES)}, got {self.preset!r}")
        if problem := n_positions_problem(self.n_positions):
            out.append(problem)
        if self.n_positions is not None and self.init_from is not None:
            out.append("--n-positions sets a fresh preset's context; --init-from keeps its own")
        if self.seq_length is not None and self.seq_length < 2:
            out.append(f"--seq-length must be >= 2, got {self.seq_length}")
        for name in (
            "batch_size",
            "gradient_accumulation_steps",
            "max_steps",
            "eval_batches",
            "log_every",
        ):
            if getattr(self, name) < 1:
                out.append(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in (
            "warmup_steps",
            "eval_every",
            "keep_checkpoints",
            "shuffle_buffer",
            "sequence_buffer",
        ):
            if getattr(self, name) < 0:
                out.append(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.learning_rate is not None and self.learning_rate <= 0:
            out.append(f"--learning-rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.min_lr_ratio <= 1:
            out.append(f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            out.append(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.weight_decay < 0:
            out.append(f"--weight-decay must be >= 0, got {self.weight_decay}")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0 <= getattr(self, name) < 1:
                out.append(
                    f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(self, name)}"
                )
        if self.max_grad_norm < 0:
            out.append(f"--max-grad-norm must be >= 0, got {self.max_grad_norm}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            out.append(f"--max-minutes must be > 0, got {self.max_minutes}")
        if self.max_tokens is not None and self.max_tokens < 1:
            out.append(f"--max-tokens must be >= 1, got {self.max_tokens}")
        for name in ("fim_rate", "fim_spm_rate"):
            if not 0 <= getattr(self, name) <= 1:
                out.append(
                    f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}"
                )
        if self.fim_mode not in FIM_MODES:
            out.append(f"--fim-mode must be one of {', '.join(FIM_MODES)}, got {self.fim_mode!r}")
        if self.peak_tflops is not None and self.peak_tflops <= 0:
            out.append(f"--peak-tflops must be > 0, got {self.peak_tflops}")
        return out
