"""`codeparrot eval humaneval|infill|generate|execute|loss|lines` (standard library imports
only)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from codeparrot.config import add_config_arguments, add_either_form, config_from_args
from codeparrot.eval.config import ExecuteConfig, GenerateConfig, HumanEvalConfig, InfillConfig

if TYPE_CHECKING:
    from codeparrot.eval.startup import SandboxStart


def _usefulness_configs() -> tuple[type, type]:
    from codeparrot.eval.lines import LinesConfig
    from codeparrot.eval.loss import LossConfig

    return LossConfig, LinesConfig


COMMAND_NAMES = ("humaneval", "infill", "generate", "execute", "loss", "lines")
REGISTER_TAKES_ONLY = True  # register(subparsers, only=NAME): that command's parser alone


def _subcommands(
    only: str | None = None,
) -> list[tuple[str, str, type, Callable[[argparse.Namespace], int], tuple]]:
    """(name, help, config class, function, positional fields) of each `eval` command, or
    of ``only`` (a name in ``COMMAND_NAMES``): the others' modules are not imported."""
    usefulness = (None, None) if only in COMMAND_NAMES[:4] else _usefulness_configs()
    loss_config, lines_config = usefulness
    commands = [
        ("humaneval", "generate with a checkpoint, execute, report pass@k",
         HumanEvalConfig, run_humaneval, ()),
        ("infill", "HumanEval infilling with a FIM checkpoint: pass@1 and exact match",
         InfillConfig, run_infill, ()),
        ("generate", "generate completions only (no code execution; resumable; data-parallel)",
         GenerateConfig, run_generate, ()),
        ("execute", "score an existing samples file (task_id, completion per line) of a --task",
         ExecuteConfig, run_execute, ("samples",)),
        ("loss", "held-out nats/char and bits/byte of checkpoints side by side",
         loss_config, run_loss, ()),
        ("lines", "greedy line completion on held-out files: exact match, edit similarity",
         lines_config, run_lines, ()),
    ]  # fmt: skip
    return [c for c in commands if only not in COMMAND_NAMES or c[0] == only]


def register(subparsers: argparse._SubParsersAction, only: str | None = None) -> None:
    """The `eval` parser, with each of its commands', or ``only`` that one's where it names
    one (a command line naming it needs no other command's module: ``eval execute`` starts
    its sandbox ~20 ms sooner)."""
    parser = subparsers.add_parser(
        "eval",
        help="score checkpoints: pass@k (HumanEval(+), MBPP(+), infilling), loss, lines",
        description="Score checkpoints: generate completions of a benchmark (--task) and run "
        "them in a sandbox for pass@k (humaneval, infill, or generate then execute; see "
        "docs/threat-model.md), or measure without running code: held-out loss (loss) and "
        "line completion as an editor asks (lines).",
    )
    sub = parser.add_subparsers(
        dest="eval_command", metavar="EVAL_COMMAND", required=True, title="commands"
    )
    for name, help_text, config_class, func, positional in _subcommands(only):
        command = sub.add_parser(name, help=help_text, description=config_class.__doc__)
        names = {f.name for f in dataclasses.fields(config_class)}
        if name == "loss":
            # `CHECKPOINT ...` to compare several (`--checkpoint` each, too)
            add_either_form(command, config_class, "checkpoints", positional=True)
            add_config_arguments(
                command, config_class, positional=positional, skip=("checkpoints",)
            )
        else:
            # with --backend openai there is no checkpoint: the config says which is missing
            required = ("checkpoint",) if "checkpoint" in names and "backend" not in names else ()
            add_config_arguments(command, config_class, positional=positional, required=required)
        command.set_defaults(func=func)


def _print_errors(summary: dict) -> None:
    for error in summary.get("input_errors", []):
        print(f"skipped {error}")
    if summary.get("verdict_fields_dropped"):
        print(
            f"ignored the verdict fields (passed, plus_passed, exact_match, language, ...) of "
            f"{summary['verdict_fields_dropped']} input lines: only the harness writes them"
        )
    if summary.get("sanitize_refused"):
        print(
            f"the sanitiser could not parse {summary['sanitize_refused']} completions (too "
            "deep or too large): each failed, its result says why"
        )
    if summary.get("sanitize_skipped"):
        from codeparrot.eval.sanitize import MAX_CHARS, MAX_PARSES

        print(
            f"the sanitiser left {summary['sanitize_skipped']} completions as written (over "
            f"{MAX_CHARS:,} characters, or no parsable prefix within {MAX_PARSES} parses "
            "and its bound on characters parsed): scored unsanitised"
        )


