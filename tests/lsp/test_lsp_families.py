"""The language server and ``serve`` over other families' models: no special token's text
reaches the editor or an API client, the family's FIM template is used, and a fast path
that does not apply falls back with one log line."""

from __future__ import annotations

import json
import logging
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from codeparrot.generation import Engine
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Document, cursor_window
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.server import make_server

sys.path.insert(0, str(Path(__file__).parent.parent))
from families import ScriptedHead, build_family

DOC = "import os\n\n\ndef join(parts):\n    return |\n\n\nprint(join(['a']))\n"
# the token each family's model writes after one ordinary token: never text
SPECIAL = {
    "codellama": "▁<EOT>",
    "deepseek-coder": "<｜fim▁begin｜>",  # not even special in DeepSeek's tokenizer
    "qwen2.5-coder": "<|file_sep|>",
    "starcoder2": "<file_sep>",
}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: build_family(name, root / name) for name in SPECIAL}


def scripted(path: Path, name: str, fim: Any = None) -> tuple[Engine, ScriptedHead, str]:
    """An engine whose model writes "os" then the family's special token, then "x"s
    (through the transformers forward: the lean decoder does not call the head module);
    ``fim``: its FIM settings."""
    loaded = Engine.load(path, quantize="none", lean_load=False)
    engine = Engine(loaded.model, loaded.tokenizer, path=path, lean_gpt2=False, fim=fim)
    tok = engine.tokenizer
    word = tok(" os", add_special_tokens=False)["input_ids"][-1]
    special = tok.convert_tokens_to_ids(SPECIAL[name])
    x = tok("x", add_special_tokens=False)["input_ids"][-1]
    head = ScriptedHead(engine.model, [word, special, x])
    return engine, head, tok.decode([word])


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_a_suggestion_holds_no_special_token_text(family_dirs, name: str) -> None:
    from codeparrot.lsp.completion import suggest

    engine, _head, word = scripted(family_dirs[name], name)
    offset = DOC.index("|")
    window = cursor_window(Document("file:///a.py", DOC.replace("|", "")), offset, 4000, 2000)
    calls = []
    real = engine.stream

    def spy(prompt, config, cancel=None, **kwargs):
        calls.append(kwargs.get("suffix"))
        return real(prompt, config, cancel, **kwargs)

    engine.stream = spy
    outcome = suggest(engine, window, None, LspConfig(), threading.Event())
    assert calls and calls[0] is not None  # the family's template: the suffix was sent
    assert outcome.finish_reason == "eos" and outcome.new_tokens == 1
    assert outcome.raw == word.strip() or outcome.raw == word
    assert "<" not in outcome.raw and "<" not in (outcome.suggestion or "")


def post(url: str, payload: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.mark.parametrize("name", ["deepseek-coder", "codellama"])
@pytest.mark.parametrize("order", ["auto", "spm"])
def test_serve_infills_in_the_asked_order_without_special_text(family_dirs, name, order) -> None:
    from codeparrot.generation.config import FimSettings

    config = ServeConfig(checkpoint=family_dirs[name], port=0, fim_order=order)
    # the server's FIM settings, given at load as serve's load_engine gives them
    engine, head, word = scripted(family_dirs[name], name, FimSettings.of(config))
    orders = []
    real = engine.prompts.infill_ids

    def spy(fim, prefix_ids, suffix_ids, asked):
        orders.append(asked)
        return real(fim, prefix_ids, suffix_ids, asked)

    engine.prompts.infill_ids = spy
    from codeparrot.generation import GenerationConfig

    prompt = "import os\n"
    _, _, healed = engine.prompts.infill_prompt(
        prompt, "\n", GenerationConfig(), engine.healer.heal
    )
    if healed is not None:  # the model first writes the prompt's last token again
        last = engine.prompts.encode_text(prompt)[-1]
        head.reset([last, *head.script])
    orders.clear()
    server = make_server(config, engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        payload = {"prompt": prompt, "suffix": "\n", "max_tokens": 8, "temperature": 0}
        status, body = post(server.url, payload)
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200, body
    [choice] = body["choices"]
    assert choice["text"] in (word, word.strip()) and choice["finish_reason"] == "stop"
    assert "<" not in choice["text"]
    assert orders == [{"auto": "psm", "spm": "spm"}[order]]  # auto: the family's PSM


def test_serve_refuses_a_malformed_fim_tokens_flag(family_dirs) -> None:
    from codeparrot.errors import ConfigError

    with pytest.raises(ConfigError, match="PREFIX,SUFFIX,MIDDLE"):
        ServeConfig(checkpoint=family_dirs["codellama"], fim_tokens="<a>")


def test_int8_where_it_does_not_apply_falls_back_with_one_log_line(tmp_path, caplog) -> None:
    """--quantize int8 on a model the lean decoder does not cover (CodeGen): the language
    server decodes with the model's own weights (a line in the log says why) instead of
    failing every suggestion."""
    from codeparrot.lsp.server import _load

    codegen = build_family("codegen", tmp_path / "codegen")
    with caplog.at_level(logging.INFO):
        engine = _load(codegen, "cpu", 1, "int8", True)
    assert engine.quantize == "none"
    said = [r.getMessage() for r in caplog.records]
    assert any("--quantize int8 does not apply" in m for m in said)
    assert any("--compile skipped" in m and "codegen" in m for m in said)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        Engine.load(codegen, device="cpu", quantize="auto")
    assert [m for m in (r.getMessage() for r in caplog.records) if "quantize auto" in m]


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_a_middle_keeps_the_space_its_first_token_writes(family_dirs, name) -> None:
    # CodeLlama's SentencePiece decoder strips the leading space of a whole text: a middle
    # decoded alone would turn `z =` + `▁in▁` into "z =in " in the editor
    from codeparrot.generation import GenerationConfig

    path = family_dirs[name]
    loaded = Engine.load(path, quantize="none", lean_load=False)
    engine = Engine(loaded.model, loaded.tokenizer, path=path, lean_gpt2=False)
    vocab = engine.tokenizer.get_vocab()
    spaced = sorted(t for t in vocab if t[:1] in ("▁", "Ġ") and t[1:].strip("▁Ġ").isalpha())
    token = spaced[0]
    head = ScriptedHead(engine.model, [vocab[token], engine.eos_token_id])
    prompt, config = "y = 1\nz =", GenerationConfig(max_new_tokens=4, temperature=0.0)
    _, _, healed = engine.prompts.infill_prompt(prompt, "\n", config, engine.healer.heal)
    if healed is not None:  # the model first writes the prompt's last token again
        head.reset([engine.prompts.encode_text(prompt)[-1], *head.script])
    [done] = engine.generate(prompt, config, suffix="\n")
    head.reset()
    streamed = "".join(e.delta for e in engine.stream(prompt, config, suffix="\n"))
    expected = token.replace("▁", " ").replace("Ġ", " ")
    assert done.text == streamed == expected and expected.startswith(" ")
