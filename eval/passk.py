"""The unbiased pass@k estimator of the Codex paper, in its numerically stable form."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_KS = (1, 10, 100)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` samples drawn from ``n`` (``c`` correct) passes.

    Equals ``1 - C(n - c, k) / C(n, k)``, computed as ``1 - prod(1 - k / i)`` for
    ``i`` in ``n - c + 1 .. n`` so that n = 200 does not overflow; 1.0 when ``n - c < k``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def mean_pass_at_k(
    counts: Mapping[str, tuple[int, int]], ks: Iterable[int] = DEFAULT_KS
) -> dict[str, float]:
    """``{"pass@k": mean over problems}`` for every k that every problem has samples for.

    ``counts`` maps a task id to ``(samples, correct)``.
    """
    if not counts:
        return {}
    smallest = min(n for n, _ in counts.values())
    out = {}
    for k in ks:
        if k <= smallest:
            values = [pass_at_k(n, c, k) for n, c in counts.values()]
            out[f"pass@{k}"] = sum(values) / len(values)
    return out
