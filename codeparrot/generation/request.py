"""One completion request, checked once: the contract every front door adapts to.

The playground (``app``), ``serve`` and the language server (``lsp``) each read their own
wire format (a web form, OpenAI's or llama.cpp's JSON, an editor's settings) and build one
:class:`CompletionRequest`. It checks every value on construction against one table of
bounds (:data:`RULES`, made from the declarations in :mod:`codeparrot.options`), narrowed
by the front door's own :class:`RequestLimits`, and raises a :class:`RequestError` whose
``field`` attribute names the value that is wrong. A front door names that field in its
own words (``max_tokens``, ``n_predict``, "Max new tokens") from a map of its own; no one
parses an error's text.

Standard library only: the servers build one per request, before any model work.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from codeparrot.config import Bounds
from codeparrot.errors import ConfigError
from codeparrot.options import CANDIDATES, MAX_NEW_TOKENS, MIN_P, TEMPERATURE, TOP_K, TOP_P

# What torch's generators accept as a seed.
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class Rule:
    """What one number field accepts: whole numbers or any, and the declared bounds."""

    whole: bool
    bounds: Bounds
    text: str = ""  # how to say the bounds, where Bounds.describe would be unreadable

    def narrowed(self, most: int | None) -> Rule:
        """This rule with an upper bound of at most ``most`` (a front door's limit)."""
        high = self.bounds.maximum
        if most is None or (high is not None and high <= most):
            return self
        return Rule(self.whole, dataclasses.replace(self.bounds, le=most, lt=None))

    def need(self) -> str:
        """``"a whole number in 1..8"``, ``"a number in (0, 1]"``, ... (what it must be)."""
        if self.text:
            return self.text
        described = self.bounds.describe(integer=self.whole)
        kind = "a whole number" if self.whole else "a number"
        return f"{kind} {described}" if described else kind


# The sampling fields' bounds, each declared once (codeparrot.options); a front door may
# lower the upper bounds of max_new_tokens and n (RequestLimits), never widen them.
RULES: dict[str, Rule] = {
    "max_new_tokens": Rule(True, MAX_NEW_TOKENS.bounds),
    "temperature": Rule(False, TEMPERATURE.bounds),
    "top_p": Rule(False, TOP_P.bounds),
    "top_k": Rule(True, TOP_K.bounds),
    "min_p": Rule(False, MIN_P.bounds),
    "n": Rule(True, CANDIDATES.bounds),
    "seed": Rule(
        True,
        Bounds(ge=SEED_RANGE[0], le=SEED_RANGE[1]),
        "a whole number from -2**63 to 2**64 - 1",
    ),
}


@dataclass(frozen=True)
class RequestLimits:
    """The largest request one front door accepts (None: only the declared bounds)."""

    max_new_tokens: int | None = None
    n: int | None = None
    stop_sequences: int | None = None
    stop_chars: int | None = None  # each stop string's


NO_LIMITS = RequestLimits()


class RequestError(ConfigError):
    """A request's value refused. ``field`` is the :class:`CompletionRequest` field's
    name, ``problem`` what is wrong with it (``"must be a number >= 0, got -1"``);
    :meth:`message` says both, under the name the front door gives the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem

    def message(self, name: str | None = None) -> str:
        """``"<name> <problem>."``: the field as the client called it, and what is wrong."""
        return f"{name or self.field} {self.problem}."


def check_number(field: str, value: Any, limits: RequestLimits = NO_LIMITS) -> None:
    """Refuse ``value`` for the number ``field`` (a key of :data:`RULES`) unless it is a
    finite number (a whole one where the field counts) within the bounds; ``seed`` may be
    None. Raises :class:`RequestError`."""
    if field == "seed" and value is None:
        return
    rule = RULES[field].narrowed(getattr(limits, field, None))
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RequestError(field, f"must be {rule.need()}, got {_shown(value)}")
    if not math.isfinite(value):
        raise RequestError(field, f"must be a finite number, got {value}")
    whole = isinstance(value, numbers.Integral)
    if (rule.whole and not whole) or not rule.bounds.admits(value):
        raise RequestError(field, f"must be {rule.need()}, got {value}")


def check_text(field: str, value: Any, *, optional: bool = False) -> None:
    """Refuse a prompt or suffix that is not text (a prompt may be token ids). Its size is
    the front door's to check, in its own units, before it parses anything."""
    if value is None and optional:
        return
    if isinstance(value, tuple) and field == "prompt":
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in value):
            raise RequestError(field, "must hold token ids (whole numbers >= 0)")
    elif not isinstance(value, str):
        raise RequestError(field, f"must be text, got {_shown(value)}")


def check_stop(value: Any, limits: RequestLimits = NO_LIMITS) -> None:
    """Refuse stop strings that are not a sequence of non-empty strings within the limits."""
    if not isinstance(value, tuple | list):
        raise RequestError("stop", f"must be a list of strings, got {_shown(value)}")
    most = limits.stop_sequences
    if most is not None and len(value) > most:
        raise RequestError("stop", f"holds {len(value)} strings; at most {most} are accepted")
    for s in value:
        if not isinstance(s, str):
            raise RequestError("stop", f"must hold strings, got {_shown(s)}")
        if not s:
            raise RequestError("stop", "holds an empty string, which would end every candidate")
        if limits.stop_chars is not None and len(s) > limits.stop_chars:
            raise RequestError(
                "stop",
                f"holds a string of {len(s):,} characters; at most {limits.stop_chars} "
                "are accepted",
            )


@dataclass(frozen=True)
class CompletionRequest:
    """What a client asks one completion of: the text (or token ids), the fill-in-the-middle
    suffix, and the sampling settings. Checked on construction, first problem raised as a
    :class:`RequestError`; ``limits`` are the front door's (not part of the request's value).
    """

    prompt: str | tuple[int, ...]
    suffix: str | None = None
    max_new_tokens: int = MAX_NEW_TOKENS.default
    temperature: float = TEMPERATURE.default
    top_p: float = TOP_P.default
    top_k: int = TOP_K.default
    min_p: float = MIN_P.default
    n: int = CANDIDATES.default
    seed: int | None = None
    stop: tuple[str, ...] = ()
    limits: RequestLimits = dataclasses.field(default=NO_LIMITS, repr=False, compare=False)

    def __post_init__(self) -> None:
        # sizes first: a long stop list is refused before its strings are read
        check_text("prompt", self.prompt)
        check_text("suffix", self.suffix, optional=True)
        check_stop(self.stop, self.limits)
        for field in RULES:
            check_number(field, getattr(self, field), self.limits)
        if isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))

    def generation(self, **settings: Any) -> Any:
        """The engine's :class:`~codeparrot.generation.GenerationConfig` for this request;
        ``settings`` are the front door's own (FIM order and tokens, a server's stops)."""
        from codeparrot.generation.config import GenerationConfig

        values = {name: getattr(self, name) for name in (*RULES, "stop")}
        return GenerationConfig(**(values | settings))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
