"""`codeparrot eval humaneval` and `codeparrot eval execute` (standard library imports only)."""

from __future__ import annotations

import argparse

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.eval.config import ExecuteConfig, HumanEvalConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="HumanEval pass@k in a sandbox",
        description="Generate and score HumanEval completions in a sandbox (see docs/threat-model.md).",
    )
    sub = parser.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND", required=True)
    humaneval = sub.add_parser(
        "humaneval",
        help="generate with a checkpoint, execute, report pass@k",
        description=HumanEvalConfig.__doc__,
    )
    add_config_arguments(humaneval, HumanEvalConfig)
    humaneval.set_defaults(func=run_humaneval)
    execute = sub.add_parser(
        "execute",
        help="score an existing samples file (task_id, completion per line)",
        description=ExecuteConfig.__doc__,
    )
    add_config_arguments(execute, ExecuteConfig, positional=("samples",))
    execute.set_defaults(func=run_execute)


def _print_summary(summary: dict) -> None:
    for error in summary.get("input_errors", []):
        print(f"skipped {error}")
    isolation = summary["isolation"]
    if isolation["missing"]:
        print(f"WARNING: weak sandbox ({isolation['mode']}): " + "; ".join(isolation["missing"]))
    print(
        f"{summary['samples']} samples of {summary['problems']} problems, "
        f"{summary['solved']} solved (sandbox: {isolation['mode']})"
    )
    for name, value in summary["pass_at_k"].items():
        print(f"{name}: {100 * value:.2f}%")


def run_humaneval(args: argparse.Namespace) -> int:
    from codeparrot.eval.humaneval import run

    config = config_from_args(HumanEvalConfig, args)
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
