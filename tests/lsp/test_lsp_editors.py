"""The editor set-ups in lsp/editors/, run in the real editors by their check scripts.

Each test types into an editor as a user would (Neovim headless with nvim_check.lua,
Helix under tmux with helix_check.py) against a checkpoint that learnt one snippet, so
the suggestion is known and the test can check what ends up in the buffer. Skipped when
the editor is missing. Besides `nvim` / `hx` on PATH, CODEPARROT_TEST_NVIM and
CODEPARROT_TEST_HX name more executables (separated by os.pathsep), to try several
versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EDITORS = Path(__file__).resolve().parents[2] / "lsp" / "editors"
SNIPPET = "import os\n\n\ndef join_all(parts):\n    return os.path.join(*parts)\n"
EXPECT = "    return os.path.join(*parts)"  # the last line, completed after `    return`


def executables(name: str, variable: str) -> list[str]:
    found = [p for p in os.environ.get(variable, "").split(os.pathsep) if p]
    on_path = shutil.which(name)
    if on_path and on_path not in found:
        found.append(on_path)
    return found or [pytest.param(None, marks=pytest.mark.skip(reason=f"no {name} on PATH"))]


@pytest.fixture(scope="module")
def snippet_checkpoint(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny GPT-2 trained until it recites SNIPPET (with and without a leading BOS)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = shutil.copytree(tiny_checkpoint, tmp_path_factory.mktemp("snippet") / "checkpoint")
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    body = [*tokenizer(SNIPPET)["input_ids"], tokenizer.eos_token_id]
    sequences = [torch.tensor([body]), torch.tensor([[tokenizer.eos_token_id, *body]])]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(200):
        ids = sequences[step % 2]
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    return out


def server_command() -> str:
    script = Path(sys.executable).with_name("codeparrot")
    return str(script) if script.exists() else "codeparrot"


def report(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}"


@pytest.mark.parametrize("nvim", executables("nvim", "CODEPARROT_TEST_NVIM"))
def test_neovim_completes_by_keystrokes(nvim: str, snippet_checkpoint: Path, tmp_path: Path):
    env = {
        **os.environ,
        "CODEPARROT_CHECKPOINT": str(snippet_checkpoint),
        "CODEPARROT_CMD": server_command(),
        "CODEPARROT_EXPECT": EXPECT,
        # keep Neovim's LSP log and state out of the user's home
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [nvim, "--headless", "-u", "NONE", "-c", f"luafile {EDITORS / 'nvim_check.lua'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, report(proc)
    assert "FAIL" not in proc.stdout, report(proc)
    assert "PASS <C-x><C-o> <C-y> inserted the item" in proc.stdout, report(proc)
    assert "PASS the server saw the buffer edit" in proc.stdout, report(proc)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux to drive Helix")
@pytest.mark.parametrize("hx", executables("hx", "CODEPARROT_TEST_HX"))
def test_helix_completes_by_keystrokes(hx: str, snippet_checkpoint: Path):
    proc = subprocess.run(
        [
            sys.executable,
            str(EDITORS / "helix_check.py"),
            "--hx",
            hx,
            "--command",
            server_command(),
            "--checkpoint",
            str(snippet_checkpoint),
            "--expect",
            EXPECT,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, report(proc)
    assert "FAIL" not in proc.stdout, report(proc)
