"""The local `code_eval` metric: loadable offline with evaluate.load, Hub-compatible I/O."""

from __future__ import annotations

from pathlib import Path

import pytest

import codeparrot.eval as eval_package

METRIC_DIR = Path(eval_package.__file__).parent / "metrics" / "code_eval"


@pytest.fixture(scope="module")
def code_eval():
    import evaluate

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # a local directory needs no Hub
        yield evaluate.load(str(METRIC_DIR))


def test_compute_matches_the_hub_metric_interface(code_eval, monkeypatch):
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    forged = "class T:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return T()\n"
    pass_at_k, results = code_eval.compute(
        references=["assert add(2, 3) == 5\nassert add(-1, 1) == 0", "assert double(4) == 8"],
        predictions=[
            ["def add(a, b):\n    return a * b", "def add(a, b):\n    return a + b", forged],
            [
                "def double(x):\n    return 2 * x",
                "def double(x):\n    return x + x",
                "import sys\nsys.exit(0)",
            ],
        ],
        k=[1, 3, 10],
    )
    assert pass_at_k == pytest.approx({"pass@1": (1 / 3 + 2 / 3) / 2, "pass@3": 1.0})
    assert [r["passed"] for _, r in results[0]] == [False, True, False]
    assert [cid for cid, _ in results[1]] == [0, 1, 2]
    assert results[1][2][1]["result"].startswith("failed")


def test_refuses_without_permission(code_eval, monkeypatch):
    from codeparrot.errors import ExecutionNotAllowed

    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    monkeypatch.delenv("CODEPARROT_ALLOW_CODE_EXECUTION", raising=False)
    with pytest.raises(ExecutionNotAllowed):
        code_eval.compute(
            references=["assert f() == 1"], predictions=[["def f(): return 1"]], k=[1]
        )
