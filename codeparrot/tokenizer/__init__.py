"""The tokenizer stage: a byte-level BPE trained on the corpus, and a report of its quality.

Importing this package is cheap: ``tokenizers``, ``transformers`` and numpy are imported
inside the functions that use them.
"""

from __future__ import annotations

from codeparrot.tokenizer.config import TokenizerConfig, TokenizerReportConfig
from codeparrot.tokenizer.report import format_report, tokenizer_report
from codeparrot.tokenizer.train import train_tokenizer

__all__ = [
    "TokenizerConfig",
    "TokenizerReportConfig",
    "format_report",
    "tokenizer_report",
    "train_tokenizer",
]
