"""Benchmarks from the local Hugging Face cache, offline: the MBPP task and decontamination.

The cache is written by the test in huggingface_hub's layout
(``datasets--OWNER--NAME/refs/main``, ``snapshots/COMMIT/CONFIG/SPLIT-*.parquet``) with
records in the schemas of ``google-research-datasets/mbpp`` (``full`` and ``sanitized``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codeparrot.data.decontaminate import benchmark_index
from codeparrot.eval.tasks import load_task

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SOLUTION = (
    "def remove_Occ(s,ch):\n    for i in range(len(s)):\n        if (s[i] == ch):\n"
    "            s = s[0 : i] + s[i + 1:]\n            break\n    return s\n"
)
TESTS = [
    'assert remove_Occ("hello","l") == "helo"',
    'assert remove_Occ("abcda","a") == "bcd"',
    'assert remove_Occ("PHP","P") == "H"',
]
FULL = {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character from the string.",
        "code": SOLUTION, "test_list": TESTS, "test_setup_code": "", "challenge_test_list": []}  # fmt: skip
# a problem of the full config's train split only: decontamination covers every split
TRAIN_SOLUTION = (
    "import math\ndef is_not_prime(n):\n    result = False\n"
    "    for i in range(2, int(math.sqrt(n)) + 1):\n        if n % i == 0:\n"
    "            result = True\n    return result\n"
)
TRAIN = {"task_id": 3, "text": "Write a python function to identify non-prime numbers.",
         "code": TRAIN_SOLUTION, "test_list": ["assert is_not_prime(2) == False",
                                               "assert is_not_prime(10) == True"],
         "test_setup_code": "", "challenge_test_list": []}  # fmt: skip
SANITIZED = {"source_file": "Benchmark Questions Verification V2.ipynb", "task_id": 11,
             "prompt": FULL["text"], "code": SOLUTION, "test_imports": [], "test_list": TESTS}  # fmt: skip


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "datasets--google-research-datasets--mbpp"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    for config, record in (("full", FULL), ("sanitized", SANITIZED)):
        (snapshot / config).mkdir(parents=True)
        path = snapshot / config / "test-00000-of-00001.parquet"
        datasets.Dataset.from_list([record]).to_parquet(str(path))
    train = snapshot / "full" / "train-00000-of-00001.parquet"
    datasets.Dataset.from_list([TRAIN]).to_parquet(str(train))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_mbpp_task_loads_from_the_cache_offline(hub_cache):
    found = load_task("mbpp")
    assert list(found.problems) == ["Mbpp/11"]  # the sanitized config's test split only
    assert found.problems["Mbpp/11"]["prompt"].endswith(f'{TESTS[0]}\n"""\n')


def test_decontamination_covers_mbpp_from_the_cache(hub_cache):
    index = benchmark_index()
    assert index.sources == {"humaneval": 164, "mbpp": 2}  # every split of the full config
    assert index.contains_snippet("x = 1\n" + TRAIN_SOLUTION)
    copied = "import os\n\n" + SOLUTION.replace("    ", "  ") + "\nprint(remove_Occ('x', 'y'))\n"
    assert index.contains_snippet(copied)
    assert index.contains_snippet("# tests\n" + "\n".join(TESTS) + "\n")
    assert not index.contains_snippet("def remove(s):\n    return s.replace('a', '')\n")


def test_decontamination_without_mbpp_says_why(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    index = benchmark_index()
    assert index.sources["humaneval"] == 164
    assert index.sources["mbpp"].startswith("unavailable")
    assert benchmark_index(mbpp=False).sources == {"humaneval": 164}


def test_manifest_names_the_benchmarks(tmp_path, hub_cache):
    from codeparrot.data import build_corpus
    from codeparrot.data.config import DataConfig

    src = tmp_path / "src"
    src.mkdir()
    (src / "clean.py").write_text(
        "".join(f"x{i} = {i}\n" for i in range(12)) + "def f():\n    return 1\n"
    )
    (src / "copied.py").write_text("x = 1\ny = 2\nz = 3\nw = 4\nv = 5\n" + SOLUTION)
    manifest = build_corpus(DataConfig(output=tmp_path / "out", sources=(str(src),), workers=1,
                                       near_dedup=False), progress=False)  # fmt: skip
    assert manifest["decontamination"]["benchmarks"] == {"humaneval": 164, "mbpp": 2}
    assert manifest["decontamination"]["removed"] == 1
    assert Path(tmp_path / "out").is_dir()
