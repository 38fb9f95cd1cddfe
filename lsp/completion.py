"""One suggestion from the shared engine: prompt, decode, stop early, post-process.

:func:`suggest` blocks (it runs the model); the server calls it in its generation thread
with a ``cancel`` event that supersession and ``$/cancelRequest`` set, which stops
decoding within one token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codeparrot import prompting
from codeparrot.fim import PSM
from codeparrot.generation.syntax import replacements
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Window
from codeparrot.lsp.postprocess import indent_width, postprocess

if TYPE_CHECKING:
    from codeparrot.generation import Completion, Engine, GenerationConfig

# Ends of a block the model may run into (besides a dedent, detected while streaming).
MULTILINE_STOPS = ("\n\n\n", "\nclass ", "\ndef ", "\nif __name__")
# The auto suffix window in PSM order (see suffix_tokens): what the model reads again at
# each keystroke takes about this long, and the window keeps at least the next line or two.
SUFFIX_REREAD_MS = 100.0
SUFFIX_MIN_TOKENS = 32


@dataclass(frozen=True)
class Outcome:
    """What the model produced and what the user gets (``None``: nothing worth showing)."""

    suggestion: str | None
    raw: str
    finish_reason: str
    prompt_tokens: int
    new_tokens: int
    cached_prompt_tokens: int = 0  # prompt tokens whose keys/values the engine reused
    failed: bool = False  # the first suggestion failed the syntax check: draws were made
    redrawn: bool = False  # the syntax check replaced the first suggestion
    cut: bool = False  # the syntax check's draws were stopped by its deadline
    timing: Completion | None = None  # the engine's account of the first draw (its times)


def prompt_budget(engine: Engine, config: LspConfig, multiline: bool) -> tuple[int, int]:
    """(prompt tokens, new tokens) that fit in the model's context
    (:func:`codeparrot.prompting.prompt_budget`)."""
    new = config.multiline_max_new_tokens if multiline else config.max_new_tokens
    return prompting.prompt_budget(engine.context_length, config.context_tokens, new)


def suggest(
    engine: Engine,
    window: Window,
    base_indent: int | None,
    config: LspConfig,
    cancel: threading.Event,
    others: Sequence[tuple[str, str]] = (),
    fits: Callable[[str], bool] | None = None,
) -> Outcome | None:
    """Generate and post-process a suggestion for ``window``; ``None`` when cancelled.

    ``others``: ``(uri, text)`` of the other open documents, most recently edited first,
    for the workspace snippets (``config.workspace_share`` of the budget). ``fits``: the
    syntax check of a suggestion in the document
    (:func:`codeparrot.generation.syntax.fits_in_window`); with ``config.syntax_samples``
    a suggestion that fails it is replaced by the most common of that many draws that pass,
    among those finished ``config.syntax_deadline_ms`` after the call started.
    """
    from codeparrot.generation.request import CompletionRequest

    started = time.perf_counter()
    if cancel.is_set():
        return None
    multiline = base_indent is not None
    budget, max_new = prompt_budget(engine, config, multiline)
    prompt, suffix = fim_prompt(engine, window, config, budget, others)
    if suffix is None and not prompt:
        # an empty document (or cursor at its start): start from end-of-text
        prompt = engine.tokenizer.eos_token or "\n"
    request = CompletionRequest(
        prompt,
        suffix,
        n=1,
        max_new_tokens=max_new,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=0,
        stop=MULTILINE_STOPS if multiline else ("\n",),
    )
    gen = request.generation()
    raw, finish, prompt_tokens, new_tokens, cached, timing = _draw(
        engine, prompt, suffix, gen, cancel, base_indent
    )
    if cancel.is_set():
        return None
    text = postprocess(raw, window, base_indent)
    failed = redrawn = cut = False
    if fits is not None and config.syntax_samples and text is not None and not fits(text):
        failed = True
        deadline = started + config.syntax_deadline_ms / 1000
        found = _redraw(engine, prompt, suffix, gen, window, base_indent, fits, config, cancel,
                        deadline)  # fmt: skip
        if cancel.is_set():
            return None
        cut = time.perf_counter() >= deadline
        if found is not None:
            raw, finish, redrawn = found.text, found.finish_reason, True
            new_tokens += found.new_tokens
            text = postprocess(raw, window, base_indent)
    return Outcome(
        text, raw, finish, prompt_tokens, new_tokens, cached, failed, redrawn, cut, timing
    )


def _draw(
    engine: Engine,
    prompt: str,
    suffix: str | None,
    gen: Any,
    cancel: threading.Event,
    base_indent: int | None,
) -> tuple[str, str, int, int, int, Any]:
    """Stream one suggestion: (text, finish reason, prompt tokens, new tokens, prompt tokens
    reused, the finished completion for its timings or None). A multi-line suggestion ends
    where its block does (finish ``"block"``)."""
    raw, finish = "", "length"
    prompt_tokens = new_tokens = cached = 0
    timing = None
    if suffix is None:
        stream = engine.stream(prompt, gen, cancel=cancel)
    else:
        stream = engine.stream(prompt, gen, cancel=cancel, suffix=suffix)
    try:
        for event in stream:
            raw += event.delta
            if event.completion is not None:
                finish = event.completion.finish_reason
                prompt_tokens = event.completion.prompt_tokens
                new_tokens = event.completion.new_tokens
                cached = getattr(event.completion, "prompt_cached_tokens", 0)
                timing = event.completion
                break
            if base_indent is not None and _block_ended(raw, base_indent):
                finish = "block"
                break
    finally:
        stream.close()
    return raw, finish, prompt_tokens, new_tokens, cached, timing


def _redraw(
    engine: Engine,
    prompt: str,
    suffix: str | None,
    gen: GenerationConfig,
    window: Window,
    base_indent: int | None,
    fits: Callable[[str], bool],
    config: LspConfig,
    cancel: threading.Event,
    deadline: float,
) -> Completion | None:
    """The syntax check's replacement for a suggestion that does not fit (None: none)."""
    extra = {} if suffix is None else {"suffix": suffix}
    found = replacements(
        engine,
        prompt,
        gen,
        lambda r: _shown_fits(r, window, base_indent, fits),
        config.syntax_samples,
        1,
        cancel=cancel,
        deadline=deadline,
        **extra,
    )
    return found[0] if found else None


