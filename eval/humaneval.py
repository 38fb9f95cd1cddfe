"""The HumanEval run: generate (resumable), execute in the sandbox, report pass@k."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, DataError
from codeparrot.eval.config import ExecuteConfig, ExecutionOptions, HumanEvalConfig
from codeparrot.eval.data import SampleFile, load_problems, read_samples, select_problems
from codeparrot.eval.execution import SampleResult, check_samples
from codeparrot.eval.report import summarize, write_chart, write_results, write_summary
from codeparrot.eval.sandbox import (
    Isolation,
    Limits,
    default_secret_dirs,
    detect_isolation,
    require_permission,
)
from codeparrot.io import atomic_open, provenance, read_json, write_json

logger = logging.getLogger(__name__)


def limits_of(config: ExecutionOptions) -> Limits:
    return Limits(timeout=config.timeout, memory=config.memory_mb << 20)


def generation_settings(config: HumanEvalConfig) -> dict[str, Any]:
    """What must match for samples already on disk to be reused by a resumed run."""
    return {
        "checkpoint": str(Path(config.checkpoint).resolve()),
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_new_tokens": config.max_new_tokens,
        "seed": config.seed,
        "batch_size": config.batch_size,
        "prompt": PROMPT_FORM,
    }


# How the prompt is given to the model: whole, with token healing (the engine backs up
# over the prompt's last token and lets the first new token be any that starts with its
# text). HumanEval prompts end in a line break; a tokenizer that keeps a line break with
# the next line's indentation would otherwise end the prompt on a token the model rarely
# saw there (a bare line break). bigcode's harness strips the prompt instead, which leaves
# a small model reading the closing quotes of the docstring as opening ones.
PROMPT_FORM = "healed"


def batch_seed(base: int, task_index: int, first_sample: int) -> int:
    """Seed of the batch of ``task_index`` whose first sample is number ``first_sample``."""
    return (base * 1_000_003 + task_index * 10_007 + first_sample) % (2**63)


def _existing_samples(path: Path, problems: dict[str, dict]) -> SampleFile:
    """Samples already generated; a torn last line (interrupted write) is dropped."""
    if not path.exists():
        return SampleFile()
    found = read_samples(path, problems)
    if found.errors:
        logger.warning("ignoring unreadable lines of %s: %s", path, "; ".join(found.errors))
        # Rewrite without the bad lines so that appended samples start on a fresh line.
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        keep = {s.line for s in found.samples}
        with atomic_open(path, "w") as fh:
            for number, line in enumerate(lines, start=1):
                if number in keep:
                    fh.write(line + "\n")
        found = read_samples(path, problems)
    return found


def generate_samples(
    config: HumanEvalConfig,
    problems: dict[str, dict[str, Any]],
    *,
    engine: Any = None,
    progress: bool = True,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Append completions to ``OUT/samples.jsonl`` until every problem has ``n`` of them.

    Each sample is flushed as soon as its batch is generated, so an interrupted run
    resumes where it stopped; samples made with other generation settings are refused.
    """
    out = config.output_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "samples.jsonl"
    meta_path = out / "samples.meta.json"
    settings = generation_settings(config)
    if path.exists() and meta_path.exists():
        previous = read_json(meta_path).get("generation", {})
        if previous != settings:
            changed = sorted(k for k in settings if previous.get(k) != settings[k])
            raise DataError(
                f"{path} was generated with other settings ({', '.join(changed)}); "
                "use another --output or delete it"
            )
    write_json(meta_path, {"generation": settings, "provenance": provenance(config)})
    have = Counter(s.task_id for s in _existing_samples(path, problems).samples)
    todo = {t: config.n - have[t] for t in problems if have[t] < config.n}
    if not todo:
        return path
    if engine is None:
        from codeparrot.generation import Engine

        if not Path(config.checkpoint).is_dir():
            raise CheckpointError(f"{config.checkpoint}: no such checkpoint directory")
        engine = Engine.load(config.checkpoint, device=config.device)
    from codeparrot.generation import HUMANEVAL_STOP_SEQUENCES, GenerationConfig

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(todo.values()), desc="generating", unit="sample")
    index = {t: i for i, t in enumerate(problems)}
    with open(path, "a", encoding="utf-8") as fh:
        for task_id, missing in todo.items():
            done = config.n - missing
            while done < config.n:
                batch = min(config.batch_size, config.n - done)
                seed = batch_seed(
                    config.seed, index[task_id], done
                )  # by position: resumes never repeat a seed
                gen = GenerationConfig(
                    n=batch,
                    temperature=config.temperature,
                    top_p=config.top_p,
                    max_new_tokens=config.max_new_tokens,
                    stop=HUMANEVAL_STOP_SEQUENCES,
                    seed=seed,
                    heal=True,
                )
                for c in engine.generate(problems[task_id]["prompt"], gen):
                    record = {
                        "task_id": task_id,
                        "completion": c.text,
                        "finish_reason": c.finish_reason,
                        "seed": seed,
                    }
                    fh.write(json.dumps(record) + "\n")
                    if on_sample is not None:
                        on_sample(record)
                fh.flush()
                os.fsync(fh.fileno())
                done += batch
                if bar is not None:
                    bar.update(batch)
    if bar is not None:
        bar.close()
    return path