def _print_summary(summary: dict, asked: str | None = None) -> None:
    _print_errors(summary)
    replay = summary.get("scoring", {}).get("no_feedback")
    if replay:
        print(
            f"no per-call feedback: {replay['recorded']} tests recorded "
            f"({replay.get('kept', 0)} kept from an earlier run), "
            f"{replay.get('literal', 0)} read from their literal arguments; "
            f"{replay['fallbacks']} samples made a call their test's reference did not and "
            f"ran call by call, {replay['unrecorded']} had no recording (reference failed)"
        )
    task = summary.get("scoring", {}).get("task")
    if asked is not None and task is not None and task != asked:
        print(f"the problem file is {task}'s (scored as --task {task})")
    installed = summary.get("scoring", {}).get("installed_base_tests")
    if installed and summary["scoring"].get("problem_file"):
        print(
            f"base tests of {installed} problems: the installed HumanEval's (the problem "
            "file's own tests scored as their plus tests)"
        )
    isolation = summary["isolation"]
    if isolation["missing"]:
        print(f"WARNING: weak sandbox ({isolation['mode']}): " + "; ".join(isolation["missing"]))
    print(
        f"{summary['samples']} samples of {summary['problems']} problems, "
        f"{summary['solved']} solved (sandbox: {isolation['mode']})"
    )
    plus = summary.get("pass_at_k_plus")
    for name, value in summary["pass_at_k"].items():
        if plus is None:
            print(f"{name}: {100 * value:.2f}%")
        else:
            print(f"{name}: {100 * value:.2f}% (base tests), {100 * plus[name]:.2f}% (base + plus)")
    if "exact_match" in summary:
        print(f"exact match: {100 * summary['exact_match']:.2f}%")
    for language, value in summary.get("exact_match_by_language", {}).items():
        print(f"{language} exact match: {100 * value:.2f}%")
    timing = summary.get("scoring", {}).get("time_limit", {})
    if timing.get("mode") == "per-task" and timing["limits"]:
        limits = timing["limits"].values()
        print(
            f"time limits per task: {min(limits):.1f}-{max(limits):.1f} s (the larger of "
            f"{timing['min_time_limit']} s and {timing['gt_time_limit_factor']} x the "
            f"reference solution's time; {len(timing['reference_failures'])} references failed)"
        )


def run_humaneval(args: argparse.Namespace) -> int:
    from codeparrot.eval.humaneval import run

    config = config_from_args(HumanEvalConfig, args)
    summary = run(config)
    _print_summary(summary, config.task)
    print(f"report: {config.output_dir()}")
    return 0


def run_infill(args: argparse.Namespace) -> int:
    from codeparrot.eval.humaneval import run

    config = config_from_args(InfillConfig, args).humaneval_config()
    summary = run(config)
    _print_summary(summary)
    print(f"report: {config.output_dir()}")
    return 0


def run_execute(args: argparse.Namespace) -> int:
    config = config_from_args(ExecuteConfig, args)
    start = _sandbox_start(config)  # while the rest of the harness is imported
    try:
        from codeparrot.eval.humaneval import execute
    except BaseException:
        if start is not None:
            start.close()
        raise
    summary = execute(config, start=start)
    _print_summary(summary, config.task)
    print(f"results: {config.results_path()}")
    return 0


def _sandbox_start(config: ExecuteConfig) -> SandboxStart | None:
    """The run's sandbox, begun before the harness's modules are imported (~35 ms of a
    2-core machine's start), where ``config``'s task runs code and the user allows it."""
    from codeparrot.eval.sandbox import require_permission
    from codeparrot.eval.startup import sandbox_start
    from codeparrot.eval.tasks import get_task

    if not get_task(config.task).executes:
        return None
    require_permission(config.allow_code_execution)
    return sandbox_start(config)


def run_loss(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from codeparrot.eval.loss import LossConfig, evaluate_loss, format_table

    config = config_from_args(LossConfig, args)
    with tqdm(desc="scoring", unit="file") as bar:
        report = evaluate_loss(config, progress=bar.update)
    print(format_table(report))
    return 0


def run_lines(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from codeparrot.eval.lines import LinesConfig, evaluate_lines

    config = config_from_args(LinesConfig, args)
    with tqdm(total=config.n, desc="completing", unit="line") as bar:
        summary = evaluate_lines(config, progress=bar.update)
    prompt = summary["prompt"]
    print(
        f"{summary['files']} held-out files ({summary['data']}); fim: {summary.get('fim')}; "
        f"suffix share {prompt['fim_suffix_share']} ({prompt.get('fim_order', 'psm')}); workspace share {prompt['workspace_share']} "
        f"({prompt['workspace']}); "
        f"prompt budget {summary.get('prompt_budget')} tokens; repetition filter: "
        f"{'on' if prompt['repetition_filter'] else 'off'}"
    )
    for kind, s in summary["scores"].items():
        print(
            f"{kind:10} n={s['n']:4}  exact match {100 * s['exact_match']:5.1f}%  "
            f"edit similarity {100 * s['edit_similarity']:5.1f}%  "
            f"repetitive raw {s['repetitive_raw']:3}  shown {s['repetitive_shown']:3}  "
            f"with snippets {s['prompts_with_snippets']:4}"
        )
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from codeparrot.eval.humaneval import generate

    config = config_from_args(GenerateConfig, args)
    summary = generate(config)
    _print_errors(summary)
    print(
        f"{summary['samples']} samples of {summary['problems']} problems: {summary['samples_file']}"
    )
    return 0
