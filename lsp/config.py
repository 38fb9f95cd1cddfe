"""The language server's settings: one dataclass for the command line and the editor.

The same fields come from three places, later ones winning: the command line
(``codeparrot lsp --max-new-tokens 24``), the client's ``initializationOptions`` and
``workspace/didChangeConfiguration``. Editors send settings as JSON objects, in
camelCase or snake_case, optionally under a ``codeparrot`` section; :func:`settings_update`
turns such an object into field values and :meth:`LspConfig.replace` validates them.

This module imports only the standard library (the CLI imports it for ``--help``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.errors import ConfigError
from codeparrot.options import (
    CHECKPOINT,
    CONTEXT_TOKENS,
    DEVICE,
    FIM_ORDER,
    FIM_SUFFIX_SHARE,
    FIM_TOKENS,
    MAX_NEW_TOKENS,
    QUANTIZE_WEIGHTS,
    REVISION,
    SYNTAX_SAMPLES,
    TEMPERATURE,
    TOP_P,
    WORKSPACE_SHARE,
)

# Fields an editor may set at run time (the transport is fixed once the server runs).
EDITOR_SETTINGS = (
    "checkpoint",
    "max_new_tokens",
    "multiline_max_new_tokens",
    "temperature",
    "top_p",
    "debounce_ms",
    "context_tokens",
    "suffix_chars",
    "cache_size",
    "multiline",
    "fim",
    "fim_suffix_share",
    "fim_suffix_tokens",
    "fim_order",
    "fim_tokens",
    "workspace_share",
    "syntax_samples",
    "syntax_deadline_ms",
)


@dataclass(frozen=True)
class LspConfig(Config):
    """Settings of ``codeparrot lsp``: which model, how much to generate, how to serve."""

    checkpoint: Path | None = CHECKPOINT.field(
        None, CHECKPOINT.help + " (default: `checkpoint` in the editor's initializationOptions)"
    )
    revision: str | None = REVISION.field()
    # Editors ask on every keystroke: the limits are lower than a batch job's.
    max_new_tokens: int = MAX_NEW_TOKENS.field(
        32, "most tokens generated for a single-line completion", le=512
    )
    multiline_max_new_tokens: int = MAX_NEW_TOKENS.field(
        96, "most tokens generated when the cursor opens an empty block", le=1024
    )
    temperature: float = TEMPERATURE.field(
        0.0,
        "sampling temperature; 0 (greedy, unlike the harness's 0.2) gives the same "
        "suggestion each time the same text is typed",
    )
    top_p: float = TOP_P.field(help="nucleus sampling mass when temperature > 0")
    debounce_ms: int = option(
        0,
        "wait this long before generating; a newer request for the document during the "
        "wait replaces this one without any model work (clients debounce too)",
        ge=0,
        le=5000,
    )
    context_tokens: int = CONTEXT_TOKENS.field()
    suffix_chars: int = option(
        2000,
        "characters after the cursor read for post-processing and, with a FIM "
        "checkpoint, for the suffix window of the prompt",
        ge=0,
    )
    fim: bool = option(
        True,
        "fill in the middle: when the checkpoint has the FIM sentinels, the prompt holds the "
        "text after the cursor too (a checkpoint without them completes the prefix alone)",
    )
    fim_suffix_share: float = FIM_SUFFIX_SHARE.field()
    fim_suffix_tokens: int = option(
        0,
        "with FIM: the most tokens the suffix window may take. In PSM order (the suffix after "
        "the prefix) the model reads the suffix again at every keystroke, so 0 (auto) caps it "
        "at what this machine reads in about 100 ms, measured at load (at least 32 tokens; "
        "no cap in SPM order, where typing reuses it). N: at most N tokens in either order",
        ge=0,
        le=32768,
    )
    fim_order: str = FIM_ORDER.field()
    fim_tokens: str = FIM_TOKENS.field()
    workspace_share: float = WORKSPACE_SHARE.field(
        help="the most of the prompt budget that snippets of other open documents may take "
        "(`# Path:` comment blocks of the lines most like the code before the cursor); 0, "
        "the default, leaves them out: no gain has been measured yet",
    )
    syntax_samples: int = SYNTAX_SAMPLES.field(
        help="syntax check: when the suggestion would leave the top-level statement around "
        "the cursor unparseable (and the error is on its lines or just below), draw this many "
        "more and show the most common one that parses (0: off; nothing is run)"
    )
    syntax_deadline_ms: float = option(
        100.0,
        "syntax check: the draws stop this many milliseconds after the suggestion was "
        "started, and the most common one that parses among those finished is shown (an "
        "editor's latency budget; the harness's check has none)",
        gt=0,
        le=60_000,
    )
    cache_size: int = option(128, "completions kept in the LRU cache (0 disables it)", ge=0)
    multiline: bool = option(
        True, "complete a whole block when the cursor opens an empty one (`def f():|`)"
    )
    threads: int = option(
        0,
        "torch threads for generation. 0 (auto): prompts on every core, and the decoding "
        "steps on one or on every core, whichever the first suggestions' own steps find "
        "faster (small models decode fastest on one, which also leaves a core to the "
        "editor; models of real size gain from more). N: prompts and steps on N threads",
        ge=0,
        le=256,
    )
    device: str | None = DEVICE.field()
    quantize: str = QUANTIZE_WEIGHTS.field(
        "auto",
        "weights of the decoding steps: none (the checkpoint's own), int8 (int8 copies of "
        "the matrices, for GPT-2, StarCoder, Llama-family and Qwen checkpoints on a CPU; "
        "prompts read them too where a probe at load finds that faster) or auto "
        "(int8 where it applies: "
        "the default here, where every keystroke waits on the decoding steps)",
    )
    compile: bool = option(
        False,
        "torch.compile the one-token decoding step in the background after loading. Off "
        "by default: the compile holds the interpreter and the cores while it runs, slowing "
        "every request meanwhile, and saves too little per request to pay back within an "
        "editing session; completions use the eager step until it is ready, and keep it "
        "if the compile fails",
    )
    tcp: str | None = option(
        None, "listen on HOST:PORT instead of talking over stdin/stdout", metavar="HOST:PORT"
    )
    log_file: Path | None = option(None, "write the server's log to this file", metavar="FILE")
    stats: bool = option(
        True,
        "record shown, accepted and dismissed suggestions with their latency to a local "
        "JSON-lines file (`codeparrot lsp stats` summarises it; nothing leaves the machine)",
    )
    stats_file: Path | None = option(
        None,
        "where --stats records (default: $XDG_STATE_HOME/codeparrot/lsp-stats.jsonl, "
        "~/.local/state when unset)",
        metavar="FILE",
    )

    def problems(self) -> list[str]:
        from codeparrot.fim import parse_fim_tokens

        out = []
        if self.tcp is not None and parse_host_port(self.tcp) is None:
            out.append(f"--tcp must look like HOST:PORT (e.g. 127.0.0.1:2087), got {self.tcp!r}")
        try:
            parse_fim_tokens(self.fim_tokens)
        except ValueError as e:
            out.append(str(e))
        from codeparrot.hub import revision_problems

        return out + revision_problems(self.checkpoint, self.revision)

    @property
    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``--tcp``, or ``None`` for stdio."""
        return None if self.tcp is None else parse_host_port(self.tcp)


