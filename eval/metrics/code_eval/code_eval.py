"""The `code_eval` metric (same inputs and outputs as the Hub's), backed by our sandbox.

Load it offline with ``evaluate.load("eval/metrics/code_eval")``. Unlike the Hub
metric, each candidate runs in the namespaced sandbox of ``eval/sandbox.py`` and its
tests run on the checker's side: functions of the candidate that a test calls are
proxied, and only plain data (numbers, strings, bytes, lists, tuples, sets, dicts,
None) crosses back. Running code needs ``CODEPARROT_ALLOW_CODE_EXECUTION=1`` (or the
Hub metric's ``HF_ALLOW_CODE_EVAL=1``).
"""

import os
from collections import defaultdict

import datasets
import evaluate

from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.passk import pass_at_k
from codeparrot.eval.sandbox import Limits, require_permission

_DESCRIPTION = """pass@k of code candidates against test code, executed in a sandbox
(PID/mount/network namespaces, an unprivileged uid, rlimits, verdicts decided outside
the candidate's process)."""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of candidates for each problem, each a list of program strings.
    references: one test program per problem (e.g. "assert add(2, 3) == 5").
    k: the k values of pass@k (default [1, 10, 100]; only k <= candidates are reported).
    num_workers: candidates executed at once (default: 3 x CPU cores).
    timeout: seconds per candidate (default 3.0).
Returns:
    pass_at_k: dict {"pass@k": mean over problems}.
    results: dict problem index -> list of (completion_id, {"task_id", "passed",
        "result", "completion_id"}).
Examples:
    >>> code_eval = evaluate.load("eval/metrics/code_eval")
    >>> pass_at_k, results = code_eval.compute(
    ...     references=["assert add(2, 3) == 5"],
    ...     predictions=[["def add(a, b): return a * b", "def add(a, b): return a + b"]],
    ...     k=[1, 2])
    >>> pass_at_k
    {'pass@1': 0.5, 'pass@2': 1.0}
"""

_CITATION = """@article{chen2021codex,
  title={Evaluating Large Language Models Trained on Code},
  author={Mark Chen and others},
  year={2021},
  eprint={2107.03374},
  archivePrefix={arXiv}
}"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class CodeEval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
            homepage="https://github.com/openai/human-eval",
            codebase_urls=["https://github.com/openai/human-eval"],
            reference_urls=["https://github.com/openai/human-eval"],
            license="MIT",
        )

    def _compute(self, predictions, references, k=(1, 10, 100), num_workers=None, timeout=3.0):
        require_permission(os.environ.get("HF_ALLOW_CODE_EVAL") == "1")
        if len(predictions) != len(references):
            raise ValueError(
                f"{len(predictions)} lists of predictions for {len(references)} references"
            )
        index = []
        programs = []
        for task_id, (candidates, test) in enumerate(zip(predictions, references, strict=True)):
            for completion_id, candidate in enumerate(candidates):
                index.append((task_id, completion_id))
                programs.append(Program(program=candidate, test=test))
        verdicts = run_programs(programs, workers=num_workers, limits=Limits(timeout=timeout))
        results = defaultdict(list)
        for (task_id, completion_id), verdict in zip(index, verdicts, strict=True):
            results[task_id].append(
                (
                    completion_id,
                    {
                        "task_id": task_id,
                        "passed": verdict.passed,
                        "result": verdict.result,
                        "completion_id": completion_id,
                    },
                )
            )
        totals = [len(c) for c in predictions]
        correct = [sum(r["passed"] for _, r in results[t]) for t in range(len(predictions))]
        scores = {}
        for kk in k:
            if totals and all(n >= kk for n in totals):
                values = [pass_at_k(n, c, kk) for n, c in zip(totals, correct, strict=True)]
                scores[f"pass@{kk}"] = sum(values) / len(values)
        return scores, results