def _shown_fits(
    raw: str, window: Window, base_indent: int | None, fits: Callable[[str], bool]
) -> bool:
    """Whether ``raw`` as it would be shown is something to show and passes ``fits``."""
    text = postprocess(raw, window, base_indent)
    return text is not None and fits(text)


def fim_prompt(
    engine: Engine,
    window: Window,
    config: LspConfig,
    budget: int,
    others: Sequence[tuple[str, str]] = (),
) -> tuple[str, str | None]:
    """(prefix, suffix) of the prompt within ``budget`` tokens; suffix ``None``: prefix only.

    :func:`codeparrot.prompting.prompt_parts` with the editor's settings: workspace
    snippets of ``others`` within ``workspace_share`` of the budget; with a FIM template
    (the engine's, resolved at load) and ``config.fim`` the suffix window takes whole lines
    after the cursor, at most ``fim_suffix_share`` of the rest and :func:`suffix_tokens`,
    and the prefix the remainder; a checkpoint without the sentinels, or nothing but blanks after the cursor,
    gets the prefix alone.
    """
    fim = config.fim and engine.infill_template() is not None
    parts = prompting.prompt_parts(
        engine.count_tokens,
        window.prefix,
        window.suffix,
        budget,
        suffix_share=config.fim_suffix_share,
        fim=fim,
        others=others,
        workspace_share=config.workspace_share,
        suffix_tokens=suffix_tokens(engine, config) if fim else None,
    )
    return parts.text, parts.suffix


def suffix_tokens(engine: Engine, config: LspConfig) -> int | None:
    """The most tokens the suffix window may take (``None``: only ``fim_suffix_share``).

    ``config.fim_suffix_tokens`` where set. Else (auto), in PSM order only: each keystroke
    changes the prefix, and the suffix after it is read again, so it gets what the model
    reads in :data:`SUFFIX_REREAD_MS` at the speed measured at load
    (``engine.prompt_ms_per_token``), at least :data:`SUFFIX_MIN_TOKENS`. In SPM order the
    suffix comes first and typing keeps its keys and values in the prompt cache. The order
    is the engine's (``fim_order`` resolved at load, ``Engine.fim_layout``).
    """
    if config.fim_suffix_tokens:
        return config.fim_suffix_tokens
    ms = getattr(engine, "prompt_ms_per_token", None)
    if not ms or engine.fim_layout.order != PSM:
        return None
    return max(SUFFIX_MIN_TOKENS, int(SUFFIX_REREAD_MS / ms))


def _block_ended(text: str, base: int | None) -> bool:
    """Has ``text`` a finished line (after the first) dedented to the opener or left?"""
    if base is None:
        return False
    lines = text.split("\n")
    return any(line.strip() and indent_width(line) <= base for line in lines[1:-1])
