"""A model served elsewhere, asked through OpenAI's ``/v1/completions`` (standard library only).

:class:`ServedEngine` stands where the generation engine stands in
:func:`codeparrot.eval.humaneval.generate_samples`: ``generate(prompt, config, cancel=,
suffix=)`` returns completions, so resuming, ordering and the sandbox are the same code
for a checkpoint on disk and for a model behind ``codeparrot serve``, vLLM, llama.cpp's
server or Ollama. Each call is one request (``n`` completions, one ``seed``); the caller
keeps at most ``concurrency`` in flight. Refused or dropped requests (429, 5xx, a
connection reset) are retried with exponential backoff; a server that is still refusing
after the retries stops the run with an error naming ``--retries`` (what was written
stays for the resume).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import CodeparrotError, ConfigError

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# a probe that costs the server one token: enough to hear whether it takes a suffix
_PROBE = {"prompt": "def f():\n", "max_tokens": 1, "temperature": 0}


class BackendError(CodeparrotError):
    """The server could not be used: unreachable, refusing, or answering out of shape."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


@dataclass(frozen=True)
class ServedCompletion:
    """One completion as the server returned it (the fields the harness records)."""

    text: str
    finish_reason: str
    seed: int | None = None


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class ServedEngine:
    """An OpenAI-compatible completions endpoint in the engine's place.

    ``base_url`` is the server's root (``http://host:8000``) or its ``/v1``; ``model`` is
    the id ``/v1/models`` lists. ``backoff`` is the first wait in seconds, doubled on
    each retry (with up to 10% jitter); a ``Retry-After`` header is honoured when longer.
    """

    device = "remote"
    context_length = None  # unknown: the reference's max_new_tokens applies

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        concurrency: int = 4,
        retries: int = 5,
        backoff: float = 1.0,
        request_timeout: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        root = base_url.rstrip("/")
        self.base_url = base_url
        self.api = root if root.endswith("/v1") else root + "/v1"
        self.model = model
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        self.request_timeout = request_timeout
        self.sleep = sleep
        self.fim: bool | None = None  # set by check(infill=True)

    # -- checks before any work ------------------------------------------------------

    def check(self, *, infill: bool = False) -> None:
        """Refuse, naming the flag, a server that is unreachable, does not know ``model``,
        or (``infill``) does not take a ``suffix``. Costs one request, two with ``infill``."""
        try:  # a server that is down is told at once, not after the whole backoff
            listing = self._request("GET", "/models", None, timeout=30, retries=1)
        except BackendError as e:
            raise ConfigError(
                f"--base-url {self.base_url}: no OpenAI-compatible server answered "
                f"GET {self.api}/models ({e.reason})"
            ) from None
        ids = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
        if self.model not in ids:
            known = ", ".join(str(i) for i in ids[:20]) or "none"
            raise ConfigError(
                f"--model {self.model!r}: the server at {self.base_url} does not serve it "
                f"(its /v1/models lists: {known})"
            )
        if infill:
            refusal = self._suffix_refusal()
            self.fim = refusal is None
            if refusal is not None:
                raise ConfigError(
                    f"--model {self.model!r} at {self.base_url} does not fill in the middle: "
                    f"a request with a suffix was refused ({refusal}); an infilling --task "
                    "needs a server and model that take /v1/completions' suffix"
                )

    def _suffix_refusal(self) -> str | None:
        """Why the server refused a one-token request with a suffix (None: it took it)."""
        try:
            self.complete(
                _PROBE["prompt"],
                suffix="    return 1\n",
                max_tokens=_PROBE["max_tokens"],
                temperature=_PROBE["temperature"],
            )
        except BackendError as e:
            if "HTTP 4" in str(e):
                return str(e)
            raise ConfigError(f"--base-url {self.base_url}: {e}") from None
        return None

    # -- the engine's interface ------------------------------------------------------

    def generate(
        self,
        prompt: str,
        config: Any,
        cancel: threading.Event | None = None,
        suffix: str | None = None,
    ) -> list[ServedCompletion]:
        """``config.n`` completions of ``prompt`` (a GenerationConfig's sampling settings)."""
        if cancel is not None and cancel.is_set():
            return []
        return self.complete(
            prompt,
            suffix=suffix,
            n=config.n,
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_new_tokens,
            stop=list(config.stop),
            seed=config.seed,
        )

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise ConfigError("--syntax-samples needs a local checkpoint (--backend local)")

    def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = None,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 256,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> list[ServedCompletion]:
        """One ``/v1/completions`` request, retried; its choices in index order."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "n": n,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
        }
        if stop:
            body["stop"] = stop
        if seed is not None:
            body["seed"] = seed
        if suffix:
            body["suffix"] = suffix
        answer = self._request("POST", "/completions", body)
        return _choices(answer, n, seed)

    # -- HTTP ------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> dict[str, Any]:
        """The JSON answer of one request, retried on 429/5xx and dropped connections."""
        last = ""
        retries = self.retries if retries is None else min(retries, self.retries)
        for attempt in range(retries + 1):
            try:
                return self._once(method, path, body, timeout or self.request_timeout)
            except _Retryable as e:
                last = e.reason
                if attempt == retries:
                    break
                wait = self.backoff * 2**attempt * (1 + 0.1 * random.random())
                if e.retry_after is not None:
                    wait = max(wait, e.retry_after)
                logger.warning(
                    "%s %s: %s; retry %d in %.1f s", method, path, last, attempt + 1, wait
                )
                self.sleep(wait)
        raise BackendError(
            f"{method} {self.api}{path} still failing after {retries} retries ({last}); "
            "raise --retries or lower --concurrency (samples written so far are kept: rerun "
            "to resume)",
            last,
        )

    def _once(
        self, method: str, path: str, body: dict[str, Any] | None, timeout: float
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.api + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            detail = _error_message(e.read())
            if e.code in RETRY_STATUSES:
                raise _Retryable(f"HTTP {e.code}: {detail}", _retry_after(e.headers)) from None
            raise BackendError(f"HTTP {e.code} from {self.api}{path}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise _Retryable(f"cannot reach {self.api}{path}: {reason}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise BackendError(f"{self.api}{path} did not answer JSON: {raw[:200]!r}") from None
        if not isinstance(answer, dict):
            raise BackendError(f"{self.api}{path} answered {type(answer).__name__}, not an object")
        return answer


def _choices(answer: dict[str, Any], n: int, seed: int | None) -> list[ServedCompletion]:
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        got = len(choices) if isinstance(choices, list) else "no"
        raise BackendError(
            f"asked for n={n} completions, the server returned {got} choices"
            + ("; a server that answers one per request needs --batch-size 1" if got == 1 else "")
        )
    out = []
    for choice in sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0):
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(text, str):
            raise BackendError(f"a choice without text: {str(choice)[:200]}")
        out.append(ServedCompletion(text, str(choice.get("finish_reason") or "stop"), seed))
    return out


def _error_message(raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error")
        if isinstance(error, dict):
            return str(error.get("message", error))[:500]
        if error is not None:
            return str(error)[:500]
    except (ValueError, AttributeError):
        pass
    return raw[:500].decode("utf-8", "replace")


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return min(float(value), 300.0) if value is not None else None
    except ValueError:
        return None
