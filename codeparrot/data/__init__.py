"""The corpus stage: ``build_corpus(DataConfig(...))`` and ``corpus_stats(...)``.

Names are resolved lazily so that importing the package (the CLI does, for ``--help``)
costs nothing: numpy, datasketch and datasets load only when a build runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codeparrot.data.config import DataConfig, StatsConfig

if TYPE_CHECKING:
    from codeparrot.data.pipeline import build_corpus
    from codeparrot.data.stats import corpus_stats

__all__ = ["DataConfig", "StatsConfig", "build_corpus", "corpus_stats"]


def __getattr__(name: str) -> Any:
    if name == "build_corpus":
        from codeparrot.data.pipeline import build_corpus

        return build_corpus
    if name == "corpus_stats":
        from codeparrot.data.stats import corpus_stats

        return corpus_stats
    raise AttributeError(f"module 'codeparrot.data' has no attribute {name!r}")
