"""``--revision`` on every command that takes a checkpoint, through an offline cache.

The cache holds ``someorg/tiny-coder`` at two revisions: ``main`` asks for remote code (so
any command that loads it is refused) and the tag ``v1`` is the tiny checkpoint. A command
that honours ``--revision v1`` loads; one that ignored it would be refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.hub import ModelRef
from tests.core.test_hub_models import SHA, cache_model, hub_cache  # noqa: F401 (fixture)

V1_SHA = "fedcba9876543210fedcba9876543210fedcba98"
ID = "someorg/tiny-coder"


@pytest.fixture
def two_revisions(hub_cache, tiny_checkpoint):  # noqa: F811 (the fixture)
    main = cache_model(hub_cache, ID, tiny_checkpoint)
    config = json.loads((main / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomModel"}
    (main / "config.json").write_text(json.dumps(config))
    cache_model(hub_cache, ID, tiny_checkpoint, sha=V1_SHA)
    repo = hub_cache / ("models--" + ID.replace("/", "--"))
    (repo / "refs" / "main").write_text(SHA)
    (repo / "refs" / "v1").write_text(V1_SHA)
    return hub_cache


def test_a_model_reference_is_parsed_once_from_what_the_user_wrote(tmp_path):
    assert ModelRef.parse(ID, "v1") == ModelRef(ID, "v1")
    assert ModelRef.parse(f"{ID}@v1") == ModelRef(ID, "v1")
    assert ModelRef.parse(f"{ID}@v1", "v1").name == f"{ID}@v1"
    assert ModelRef.parse(ID) == ModelRef(ID, None) and ModelRef.parse(ID).name == ID
    local = ModelRef.parse(tmp_path, "v1")  # a directory has no revisions
    assert local.source == str(tmp_path) and not local.is_hub and local.name == str(tmp_path)
    assert ModelRef.parse(ModelRef(ID, "v1")) == ModelRef(ID, "v1")  # passed down as it is
    assert ModelRef.parse(ModelRef(ID), "v1") == ModelRef(ID, "v1")
    with pytest.raises(CheckpointError, match="names revision 'v1' but --revision is 'v2'"):
        ModelRef.parse(f"{ID}@v1", "v2")
    with pytest.raises(CheckpointError, match="names revision 'v1' but --revision is 'v2'"):
        ModelRef.parse(ModelRef(ID, "v1"), "v2")


@pytest.mark.parametrize("how", ["lean", "lean declines", "transformers"])
def test_a_load_resolves_its_model_once(two_revisions, monkeypatch, how):
    """Each load looks the Hub id up in the cache (or on the Hub) once, whichever loaders
    read it (the lean one, then transformers' where the lean one declines, the tokenizer,
    the checks)."""
    from codeparrot import hub
    from codeparrot.generation import Engine
    from codeparrot.serve.config import ServeConfig
    from codeparrot.serve.server import load_engine

    lookups = []
    snapshot = hub._snapshot

    def counted(repo_id, revision):
        lookups.append((repo_id, revision))
        return snapshot(repo_id, revision)

    monkeypatch.setattr(hub, "_snapshot", counted)
    if how == "lean declines":  # as for a variant the lean decoder does not compute
        monkeypatch.setattr(
            "codeparrot.models.lean_load.lean_load_problem", lambda *_: "declined by a test"
        )
    lean_load = how != "transformers"
    engine = Engine.load(ModelRef(ID, "v1"), lean_load=lean_load)
    assert lookups == [(ID, "v1")] and engine.context_length == 256
    assert str(engine.path) == f"{ID}@v1"  # named as the user named it
    lookups.clear()
    monkeypatch.setenv("CODEPARROT_LEAN_LOAD", "1" if lean_load else "0")
    load_engine(ServeConfig(checkpoint=Path(ID), revision="v1"))  # serve's whole load
    assert lookups == [(ID, "v1")]


def test_complete_takes_revision(two_revisions):
    run = [sys.executable, "-m", "codeparrot", "complete", "--max-new-tokens", "2"]

    def complete(*args):
        return subprocess.run(
            [*run, *args, "x = "], capture_output=True, text=True, timeout=180, env=dict(os.environ)
        )

    ok = complete("--checkpoint", ID, "--revision", "v1")
    assert ok.returncode == 0, ok.stderr
    main = complete("--checkpoint", ID)
    assert main.returncode != 0 and "auto_map" in main.stderr
    both = complete("--checkpoint", f"{ID}@v1", "--revision", "v2")
    assert both.returncode != 0 and "Traceback" not in both.stderr
    assert "--revision" in both.stderr and f"{ID}@v1" in both.stderr


def test_serve_takes_revision(two_revisions):
    from codeparrot.serve.config import ServeConfig
    from codeparrot.serve.server import load_engine

    engine = load_engine(ServeConfig(checkpoint=Path(ID), revision="v1"))
    assert engine.context_length == 256
    with pytest.raises(CheckpointError, match="auto_map"):
        load_engine(ServeConfig(checkpoint=Path(ID)))
    with pytest.raises(ConfigError, match="--checkpoint and --revision disagree"):
        ServeConfig(checkpoint=Path(f"{ID}@v1"), revision="main")


def test_the_language_server_takes_revision(two_revisions):
    from codeparrot.lsp.config import LspConfig
    from codeparrot.lsp.server import build_server

    server = build_server(LspConfig(checkpoint=Path(ID), revision="v1", cache_size=0))
    try:
        server.load_engine()
        assert server._engine.result(timeout=120).context_length == 256
    finally:
        server._generator.shutdown(wait=True)
    with pytest.raises(ConfigError, match="--checkpoint and --revision disagree"):
        LspConfig(checkpoint=Path(f"{ID}@v1"), revision="v2")


def test_the_playground_takes_revision(two_revisions):
    from codeparrot.app.config import AppConfig
    from codeparrot.app.ui import EnginePool

    config = AppConfig(checkpoints=(Path(ID),), revision="v1")
    assert config.served_checkpoints == (ModelRef(ID, "v1"),)
    pool = EnginePool(config.served_checkpoints, device="cpu")
    assert pool.get(f"{ID}@v1").context_length == 256
    with pytest.raises(ConfigError, match="--checkpoint and --revision disagree"):
        AppConfig(checkpoints=(Path(f"{ID}@v1"),), revision="v2")


def test_eval_takes_revision(two_revisions, tmp_path):
    from codeparrot.eval.config import GenerateConfig
    from codeparrot.eval.humaneval import _load_engine, _model_settings
    from codeparrot.eval.lines import LinesConfig

    config = GenerateConfig(checkpoint=Path(ID), revision="v1", output=tmp_path / "out")
    assert config.model_path == ModelRef(ID, "v1") and str(config.model_path) == f"{ID}@v1"
    assert _load_engine(config, None).context_length == 256
    # resume compares what generated the samples: the revision is part of it
    assert _model_settings(config) == {"checkpoint": f"{ID}@v1"}
    with pytest.raises(CheckpointError, match="auto_map"):
        _load_engine(GenerateConfig(checkpoint=Path(ID), output=tmp_path / "out"), None)
    with pytest.raises(ConfigError, match="--checkpoint and --revision disagree"):
        GenerateConfig(checkpoint=Path(f"{ID}@v1"), revision="v2")
    with pytest.raises(ConfigError, match="--checkpoint and --revision disagree"):
        LinesConfig(checkpoint=Path(f"{ID}@v1"), revision="v2")


@pytest.mark.parametrize(
    "command",
    ["complete", "serve", "lsp", "app", "finetune", "eval humaneval", "eval infill", "eval lines"],
)
def test_every_command_that_loads_a_checkpoint_has_revision(command):
    from codeparrot.cli import build_parser

    parser = build_parser()
    sub = parser
    for word in command.split():
        sub = sub._subparsers._group_actions[0].choices[word]
    assert "--revision" in sub._option_string_actions
