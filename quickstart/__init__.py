"""``codeparrot quickstart``: corpus -> tokenizer -> pretraining -> HumanEval in one command.

The orchestrator stands above every stage (the core, ``codeparrot.training`` and
``codeparrot.eval``), so that no stage imports upward. Importing the package is cheap:
the stages are imported inside the steps that run them.
"""

from __future__ import annotations

from codeparrot.quickstart.cli import QuickstartConfig, format_summary, run_quickstart

__all__ = ["QuickstartConfig", "format_summary", "run_quickstart"]
