"""`codeparrot eval humaneval|generate|execute` (standard library imports only)."""

from __future__ import annotations

import argparse

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.eval.config import ExecuteConfig, GenerateConfig, HumanEvalConfig, InfillConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="pass@k of HumanEval(+), MBPP(+), infilling, in a sandbox",
        description="Generate and score completions of a benchmark (--task) in a sandbox "
        "(see docs/threat-model.md).",
    )
    sub = parser.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND", required=True)
    humaneval = sub.add_parser(
        "humaneval",
        help="generate with a checkpoint, execute, report pass@k",
        description=HumanEvalConfig.__doc__,
    )
    add_config_arguments(humaneval, HumanEvalConfig)
    humaneval.set_defaults(func=run_humaneval)
    infill = sub.add_parser(
        "infill",
        help="HumanEval infilling with a FIM checkpoint: pass@1 and exact match",
        description=InfillConfig.__doc__,
    )
    add_config_arguments(infill, InfillConfig)
    infill.set_defaults(func=run_infill)
    generate = sub.add_parser(
        "generate",
        help="generate completions only (no code execution; resumable; data-parallel)",
        description=GenerateConfig.__doc__,
    )
    add_config_arguments(generate, GenerateConfig)
    generate.set_defaults(func=run_generate)
    execute = sub.add_parser(
        "execute",
        help="score an existing samples file (task_id, completion per line) of a --task",
        description=ExecuteConfig.__doc__,
    )
    add_config_arguments(execute, ExecuteConfig, positional=("samples",))
    execute.set_defaults(func=run_execute)
    register_usefulness(sub)


def register_usefulness(sub: argparse._SubParsersAction) -> None:
    """`eval loss` and `eval lines`: metrics a small model moves."""
    from codeparrot.eval.lines import LinesConfig
    from codeparrot.eval.loss import LossConfig

    loss = sub.add_parser(
        "loss",
        help="held-out nats/char and bits/byte of checkpoints side by side",
        description=LossConfig.__doc__,
    )
    add_config_arguments(loss, LossConfig, positional=("checkpoints",))
    loss.set_defaults(func=run_loss)
    lines = sub.add_parser(
        "lines",
        help="greedy line completion on held-out files: exact match, edit similarity",
        description=LinesConfig.__doc__,
    )
    add_config_arguments(lines, LinesConfig, positional=("checkpoint",))
    lines.set_defaults(func=run_lines)


def _print_errors(summary: dict) -> None:
    for error in summary.get("input_errors", []):
        print(f"skipped {error}")


def _print_summary(summary: dict) -> None:
    _print_errors(summary)
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


def run_humaneval(args: argparse.Namespace) -> int:
    from codeparrot.eval.humaneval import run

    config = config_from_args(HumanEvalConfig, args)
    summary = run(config)
    _print_summary(summary)
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
    from codeparrot.eval.humaneval import execute

    config = config_from_args(ExecuteConfig, args)
    summary = execute(config)
    _print_summary(summary)
    print(f"results: {config.results_path()}")
    return 0


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
        f"suffix share {prompt['suffix_share']}; workspace share {prompt['workspace_share']}; "
        f"prompt budget {summary.get('prompt_budget')} tokens; repetition filter: "
        f"{'on' if prompt['repetition_filter'] else 'off'}"
    )
    for kind, s in summary["scores"].items():
        print(
            f"{kind:10} n={s['n']:4}  exact match {100 * s['exact_match']:5.1f}%  "
            f"edit similarity {100 * s['edit_similarity']:5.1f}%  "
            f"repetitive raw {s['repetitive_raw']:3}  shown {s['repetitive_shown']:3}"
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
