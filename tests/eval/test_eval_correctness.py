"""All 164 canonical solutions pass; solutions wrong by construction fail."""

from __future__ import annotations

import pytest

from codeparrot.eval.data import Sample, load_problems
from codeparrot.eval.execution import check_samples
from codeparrot.eval.passk import mean_pass_at_k
from codeparrot.eval.report import per_problem_counts
from codeparrot.eval.sandbox import detect_isolation


@pytest.fixture(scope="module")
def problems():
    return load_problems()


@pytest.fixture(scope="module")
def isolation():
    return detect_isolation()


def wrong_by_construction(problem: dict) -> list[str]:
    """Completions that cannot pass: no result, a wrong type, an exception, a wrong value."""
    body, entry = problem["canonical_solution"], problem["entry_point"]
    return [
        "    return None\n",
        "    raise ValueError('nope')\n",
        # the canonical function, rebound to a wrapper whose answers are never right
        f"{body}\n_canonical = {entry}\n"
        f"def {entry}(*args, **kwargs):\n    return ('wrong', _canonical(*args, **kwargs))\n",
    ]


def test_canonical_solutions_pass_and_wrong_ones_fail(problems, isolation):
    samples = []
    for task_id, problem in problems.items():
        samples.append(Sample(task_id, 0, problem["canonical_solution"], 0))
    for task_id, problem in problems.items():
        for i, completion in enumerate(wrong_by_construction(problem), start=1):
            samples.append(Sample(task_id, i, completion, 0))
    results = check_samples(samples, problems, isolation=isolation, workers=12)
    canonical = [r for r in results if r.completion_id == 0]
    wrong = [r for r in results if r.completion_id != 0]
    failing = {r.task_id: r.result for r in canonical if not r.passed}
    assert failing == {}
    assert len(canonical) == 164
    assert mean_pass_at_k(
        {t: (c["samples"], c["passed"]) for t, c in per_problem_counts(canonical).items()}, [1]
    ) == {"pass@1": 1.0}
    forged = {(r.task_id, r.completion_id): r.result for r in wrong if r.passed}
    assert forged == {}
    assert mean_pass_at_k(
        {t: (c["samples"], c["passed"]) for t, c in per_problem_counts(wrong).items()}, [1, 3]
    ) == {"pass@1": 0.0, "pass@3": 0.0}
