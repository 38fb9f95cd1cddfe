"""--task santacoder-fim: bigcode's single-line infilling exact match, on a fixture in the
published data's schema (``bigcode/santacoder-fim-task``: name, language, prompt, suffix,
canonical_solution, tests; one parquet file, split train). Nothing is executed."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from codeparrot.eval.config import HumanEvalConfig
from codeparrot.eval.humaneval import run
from codeparrot.eval.tasks import load_task

ROWS = [
    {
        "name": "HumanEval_53_add",
        "language": "py",
        "prompt": 'def add(x: int, y: int):\n    """Add two numbers x and y"""\n',
        "suffix": "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n",
        "canonical_solution": "    return x + y",
        "tests": "",
    },
    {
        "name": "HumanEval_53_add",
        "language": "js",
        "prompt": "//Add two numbers x and y\nfunction add(x, y){\n",
        "suffix": "\n}\n",
        "canonical_solution": "  return x + y;",
        "tests": "",
    },
    {
        "name": "HumanEval_23_strlen",
        "language": "java",
        "prompt": "class Problem {\n    public static long strlen(String string) {\n",
        "suffix": "\n    }\n}\n",
        "canonical_solution": "        return string.length();",
        "tests": "",
    },
]


@pytest.fixture
def fim_file(tmp_path):
    import datasets

    path = tmp_path / "data" / "train-00000-of-00001.parquet"
    path.parent.mkdir()
    datasets.Dataset.from_list(ROWS).to_parquet(str(path))
    return path


@dataclass
class Made:
    text: str
    finish_reason: str = "eos"


class FimEngine:
    """Fills the Python and Java middles right (with stray whitespace), the JavaScript one wrong."""

    context_length = 256
    device = "cpu"
    fim = object()

    def __init__(self):
        self.suffixes = []
        self.lock = threading.Lock()

    def generate(self, prompt, config, cancel=None, suffix=None):
        with self.lock:
            self.suffixes.append(suffix)
        row = next(r for r in ROWS if r["prompt"] == prompt)
        text = row["canonical_solution"] + "\n" if row["language"] != "js" else "  return x - y;"
        return [Made(text)] * config.n


def test_rows_of_the_published_schema_become_infilling_tasks(fim_file):
    found = load_task("santacoder-fim", fim_file)
    assert list(found.problems) == [
        "SantaCoderFIM/py/HumanEval_53_add/L2",
        "SantaCoderFIM/js/HumanEval_53_add/L2",
        "SantaCoderFIM/java/HumanEval_23_strlen/L2",
    ]
    task = found.problems["SantaCoderFIM/java/HumanEval_23_strlen/L2"]
    assert task["suffix"] == "\n    }\n}\n" and task["language"] == "java"


def test_the_hub_source_is_read_with_the_real_loader(fim_file, monkeypatch):
    import codeparrot.hub

    asked = []

    def dataset_files(dataset, pattern):
        asked.append((dataset, pattern))
        return [fim_file]

    monkeypatch.setattr(codeparrot.hub, "dataset_files", dataset_files)
    found = load_task("santacoder-fim")
    assert asked == [("bigcode/santacoder-fim-task", "data/train-*")]
    assert len(found.problems) == 3


def test_exact_match_per_language_without_running_anything(fim_file, tmp_path, monkeypatch):
    monkeypatch.delenv("CODEPARROT_ALLOW_CODE_EXECUTION", raising=False)
    engine = FimEngine()
    config = HumanEvalConfig(checkpoint=tmp_path, task="santacoder-fim", problem_file=fim_file,
                             output=tmp_path / "out", n=1, batch_size=1, temperature=0.0,
                             max_new_tokens=16, ks=(1,))  # fmt: skip
    summary = run(config, engine=engine, progress=False)
    assert sorted(engine.suffixes) == sorted(r["suffix"] for r in ROWS)
    assert summary["exact_match"] == pytest.approx(2 / 3)
    assert summary["exact_match_by_language"] == {"py": 1.0, "js": 0.0, "java": 1.0}
    assert summary["isolation"]["mode"].startswith("not run")
