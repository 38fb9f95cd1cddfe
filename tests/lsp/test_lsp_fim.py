"""Fill-in-the-middle prompts: the suffix reaches a FIM checkpoint, and only one."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from lsprotocol import types

from codeparrot.generation import Engine
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Document
from codeparrot.lsp.server import build_server
from codeparrot.prompting import fit_suffix

FILE = (
    "import os\n\n\n"
    "def join(parts):\n"
    "    \n"  # line 4: the cursor at its start (after the indent)
    "    return os.path.join(*parts)\n\n\n"
    "def size(path):\n"
    "    return os.stat(path).st_size\n"
)


@pytest.fixture(scope="module")
def fim_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer GPT-2 whose tokenizer has the StarCoder sentinels."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from codeparrot.fim import SENTINELS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", *SENTINELS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([FILE * 4], trainer=trainer)
    eos = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=eos, eos_token=eos, unk_token=eos, model_max_length=256
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=2, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("fim") / "checkpoint"
    GPT2LMHeadModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def engine_calls(monkeypatch) -> list[dict]:
    """Every call of Engine.stream: its prompt and suffix (then the real call)."""
    calls: list[dict] = []
    real = Engine.stream

    def spy(self, prompt, config, cancel=None, **kwargs):
        calls.append(
            {"prompt": prompt, "suffix": kwargs.get("suffix"), "fim": self.fim,
             "order": self.fim_layout.order}
        )  # fmt: skip
        return real(self, prompt, config, cancel, **kwargs)

    monkeypatch.setattr(Engine, "stream", spy)
    return calls


def ask(checkpoint: Path, cursors: list[tuple[int, int]], **settings) -> None:
    server = build_server(LspConfig(checkpoint=checkpoint, cache_size=0, **settings))
    server.documents["file:///w/a.py"] = Document("file:///w/a.py", FILE, 1)
    server.load_engine()

    async def run():
        for line, character in cursors:
            await server.suggestion("file:///w/a.py", types.Position(line, character))

    try:
        asyncio.run(run())
    finally:
        server._generator.shutdown(wait=True)


def test_a_fim_checkpoint_gets_the_suffix(fim_checkpoint, engine_calls):
    ask(fim_checkpoint, [(4, 4), (5, 11)])  # a blank line in a function; mid-line
    line_start, mid_line = engine_calls
    assert line_start["fim"] is not None
    assert line_start["prompt"].endswith("def join(parts):\n    ")
    assert line_start["suffix"].startswith("\n    return os.path.join(*parts)\n")
    assert line_start["suffix"].endswith("\n")  # whole lines
    assert mid_line["prompt"].endswith("    return ")
    assert mid_line["suffix"].startswith("os.path.join(*parts)\n")
    # a checkpoint from elsewhere with StarCoder's tokens: StarCoder's order (PSM) by
    # default, SPM when the editor asks
    assert line_start["order"] == mid_line["order"] == "psm"
    engine_calls.clear()
    ask(fim_checkpoint, [(5, 11)], fim_order="spm")
    assert engine_calls[0]["order"] == "spm"


def test_a_checkpoint_trained_here_keeps_spm_by_default(fim_checkpoint, tmp_path, engine_calls):
    import json
    import shutil

    ours = tmp_path / "ours"
    shutil.copytree(fim_checkpoint, ours)
    (ours / "codeparrot_checkpoint.json").write_text(json.dumps({"fim_trained": True}))
    ask(ours, [(5, 11)])
    assert engine_calls[0]["order"] == "spm"  # the order measured best for our models


def test_the_suffix_window_keeps_to_its_share_of_the_budget(fim_checkpoint, engine_calls):
    ask(fim_checkpoint, [(4, 4)], fim_suffix_share=0.05, context_tokens=160)
    (call,) = engine_calls
    engine = Engine.load(fim_checkpoint)
    # the suffix, cut to its share: a line break is all that fits
    assert call["suffix"] == "\n" and engine.count_tokens(call["suffix"]) <= int(160 * 0.05)
    assert call["prompt"].endswith("def join(parts):\n    ")


def test_in_psm_order_the_suffix_window_fits_the_measured_prompt_speed(
    fim_checkpoint, engine_calls, monkeypatch
):
    from codeparrot.lsp import completion

    # a slow machine: 20 ms a prompt token, so 100 ms re-read 5 tokens of suffix
    monkeypatch.setattr(
        "codeparrot.generation.threads.time_prompt", lambda engine, threads=None: 20.0
    )
    monkeypatch.setattr(completion, "SUFFIX_MIN_TOKENS", 1)
    ask(fim_checkpoint, [(4, 4)])  # auto, PSM: the suffix is read again at each keystroke
    ask(fim_checkpoint, [(4, 4)], fim_order="spm")  # typing reuses an SPM suffix: no cap
    ask(fim_checkpoint, [(4, 4)], fim_suffix_tokens=3)  # the editor's own cap
    psm, spm, fixed = engine_calls
    engine = Engine.load(fim_checkpoint)
    tokens = [engine.count_tokens(c["suffix"] or "") for c in (psm, spm, fixed)]
    assert psm["order"] == "psm" and spm["order"] == "spm"
    assert tokens[1] > 5 and tokens[0] <= 5 and tokens[2] <= 3
    assert psm["suffix"].endswith("\n")  # whole lines still
    assert spm["suffix"].startswith(psm["suffix"])


def test_fim_off_or_a_checkpoint_without_sentinels_sends_the_prefix_alone(
    fim_checkpoint, tiny_checkpoint, engine_calls, caplog
):
    ask(fim_checkpoint, [(4, 4)], fim=False)
    with caplog.at_level(logging.INFO, logger="codeparrot.lsp"):
        ask(tiny_checkpoint, [(4, 4), (5, 11)])
    assert [c["suffix"] for c in engine_calls] == [None, None, None]
    assert engine_calls[1]["fim"] is None
    notices = [r for r in caplog.records if "fill-in-the-middle sentinels" in r.getMessage()]
    assert len(notices) == 1  # once, not per request


def test_fit_suffix_cuts_at_line_ends():
    count = len  # one token per character
    text = "abc\ndefgh\nij"
    assert fit_suffix(text, 100, count) == text
    assert fit_suffix(text, 10, count) == "abc\ndefgh\n"
    assert fit_suffix(text, 5, count) == "abc\n"
    assert fit_suffix(text, 3, count) == ""  # the first line alone is over: no suffix
    assert fit_suffix(text, 0, count) == ""


def test_an_editors_fim_settings_are_resolved_once_each_without_a_reload(
    fim_checkpoint, engine_calls, monkeypatch
):
    """A new fim_order from the editor is resolved once, when it comes (not at each
    keystroke), on the loaded engine; fim_tokens its tokenizer lacks are reported and the
    settings in use kept."""
    from codeparrot.generation import prompt

    resolved = []
    real = prompt.resolve_order
    monkeypatch.setattr(prompt, "resolve_order", lambda *a: resolved.append(a) or real(*a))
    server = build_server(LspConfig(checkpoint=fim_checkpoint, cache_size=0))
    uri = "file:///w/a.py"
    server.documents[uri] = Document(uri, FILE, 1)
    shown: list[str] = []
    monkeypatch.setattr(server, "show", lambda kind, message: shown.append(message))
    server.load_engine()
    here = types.Position(5, 11)

    async def run():
        await server.suggestion(uri, here)
        first = await server.engine()
        server.update_settings({"fimOrder": "spm"}, "didChangeConfiguration")
        await server.suggestion(uri, here)
        await server.suggestion(uri, types.Position(4, 4))
        server.update_settings({"fimTokens": "<nope>,<fim_suffix>,<fim_middle>"}, "settings")
        await server.suggestion(uri, here)
        return first, await server.engine()

    try:
        first, last = asyncio.run(run())
    finally:
        server._generator.shutdown(wait=True)
    assert first is last  # the same engine: nothing was loaded again
    assert [c["order"] for c in engine_calls] == ["psm", "spm", "spm", "spm"]
    assert len(resolved) == 2  # at load, then once for the editor's new order
    assert [m for m in shown if "--fim-tokens '<nope>," in m and "no single token" in m]
    assert (server.config.fim_order, server.config.fim_tokens) == ("spm", "")
