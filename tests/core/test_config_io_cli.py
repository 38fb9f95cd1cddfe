"""The foundation every stage relies on: configs, atomic outputs, the CLI table."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from codeparrot.config import Config, add_config_arguments, config_from_args, load_config, option
from codeparrot.errors import ConfigError
from codeparrot.io import atomic_directory, atomic_open, provenance, write_json


@dataclass(frozen=True)
class DemoConfig(Config):
    output: Path = option(help="where to write")
    size: int = option(8, "how many")
    rate: float = option(0.5, "a fraction")
    names: tuple[str, ...] = option(("a", "b"), "some names")
    seed: int | None = option(None, "a seed")
    fast: bool = option(False, "go fast")

    def problems(self) -> list[str]:
        out = []
        if self.size < 1:
            out.append(f"--size must be >= 1, got {self.size}")
        if not 0 <= self.rate <= 1:
            out.append(f"--rate must be in [0, 1], got {self.rate}")
        return out


def test_invalid_config_names_every_bad_flag():
    with pytest.raises(ConfigError) as e:
        DemoConfig(output=Path("x"), size=0, rate=2.0)
    assert "--size" in str(e.value) and "--rate" in str(e.value)


def test_config_round_trips_through_json(tmp_path):
    cfg = DemoConfig(output=Path("out"), size=3, names=("x",), seed=7, fast=True)
    path = tmp_path / "c.json"
    path.write_text(cfg.to_json())
    assert load_config(DemoConfig, path) == cfg


def test_unknown_field_is_rejected():
    with pytest.raises(ConfigError, match="bogus"):
        DemoConfig.from_dict({"output": "o", "bogus": 1})


def test_cli_flags_override_only_what_was_given():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, DemoConfig)
    args = parser.parse_args(["--output", "o", "--size", "4", "--names", "p", "q", "--fast"])
    cfg = config_from_args(DemoConfig, args)
    assert cfg == DemoConfig(output=Path("o"), size=4, names=("p", "q"), fast=True)
    assert cfg.rate == 0.5  # default kept
    help_text = parser.format_help()
    assert "how many (default: 8)" in help_text


def test_atomic_open_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.jsonl.gz"
    with pytest.raises(RuntimeError), atomic_open(target) as fh:
        fh.write("partial\n")
        raise RuntimeError("boom")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_open_gzip_round_trip(tmp_path):
    import gzip

    target = tmp_path / "a.jsonl.gz"
    with atomic_open(target) as fh:
        fh.write('{"x": 1}\n')
    assert gzip.open(target, "rt").read() == '{"x": 1}\n'


def test_atomic_directory_appears_only_when_complete(tmp_path):
    target = tmp_path / "corpus"
    with pytest.raises(ValueError), atomic_directory(target) as tmp:
        (tmp / "shard").write_text("half")
        raise ValueError
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_directory(target) as tmp:
        (tmp / "shard").write_text("whole")
    assert (target / "shard").read_text() == "whole"
    with pytest.raises(FileExistsError), atomic_directory(target):
        pass
    with atomic_directory(target, overwrite=True) as tmp:
        (tmp / "new").write_text("v2")
    assert sorted(p.name for p in target.iterdir()) == ["new"]


def test_provenance_records_config_and_versions(tmp_path):
    cfg = DemoConfig(output=Path("o"))
    write_json(tmp_path / "m.json", provenance(cfg))
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["config"]["size"] == 8
    assert data["versions"]["codeparrot"]


def test_help_is_fast_and_imports_no_heavy_library():
    code = (
        "import sys, contextlib, io\n"
        "from codeparrot.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'gradio', 'pygls', 'datasets') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_console_script_lists_subcommands():
    out = subprocess.run(
        [sys.executable, "-m", "codeparrot", "--help"], capture_output=True, text=True, check=True
    )
    assert "COMMAND" in out.stdout


def test_atomic_outputs_get_the_usual_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        with atomic_open(tmp_path / "f.txt") as fh:
            fh.write("x")
        with atomic_directory(tmp_path / "d"):
            pass
    finally:
        os.umask(mask)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize(
    "command",
    [
        ["quickstart"],
        ["data", "build"],
        ["data", "stats"],
        ["tokenizer", "train"],
        ["tokenizer", "report"],
        ["init"],
        ["train"],
        ["finetune"],
        ["complete"],
        ["eval", "humaneval"],
        ["eval", "execute"],
        ["app"],
        ["lsp"],
    ],
)
def test_every_subcommand_explains_its_flags(command, capsys):
    from codeparrot.cli import main

    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    # a flag of its own besides --help, explained, and no help text mangled by "%"
    assert re.search(r"^\s+(-\w, )?--(?!help\b)[\w-]+.*\S", out, re.M), out
    assert "option_strings" not in out
