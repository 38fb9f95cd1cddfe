"""Fixtures of the playground tests: checkpoints with reports beside them, a served app."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Playground:
    url: str
    trained: Path  # a copy of tiny_checkpoint with training facts and a HumanEval report
    foreign: Path  # tiny_checkpoint as is: no codeparrot files beside it
    missing: Path  # offered in the picker but not on disk


def write_reports(checkpoint: Path) -> dict:
    """Facts, metrics and a HumanEval summary in the documented layout; returns the facts."""
    facts = {
        "step": 1500,
        "tokens_seen": 12_345_678,
        "parameters": 149_248,
        "preset": "tiny",
        "eval_loss": 3.2109,
        "perplexity": 24.8,
    }
    (checkpoint / "codeparrot_checkpoint.json").write_text(json.dumps(facts))
    with open(checkpoint / "metrics.jsonl", "w") as fh:
        for step in range(0, 1600, 100):
            fh.write(json.dumps({"step": step, "loss": 6.0 - step / 500, "lr": 5e-4}) + "\n")
    report = checkpoint / "humaneval"
    report.mkdir()
    summary = {  # the layout eval/report.py writes
        "pass_at_k": {"pass@1": 0.0125, "pass@10": 0.0375},
        "problems": 2,
        "samples": 40,
        "solved": 1,
        "per_problem": {
            "HumanEval/0": {"samples": 20, "passed": 1},
            "HumanEval/1": {"samples": 20, "passed": 0},
        },
        "generation": {"temperature": 0.8, "top_p": 0.95, "n": 20},
    }
    (report / "summary.json").write_text(json.dumps(summary))
    return facts


class FakePool:
    """An engine pool over one checkpoint name whose engine is a test's fake."""

    def __init__(self, checkpoint: Path, engine: Any) -> None:
        self.checkpoints = {str(checkpoint): checkpoint}
        self.engine = engine

    def is_loaded(self, key: str) -> bool:
        return True

    def get(self, key: str) -> Any:
        return self.engine


@pytest.fixture
def served(tmp_path: Path) -> Iterator:
    """Serve playgrounds over fake engines: yields ``start(engine, **config)`` -> (URL,
    the :class:`codeparrot.app.ui.Playground`)."""
    from codeparrot.app.config import AppConfig
    from codeparrot.app.ui import Playground as Handlers
    from codeparrot.app.ui import serve

    demos = []

    def start(engine: Any, **changes: Any) -> tuple[str, Any]:
        checkpoint = tmp_path / f"ckpt-{len(demos)}"
        checkpoint.mkdir()
        config = AppConfig(checkpoints=(checkpoint,), port=0, stream_interval=0.0, **changes)
        playground = Handlers(config, pool=FakePool(checkpoint, engine))
        demo, url = serve(playground, block=False)
        demos.append(demo)
        return url, playground

    yield start
    for demo in demos:
        demo.close()


@pytest.fixture(scope="session")
def playground(
    tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Playground]:
    """The playground served in this process on a free port of 127.0.0.1."""
    from codeparrot.app.config import AppConfig
    from codeparrot.app.ui import launch

    root = tmp_path_factory.mktemp("playground")
    trained = root / "run"
    shutil.copytree(tiny_checkpoint, trained)
    write_reports(trained)
    missing = root / "deleted-run"
    config = AppConfig(
        checkpoints=(trained, tiny_checkpoint, missing),
        port=0,
        stream_interval=0.0,
        max_new_tokens_limit=128,
        compile=False,  # EnginePool's compile has its own test
    )
    demo, url = launch(config, block=False)
    try:
        yield Playground(url=url, trained=trained, foreign=tiny_checkpoint, missing=missing)
    finally:
        demo.close()
