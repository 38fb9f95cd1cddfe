"""Acceptance statistics: what the next edit says, and the summary per checkpoint."""

from __future__ import annotations

import json

import pytest

from codeparrot.lsp.stats import (
    StatsError,
    StatsRecorder,
    default_stats_file,
    format_summary,
    summarise,
)


def events(path) -> list[tuple[str, str | None]]:
    return [(r["event"], r.get("via")) for r in map(json.loads, path.read_text().splitlines())]


def test_the_next_edit_decides(tmp_path):
    path = tmp_path / "s.jsonl"
    rec = StatsRecorder(path, "runs/a")
    rec.shown("1", "u", 10, "foo(x)", 12.0)
    rec.edited("u", 10, 0, "foo(x)")  # the whole suggestion: accepted
    rec.shown("2", "u", 20, "bar(y)", 14.0)
    rec.edited("u", 20, 0, "ba")  # its start: partial
    rec.shown("3", "u", 30, "baz", 16.0)
    rec.edited("u", 31, 0, "q")  # elsewhere: dismissed
    rec.shown("4", "u", 40, "qux", 18.0)
    rec.shown("5", "u", 43, "quux", 20.0)  # replaced before any verdict: dismissed
    rec.accepted("5")
    rec.accepted("5")  # decided once
    rec.rejected("unknown")
    assert [e for e in events(path) if e[0] != "shown"] == [
        ("accepted", "inferred"),
        ("partial", "inferred"),
        ("dismissed", "inferred"),
        ("dismissed", "replaced"),
        ("accepted", "notification"),
    ]
    per, skipped = summarise(path)
    assert skipped == 0
    a = per["runs/a"]
    assert (a["shown"], a["accepted"], a["partial"], a["dismissed"]) == (5, 2, 1, 2)
    assert a["acceptanceRate"] == 0.4 and a["acceptedOrPartialRate"] == 0.6
    assert a["latencyP50Ms"] == 16.0
    assert "runs/a: 5 shown, 2 accepted" in format_summary(per, skipped, path)


def test_summary_per_checkpoint_skips_corrupt_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    StatsRecorder(path, "runs/a").shown("1", "u", 0, "x", 5.0)
    with open(path, "a") as fh:
        fh.write('not json\n{"event": "bogus"}\n[1, 2]\n')
    StatsRecorder(path, "runs/b").shown("2", "u", 0, "y", 7.0)
    per, skipped = summarise(path)
    assert set(per) == {"runs/a", "runs/b"} and skipped == 3
    with pytest.raises(StatsError, match="cannot read"):
        summarise(tmp_path / "missing.jsonl")


def test_no_path_records_nothing(tmp_path, monkeypatch):
    # where a recorder that fell back to a file would write: the default statistics file
    # (under XDG_STATE_HOME) or the working directory
    state, cwd = tmp_path / "state", tmp_path / "cwd"
    state.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.chdir(cwd)

    def edit(rec: StatsRecorder) -> None:
        rec.shown("1", "u", 0, "x", 1.0)
        rec.accepted("1")
        rec.shown("2", "u", 5, "yy", 2.0)
        rec.edited("u", 5, 0, "yy")

    control = tmp_path / "control.jsonl"
    edit(StatsRecorder(control, "runs/a"))
    assert len(control.read_text().splitlines()) == 4  # the same events, recorded
    edit(StatsRecorder(None, "runs/a"))
    assert not default_stats_file().exists()
    assert list(state.rglob("*")) == [] and list(cwd.iterdir()) == []
