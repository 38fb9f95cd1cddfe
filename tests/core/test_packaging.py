"""One installed import package, `codeparrot`, whatever directory the user runs from."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from codeparrot import cli


def test_the_distribution_installs_only_the_codeparrot_package():
    top_level = importlib.metadata.distribution("codeparrot").read_text("top_level.txt")
    assert top_level.split() == ["codeparrot"]


def test_stages_import_from_a_directory_full_of_same_named_folders(tmp_path):
    for name in ("eval", "app", "lsp", "serve", "training"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the user package')\n")
    probe = (
        "import codeparrot.training, codeparrot.eval, codeparrot.app, codeparrot.lsp, codeparrot.serve\n"
        "print(codeparrot.eval.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "codeparrot", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    for command in ("train", "eval", "app", "lsp", "serve"):
        assert f"\n    {command}" in helped.stdout


def test_a_subcommand_that_fails_to_import_is_an_error_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, ("broken", "codeparrot.no_such_stage")))
    assert cli.main(["--help"]) == cli.EXIT_FAILURE
    err = capsys.readouterr().err
    assert "`broken`" in err and "codeparrot.no_such_stage" in err
    with pytest.raises(cli.CommandImportError, match="no_such_stage"):
        cli.build_parser()


def test_a_command_whose_extra_is_missing_names_the_extra(monkeypatch, capsys):
    """`codeparrot app` without gradio says to install the `app` extra, not a traceback."""
    import argparse

    def needs_gradio(args):
        raise ModuleNotFoundError("No module named 'gradio'", name="gradio")

    def register(subparsers):
        subparsers.add_parser("app").set_defaults(func=needs_gradio)

    module = argparse.Namespace(register=register)
    monkeypatch.setattr(cli, "COMMANDS", (("app", "fake.app"),))
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: module)
    assert cli.main(["app"]) == cli.EXIT_FAILURE
    err = capsys.readouterr().err
    assert "codeparrot[app]" in err and "gradio" in err


def test_an_unrelated_import_error_is_not_hidden(monkeypatch):
    import argparse

    def broken(args):
        raise ModuleNotFoundError("No module named 'torch_nightly'", name="torch_nightly")

    module = argparse.Namespace(register=lambda sp: sp.add_parser("app").set_defaults(func=broken))
    monkeypatch.setattr(cli, "COMMANDS", (("app", "fake.app"),))
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: module)
    with pytest.raises(ModuleNotFoundError, match="torch_nightly"):
        cli.main(["app"])


def test_the_base_install_needs_no_surface_extra():
    """The extras split: the playground, the language server and evaluate's metric are
    extras; the base install is enough for train, complete, serve and the harness."""
    requires = importlib.metadata.distribution("codeparrot").requires or []
    base = [r for r in requires if "extra ==" not in r]
    names = {r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip() for r in base}
    assert not names & {"gradio", "pygls", "lsprotocol", "evaluate"}
    assert {"torch", "transformers", "accelerate"} <= names
