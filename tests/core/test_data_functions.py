"""Function-level documents: which functions are cut out, their shape, and the corpus option."""

from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path

import pytest

from codeparrot.data import DataConfig, build_corpus
from codeparrot.data.functions import add_function_documents, function_documents
from codeparrot.errors import DataError

SOURCE = (
    textwrap.dedent(
        '''\
    """A module."""
    import os
    import re as regex
    from typing import List, Optional


    def strlen(string: str) -> int:
        """Length of the string."""
        return len(string)


    def matches(words: List[str], pattern: str) -> List[str]:
        """The words that match the pattern."""
        compiled = regex.compile(pattern)
        return [w for w in words if compiled.match(w)]


    def undocumented(x):
        return x + 1


    def only_a_docstring():
        """Nothing else."""


    def long_body(n):
        """Twenty-five lines."""
    '''
    )
    + "".join(f"    n += {i}\n" for i in range(25))
    + textwrap.dedent(
        '''\


    class Box:
        def get(self):
            """A method: not a top-level function."""
            return 1
    '''
    )
)


def test_short_documented_top_level_functions_with_the_imports_they_use():
    docs = function_documents(SOURCE)
    assert docs == [
        'def strlen(string: str) -> int:\n    """Length of the string."""\n    return len(string)\n',
        "import re as regex\nfrom typing import List, Optional\n\n\n"
        "def matches(words: List[str], pattern: str) -> List[str]:\n"
        '    """The words that match the pattern."""\n'
        "    compiled = regex.compile(pattern)\n"
        "    return [w for w in words if compiled.match(w)]\n",
    ]
    # every document parses on its own
    for doc in docs:
        compile(doc, "<doc>", "exec")


def test_limits_and_unparseable_files():
    assert function_documents(SOURCE, max_body_lines=30)[-1].startswith("def long_body(n):")
    assert len(function_documents(SOURCE, max_chars=100)) == 1  # the import header is too long
    assert function_documents("def broken(:\n    pass\n") == []
    assert function_documents("") == []


def _module(i: int) -> str:
    body = "\n".join(
        f'def func_{i}_{j}(arg):\n    """Scale {j}."""\n    value = arg * {j}\n    return value\n'
        for j in range(6)
    )
    return f'"""Module {i}."""\nimport os\n\n{body}\nA = 1\nB = 2\nC = 3\nD = 4\nE = 5\n'


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """Six one-module packages of six documented functions each."""
    root = tmp_path / "code"
    for p in range(6):
        (root / f"pkg{p}").mkdir(parents=True)
        (root / f"pkg{p}" / "mod.py").write_text(_module(p))
    return root


def _read(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_build_adds_copies_to_the_training_split_only(src, tmp_path):
    out = tmp_path / "corpus"
    manifest = build_corpus(
        DataConfig(output=out, sources=(str(src),), workers=1, function_documents=2),
        progress=False,
    )
    train = [r for s in sorted((out / "train").glob("shard-0*.jsonl.gz")) for r in _read(s)]
    extra = _read(out / "train" / "shard-functions.jsonl.gz")
    assert len(extra) == 2 * 6 * len(train)  # six documented functions a file, two copies
    assert {r["content"] for r in extra} == {
        d for r in train for d in function_documents(r["content"])
    }
    assert extra[0]["path"].endswith("::function0") and set(extra[0]) >= {"repo_name", "size"}
    assert manifest["function_documents"] == {
        "copies": 2,
        "documents": 6 * len(train),
        "chars": sum(len(d) for r in train for d in function_documents(r["content"])),
    }
    assert json.loads((out / "manifest.json").read_text())["function_documents"]["copies"] == 2
    assert not list((out / "valid").glob("shard-functions*"))

    # the training loop's reader sees the extra shard
    from codeparrot.training.data import shard_files

    # ... last, so a tokenizer trained on the first files still reads whole files
    assert shard_files(out, "train")[-1] == out / "train" / "shard-functions.jsonl.gz"

    plain = build_corpus(
        DataConfig(output=tmp_path / "plain", sources=(str(src),), workers=1), progress=False
    )
    assert "function_documents" not in plain
    assert not (tmp_path / "plain" / "train" / "shard-functions.jsonl.gz").exists()


def test_a_corpus_of_function_documents_only(src, tmp_path):
    base = tmp_path / "corpus"
    # a corpus that has function documents already: they are made again, not added to
    build_corpus(
        DataConfig(output=base, sources=(str(src),), workers=1, function_documents=2),
        progress=False,
    )
    out = tmp_path / "anneal"
    entry = add_function_documents(base, out, 1, only=True)
    assert [p.name for p in (out / "train").iterdir()] == ["shard-functions.jsonl.gz"]
    assert len(_read(out / "train" / "shard-functions.jsonl.gz")) == entry["documents"] > 0
    assert sorted(p.name for p in (out / "valid").iterdir()) == sorted(
        p.name for p in (base / "valid").iterdir()
    )
    assert json.loads((out / "manifest.json").read_text())["function_documents"]["only"]
    assert entry["documents"] == 6 * len(_read(next((base / "train").glob("shard-0*"))))
    assert len(_read(base / "train" / "shard-functions.jsonl.gz")) == 2 * entry["documents"]


def test_add_function_documents_refuses_bad_input(tmp_path):
    with pytest.raises(DataError, match="not a corpus"):
        add_function_documents(tmp_path, tmp_path / "out", 1)
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "train").mkdir()
    with pytest.raises(DataError, match="copies must be at least 1"):
        add_function_documents(tmp_path, tmp_path / "out", 0)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", [["data", "build"], ["quickstart"]])
def test_cli_offers_the_option(stage):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "codeparrot", *stage, "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "--function-documents" in out and "HumanEval's shape" in " ".join(out.split())