def score(
    samples: SampleFile,
    problems: dict[str, dict[str, Any]],
    config: ExecutionOptions,
    *,
    progress: bool = True,
) -> tuple[list[SampleResult], Isolation]:
    require_permission(config.allow_code_execution)
    isolation = detect_isolation(config.sandbox)
    secret = default_secret_dirs()
    if config.problem_file is not None:
        secret += (str(Path(config.problem_file).resolve().parent),)
    results = check_samples(
        samples.samples,
        problems,
        workers=config.workers,
        limits=limits_of(config),
        isolation=isolation,
        progress=progress,
        secret_dirs=secret,
    )
    return results, isolation


def execute(config: ExecuteConfig, *, progress: bool = True) -> dict[str, Any]:
    """Score a samples file; writes RESULTS.jsonl and RESULTS.summary.json. Returns the summary."""
    require_permission(config.allow_code_execution)
    problems = load_problems(config.problem_file)
    assert config.samples is not None
    samples = read_samples(config.samples, problems)
    if not samples.samples:
        raise DataError(
            f"{config.samples}: no usable samples"
            + (
                f" ({len(samples.errors)} bad lines; first: {samples.errors[0]})"
                if samples.errors
                else ""
            )
        )
    results, isolation = score(samples, problems, config, progress=progress)
    out = config.results_path()
    write_results(out, results)
    summary = summarize(
        results,
        config.ks,
        input_errors=samples.errors,
        isolation=isolation.to_dict(),
        provenance=provenance(config),
    )
    write_summary(out.with_name(out.name.removesuffix(".jsonl") + ".summary.json"), summary)
    return summary


def run(config: HumanEvalConfig, *, engine: Any = None, progress: bool = True) -> dict[str, Any]:
    """Generate, execute and report; returns the summary written to OUT/summary.json."""
    require_permission(config.allow_code_execution)
    problems = select_problems(load_problems(config.problem_file), config.problem_ids, config.limit)
    path = generate_samples(config, problems, engine=engine, progress=progress)
    samples = read_samples(path, problems)
    per_task = Counter(s.task_id for s in samples.samples)
    # A file grown by an earlier run with a larger --n keeps its first n samples per task.
    kept: Counter[str] = Counter()
    chosen = []
    for s in samples.samples:
        if kept[s.task_id] < config.n:
            chosen.append(s)
            kept[s.task_id] += 1
    samples = SampleFile(chosen, samples.errors)
    logger.info("scoring %d samples of %d problems", len(chosen), len(per_task))
    results, isolation = score(samples, problems, config, progress=progress)
    out = config.output_dir()
    write_results(out / "results.jsonl", results)
    summary = summarize(
        results,
        config.ks,
        generation=generation_settings(config) | {"n": config.n},
        isolation=isolation.to_dict(),
        provenance=provenance(config),
    )
    write_summary(out / "summary.json", summary)
    write_chart(out / "pass_at_k.png", summary, title=f"HumanEval: {config.checkpoint}")
    return summary
