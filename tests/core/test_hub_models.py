"""Hub ids wherever a checkpoint is taken: resolved offline through a cache built here.

The cache is laid out as huggingface_hub lays it out (``models--ORG--NAME/snapshots/SHA``
and ``refs/main``), so nothing is downloaded; ``HF_HUB_OFFLINE=1`` keeps it that way.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError
from codeparrot.hub import in_hub_cache, looks_like_hub_id, resolve_model, split_revision
from codeparrot.models.checkpoint import load_checkpoint, validate_checkpoint

SHA = "0123456789abcdef0123456789abcdef01234567"


def cache_model(cache: Path, repo_id: str, source: Path, sha: str = SHA) -> Path:
    """Put ``source``'s files into the cache as huggingface_hub would; the snapshot dir."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / sha
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty offline Hugging Face cache of this test (no token, no network)."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return cache


def test_a_hub_id_loads_from_the_cache_offline(hub_cache, tiny_checkpoint):
    import torch

    from codeparrot.generation import Engine, GenerationConfig

    snapshot = cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    assert resolve_model("someorg/tiny-coder").path == snapshot
    assert resolve_model(f"someorg/tiny-coder@{SHA}").path == snapshot
    assert resolve_model("someorg/tiny-coder", revision=SHA).revision == SHA
    assert validate_checkpoint("someorg/tiny-coder")["model_type"] == "gpt2"

    model, _tok, _meta = load_checkpoint("someorg/tiny-coder")
    local, _tok, _meta = load_checkpoint(tiny_checkpoint)
    x = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(model(input_ids=x).logits, local(input_ids=x).logits)

    engine = Engine.load("someorg/tiny-coder")
    out = engine.generate("def f(x):", GenerationConfig(max_new_tokens=4, temperature=0))
    assert out[0].new_tokens > 0 and isinstance(out[0].text, str)


