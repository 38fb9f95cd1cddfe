"""Reports of a HumanEval run: results.jsonl, summary.json and a pass@k chart."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from codeparrot.eval.execution import SampleResult
from codeparrot.eval.passk import DEFAULT_KS, mean_pass_at_k
from codeparrot.io import atomic_open, write_json


def per_problem_counts(results: Iterable[SampleResult]) -> dict[str, dict[str, int]]:
    """``{task_id: {"samples": n, "passed": c}}`` in first-seen order."""
    samples: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    for r in results:
        samples[r.task_id] += 1
        passed[r.task_id] += int(r.passed)
    return {t: {"samples": samples[t], "passed": passed[t]} for t in samples}


def summarize(
    results: Sequence[SampleResult], ks: Iterable[int] = DEFAULT_KS, **extra: Any
) -> dict[str, Any]:
    """pass@k (only k <= the fewest samples of any problem), counts and outcome kinds."""
    counts = per_problem_counts(results)
    outcomes: Counter[str] = Counter()
    for r in results:
        outcomes["passed" if r.passed else r.result.split(":")[0]] += 1
    return {
        "pass_at_k": mean_pass_at_k(
            {t: (c["samples"], c["passed"]) for t, c in counts.items()}, ks
        ),
        "problems": len(counts),
        "samples": len(results),
        "solved": sum(1 for c in counts.values() if c["passed"]),
        "outcomes": dict(outcomes),
        "per_problem": counts,
        **extra,
    }


def write_results(path: str | Path, results: Iterable[SampleResult]) -> None:
    with atomic_open(path, "w") as fh:
        for r in results:
            fh.write(json.dumps(r.to_dict()) + "\n")


def write_summary(path: str | Path, summary: dict[str, Any]) -> None:
    write_json(path, summary)


def write_chart(path: str | Path, summary: dict[str, Any], title: str = "HumanEval") -> None:
    """A PNG with pass@k bars and the per-problem pass rates (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(1, 3))
    scores = summary["pass_at_k"]
    left.bar(list(scores), [100 * v for v in scores.values()], color="#4c72b0")
    left.set_ylabel("%")
    left.set_ylim(0, 100)
    left.set_title("pass@k")
    for i, v in enumerate(scores.values()):
        left.text(i, 100 * v + 1, f"{100 * v:.1f}", ha="center")
    per = summary["per_problem"]
    rates = [c["passed"] / c["samples"] for c in per.values()]
    right.bar(range(len(rates)), rates, width=1.0, color="#55a868")
    right.set_xlabel("problem (task id order)")
    right.set_ylabel("fraction of samples passing")
    right.set_ylim(0, 1)
    right.set_title(f"{summary['solved']}/{summary['problems']} problems solved")
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)
