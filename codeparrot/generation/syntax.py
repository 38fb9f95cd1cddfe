"""Syntax-checked completion: prefer a candidate after which the code still parses.

A small model's greedy line often cannot stand where it goes: ``if n < 1:`` above a line
that is not indented under it, a bracket never closed, ``return x = 1``. The code after
the cursor shows it. With ``syntax_samples`` = K > 0, a candidate whose insertion leaves the
code unparseable (``fits`` says so) is replaced by one of K more sampled for it that fits:
after greedy decoding the most common, after sampling the first. When none fits, the
candidate stays as it was.

This works for any checkpoint, with or without fill-in-the-middle: the check reads the
code after the cursor whether or not the model was shown it. Checking never runs a
candidate: :func:`parses` only builds a syntax tree (``ast.parse``), and the code is
never compiled to bytecode or executed.
"""

from __future__ import annotations

import ast
import dataclasses
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from codeparrot.options import CANDIDATES

if TYPE_CHECKING:
    from codeparrot.generation.config import GenerationConfig
    from codeparrot.generation.engine import Completion

# Code longer than this is not checked (a candidate then always fits): parsing is linear,
# about a millisecond per 10 kB, and a check runs once per candidate.
MAX_CHECK_CHARS = 200_000
# First characters of a line that does not start a statement at column 0.
_NOT_A_STATEMENT = frozenset(("", " ", "\t", "#", ")", "]", "}", "@"))
# Temperature of the replacement draws when the first candidate was greedy.
DRAW_TEMPERATURE = 0.8


def parses(code: str) -> bool:
    """Whether ``code`` is a syntactically valid Python module (nothing is run)."""
    return syntax_error(code) is None


def fits_in_window(before: str, after: str) -> Callable[[str], bool]:
    """The check of a middle in an editor's window of a file, which may not parse for
    reasons of its own: cut at either end, or half-written elsewhere.

    The code checked is the top-level statement the cursor is in: from the last line of
    ``before`` that starts at column 0 with code (the window's start when there is none)
    to the next such line of ``after`` (or its last whole line). Give as much of the file
    as there is: a window that starts inside a function is not checked (its first line's
    indentation is an error above the middle). A middle fails only when the parser's first
    error lies on the middle's lines or on the line after them (where a block it opens is
    missing, for instance): an error above it is the file's own, one further down is not
    blamed on it.
    """
    lines = before.split("\n")
    start = next(
        (i for i in range(len(lines) - 1, -1, -1) if lines[i][:1] not in _NOT_A_STATEMENT),
        0,
    )
    head = "\n".join(lines[start:])
    first = len(lines) - start  # the middle's first line, counted from 1
    rest = after.split("\n")
    end = next(
        (i for i in range(1, len(rest)) if rest[i][:1] not in _NOT_A_STATEMENT), len(rest) - 1
    )
    tail = "\n".join(rest[:end]) + "\n" if len(rest) > 1 else after

    def fits(middle: str) -> bool:
        code = head + middle + tail
        if len(code) > MAX_CHECK_CHARS:
            return True
        error = syntax_error(code)
        if error is None or error.lineno is None:
            return error is None
        return not first <= error.lineno <= first + middle.count("\n") + 1

    return fits


