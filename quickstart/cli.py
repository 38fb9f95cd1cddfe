"""``codeparrot quickstart``: the whole recipe in one command, sized for a laptop.

corpus -> tokenizer -> tokenizer report -> pretraining -> HumanEval -> summary.

It stands above every stage (installed as ``codeparrot.quickstart``, from the repository's
``quickstart/``), so it may import the core, ``training`` and ``eval``; it does so inside
the steps, so that ``codeparrot --help`` stays fast.
Each finished step is recorded in ``OUTPUT/quickstart.json`` together with the config
that produced it, so a re-run reuses it; ``--force`` redoes everything, and a step whose
recorded config differs from the current one is redone along with the steps after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.config import Config, add_config_arguments, config_from_args, option
from codeparrot.options import (
    BATCH_SIZE,
    FIM_LINE_RATE,
    FIM_MODE,
    FIM_RATE,
    FIM_SPM_RATE,
    FUNCTION_DOCUMENTS,
    MAX_MINUTES,
    MAX_NEW_TOKENS,
    MAX_STEPS,
    MIN_DOCSTRING_SHARE,
    MIXED_PRECISION,
    N_POSITIONS,
    OPTIMIZER,
    PRESET,
    SCHEDULE,
    VOCAB_SIZE,
)
from codeparrot.tokenizer.config import vocab_size_problem
from codeparrot.tokenizer.pretokenizer import PRE_TOKENIZERS
from codeparrot.training.config import QUICKSTART_RECIPE


@dataclass(frozen=True)
class QuickstartConfig(Config):
    """Build a corpus from your Python installation, train a tokenizer and a model on it,
    score it on HumanEval in a sandbox, and print what to run next."""

    output: Path = option(Path("runs/quickstart"), "directory for every artefact of the run")
    # The training recipe is QUICKSTART_RECIPE, `codeparrot train`'s default too (why it
    # is the one: training/config.py). `tiny` (GPT-2) reproduces CodeParrot.
    preset: str = PRESET.field(
        QUICKSTART_RECIPE.preset,
        "model preset (tiny-qwen and tiny train on 2 CPU cores in minutes)",
    )
    n_positions: int | None = N_POSITIONS.field(
        help="the model's context (default: the preset's; tiny's 256 leaves 128 tokens of "
        "prompt beside eval-max-new-tokens 128, and half the HumanEval prompts are longer)",
    )
    sources: tuple[str, ...] = option(
        (),
        "corpus sources: directories, git checkouts or hub:NAME (default: this Python "
        "installation's stdlib and site-packages)",
        flag="--source",
    )
    max_files: int = option(8000, "cap on input files sampled for the corpus (0: all)", ge=0)
    min_docstring_share: float = MIN_DOCSTRING_SHARE.field()
    function_documents: int = FUNCTION_DOCUMENTS.field()
    vocab_size: int = VOCAB_SIZE.field(8192, "tokenizer vocabulary (the reference uses 32768)")
    tokenizer_files: int = option(3000, "files the tokenizer is trained on", ge=1)
    pre_tokenizer: str = option(
        "gpt2",
        "the tokenizer's pre-tokenizer: gpt2 (GPT-2's split, which the tiny model learns "
        "best at this budget; RESULTS.md) or code (the library default: more text per "
        "token)",
        choices=PRE_TOKENIZERS,
    )
    max_steps: int | None = MAX_STEPS.field(
        None,
        "training steps, a cap (default: the recipe's 1,000, or more where the budget holds "
        "more, up to 4 epochs of the corpus; the learning-rate schedule spans those trained)",
    )
    batch_size: int = BATCH_SIZE.field(QUICKSTART_RECIPE.batch_size, "sequences per training step")
    total_minutes: float = option(
        15.0,
        "the whole quickstart's time (the install's too, from --started-at): training "
        "gets what the other steps leave, measured as they run",
        gt=0,
    )
    started_at: float | None = option(
        None,
        "Unix time the quickstart began, for --total-minutes (`make quickstart` passes the "
        "time before its install; default: when this command started)",
        gt=0,
        metavar="SECONDS",
    )
    max_minutes: float | None = MAX_MINUTES.field(
        help="training minutes, planned over (default: what --total-minutes leaves)"
    )
    gpu_plan: bool = option(
        True,
        "on a CUDA device, train a model, batch and context sized to it (mini-qwen or "
        "small-qwen by the measured step time, context 1,024, the batch its memory holds); "
        "--no-gpu-plan trains the CPU recipe there too",
    )
    mixed_precision: str = MIXED_PRECISION.field()
    compile: bool = option(
        True, "torch.compile the model (a minute to start, then faster steps; RESULTS.md)"
    )
    pretokenized: bool = option(
        QUICKSTART_RECIPE.pretokenized,
        "tokenize the corpus once into memmapped shards and train on randomly drawn windows "
        "(instead of streaming packed sequences through shuffle buffers)",
    )
    optimizer: str = OPTIMIZER.field(QUICKSTART_RECIPE.optimizer)
    schedule: str = SCHEDULE.field(QUICKSTART_RECIPE.schedule)
    fim_rate: float | None = FIM_RATE.field(QUICKSTART_RECIPE.fim_rate)
    fim_spm_rate: float = FIM_SPM_RATE.field()
    fim_line_rate: float = FIM_LINE_RATE.field()
    fim_mode: str = FIM_MODE.field()
    eval_n: int = option(
        2,
        "HumanEval samples per problem at T 0.2 (the reference uses 200; 2 keep the whole "
        "quickstart within 15 minutes on 2 cores, and its model has solved none so far)",
        ge=1,
    )
    eval_limit: int | None = option(
        None, "only the first K HumanEval problems (default: all 164)", ge=1
    )
    eval_max_new_tokens: int = MAX_NEW_TOKENS.field(
        128,
        "most new tokens per HumanEval completion (the reference's 256 needs a context of "
        "more than 256 tokens: the small and large presets)",
    )
    infill_sample: int = option(
        200,
        "single-line infilling tasks scored after HumanEval (a seeded sample of the 1,033; "
        "greedy, prefix + suffix; 0 skips it; only for a model trained with FIM)",
        ge=0,
    )
    allow_code_execution: bool = option(
        False,
        "run the model's HumanEval completions in the sandbox (also "
        "CODEPARROT_ALLOW_CODE_EXECUTION=1); without it the evaluation step is skipped",
    )
    seed: int = option(0, "seed of every random choice in the run")
    force: bool = option(False, "redo every step even when its output is there")

    def problems(self) -> list[str]:
        return [p] if (p := vocab_size_problem(self.vocab_size)) else []

    @property
    def corpus_dir(self) -> Path:
        return self.output / "corpus"

    @property
    def tokenizer_dir(self) -> Path:
        return self.output / "tokenizer"

    @property
    def model_dir(self) -> Path:
        return self.output / "model"

    @property
    def state_file(self) -> Path:
        return self.output / "quickstart.json"


# -- the steps -------------------------------------------------------------------------
# Each returns (config recorded for reuse, facts for the summary).


def _data_config(cfg: QuickstartConfig) -> Any:
    from codeparrot.data import DataConfig

    return DataConfig(
        output=cfg.corpus_dir,
        sources=cfg.sources,
        max_files=cfg.max_files,
        min_docstring_share=cfg.min_docstring_share,
        function_documents=cfg.function_documents,
        seed=cfg.seed,
        force=True,
    )


def step_corpus(cfg: QuickstartConfig, interrupted: bool = False) -> dict[str, Any]:
    from codeparrot.data import build_corpus

    manifest = build_corpus(_data_config(cfg))
    return {
        "input_files": manifest["input"]["files"],
        "output_files": manifest["output"]["files"],
        "output_bytes": manifest["output"]["bytes"],
        "removed": manifest["removed"],
        "train_files": manifest["splits"]["train"]["files"],
        "valid_files": manifest["splits"]["valid"]["files"],
    }


def _tokenizer_config(cfg: QuickstartConfig) -> Any:
    from codeparrot.tokenizer import TokenizerConfig

    return TokenizerConfig(
        data=cfg.corpus_dir,
        output=cfg.tokenizer_dir,
        vocab_size=cfg.vocab_size,
        files=cfg.tokenizer_files,
        pre_tokenizer=cfg.pre_tokenizer,
        overwrite=True,
    )


def step_tokenizer(cfg: QuickstartConfig, interrupted: bool = False) -> dict[str, Any]:
    from codeparrot.io import write_json
    from codeparrot.tokenizer import TokenizerReportConfig, tokenizer_report, train_tokenizer

    train_tokenizer(_tokenizer_config(cfg))
    report = tokenizer_report(TokenizerReportConfig(tokenizer=cfg.tokenizer_dir, max_files=300))
    write_json(cfg.output / "tokenizer_report.json", report)
    return {
        "vocab_size": report["vocab_size"],
        "chars_per_token": report["chars_per_token"],
        "gpt2_ratio": report["gpt2"]["ratio"],
        "gpt2_note": report["gpt2"]["note"],
        "heldout_files": report["heldout"]["files"],
    }


def _train_config(
    cfg: QuickstartConfig,
    resume: bool = False,
    max_minutes: float | None = None,
    plan: Any = None,
) -> Any:
    """The training run's config; ``max_minutes`` the budget derived at run time and
    ``plan`` the quickstart's plan for the device (quickstart.plan; the recorded config
    keeps ``--max-minutes`` and ``--max-steps`` as given, so that a re-run reuses the
    model)."""
    from codeparrot.quickstart.plan import RECIPE_STEPS
    from codeparrot.training.config import TrainConfig

    return TrainConfig(
        data=cfg.corpus_dir,
        tokenizer=cfg.tokenizer_dir,
        output=cfg.model_dir,
        preset=plan.preset if plan else cfg.preset,
        n_positions=plan.n_positions if plan else cfg.n_positions,
        max_steps=plan.max_steps if plan else cfg.max_steps or RECIPE_STEPS,
        recipe_steps=plan.recipe_steps if plan and plan.fills else None,
        batch_size=plan.batch_size if plan else cfg.batch_size,
        max_minutes=cfg.max_minutes if max_minutes is None else max_minutes,
        mixed_precision=cfg.mixed_precision,
        compile=cfg.compile,
        pretokenized=cfg.pretokenized,
        optimizer=cfg.optimizer,
        schedule=cfg.schedule,
        fim_rate=cfg.fim_rate,
        fim_spm_rate=cfg.fim_spm_rate,
        fim_line_rate=cfg.fim_line_rate,
        fim_mode=cfg.fim_mode,
        seed=cfg.seed,
        resume=resume,
    )


def step_train(
    cfg: QuickstartConfig,
    interrupted: bool = False,
    log: Any = None,
    max_minutes: float | None = None,
    plan: Any = None,
) -> dict[str, Any]:
    import shutil

    from codeparrot.eval.loss import LossConfig, evaluate_loss
    from codeparrot.training import train

    # An interrupted run of the same settings continues from its last checkpoint; any
    # other earlier run in the directory was made with other settings and is replaced.
    checkpoints = cfg.model_dir / "checkpoints"
    resume = interrupted and checkpoints.is_dir() and any(checkpoints.iterdir())
    if not resume and cfg.model_dir.exists():
        shutil.rmtree(cfg.model_dir)
    train_cfg = _train_config(cfg, resume=resume, max_minutes=max_minutes, plan=plan)
    result = train(train_cfg, log=log)
    # how likely the model finds HumanEval's reference solutions: a HumanEval signal that
    # moves long before pass@k of a model trained for minutes does (no code is run)
    solutions = evaluate_loss(LossConfig(checkpoints=(cfg.model_dir,), task="humaneval"))
    return {
        "humaneval_solutions_nats_per_char": solutions["rows"][0]["nats_per_char"],
        "step": result.step,
        "tokens_seen": result.tokens_seen,
        "parameters": result.parameters,
        "train_loss": result.train_loss,
        "eval_loss": result.eval_loss,
        "perplexity": result.perplexity,
        "tokens_per_s": result.tokens_per_s,
        "minutes": result.seconds / 60,
        "stopped_by": result.stopped_by,
        "resumed_from": result.resumed_from,
        "precision": result.precision,
        "planned_steps": result.planned_steps,
        "max_steps": cfg.max_steps,
        "budget_minutes": max_minutes if max_minutes is not None else cfg.max_minutes,
        "preset": train_cfg.preset,
        "batch_size": train_cfg.batch_size,
        **_recipe_facts(cfg, plan, result),
        **_device_facts(plan, result, cfg.model_dir),
    }


def _recipe_facts(cfg: QuickstartConfig, plan: Any, result: Any) -> dict[str, Any]:
    """The recipe's steps and tokens beside the run's: what a filled budget is measured
    against (the run's own ``--max-steps`` is then only a ceiling)."""
    from codeparrot.quickstart.plan import RECIPE_STEPS

    if plan is None or not plan.fills:
        return {"designed_tokens": result.designed_tokens}
    return {
        "recipe_steps": RECIPE_STEPS,
        "recipe_tokens": plan.recipe_tokens,
        # the warning of a model that saw too little measures against the recipe's tokens
        "designed_tokens": plan.recipe_tokens,
    }


def _device_facts(plan: Any, result: Any, model_dir: Path) -> dict[str, Any]:
    """The device, steady tokens/s and MFU (against a large bf16 product measured on the
    device) for the summary."""
    if plan is None:
        return {}
    from codeparrot.models.presets import get_preset
    from codeparrot.quickstart.plan import steady_tokens_per_s

    facts: dict[str, Any] = {"device": plan.device.describe()}
    steady = steady_tokens_per_s(model_dir / "metrics.jsonl")
    if steady is not None:
        facts["steady_tokens_per_s"] = steady
    if plan.peak_flops and steady:
        shape = get_preset(plan.preset)
        per_token = 6 * result.parameters + 12 * shape.n_layer * shape.n_embd * plan.seq_length
        facts["flops_per_s"] = steady * per_token
        facts["peak_flops"] = plan.peak_flops
        facts["mfu"] = steady * per_token / plan.peak_flops
    return facts


def _eval_config(cfg: QuickstartConfig) -> Any:
    from codeparrot.eval.config import HumanEvalConfig

    return HumanEvalConfig(
        checkpoint=cfg.model_dir,
        n=cfg.eval_n,
        batch_size=cfg.eval_n,
        limit=cfg.eval_limit,
        max_new_tokens=cfg.eval_max_new_tokens,
        seed=cfg.seed,
        allow_code_execution=True,
    )


def step_eval(cfg: QuickstartConfig, interrupted: bool = False) -> dict[str, Any]:
    import shutil

    from codeparrot.eval.humaneval import run

    # samples of an interrupted run with the same settings are kept and resumed; a
    # report made with other settings (or for an earlier model) is replaced
    report_dir = _eval_config(cfg).output_dir()
    if not interrupted and report_dir.exists():
        shutil.rmtree(report_dir)
    summary = run(_eval_config(cfg))
    return {
        "pass_at_k": summary["pass_at_k"],
        "problems": summary["problems"],
        "samples": summary["samples"],
        "solved": summary["solved"],
        "sandbox": summary["isolation"]["mode"],
        "sandbox_missing": summary["isolation"]["missing"],
        "report": str(_eval_config(cfg).output_dir()),
    }


INFILL_MAX_NEW_TOKENS = 64  # a single line; generation stops at its end


def _infill_config(cfg: QuickstartConfig) -> Any:
    from codeparrot.eval.config import HumanEvalConfig

    return HumanEvalConfig(
        checkpoint=cfg.model_dir,
        task="infill-single-line",
        n=1,
        batch_size=1,
        temperature=0.0,
        sample=cfg.infill_sample or None,
        max_new_tokens=INFILL_MAX_NEW_TOKENS,
        seed=cfg.seed,
        ks=(1,),
        allow_code_execution=True,
    )


def trained_with_fim(model_dir: Path) -> bool:
    """Whether the checkpoint was trained with fill-in-the-middle examples."""
    from codeparrot.models.checkpoint import read_checkpoint_meta, trained_to_infill

    return bool(trained_to_infill(read_checkpoint_meta(model_dir)))


def step_infill(cfg: QuickstartConfig, interrupted: bool = False) -> dict[str, Any]:
    import shutil

    from codeparrot.eval.humaneval import run

    if not trained_with_fim(cfg.model_dir):
        return {"skipped": "the model was trained without fill-in-the-middle (--fim-rate 0)"}
    report_dir = _infill_config(cfg).output_dir()
    if not interrupted and report_dir.exists():
        shutil.rmtree(report_dir)
    summary = run(_infill_config(cfg))
    return {
        "pass_at_1": summary["pass_at_k"]["pass@1"],
        "exact_match": summary.get("exact_match"),
        "tasks": summary["problems"],
        "report": str(report_dir),
    }


STEPS = (
    ("corpus", "Building the corpus", step_corpus, _data_config),
    ("tokenizer", "Training the tokenizer", step_tokenizer, _tokenizer_config),
    ("train", "Pretraining the model", step_train, _train_config),
    ("eval", "Scoring HumanEval in the sandbox", step_eval, _eval_config),
    ("infill", "Scoring single-line infilling in the sandbox", step_infill, _infill_config),
)


def execution_allowed(cfg: QuickstartConfig) -> bool:
    return cfg.allow_code_execution or os.environ.get("CODEPARROT_ALLOW_CODE_EXECUTION") == "1"


def check_fits(cfg: QuickstartConfig) -> None:
    """Settings that only fail late (after training) are refused before any work."""
    from codeparrot.errors import ConfigError
    from codeparrot.models.presets import get_preset

    positions = cfg.n_positions or get_preset(cfg.preset).n_positions
    if cfg.eval_max_new_tokens > positions // 2:
        raise ConfigError(
            f"--eval-max-new-tokens {cfg.eval_max_new_tokens} leaves too little of the "
            f"model's {positions}-token context for the HumanEval prompt; "
            f"use at most {positions // 2}"
        )


def training_minutes(
    cfg: QuickstartConfig,
    elapsed_s: float,
    steps: dict[str, Any],
    log: Any,
    floor_minutes: float | None = None,
) -> float:
    """``--max-minutes``, or what ``--total-minutes`` leaves for training once
    ``elapsed_s`` are spent (quickstart.budget), said in one line."""
    from codeparrot.quickstart.budget import MIN_TRAINING_MINUTES, training_budget

    if cfg.max_minutes is not None:
        return cfg.max_minutes
    executes = execution_allowed(cfg)
    problems = min(cfg.eval_limit or HUMANEVAL_PROBLEMS, HUMANEVAL_PROBLEMS)
    budget = training_budget(
        total_minutes=cfg.total_minutes,
        elapsed_s=elapsed_s,
        tokenizer_s=(steps.get("tokenizer") or {}).get("seconds"),
        humaneval_samples=problems * cfg.eval_n if executes else 0,
        infill_tasks=cfg.infill_sample if executes else 0,
        floor_minutes=floor_minutes or MIN_TRAINING_MINUTES,
    )
    log(budget.describe())
    return budget.minutes


def plan_training(
    cfg: QuickstartConfig,
    began: float,
    steps: dict[str, Any],
    log: Any,
    clock: Callable[[], float],
    device: Any,
    measure: Any,
    peak: Callable[[], float] | None,
) -> tuple[float, Any]:
    """The training minutes and the plan for ``device`` (quickstart.plan): on CUDA (unless
    --no-gpu-plan) a model, batch and context sized to it, its measurement paid from the
    minutes; elsewhere the recipe, its steps filling the budget unless --max-steps caps
    them."""
    from codeparrot.quickstart import plan as plans

    facts = {name: (step or {}).get("facts") or {} for name, step in steps.items()}
    corpus_tokens = plans.corpus_train_tokens(facts)
    on_gpu = device.kind == "cuda" and cfg.gpu_plan
    floor = plans.GPU_MIN_TRAINING_MINUTES if on_gpu else None
    minutes = training_minutes(cfg, clock() - began, steps, log, floor_minutes=floor)
    if not on_gpu:
        plan = plans.cpu_plan(
            device, preset=cfg.preset, batch_size=cfg.batch_size, n_positions=cfg.n_positions,
            given_steps=cfg.max_steps, corpus_tokens=corpus_tokens,
        )  # fmt: skip
    else:
        started = clock()
        plan = plans.gpu_plan(
            device, minutes=minutes, vocab_size=cfg.vocab_size, given_steps=cfg.max_steps,
            corpus_tokens=corpus_tokens, measure=measure or plans.cuda_measure(cfg.tokenizer_dir),
            peak_flops=(peak or plans.cuda_peak_flops)(),
        )  # fmt: skip
        if cfg.max_minutes is None:  # the measurement came out of training's minutes
            minutes = max(plans.GPU_MIN_TRAINING_MINUTES, minutes - (clock() - started) / 60)
    for line in plan.describe():
        log(line)
    return minutes, plan


HUMANEVAL_PROBLEMS = 164


def run_quickstart(
    cfg: QuickstartConfig,
    log: Any = print,
    clock: Callable[[], float] = time.time,
    device: Any = None,
    measure: Any = None,
    peak: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Run (or reuse) every step; returns the recorded state with each step's facts.

    ``clock`` tells the time (Unix seconds) for ``--total-minutes`` and ``--started-at``;
    ``device`` (quickstart.plan.Device; default: the one found), ``measure`` and ``peak``
    (a preset's step time and the device's bf16 FLOP/s; default: measured on CUDA) decide
    the training plan."""
    from codeparrot.io import provenance, write_json

    check_fits(cfg)
    began = cfg.started_at if cfg.started_at is not None else clock()

    state: dict[str, Any] = {}
    if cfg.state_file.is_file() and not cfg.force:
        state = json.loads(cfg.state_file.read_text())
    steps: dict[str, Any] = state.get("steps", {})
    redo_rest = cfg.force
    total = len(STEPS)
    for number, (name, title, func, config_of) in enumerate(STEPS, start=1):
        if name == "infill" and not cfg.infill_sample:
            log(f"[{number}/{total}] {title}: skipped (--infill-sample 0).")
            steps.pop(name, None)
            continue
        if name in ("eval", "infill") and not execution_allowed(cfg):
            log(
                f"[{number}/{total}] {title}: skipped. HumanEval runs model-written code; "
                "pass --allow-code-execution (or set CODEPARROT_ALLOW_CODE_EXECUTION=1) "
                "to run it in the sandbox."
            )
            steps.pop(name, None)
            continue
        step_config = config_of(cfg).to_dict()
        if name == "train":  # as given: None lets the budget decide
            step_config |= {"max_steps": cfg.max_steps, "gpu_plan": cfg.gpu_plan}
        previous = steps.get(name) or {}
        same = previous.get("config") == step_config
        if not redo_rest and same and previous.get("status") == "done":
            log(f"[{number}/{total}] {title}: reusing {previous['output']} (--force redoes it)")
            continue
        redo_rest = True  # everything downstream of a redone step is redone too
        interrupted = same and previous.get("status") == "running" and not cfg.force
        log(f"[{number}/{total}] {title} ..." + (" (continuing)" if interrupted else ""))
        started = clock()
        output = str(_output_of(cfg, name))
        steps[name] = {"config": step_config, "output": output, "status": "running"}
        write_json(cfg.state_file, {"steps": steps, "provenance": provenance(cfg)})
        if name == "train":
            if device is None:
                from codeparrot.quickstart.plan import detect_device

                device = detect_device()
            minutes, plan = plan_training(cfg, began, steps, log, clock, device, measure, peak)
            facts = step_train(cfg, interrupted, log, max_minutes=minutes, plan=plan)
        else:
            facts = func(cfg, interrupted)
        steps[name] = {
            "config": step_config,
            "output": output,
            "status": "done",
            "seconds": round(clock() - started, 1),
            "facts": facts,
        }
        write_json(cfg.state_file, {"steps": steps, "provenance": provenance(cfg)})
    state = {
        "steps": steps,
        "minutes": (clock() - began) / 60,  # this run's, from --started-at where given
        "timed_from": "--started-at" if cfg.started_at is not None else "the command's start",
        "provenance": provenance(cfg),
    }
    write_json(cfg.state_file, state)
    return state


def _output_of(cfg: QuickstartConfig, name: str) -> Path:
    return {
        "corpus": cfg.corpus_dir,
        "tokenizer": cfg.tokenizer_dir,
        "train": cfg.model_dir,
        "eval": cfg.model_dir / "humaneval",
        "infill": cfg.model_dir / "infill-single-line",
    }[name]


def _train_lines(cfg: QuickstartConfig, f: dict[str, Any], chars: float | None) -> list[str]:
    """The summary's model lines: size, steps, tokens, speed, device, losses."""
    loss = "n/a" if f["eval_loss"] is None else f"{f['eval_loss']:.3f}"
    ppl = "n/a" if f["perplexity"] is None else f"{f['perplexity']:.1f}"
    lines = [
        f"model       {f.get('preset', cfg.preset)}: {f['parameters'] / 1e6:.1f}M parameters, "
        f"{_steps_reached(f)}, {f['tokens_seen'] / 1e6:.2f}M tokens{_against_recipe(f)} "
        f"in {f['minutes']:.1f} min ({f['tokens_per_s']:,.0f} tokens/s, {_precision_name(f)})"
    ]
    lines += _device_lines(f)
    per_char = ""
    if f["eval_loss"] is not None and chars:
        # comparable across tokenizers: one that packs more text per token has a
        # higher loss per token for the same model quality
        per_char = f" (~{f['eval_loss'] / chars:.3f} nats/char)"
    lines.append(f"            validation loss {loss} nats/token{per_char}, perplexity {ppl}")
    if f.get("humaneval_solutions_nats_per_char") is not None:
        lines.append(
            f"            HumanEval's reference solutions: "
            f"{f['humaneval_solutions_nats_per_char']:.3f} nats/char (lower is better; "
            "compare runs with `codeparrot eval loss RUN OTHER --task humaneval`)"
        )
    return lines + _undertrained_lines(f)


def format_summary(cfg: QuickstartConfig, state: dict[str, Any]) -> str:
    steps = {k: v for k, v in state["steps"].items() if v.get("status") == "done"}
    lines = ["", "codeparrot quickstart: summary", "=" * 30]
    if state.get("minutes") is not None:
        since = "make quickstart's start, install included"
        if state.get("timed_from") != "--started-at":
            since = "the command's start"
        lines.append(
            f"time        {state['minutes']:.1f} minutes in all, of --total-minutes "
            f"{cfg.total_minutes:g} (from {since})"
        )
    if "corpus" in steps:
        f = steps["corpus"]["facts"]
        removed = ", ".join(f"{k} {v:,}" for k, v in sorted(f["removed"].items()) if v)
        lines += [
            f"corpus      {f['output_files']:,} files ({f['output_bytes'] / 1e6:.1f} MB) kept of "
            f"{f['input_files']:,} read; train {f['train_files']:,} / valid {f['valid_files']:,}",
            f"            removed: {removed or 'nothing'}",
        ]
    if "tokenizer" in steps:
        f = steps["tokenizer"]["facts"]
        ratio = f["gpt2_ratio"]
        vs = f"GPT-2 needs {ratio:.2f}x the tokens" if ratio else f["gpt2_note"]
        lines.append(
            f"tokenizer   vocab {f['vocab_size']:,}, {f['chars_per_token']:.2f} chars/token on "
            f"{f['heldout_files']} held-out files; {vs}"
        )
    if "train" in steps:
        chars = steps.get("tokenizer", {}).get("facts", {}).get("chars_per_token")
        lines += _train_lines(cfg, steps["train"]["facts"], chars)
    if "eval" in steps:
        f = steps["eval"]["facts"]
        scores = ", ".join(f"{k} {100 * v:.2f}%" for k, v in f["pass_at_k"].items())
        lines.append(
            f"HumanEval   {scores} ({f['problems']} problems x {cfg.eval_n} samples, "
            f"{f['solved']} solved; sandbox: {f['sandbox']})"
        )
        if f["sandbox_missing"]:
            lines.append("            WARNING: weaker sandbox: " + "; ".join(f["sandbox_missing"]))
        lines.append(
            "            published CodeParrot 110M: pass@1 3.80%, pass@10 6.57%, pass@100 12.78% "
            "(trained on ~30B tokens, 16 A100s)"
        )
    else:
        lines.append("HumanEval   not run (pass --allow-code-execution to score it in the sandbox)")
    if "infill" in steps:
        f = steps["infill"]["facts"]
        if "skipped" in f:
            lines.append(f"infilling   not run: {f['skipped']}")
        else:
            exact = (
                "" if f["exact_match"] is None else f", exact match {100 * f['exact_match']:.1f}%"
            )
            lines.append(
                f"infilling   single-line pass@1 {100 * f['pass_at_1']:.1f}%{exact} on "
                f"{f['tasks']:,} of OpenAI's 1,033 tasks (prefix + suffix in, greedy)"
            )
    ckpt = shlex.quote(str(cfg.model_dir))
    lines += [
        "",
        f"checkpoint  {cfg.model_dir}  (AutoModelForCausalLM / AutoTokenizer load it)",
        "",
        "next:",
        f"  codeparrot complete --checkpoint {ckpt} 'def fibonacci(n):'",
        f"  codeparrot app {ckpt}          # the playground in your browser",
        f"  codeparrot lsp --checkpoint {ckpt}          # completions in your editor (docs/editors.md)",
        f"  codeparrot eval humaneval --checkpoint {ckpt} --n 100 "
        f"--max-new-tokens {cfg.eval_max_new_tokens} --allow-code-execution",
    ]
    return "\n".join(lines)


def _steps_reached(facts: dict[str, Any]) -> str:
    """The steps reached of those planned, and the recipe's count where the budget cut or
    lengthened it."""
    planned = facts.get("planned_steps")
    designed = facts.get("recipe_steps") or facts.get("max_steps")
    if planned is None:
        return f"{facts['step']:,} steps"
    text = f"{facts['step']:,} of {planned:,} planned steps"
    if designed and planned < designed:
        text += f" (the recipe's {designed:,}, shortened to fit --max-minutes)"
    elif facts.get("recipe_steps") and planned > designed:
        text += f" (the recipe's {designed:,}, lengthened to fill the budget)"
    return text


def _against_recipe(facts: dict[str, Any]) -> str:
    """`` (1.9x the recipe's 4.10M)`` where the budget decided the steps."""
    recipe = facts.get("recipe_tokens")
    if not recipe:
        return ""
    return f" ({facts['tokens_seen'] / recipe:.1f}x the recipe's {recipe / 1e6:.2f}M)"


def _device_lines(facts: dict[str, Any]) -> list[str]:
    """The device, steady tokens/s and MFU of a planned run."""
    if not facts.get("device"):
        return []
    line = f"            device {facts['device']}"
    if facts.get("steady_tokens_per_s"):
        line += f": {facts['steady_tokens_per_s']:,.0f} tokens/s steady (compilation apart)"
    if facts.get("mfu") is not None:
        line += (
            f", {facts['flops_per_s'] / 1e12:.1f} TFLOP/s, MFU {100 * facts['mfu']:.1f}% of "
            f"{facts['peak_flops'] / 1e12:.0f} TFLOP/s (an 8192^3 bf16 product measured)"
        )
    return [line]


def _precision_name(facts: dict[str, Any]) -> str:
    chosen = (facts.get("precision") or {}).get("mixed_precision")
    return {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}.get(chosen, "precision unknown")


def _undertrained_lines(facts: dict[str, Any]) -> list[str]:
    from codeparrot.training.plan import undertrained_warning

    warning = undertrained_warning(
        tokens_seen=facts["tokens_seen"],
        designed_tokens=facts.get("designed_tokens") or 0,
        tokens_per_s=facts["tokens_per_s"],
        what="the quickstart",
    )
    return [] if warning is None else ["            " + warning]


# -- CLI ---------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quickstart",
        help="the whole recipe in one command: corpus, tokenizer, model, HumanEval",
        description=QuickstartConfig.__doc__,
    )
    add_config_arguments(parser, QuickstartConfig)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from codeparrot.generation.waits import prefer_short_spins

    prefer_short_spins()  # before torch loads: training spins briefly (generation.waits)
    cfg = config_from_args(QuickstartConfig, args)

    def log(message: str) -> None:
        print(message, flush=True)

    state = run_quickstart(cfg, log=log)
    print(format_summary(cfg, state))
    return 0
