"""Fine-tuning on your own code: ``finetune(FinetuneConfig) -> FinetuneResult``.

The short path from a repository to an editor that completes in it:

1. check every input before any work (checkpoint is a causal LM with its tokenizer, the
   repository holds Python files, the output is free, the Hub is reachable if asked);
2. build a corpus from the repository with the usual cleaning, split by *file* so that the
   validation files are held out of training (``OUTPUT/corpus``);
3. measure the base checkpoint's loss on the validation files (and on the first train
   tokens, to see training work), train from the checkpoint with a fine-tuning schedule
   (``OUTPUT/model``, a normal ``codeparrot train`` run directory), measure again;
4. record both in ``OUTPUT/finetune.json`` and return the commands that start the
   language server and the playground on the result.

The losses before and after are measured here by one function, in float32, on the same
token windows, so the two numbers are comparable (the training loop's own evaluation runs
under autocast and only on full batches).
"""

from __future__ import annotations

import math
import shlex
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.errors import CheckpointError, DataError
from codeparrot.options import (
    BATCH_SIZE,
    CHECKPOINT,
    DEFAULT_FIM_RATE,
    DROPOUT,
    FIM_RATE,
    FIM_TOKENS,
    LEARNING_RATE,
    MAX_MINUTES,
    MAX_STEPS,
    MIN_LR_RATIO,
    MIXED_PRECISION,
    REVISION,
    SEQ_LENGTH,
    TRACKER,
    VALID_FRACTION,
    WARMUP_STEPS,
    WEIGHT_DECAY,
    WORKERS,
)

RESULT_FILE = "finetune.json"
PEFT_METHODS = ("lora",)
# The longest sequence a fine-tune packs by default: real models' contexts (16k for
# CodeLlama, 32k for Qwen2.5-Coder) would make one CPU step take minutes.
DEFAULT_SEQ_LENGTH = 1024


