"""``data build --split-by file``: one repository's files divided between train and valid."""

from __future__ import annotations

import gzip
import json
import shutil
import sysconfig
from pathlib import Path

import pytest

from codeparrot.data import DataConfig, build_corpus
from codeparrot.data.split import assign_splits, split_unit
from codeparrot.errors import ConfigError

MODULES = ("textwrap.py", "heapq.py", "bisect.py", "fnmatch.py", "glob.py", "shlex.py", "sched.py")


def split_paths(corpus: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for split in ("train", "valid"):
        out[split] = set()
        for shard in (corpus / split).glob("*.jsonl.gz"):
            with gzip.open(shard, "rt", encoding="utf-8") as fh:
                out[split] |= {json.loads(line)["path"] for line in fh}
    return out


def test_one_repository_is_split_by_file(tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    package = tmp_path / "repo" / "pkg"
    package.mkdir(parents=True)
    for name in MODULES:
        shutil.copyfile(stdlib / name, package / name)
    common = dict(sources=(str(tmp_path / "repo"),), workers=1, valid_fraction=0.3)
    by_repo = build_corpus(DataConfig(output=tmp_path / "a", **common), progress=False)
    assert by_repo["splits"]["valid"]["files"] == 0  # one repository: nothing to hold out
    by_file = build_corpus(
        DataConfig(output=tmp_path / "b", split_by="file", **common), progress=False
    )
    assert by_file["splits"]["valid"]["files"] >= 1 and by_file["splits"]["train"]["files"] >= 1
    paths = split_paths(tmp_path / "b")
    assert not paths["train"] & paths["valid"]
    again = build_corpus(
        DataConfig(output=tmp_path / "c", split_by="file", **common), progress=False
    )
    assert split_paths(tmp_path / "c") == paths  # seeded: the same files are held out
    assert again["provenance"]["config"]["split_by"] == "file"


def test_split_units_and_validation():
    assert split_unit("repository", "me/app", "a/b.py") == "me/app"
    assert split_unit("file", "me/app", "a/b.py") == "me/app/a/b.py"
    units = {split_unit("file", "me/app", f"m{i}.py"): 1 for i in range(20)}
    splits = assign_splits(units, 0.25, seed=1)
    assert sum(v == "valid" for v in splits.values()) == 5
    with pytest.raises(ConfigError, match="--split-by"):
        DataConfig(output=Path("x"), split_by="directory")
