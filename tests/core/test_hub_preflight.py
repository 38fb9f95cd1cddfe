"""``--push-to-hub``: the checks that run before any work, offline.

The upload itself needs the network and a Hub account, so it is not exercised here;
these tests cover what can fail before a stage starts, and that nothing is written then.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from codeparrot import hub
from codeparrot.errors import CodeparrotError


@pytest.fixture
def no_login(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment with no token anywhere (the token file is looked up at call time)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    return tmp_path / "hf_home" / "token"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable_hub(monkeypatch: pytest.MonkeyPatch, no_login: Path) -> str:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_dummy_token_for_tests")
    return endpoint


def test_no_token_is_reported_with_where_it_looked(no_login):
    with pytest.raises(CodeparrotError, match="no Hugging Face token") as info:
        hub.preflight("me/corpus")
    assert "HF_TOKEN" in str(info.value) and str(no_login) in str(info.value)


def test_cached_login_is_found(no_login, monkeypatch):
    no_login.parent.mkdir(parents=True)
    no_login.write_text("hf_cached\n")
    assert hub.find_token() == "hf_cached"
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert hub.find_token() == "hf_env"


def test_unreachable_hub_is_reported(unreachable_hub):
    with pytest.raises(CodeparrotError, match="not reachable") as info:
        hub.preflight("me/model", timeout=2)
    assert unreachable_hub in str(info.value)


def test_offline_mode_and_bad_names(no_login, monkeypatch):
    with pytest.raises(CodeparrotError, match="not a Hub repository name"):
        hub.preflight("a/b/c")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CodeparrotError, match="HF_HUB_OFFLINE"):
        hub.preflight("me/model")


def test_branch_names_follow_the_run_directory():
    assert hub.branch_name(Path("runs/my run")) == "my-run"
    assert hub.branch_name("quickstart") == "quickstart"


def test_data_build_fails_before_any_work(unreachable_hub, tmp_path, capsys):
    from codeparrot.cli import main

    source = tmp_path / "src"
    source.mkdir()
    (source / "a.py").write_text("x = 1\n")
    out = tmp_path / "corpus"
    assert main(["data", "build", str(source), "--output", str(out), "--push-to-hub", "c"]) == 1
    assert "not reachable" in capsys.readouterr().err
    assert not out.exists()


def test_tokenizer_train_fails_before_any_work(no_login, tmp_path, capsys):
    from codeparrot.cli import main

    out = tmp_path / "tok"
    argv = ["tokenizer", "train", "--data", str(tmp_path), "--output", str(out)]
    assert main([*argv, "--push-to-hub", "me/tok"]) == 1
    assert "no Hugging Face token" in capsys.readouterr().err
    assert not out.exists()


def test_train_fails_before_any_work(unreachable_hub, tmp_path, capsys):
    from codeparrot.cli import main

    out = tmp_path / "run"
    argv = ["train", "--data", str(tmp_path), "--init-from", str(tmp_path / "checkpoint")]
    assert main([*argv, "--output", str(out), "--push-to-hub", "me/model"]) == 1
    assert "not reachable" in capsys.readouterr().err
    assert not out.exists()


def test_finetune_fails_before_any_work(no_login, tiny_checkpoint, tmp_path, capsys):
    from codeparrot.cli import main

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    out = tmp_path / "ft"
    argv = ["finetune", str(repo), "--checkpoint", str(tiny_checkpoint), "--output", str(out)]
    assert main([*argv, "--push-to-hub", "me/ft"]) == 1
    assert "no Hugging Face token" in capsys.readouterr().err
    assert not out.exists()