@dataclass(frozen=True)
class FinetuneConfig(Config):
    """Continue training a checkpoint on one repository and report held-out loss before/after.

    The step budget defaults to ``epochs`` passes over the repository's train files,
    capped by ``max_minutes``; the learning rate is lower and the warmup shorter than
    for pretraining.
    """

    repository: Path = option(
        help="directory of the code to fine-tune on (a checkout or folder)", metavar="REPOSITORY"
    )
    checkpoint: Path = CHECKPOINT.field()  # the base model (or a LoRA adapter)
    output: Path = option(
        help="directory to create: corpus/, model/ and finetune.json", metavar="DIR"
    )
    learning_rate: float = LEARNING_RATE.field(
        2e-4,
        "peak learning rate (lower than pretraining's: the tiny preset uses 2e-3, small 5e-4)",
    )
    warmup_steps: int = WARMUP_STEPS.field(
        20, "linear warmup steps (fewer than pretraining's: the weights are trained already)"
    )
    min_lr_ratio: float = MIN_LR_RATIO.field()
    weight_decay: float = WEIGHT_DECAY.field()
    epochs: float = option(3.0, "passes over the train files when --max-steps is not given", gt=0)
    max_steps: int | None = MAX_STEPS.field(None, "optimizer steps (default: from --epochs)")
    max_minutes: float = MAX_MINUTES.field(10.0)
    batch_size: int = BATCH_SIZE.field(8, "sequences per optimizer step")
    seq_length: int | None = SEQ_LENGTH.field(
        help=f"tokens per packed sequence (default: the model's context, at most "
        f"{DEFAULT_SEQ_LENGTH:,}: a 16k or 32k context would make one step take minutes)"
    )
    dropout: float | None = DROPOUT.field(
        help="dropout while fine-tuning (default: the checkpoint's; small data may want 0.1)"
    )
    valid_fraction: float = VALID_FRACTION.field(
        0.1,
        "share of the repository's files held out for validation (one repository: "
        "a larger share than a corpus needs, and never none)",
        gt=0,
    )
    eval_tokens: int = option(
        200_000, "most tokens of each split the before/after loss is measured on", ge=2
    )
    mixed_precision: str = MIXED_PRECISION.field()
    log_with: str = TRACKER.field()
    workers: int = WORKERS.field()
    seed: int = option(0, "seed of the split, data order and dropout")
    force: bool = option(False, "replace --output if it already holds a fine-tuning run")
    progress: bool = option(True, "show progress bars")
    revision: str | None = REVISION.field()
    fim_rate: float | None = FIM_RATE.field(
        help="share of the training documents turned into fill-in-the-middle examples, laid "
        "out in the base model's own template (StarCoder's, Qwen2.5-Coder's, CodeLlama's ...: "
        "detected from its tokenizer, or --fim-tokens) and in the order the fine-tuned model "
        f"is prompted in (SPM for the StarCoder template, PSM for the others); default: "
        f"{DEFAULT_FIM_RATE} when the base fills in the middle (the quickstart's rate), else 0"
    )
    fim_tokens: str = FIM_TOKENS.field()
    peft: str | None = option(
        None,
        "parameter-efficient fine-tuning: lora trains low-rank adapters of the attention "
        "projections (peft) with the base weights frozen and saves an adapter that every "
        "command loads on top of its base (default: train every weight)",
        choices=PEFT_METHODS,
    )
    lora_rank: int = option(8, "with --peft lora: rank of the adapter matrices", ge=1, le=1024)
    lora_alpha: float = option(
        16.0, "with --peft lora: scale of the adapter's update (alpha / rank)", gt=0
    )
    lora_dropout: float = option(
        0.05, "with --peft lora: dropout on the adapter's input", ge=0, lt=1
    )
    lora_targets: tuple[str, ...] = option(
        (),
        "with --peft lora: names of the linear layers to adapt (default per family: GPT-2 "
        "c_attn c_proj, gpt_bigcode c_attn, Llama/Qwen2/Mistral/Starcoder2 q_proj k_proj "
        "v_proj o_proj, ...)",
        metavar="NAME",
    )
    activation_checkpointing: bool = option(
        True,
        "with --peft lora: recompute each block's activations in the backward pass instead "
        "of keeping them (a 164M gpt_bigcode at 1,024 tokens on a CPU: 2.0 instead of 5.8 "
        "GiB peak, for 1.6x the step time)",
    )
    merge: bool = option(
        False,
        "with --peft lora: merge the adapter into the base weights and save a plain "
        "checkpoint instead of an adapter",
    )
    push_to_hub: str | None = option(
        None,
        "push the fine-tuned model to this Hub repository, on a branch named after --output "
        "(needs huggingface_hub, a token and the network; checked before any work)",
        metavar="NAME",
    )

    def problems(self) -> list[str]:
        out = []
        if self.peft is None:
            changed = [
                flag
                for flag, name in (("--merge", "merge"), ("--lora-targets", "lora_targets"))
                if getattr(self, name)
            ]
            if changed:
                out.append(f"{', '.join(changed)} needs --peft lora")
        from codeparrot.fim import parse_fim_tokens

        try:
            parse_fim_tokens(self.fim_tokens)
        except ValueError as e:
            out.append(str(e))
        return out

    @property
    def corpus_dir(self) -> Path:
        return self.output / "corpus"

    @property
    def model_dir(self) -> Path:
        return self.output / "model"


@dataclass
class FinetuneResult:
    """What a fine-tuning run measured; ``model`` is a checkpoint directory."""

    output: Path
    model: Path
    corpus: Path
    train_files: int
    valid_files: int
    train_tokens: int
    valid_tokens: int
    valid_loss_before: float
    valid_loss_after: float
    train_loss_before: float
    train_loss_after: float
    steps: int
    stopped_by: str
    seconds: float
    lsp_command: str
    app_command: str
    pushed: str | None = None
    # a fine-tune (full or LoRA) stopped by --max-minutes under a quarter of its planned
    # tokens: what to do about it (training/plan.py's warning, as `train` prints it)
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


# -- checks before any work ------------------------------------------------------------


def check_repository(repository: Path) -> None:
    """The repository exists and holds at least one Python file the corpus would read."""
    from codeparrot.data.sources import iter_source

    if not repository.is_dir():
        raise DataError(f"REPOSITORY {repository}: no such directory")
    if next(iter_source(str(repository)), None) is None:
        raise DataError(
            f"REPOSITORY {repository}: no Python (*.py) files found; point it at a source "
            "checkout (folders named site-packages, node_modules and __pycache__ are skipped)"
        )


