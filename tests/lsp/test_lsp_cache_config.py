"""The suggestion cache (exact hits, typing through) and the server's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codeparrot.errors import ConfigError
from codeparrot.lsp.cache import PREFIX_KEY, SuggestionCache
from codeparrot.lsp.config import LspConfig, apply_settings, parse_host_port, settings_update


def test_exact_hit_and_lru_eviction():
    cache = SuggestionCache(2)
    cache.put("a", "x = ", "\n", "1")
    cache.put("a", "y = ", "\n", "2")
    assert cache.get("a", "x = ", "\n") == "1"  # refreshes "x"
    cache.put("a", "z = ", "\n", "3")  # evicts "y", the least recently used
    assert cache.get("a", "y = ", "\n") is None
    assert cache.get("a", "x = ", "\n") == "1"
    assert cache.get("b", "x = ", "\n") is None  # another document
    assert cache.get("a", "x = ", "1\n") is None  # other text after the cursor


@given(
    st.text(st.sampled_from(list("ab =(\n")), max_size=2 * PREFIX_KEY + 10),
    st.text(st.sampled_from(list("xyz()")), min_size=2, max_size=20),
    st.data(),
)
def test_typing_through_serves_the_rest(prefix: str, suggestion: str, data):
    cache = SuggestionCache(8)
    cache.put("u", prefix, "", suggestion)
    n = data.draw(st.integers(1, len(suggestion) - 1))
    rest = suggestion[n:]
    got = cache.get("u", prefix + suggestion[:n], "")
    assert got == (rest if rest.strip() else None)


def test_typing_something_else_misses():
    cache = SuggestionCache(8)
    cache.put("u", "total = ", "", "price * qty")
    assert cache.get("u", "total = pr", "") == "ice * qty"
    assert cache.get("u", "total = q", "") is None
    assert cache.get("u", "grand total = pr", "") is None  # a different text before
    assert cache.get("u", "total = price * qty", "") is None  # typed it all


def test_disabled_cache():
    cache = SuggestionCache(0)
    cache.put("u", "a", "", "b")
    assert cache.get("u", "a", "") is None and len(cache) == 0


def test_config_validation_names_every_flag():
    with pytest.raises(ConfigError) as info:
        LspConfig(max_new_tokens=0, temperature=-1, tcp="nowhere", debounce_ms=-5)
    message = str(info.value)
    for flag in ("--max-new-tokens", "--temperature", "--tcp", "--debounce-ms"):
        assert flag in message


def test_host_port():
    assert parse_host_port("127.0.0.1:2087") == ("127.0.0.1", 2087)
    assert parse_host_port(":2087") == ("127.0.0.1", 2087)
    assert parse_host_port("[::1]:9000") == ("::1", 9000)
    assert parse_host_port("localhost") is None
    assert parse_host_port("h:99999") is None
    assert LspConfig(tcp="localhost:2087").address == ("localhost", 2087)


def test_editor_settings_in_any_spelling():
    changes, warnings = settings_update(
        {"codeparrot": {"maxTokens": 8, "debounceMs": 50, "checkpoint": "~/m", "tcp": "x:1"}}
    )
    assert changes == {"max_new_tokens": 8, "debounce_ms": 50, "checkpoint": "~/m"}
    assert warnings == ["setting 'tcp' ignored (set on the command line)"]
    config, _ = apply_settings(LspConfig(), {"max_new_tokens": "12", "temperature": 0.5})
    assert config.max_new_tokens == 12 and config.temperature == 0.5
    config, _ = apply_settings(LspConfig(), {"checkpoint": "models/m"})
    assert config.checkpoint == Path("models/m")
    with pytest.raises(ConfigError):
        apply_settings(LspConfig(), {"maxTokens": "many"})
    with pytest.raises(ConfigError):
        apply_settings(LspConfig(), {"temperature": -1})
    config, _ = apply_settings(LspConfig(), {"fimOrder": "psm"})
    assert config.fim_order == "psm"
    with pytest.raises(ConfigError, match="fim_order"):
        apply_settings(LspConfig(), {"fimOrder": "middle-first"})
    assert settings_update("nonsense")[0] == {}
    assert settings_update(None) == ({}, [])


@pytest.mark.parametrize("name", ["temperature", "topP", "maxTokens", "debounceMs"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "nan", "Infinity"])
def test_non_finite_settings_are_refused(name, value):
    with pytest.raises(ConfigError, match=repr(value).replace("(", r"\(")):
        apply_settings(LspConfig(), {name: value})


@pytest.mark.slow
def test_the_server_compiles_its_decoding_step_in_the_background_unless_told_not_to(
    tiny_checkpoint, monkeypatch
):
    from codeparrot.generation import int8
    from codeparrot.lsp.server import _load

    # the weight-only int8 kernel: the dynamic one's steps stay eager (test_int8_kernels)
    monkeypatch.setattr(int8, "measure_kernels", lambda m: {"dynamic": 2.0, "weight-only": 1.0})

    plain = _load(tiny_checkpoint, None, 1, "auto", False)
    assert not plain.steps_compiled.is_set() and plain.decoder.lean._compiled is None
    engine = _load(tiny_checkpoint, None, 1, "auto", True)  # returns before the compile ends
    assert engine.steps_compiled.wait(timeout=600)
    assert engine.compile_error is None and engine.decoder.lean._compiled is not None


def test_every_setting_the_editor_guide_lists_is_accepted():
    guide = (Path(__file__).parents[2] / "docs" / "editors.md").read_text()
    rows = [line.split("|") for line in guide.splitlines() if line.startswith("| `--")]
    keys = [cells[2].strip().strip("`") for cells in rows if "`" in cells[2]]
    assert "syntaxSamples" in keys and "syntaxDeadlineMs" in keys
    changes, warnings = settings_update({k: 1 for k in keys})
    assert warnings == [] and len(changes) == len(keys)