def syntax_error(code: str) -> SyntaxError | None:
    """The parser's first error in ``code`` (None: it parses); nothing is run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(code)
        except SyntaxError as e:
            return e
        except (ValueError, RecursionError, MemoryError) as e:
            return SyntaxError(str(e))
    return None


def most_common(texts: Sequence[str]) -> str | None:
    """The most common of ``texts`` (the first among equals; texts differing only in
    trailing whitespace count as one), or None when there are none."""
    if not texts:
        return None
    counts = Counter(t.rstrip() for t in texts)
    best = max(counts.values())
    return next(t for t in texts if counts[t.rstrip()] == best)


def checked_generate(
    engine: Any,
    prompt: str,
    config: GenerationConfig,
    fits: Callable[[str], bool],
    samples: int,
    *,
    cancel: threading.Event | None = None,
    deadline_ms: float | None = None,
    **kwargs: Any,
) -> list[Completion]:
    """``engine.generate`` whose candidates that do not ``fit`` are replaced by
    :func:`replacements`, ``samples`` drawn for each.

    ``samples`` = 0 is ``engine.generate`` itself. Candidates no draw can replace stay.
    ``deadline_ms``: the draws stop this long after the call started (as in the editor).
    """
    started = time.perf_counter()
    deadline = None if deadline_ms is None else started + deadline_ms / 1000
    made = list(engine.generate(prompt, config, cancel=cancel, **kwargs))
    if samples <= 0:
        return made
    failing = [i for i, c in enumerate(made) if not fits(c.text)]
    if not failing or (cancel is not None and cancel.is_set()):
        return made
    found = replacements(
        engine, prompt, config, fits, samples, len(failing), cancel=cancel, deadline=deadline,
        **kwargs,
    )  # fmt: skip
    for i, chosen in zip(failing, found, strict=False):
        made[i] = dataclasses.replace(chosen, seconds=made[i].seconds + chosen.seconds)
    return made


def replacements(
    engine: Any,
    prompt: str,
    config: GenerationConfig,
    fits: Callable[[str], bool],
    samples: int,
    count: int,
    *,
    cancel: threading.Event | None = None,
    deadline: float | None = None,
    **kwargs: Any,
) -> list[Completion]:
    """Up to ``count`` candidates that ``fit``, from ``samples * count`` drawn in one batch
    (at most the engine's 1,024 candidates per call; seeded with ``config.seed + 1``, fresh
    when it is None); fewer when fewer fit.

    After greedy decoding (``config.temperature`` 0) each is the most common draw that fits,
    drawn at :data:`DRAW_TEMPERATURE`: the consensus stands for the greedy choice. After
    sampling they are the fitting draws in the order drawn, so that they stay samples (of
    the code that parses) and distinct draws. Each carries its share of the batch's time.

    The batch stops as soon as the outcome is settled (:func:`settled`): once one text that
    fits has more draws than any other could reach, the unfinished draws (often the
    longest, which would cost the most steps) are not decoded further. The choice is the
    text the whole batch would choose (up to trailing whitespace).

    ``deadline`` (a :func:`time.perf_counter` time; an editor's latency budget) stops the
    batch when it passes: the choice is then made among the draws finished by then.
    """
    n = min(samples * count, int(CANDIDATES.le or 1))  # one batch, within its bound
    draw = dataclasses.replace(
        config,
        n=n,
        temperature=config.temperature or DRAW_TEMPERATURE,
        seed=None if config.seed is None else config.seed + 1,
    )
    greedy = config.temperature == 0
    finished: dict[int, Completion | None] = {}  # draw index -> the draw if it fits
    started = time.perf_counter()
    if deadline is not None and started >= deadline:
        return []  # too late to draw: not even a prefill
    stream = engine.stream(prompt, draw, cancel=cancel, **kwargs)
    try:
        for event in stream:
            if event.completion is not None:
                finished[event.index] = event.completion if fits(event.completion.text) else None
                if settled(finished, n, count, greedy):
                    break
            if deadline is not None and time.perf_counter() >= deadline:
                break
    finally:
        stream.close()
    share = (time.perf_counter() - started) / count  # the batch ran once
    fitting = [
        dataclasses.replace(d, seconds=share) for _, d in sorted(finished.items()) if d is not None
    ]
    if not greedy:
        return fitting[:count]
    text = most_common([d.text for d in fitting])
    return [next(d for d in fitting if d.text == text)] * count if fitting else []


def settled(finished: dict[int, Any], n: int, count: int, greedy: bool) -> bool:
    """Whether the draws still unfinished can no longer change :func:`replacements`' choice.

    ``finished`` maps each finished draw's index (of ``n``) to the draw when it fits, to
    None when it does not. Greedy (the most common text that fits): when its count exceeds
    the runner-up's plus every unfinished draw. Sampling (the first ``count`` that fit, in
    the order drawn): when they are known and every draw before them has finished.
    """
    if len(finished) >= n:
        return True
    if greedy:
        counts = Counter(d.text.rstrip() for d in finished.values() if d is not None)
        top = [c for _, c in counts.most_common(2)] + [0, 0]
        return top[0] > top[1] + (n - len(finished))
    taken = 0
    for i in range(n):
        if i not in finished:
            return False
        taken += finished[i] is not None
        if taken >= count:
            return True
    return True