def preflight(config: FinetuneConfig) -> tuple[Path, Any]:
    """Every check that can fail before data or weights are touched.

    Returns the base checkpoint's local directory (a Hub id resolved through the cache)
    and the Hub target of ``--push-to-hub`` (None when not asked)."""
    from codeparrot.hub import hub_cache_dir, in_hub_cache
    from codeparrot.models.adapter import is_adapter
    from codeparrot.models.checkpoint import resolve_checkpoint, validate_checkpoint

    base = resolve_checkpoint(config.checkpoint, config.revision)
    if base.is_dir() and is_adapter(base):
        raise CheckpointError(
            f"--checkpoint {config.checkpoint}: is an adapter; fine-tune its base model, or "
            "merge it into a plain checkpoint first (finetune --peft lora --merge)"
        )
    # causal LM, no custom code, weights, its tokenizer fits, --seq-length within the context
    validate_checkpoint(base, seq_length=config.seq_length)
    if config.fim_rate:  # a base without FIM tokens: an error before any work
        from codeparrot.models.checkpoint import load_tokenizer
        from codeparrot.training.finetune_fim import family_transform

        family_transform(
            load_tokenizer(base), config.fim_rate, config.fim_tokens, config.seed,
            where=str(config.checkpoint),
        )  # fmt: skip
    check_repository(config.repository)
    if in_hub_cache(config.output):
        raise CheckpointError(
            f"--output {config.output}: inside the Hugging Face cache ({hub_cache_dir()}); "
            "write the fine-tuned model somewhere else"
        )
    if config.output.exists() and not config.output.is_dir():
        raise DataError(f"--output {config.output} exists and is not a directory")
    taken = [p for p in (config.corpus_dir, config.model_dir, config.output / RESULT_FILE)]
    if not config.force and any(p.exists() for p in taken):
        raise CheckpointError(
            f"--output {config.output} already holds a fine-tuning run; choose another "
            "--output or pass --force to replace it"
        )
    if config.push_to_hub:
        from codeparrot.hub import preflight as hub_preflight

        return base, hub_preflight(config.push_to_hub)
    return base, None


def default_seq_length(model_config: dict[str, Any]) -> int:
    """The model's context, at most :data:`DEFAULT_SEQ_LENGTH` tokens."""
    from codeparrot.models.checkpoint import context_length

    return min(context_length(model_config), DEFAULT_SEQ_LENGTH)


# -- measuring -------------------------------------------------------------------------


def split_tokens(corpus: Path, split: str, tokenizer: Any, limit: int) -> list[int]:
    """The first ``limit`` tokens of a split in shard order, each document after the BOS
    the tokenizer adds (where it adds one) and ended by EOS, as training packs them."""
    from codeparrot.fim import leading_special_ids
    from codeparrot.training.data import encode_batch, read_documents, shard_files

    bos = leading_special_ids(tokenizer)
    ids: list[int] = []
    texts: list[str] = []
    for _shard, _line, text in read_documents(shard_files(corpus, split)):
        texts.append(text)
        if len(texts) == 64:
            for doc in encode_batch(tokenizer, texts):
                ids.extend((*bos, *doc, tokenizer.eos_token_id))
            texts = []
            if len(ids) >= limit:
                break
    for doc in encode_batch(tokenizer, texts):
        ids.extend((*bos, *doc, tokenizer.eos_token_id))
    return ids[:limit]


def mean_loss(model: Any, ids: list[int], seq_length: int, batch_size: int = 8) -> float:
    """Token-weighted mean next-token loss (nats) over consecutive windows of ``ids``."""
    import torch

    windows = [ids[i : i + seq_length] for i in range(0, len(ids), seq_length)]
    windows = [w for w in windows if len(w) >= 2]
    if not windows:
        raise DataError("too few tokens to measure a loss (need at least 2)")
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        full = [w for w in windows if len(w) == seq_length]
        groups = [full[i : i + batch_size] for i in range(0, len(full), batch_size)]
        groups += [[w] for w in windows if len(w) != seq_length]
        for group in groups:
            x = torch.tensor(group, dtype=torch.long)  # (B, T)
            n = x.shape[0] * (x.shape[1] - 1)  # predicted tokens
            loss = model(input_ids=x, labels=x).loss.float()
            total += float(loss) * n
            count += n
    model.train(was_training)
    return total / count