def parse_host_port(text: str) -> tuple[str, int] | None:
    """``"HOST:PORT"`` -> ``(host, port)``; ``None`` when it is not one."""
    match = re.fullmatch(r"\[?([^\[\]]*?)\]?:(\d{1,5})", text.strip())
    if match is None or not 0 < int(match.group(2)) < 65536:
        return None
    return match.group(1) or "127.0.0.1", int(match.group(2))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


# Short names editors commonly use, mapped to fields.
_ALIASES = {"max_tokens": "max_new_tokens", "multiline_max_tokens": "multiline_max_new_tokens"}


def settings_update(settings: Any) -> tuple[dict[str, Any], list[str]]:
    """Field values from an editor's settings object, and warnings for what was ignored.

    Accepts ``{"maxTokens": 16}``, ``{"max_new_tokens": 16}`` or either of them under a
    ``"codeparrot"`` key. Values are not validated here: :meth:`LspConfig.replace` does.
    """
    if settings is None:
        return {}, []
    if not isinstance(settings, dict):
        return {}, [f"settings must be a JSON object, got {type(settings).__name__}"]
    if isinstance(settings.get("codeparrot"), dict):
        settings = settings["codeparrot"]
    names = {f.name for f in fields(LspConfig)}
    changes: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in settings.items():
        name = _snake(str(key))
        name = _ALIASES.get(name, name)
        if name not in EDITOR_SETTINGS:
            reason = "set on the command line" if name in names else "unknown"
            warnings.append(f"setting {key!r} ignored ({reason})")
            continue
        changes[name] = value
    return changes, warnings