def test_complete_takes_a_hub_id_and_names_it_when_not_cached(hub_cache, tiny_checkpoint):
    cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    env = dict(os.environ)
    run = [sys.executable, "-m", "codeparrot", "complete", "--max-new-tokens", "3"]
    ok = subprocess.run(
        [*run, "--checkpoint", "someorg/tiny-coder", "x = "],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run(
        [*run, "--checkpoint", "someorg/not-cached", "x = "],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert missing.returncode != 0
    assert "someorg/not-cached" in missing.stderr and "HF_HUB_OFFLINE" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_not_cached_offline_names_the_id_and_what_to_do(hub_cache):
    with pytest.raises(CheckpointError) as info:
        load_checkpoint("someorg/elsewhere")
    message = str(info.value)
    assert "someorg/elsewhere" in message and "HF_HUB_OFFLINE" in message
    assert "hf download someorg/elsewhere" in message


class _StubHub(http.server.BaseHTTPRequestHandler):
    """Answers as the Hub does for a gated model, a missing one and a missing revision."""

    def do_GET(self) -> None:
        if "/gated" in self.path:
            status, code = 403, "GatedRepo"
        elif "/revision/nope" in self.path:
            status, code = 404, "RevisionNotFound"
        else:
            status, code = 401, "RepoNotFound"
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stub_hub(hub_cache, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StubHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()


def test_gated_missing_and_unknown_revisions_say_what_to_do(stub_hub):
    with pytest.raises(CheckpointError, match=r"someorg/gated: a gated model.*log in"):
        validate_checkpoint("someorg/gated")
    with pytest.raises(CheckpointError, match="someorg/missing: no such directory, and no such"):
        validate_checkpoint("someorg/missing")
    with pytest.raises(CheckpointError, match="someorg/model@nope: no such revision"):
        validate_checkpoint("someorg/model@nope")


def test_a_cached_checkpoint_that_asks_for_remote_code_is_refused(hub_cache, tiny_checkpoint):
    snapshot = cache_model(hub_cache, "someorg/custom", tiny_checkpoint)
    config = json.loads((snapshot / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomModel"}
    (snapshot / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="auto_map") as info:
        load_checkpoint("someorg/custom")
    assert "never runs code" in str(info.value)


def test_pickled_weights_are_never_loaded_from_the_hub(hub_cache, tiny_checkpoint, tmp_path):
    source = tmp_path / "pickled"
    shutil.copytree(tiny_checkpoint, source)
    (source / "model.safetensors").rename(source / "pytorch_model.bin")
    cache_model(hub_cache, "someorg/pickled", source)
    with pytest.raises(CheckpointError, match="someorg/pickled: no safetensors weights"):
        validate_checkpoint("someorg/pickled")


def test_a_local_directory_wins_over_a_hub_id(hub_cache, tiny_checkpoint, tmp_path, monkeypatch):
    cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_checkpoint, tmp_path / "someorg" / "tiny-coder")
    assert resolve_model("someorg/tiny-coder").path == Path("someorg/tiny-coder")
    assert resolve_model("someorg/tiny-coder").hub_id is None


def test_train_init_from_a_hub_id(hub_cache, tiny_checkpoint, tmp_path):
    from codeparrot.training import TrainConfig, train
    from tests.training.test_finetune_init_from import write_corpus

    cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    config = TrainConfig(
        data=write_corpus(tmp_path / "corpus"),
        output=tmp_path / "run",
        init_from=Path("someorg/tiny-coder"),
        seq_length=32,
        batch_size=2,
        max_steps=1,
        eval_every=0,
        mixed_precision="no",
        log_with="none",
        progress=False,
    )
    assert train(config).step == 1
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert not in_hub_cache(tmp_path / "run")


def test_the_playground_reads_a_hub_models_card(hub_cache, tiny_checkpoint):
    from codeparrot.app.model_card import read_model_card

    cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    card = read_model_card("someorg/tiny-coder")
    assert card.exists and card.context_length == 256
    assert str(card.path) == "someorg/tiny-coder"
    assert not read_model_card("someorg/not-cached").exists


def test_hub_id_spelling_and_revisions():
    assert looks_like_hub_id("bigcode/tiny_starcoder_py")
    assert looks_like_hub_id("Qwen/Qwen2.5-Coder-0.5B@main")
    for path in ("runs", "./a/b", "/abs/path", "a/b/c", "../a/b"):
        assert not looks_like_hub_id(path), path
    assert split_revision("a/b@v1.0") == ("a/b", "v1.0")
    assert split_revision("a/b", "dev") == ("a/b", "dev")
    with pytest.raises(CheckpointError, match="--revision"):
        split_revision("a/b@v1", "v2")


def test_outputs_inside_the_cache_are_recognised(hub_cache, tmp_path):
    assert in_hub_cache(hub_cache / "models--a--b" / "snapshots" / SHA / "out")
    assert not in_hub_cache(tmp_path / "runs" / "out")


@pytest.mark.parametrize("ref", ["../../../elsewhere", "../../models--other--repo/snapshots/x"])
def test_a_cached_ref_that_is_no_commit_is_refused(hub_cache, tiny_checkpoint, tmp_path, ref):
    """A ``refs/main`` reading ``../../..`` must not load a model from outside the cache."""
    cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    outside = hub_cache / "models--someorg--tiny-coder" / "snapshots" / ref
    outside.mkdir(parents=True, exist_ok=True)
    for f in tiny_checkpoint.iterdir():
        if f.is_file():
            shutil.copy(f, outside / f.name)
    (hub_cache / "models--someorg--tiny-coder" / "refs" / "main").write_text(ref)
    with pytest.raises(CheckpointError, match=r"refs/main does not hold a 40-hex commit"):
        resolve_model("someorg/tiny-coder")
    with pytest.raises(CheckpointError, match="40-hex"):
        load_checkpoint("someorg/tiny-coder")


def test_a_revision_with_dot_dot_is_refused(hub_cache, tiny_checkpoint):
    cache_model(hub_cache, "someorg/tiny-coder", tiny_checkpoint)
    with pytest.raises(CheckpointError, match="not a branch, tag or commit"):
        resolve_model("someorg/tiny-coder@main/../../..")


def test_a_hub_download_takes_no_pickle_and_no_code():
    """What ``snapshot_download`` keeps of a repository (huggingface_hub's own filter over
    MODEL_PATTERNS): configs, tokenizer files and safetensors weights, never pickles or
    Python files, whatever else the repository holds. The tests above run offline, where
    the cache is read without the filter."""
    from huggingface_hub.utils import filter_repo_objects

    from codeparrot.hub import MODEL_PATTERNS

    repository = [
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "vocab.json", "merges.txt", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json",
        "pytorch_model.bin", "pytorch_model-00001-of-00002.bin", "model.pt", "model.pth",
        "training_args.bin", "optimizer.pt", "rng_state.pkl", "model.ckpt",
        "modeling_custom.py", "configuration_custom.py", "tokenization_custom.py",
        "custom_code/__init__.py", "onnx/model.onnx", "README.md", ".gitattributes",
    ]  # fmt: skip
    kept = set(filter_repo_objects(repository, allow_patterns=list(MODEL_PATTERNS)))
    assert kept == {
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "vocab.json", "merges.txt", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json",
    }  # fmt: skip