def checkpoint_losses(
    path: Path, splits: dict[str, list[int]], seq_length: int
) -> dict[str, float]:
    """Loss of the checkpoint at ``path`` on each split's tokens (float32, no dropout)."""
    from codeparrot.models.checkpoint import load_checkpoint

    model, _tokenizer, _meta = load_checkpoint(path)
    model.float()
    if getattr(model, "loss_type", None) is None:
        model.loss_type = "ForCausalLM"  # else transformers warns that None is unrecognised
    # at most ~128 MiB of float32 logits per forward pass (a 49k vocabulary: one sequence)
    batch = max(1, min(8, (1 << 25) // (seq_length * model.config.vocab_size)))
    return {name: mean_loss(model, ids, seq_length, batch) for name, ids in splits.items()}


# -- the stage -------------------------------------------------------------------------


def _build_corpus(config: FinetuneConfig) -> dict[str, Any]:
    from codeparrot.data import DataConfig, build_corpus

    data = DataConfig(
        output=config.corpus_dir,
        sources=(str(config.repository),),
        split_by="file",
        valid_fraction=config.valid_fraction,
        seed=config.seed,
        workers=config.workers,
        force=True,
    )
    manifest = build_corpus(data, progress=config.progress)
    train_files = manifest["splits"]["train"]["files"]
    valid_files = manifest["splits"]["valid"]["files"]
    if train_files == 0 or valid_files == 0:
        kept = manifest["output"]["files"]
        raise DataError(
            f"REPOSITORY {config.repository}: {kept} Python file(s) left after cleaning "
            f"({manifest['input']['files']} read; removed: "
            f"{ {k: v for k, v in manifest['removed'].items() if v} }); fine-tuning needs at "
            "least one file to train on and one to hold out"
        )
    return manifest


def _train_config(
    config: FinetuneConfig, base: Path, steps: int, seq_length: int, train_tokens: int
) -> Any:
    from codeparrot.training.config import TrainConfig

    # The sequence shuffle buffer holds at most one epoch of a small repository, so that
    # --epochs still counts passes over it rather than draws from several epochs at once.
    default_buffer = TrainConfig.__dataclass_fields__["sequence_buffer"].default

    return TrainConfig(
        data=config.corpus_dir,
        output=config.model_dir,
        init_from=base,
        dropout=config.dropout,
        seq_length=seq_length,
        # fine-tuning keeps AdamW, a cosine schedule and the streamed epochs (not the
        # pretraining recipe TrainConfig defaults to)
        optimizer="adamw",
        schedule="cosine",
        pretokenized=False,
        sequence_buffer=min(default_buffer, train_tokens // seq_length),
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        min_lr_ratio=config.min_lr_ratio,
        warmup_steps=min(config.warmup_steps, max(0, steps // 5)),
        weight_decay=config.weight_decay,
        max_steps=steps,
        max_minutes=config.max_minutes,
        mixed_precision=config.mixed_precision,
        fim_rate=0.0,  # FIM examples, in the base's template, come from finetune_fim
        eval_every=0,
        eval_batches=4,
        keep_checkpoints=1,
        log_every=max(1, min(10, steps // 20)),
        log_with=config.log_with,
        seed=config.seed,
        progress=config.progress,
        peak_tflops=1.0,  # MFU is not what a fine-tune reports; skip the matmul probe
    )


def planned_steps(config: FinetuneConfig, train_tokens: int, seq_length: int) -> int:
    """``--max-steps``, or enough optimizer steps for ``--epochs`` over the train tokens."""
    if config.max_steps is not None:
        return config.max_steps
    per_step = config.batch_size * seq_length
    return max(1, math.ceil(config.epochs * train_tokens / per_step))


def _fim_plan(config: FinetuneConfig, base: Path, tokenizer: Any, say: Any) -> dict[str, Any]:
    """The FIM rate, the transform of the training documents (FIM examples in the base's
    template, and BOS first where the tokenizer adds it; None when neither applies) and
    the FIM status the fine-tuned model records: trained with FIM, or the base's own."""
    from codeparrot.training.finetune_fim import base_infills, family_transform, fim_rate

    infills = base_infills(base, tokenizer, config.fim_tokens)
    rate = fim_rate(config.fim_rate, infills)
    transform = family_transform(
        tokenizer, rate, config.fim_tokens, config.seed, where=str(config.checkpoint)
    )
    if transform is not None and rate:
        order = "SPM" if transform.spm_rate else "PSM"
        say(f"fill in the middle: {rate:g} of the documents, {order}, in the base's template")
    return {"rate": rate, "transform": transform, "trained": bool(rate) or infills}


def _fim_record(fim: dict[str, Any]) -> dict[str, Any]:
    transform = fim["transform"]
    if not fim["rate"]:
        return {"rate": 0.0, "fim_trained": fim["trained"]}
    return {
        "rate": fim["rate"],
        "template": transform.template,
        "order": "spm" if transform.spm_rate else "psm",
        "fim_trained": fim["trained"],
    }


def _fim_train_tokens(corpus: Path, transform: Any, tokenizer: Any) -> list[int]:
    """The train split as the transform makes its documents (FIM examples, BOS first where
    the tokenizer adds it), each ended by end-of-text."""
    from codeparrot.training.finetune_fim import fim_documents

    ids: list[int] = []
    for doc in fim_documents(corpus, "train", transform):
        ids.extend(doc)
        ids.append(tokenizer.eos_token_id)
    return ids


def _train_full(
    config: FinetuneConfig,
    base: Path,
    steps: int,
    seq_length: int,
    train_tokens: int,
    tokenizer: Any,
    fim: dict[str, Any],
    say: Any,
) -> Any:
    """Train every weight; with FIM the examples come in the base's template, every
    document after the BOS the tokenizer adds (training and validation alike), and the
    export records the FIM status of :func:`_fim_plan`."""
    from codeparrot.io import read_json, write_json
    from codeparrot.models.checkpoint import CHECKPOINT_META
    from codeparrot.training.data import PackedStream, shard_files
    from codeparrot.training.finetune_fim import family_transform
    from codeparrot.training.loop import train

    train_config = _train_config(config, base, steps, seq_length, train_tokens)
    data: dict[str, Any] = {}
    if fim["transform"] is not None:
        data["train_data"] = PackedStream(
            shard_files(config.corpus_dir, "train"),
            tokenizer,
            seq_length,
            shuffle_buffer=train_config.shuffle_buffer,
            sequence_buffer=train_config.sequence_buffer,
            seed=train_config.seed,
            fim=fim["transform"],
        )
        valid_files = shard_files(config.corpus_dir, "valid")
        # validation stays left to right, with the BOS the training documents start with
        plain = family_transform(tokenizer, 0.0, "", train_config.seed, str(config.checkpoint))
        data["valid_data"] = lambda: PackedStream(
            valid_files, tokenizer, seq_length, shuffle_buffer=0, loop=False, fim=plain
        )
    trained = train(train_config, log=say, **data)
    meta_file = config.model_dir / CHECKPOINT_META
    meta = read_json(meta_file)
    meta["fim_trained"] = fim["trained"]
    write_json(meta_file, meta)
    return trained


def undertrained(config: FinetuneConfig, trained: Any) -> str | None:
    """The warning of ``train --max-minutes`` when the run saw under a quarter of the tokens
    its steps were planned for (None otherwise). ``trained`` is the full fine-tune's
    ``TrainResult`` or the LoRA loop's ``LoopResult``: both count ``tokens_seen``,
    ``designed_tokens`` and ``tokens_per_s``."""
    from codeparrot.training.plan import undertrained_warning

    if not trained.designed_tokens:
        return None
    if config.max_steps is not None:
        what = f"--max-steps {config.max_steps}"
    else:
        what = f"--epochs {config.epochs:g}"
    return undertrained_warning(
        tokens_seen=trained.tokens_seen,
        designed_tokens=trained.designed_tokens,
        tokens_per_s=trained.tokens_per_s,
        what=what,
    )


def commands(model_dir: Path) -> tuple[str, str]:
    """The commands that start the language server and the playground on ``model_dir``."""
    path = shlex.quote(str(model_dir))
    return f"codeparrot lsp --checkpoint {path}", f"codeparrot app {path}"


def finetune(config: FinetuneConfig, log: Any = None) -> FinetuneResult:
    """Build the repository's corpus, train from the checkpoint, measure before and after."""
    from codeparrot.io import provenance, write_json
    from codeparrot.models.checkpoint import load_tokenizer, read_model_config

    say = log or (lambda _msg: None)
    base, target = preflight(config)
    started = time.perf_counter()
    if config.force:
        for path in (config.corpus_dir, config.model_dir):
            shutil.rmtree(path, ignore_errors=True)
        (config.output / RESULT_FILE).unlink(missing_ok=True)

    say(f"building the corpus of {config.repository} (held out by file)")
    manifest = _build_corpus(config)
    tokenizer = load_tokenizer(base)
    seq_length = config.seq_length or default_seq_length(read_model_config(base))
    splits = {
        "valid": split_tokens(config.corpus_dir, "valid", tokenizer, config.eval_tokens),
    }
    every_train_token = split_tokens(config.corpus_dir, "train", tokenizer, 1 << 62)
    train_tokens = len(every_train_token)
    splits["train"] = every_train_token[: config.eval_tokens]
    say(f"measuring the base checkpoint on {len(splits['valid']):,} held-out tokens")
    before = checkpoint_losses(base, splits, seq_length)
    fim = _fim_plan(config, base, tokenizer, say)

    steps = planned_steps(config, train_tokens, seq_length)
    say(f"fine-tuning for up to {steps} steps or {config.max_minutes:g} minutes")
    run = _train(config, base, every_train_token, steps, seq_length, tokenizer, fim, say)
    step, stopped_by, precision, planned, warning = run
    del every_train_token
    after = checkpoint_losses(config.model_dir, splits, seq_length)

    pushed = None
    if target is not None:
        from codeparrot.hub import branch_name, push_run

        pushed = push_run(target, config.model_dir, step, branch=branch_name(config.output))
    lsp_command, app_command = commands(config.model_dir)
    result = FinetuneResult(
        output=config.output,
        model=config.model_dir,
        corpus=config.corpus_dir,
        train_files=manifest["splits"]["train"]["files"],
        valid_files=manifest["splits"]["valid"]["files"],
        train_tokens=train_tokens,
        valid_tokens=len(splits["valid"]),
        valid_loss_before=before["valid"],
        valid_loss_after=after["valid"],
        train_loss_before=before["train"],
        train_loss_after=after["train"],
        steps=step,
        stopped_by=stopped_by,
        seconds=time.perf_counter() - started,
        lsp_command=lsp_command,
        app_command=app_command,
        pushed=pushed,
        warning=warning,
    )
    record = {"seq_length": seq_length, "precision": precision, "planned_steps": planned}
    write_json(
        config.output / RESULT_FILE,
        {**result.to_dict(), **record, "fim": _fim_record(fim), "provenance": provenance(config)},
    )
    return result


def _train(
    config: FinetuneConfig,
    base: Path,
    every_train_token: list[int],
    steps: int,
    seq_length: int,
    tokenizer: Any,
    fim: dict[str, Any],
    say: Any,
) -> tuple[int, str, Any, int, str | None]:
    """Train an adapter (``--peft lora``) or every weight: (steps done, what stopped the
    run, the precision chosen, the steps planned, the under-training warning or None)."""
    if config.peft == "lora":
        from codeparrot.training.lora import finetune_lora

        if fim["transform"] is not None:
            every_train_token = _fim_train_tokens(config.corpus_dir, fim["transform"], tokenizer)
        adapter, precision = finetune_lora(
            config, base, every_train_token, steps=steps, seq_length=seq_length, log=say,
            fim_trained=fim["trained"],
        )  # fmt: skip
        # the adapter's loop checks --max-minutes before each step: it plans `steps`
        return adapter.steps, adapter.stopped_by, precision, steps, undertrained(config, adapter)
    train_tokens = len(every_train_token)
    trained = _train_full(config, base, steps, seq_length, train_tokens, tokenizer, fim, say)
    warning = undertrained(config, trained)
    return trained.step, trained.stopped_by, trained.precision, trained.planned_steps, warning


__all__ = [
    "FinetuneConfig",
    "FinetuneResult",
    "default_seq_length",
    "finetune",
    "mean_loss",
    "preflight",
]
