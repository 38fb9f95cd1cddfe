"""Reports of an evaluation run: results.jsonl, summary.json and a pass@k chart."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from codeparrot.eval.passk import DEFAULT_KS, mean_pass_at_k
from codeparrot.io import atomic_open, write_json


def _field(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


def per_problem_counts(rows: Iterable[Any], key: str = "passed") -> dict[str, dict[str, int]]:
    """``{task_id: {"samples": n, "passed": c}}`` in first-seen order (``c`` counts ``key``).

    ``rows``: result rows (mappings) or objects with ``task_id`` and ``key`` attributes.
    """
    samples: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    for r in rows:
        task_id = _field(r, "task_id")
        samples[task_id] += 1
        passed[task_id] += int(bool(_field(r, key)))
    return {t: {"samples": samples[t], "passed": passed[t]} for t in samples}


def _pass_at_k(counts: dict[str, dict[str, int]], ks: Iterable[int]) -> dict[str, float]:
    return mean_pass_at_k({t: (c["samples"], c["passed"]) for t, c in counts.items()}, ks)


def summarize(
    rows: Sequence[Mapping[str, Any]], ks: Iterable[int] = DEFAULT_KS, **extra: Any
) -> dict[str, Any]:
    """pass@k (only k <= the fewest samples of any problem), counts and outcome kinds.

    Rows with ``plus_passed`` (HumanEval+, MBPP+) also give ``pass_at_k_plus`` (base + plus
    tests) beside ``pass_at_k`` (base tests); rows with ``exact_match`` (infilling) its mean;
    rows with ``sanitized`` (``--sanitize``) count the completions the sanitiser could not
    parse (``sanitize_refused``: each such sample failed, its result says why) and those
    over its bounds, run as written (``sanitize_skipped``).
    """
    ks = tuple(ks)
    counts = per_problem_counts(rows)
    outcomes: Counter[str] = Counter()
    for r in rows:
        outcomes["passed" if r["passed"] else r["result"].split(":")[0]] += 1
    summary: dict[str, Any] = {
        "pass_at_k": _pass_at_k(counts, ks),
        "problems": len(counts),
        "samples": len(rows),
        "solved": sum(1 for c in counts.values() if c["passed"]),
        "outcomes": dict(outcomes),
        "per_problem": counts,
    }
    if rows and all("plus_passed" in r for r in rows):
        plus = per_problem_counts(rows, "plus_passed")
        summary["pass_at_k_plus"] = _pass_at_k(plus, ks)
        summary["solved_plus"] = sum(1 for c in plus.values() if c["passed"])
        for task_id, c in plus.items():
            counts[task_id]["plus_passed"] = c["passed"]
    if rows and all("exact_match" in r for r in rows):
        summary["exact_match"] = sum(bool(r["exact_match"]) for r in rows) / len(rows)
    if rows and all("sanitized" in r for r in rows):
        from codeparrot.eval.sanitize import refused, skipped

        summary["sanitize_refused"] = sum(refused(r["sanitized"]) for r in rows)
        summary["sanitize_skipped"] = sum(skipped(r["sanitized"]) for r in rows)
    return summary | extra


def write_results(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    with atomic_open(path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


def write_summary(path: str | Path, summary: dict[str, Any]) -> None:
    write_json(path, summary)


def write_chart(path: str | Path, summary: dict[str, Any], title: str = "HumanEval") -> None:
    """A PNG with pass@k bars and the per-problem pass rates (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(1, 3))
    series = {"base tests": summary["pass_at_k"]}
    if "pass_at_k_plus" in summary:  # HumanEval+ / MBPP+: base + plus tests beside
        series["base + plus tests"] = summary["pass_at_k_plus"]
    width = 0.8 / len(series)
    for j, (label, scores) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(scores))]
        left.bar(xs, [100 * v for v in scores.values()], width=width, label=label)
        for x, v in zip(xs, scores.values(), strict=True):
            left.text(x, 100 * v + 1, f"{100 * v:.1f}", ha="center", fontsize=8)
    left.set_xticks(range(len(summary["pass_at_k"])), list(summary["pass_at_k"]))
    if len(series) > 1:
        left.legend(fontsize=8)
    left.set_ylabel("%")
    left.set_ylim(0, 100)
    left.set_title("pass@k")
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