# The editor's sampling settings as the request contract's fields
# (codeparrot.generation.request), which checks their values.
SAMPLING_SETTINGS = {
    "max_new_tokens": "max_new_tokens",
    "multiline_max_new_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
}


def apply_settings(config: LspConfig, settings: Any) -> tuple[LspConfig, list[str]]:
    """``config`` with an editor's settings applied; raises ConfigError on bad values."""
    from codeparrot.generation.request import RequestError

    changes, warnings = settings_update(settings)
    if not changes:
        return config, warnings
    typed: dict[str, Any] = {}
    problems = []
    for name, value in changes.items():
        try:
            typed[name] = (
                _sampling(name, value) if name in SAMPLING_SETTINGS else _coerce(name, value)
            )
        except RequestError as e:
            problems.append(f"setting {name!r}: cannot use {value!r}: {e.problem}")
        except (TypeError, ValueError):
            floats = ("fim_suffix_share", "workspace_share")
            what = " (a finite number is needed)" if name in floats else ""
            problems.append(f"setting {name!r}: cannot use {value!r}{what}")
    if problems:
        raise ConfigError("; ".join(problems))
    return config.replace(**typed), warnings


def _sampling(name: str, value: Any) -> Any:
    """An editor's sampling setting as a number the request contract accepts (editors may
    send numbers as strings); :class:`RequestError` when it does not."""
    from codeparrot.config import field_bounds
    from codeparrot.generation.request import RequestError, RequestLimits, check_number

    field = SAMPLING_SETTINGS[name]
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                raise RequestError(field, "must be a number") from None
    if field == "max_new_tokens" and isinstance(value, float) and value.is_integer():
        value = int(value)
    most = field_bounds(LspConfig, name).maximum if field == "max_new_tokens" else None
    check_number(field, value, RequestLimits(max_new_tokens=most))
    return value


def _coerce(name: str, value: Any) -> Any:
    if name == "checkpoint":
        return None if value in (None, "") else Path(str(value)).expanduser()
    if name == "multiline":
        if not isinstance(value, bool):
            raise TypeError(name)
        return value
    if name == "fim":
        if not isinstance(value, bool):
            raise TypeError(name)
        return value
    if name == "fim_order":
        if value not in FIM_ORDER.choices:
            raise ValueError(name)
        return value
    if name == "fim_tokens":
        from codeparrot.fim import parse_fim_tokens

        if value is None:
            return ""
        if not isinstance(value, str):
            raise TypeError(name)
        parse_fim_tokens(value)  # ValueError: a malformed list
        return value
    if name in ("fim_suffix_share", "workspace_share"):
        if isinstance(value, bool):
            raise TypeError(name)
        number = float(value)
        if not math.isfinite(number):  # NaN passes every range check and samples garbage
            raise ValueError(name)
        return number
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(name)
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise TypeError(name)
    return int(value)
