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

The server is not trusted (docs/threat-model.md): each request has one deadline for the
whole exchange (``--request-timeout``, not per read), the bytes read of an answer are
capped (from ``n`` x ``max_tokens``), redirects are followed on the same host only, and
each choice's ``index`` and ``finish_reason`` are type-checked before they are recorded.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codeparrot.errors import CodeparrotError, ConfigError

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# What a finish_reason may say (OpenAI's, vLLM's, llama.cpp's and ours); anything else is
# recorded as "unknown".
FINISH_REASONS = frozenset(
    {"stop", "length", "eos", "repetition", "content_filter", "abort", "tool_calls", "limit"}
)
MIN_ANSWER_BYTES = 1 << 20  # the cap's floor: a /v1/models listing, an error page
BYTES_PER_TOKEN = 64  # a token's text in JSON, escapes included, with room to spare
MAX_REDIRECTS = 3
_CHUNK = 1 << 16
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
        self.server_info: dict[str, Any] = {}  # quantization, max_model_len when listed

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
        data = listing.get("data")
        entries = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        ids = [m.get("id") for m in entries]
        if self.model not in ids:
            known = ", ".join(str(i) for i in ids[:20]) or "none"
            raise ConfigError(
                f"--model {self.model!r}: the server at {self.base_url} does not serve it "
                f"(its /v1/models lists: {known})"
            )
        self.server_info = _server_info(entries[ids.index(self.model)])
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
        """Why the server refused a one-token request with a suffix (None: it took it).

        A server that takes the field and ignores it reads as many prompt tokens with a
        suffix as without one (``usage.prompt_tokens``): that is a refusal too."""
        suffix = "    return 1\n" * 4
        try:
            with_suffix = self._probe(suffix)
            without = self._probe(None)
        except BackendError as e:
            if "HTTP 4" in str(e):
                return str(e)
            raise ConfigError(f"--base-url {self.base_url}: {e}") from None
        if with_suffix is None or without is None:
            logger.warning(
                "%s reports no usage.prompt_tokens: cannot tell whether it reads the suffix",
                self.base_url,
            )
        elif with_suffix <= without:
            return (
                f"it read {with_suffix} prompt tokens with a suffix and {without} without: "
                "the suffix was ignored"
            )
        return None

    def _probe(self, suffix: str | None) -> int | None:
        """``usage.prompt_tokens`` of a one-token request (None: not reported)."""
        body = {"model": self.model, **_PROBE, **({"suffix": suffix} if suffix else {})}
        answer = self._request("POST", "/completions", body, max_bytes=MIN_ANSWER_BYTES)
        usage = answer.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None

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
        cap = max(MIN_ANSWER_BYTES, n * max_tokens * BYTES_PER_TOKEN)
        answer = self._request("POST", "/completions", body, max_bytes=cap)
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
        max_bytes: int = MIN_ANSWER_BYTES,
    ) -> dict[str, Any]:
        """The JSON answer of one request, retried on 429/5xx and dropped connections."""
        last = ""
        retries = self.retries if retries is None else min(retries, self.retries)
        for attempt in range(retries + 1):
            try:
                return self._once(method, path, body, timeout or self.request_timeout, max_bytes)
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
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        timeout: float,
        max_bytes: int = MIN_ANSWER_BYTES,
    ) -> dict[str, Any]:
        """One exchange (redirects on the same host included) within ``timeout`` seconds."""
        data = None if body is None else json.dumps(body).encode()
        url = self.api + path
        deadline = time.monotonic() + timeout
        for _ in range(MAX_REDIRECTS + 1):
            status, headers, raw = _exchange(method, url, data, deadline, max_bytes)
            if status in (301, 302, 303, 307, 308):
                url = _same_host_redirect(url, headers.get("Location"))
                continue
            break
        else:
            raise BackendError(f"{self.api}{path}: more than {MAX_REDIRECTS} redirects")
        if status >= 400:
            detail = _error_message(raw)
            if status in RETRY_STATUSES:
                raise _Retryable(f"HTTP {status}: {detail}", _retry_after(headers))
            raise BackendError(f"HTTP {status} from {self.api}{path}: {detail}")
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            raise BackendError(f"{self.api}{path} did not answer JSON: {raw[:200]!r}") from None
        if not isinstance(answer, dict):
            raise BackendError(f"{self.api}{path} answered {type(answer).__name__}, not an object")
        return answer


def _exchange(
    method: str, url: str, data: bytes | None, deadline: float, max_bytes: int
) -> tuple[int, Any, bytes]:
    """(status, headers, body) of one HTTP request that ends by ``deadline``, whatever the
    server does: a watchdog shuts the socket then, and reads stop at ``max_bytes``."""
    parts = urllib.parse.urlsplit(url)
    kind = {"http": http.client.HTTPConnection, "https": http.client.HTTPSConnection}
    if parts.scheme not in kind or not parts.hostname:
        raise BackendError(f"{url}: not an http:// or https:// URL")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise BackendError(f"{url}: no answer within --request-timeout")
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = kind[parts.scheme](parts.hostname, parts.port, timeout=remaining)
    expired = threading.Event()

    def watchdog() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(remaining, watchdog)
    timer.daemon = True
    timer.start()
    try:
        conn.request(method, target or "/", body=data, headers=_HEADERS)
        response = conn.getresponse()
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
            raise BackendError(_too_large(url, f"{int(declared):,} bytes declared", max_bytes))
        raw = _read_capped(response, url, max_bytes, expired)
        return response.status, response.headers, raw
    except (http.client.HTTPException, OSError) as e:
        if expired.is_set():
            raise _timed_out(url) from None
        raise _Retryable(f"cannot reach {url}: {e}") from None
    finally:
        timer.cancel()
        conn.close()


_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def _read_capped(response: Any, url: str, max_bytes: int, expired: threading.Event) -> bytes:
    buffer = bytearray()
    while True:
        chunk = response.read1(_CHUNK)
        if expired.is_set():
            raise _timed_out(url)
        if not chunk:
            return bytes(buffer)
        buffer += chunk
        if len(buffer) > max_bytes:
            raise BackendError(
                _too_large(url, f"{len(buffer):,} bytes read and more coming", max_bytes)
            )


def _too_large(url: str, what: str, max_bytes: int) -> str:
    return (
        f"{url}: the answer is too large ({what}; at most {max_bytes:,} bytes are read, "
        "from n x max_tokens); the server is broken or hostile"
    )


def _timed_out(url: str) -> BackendError:
    return BackendError(
        f"{url}: no complete answer within --request-timeout (the whole request, not one "
        "read); raise --request-timeout for a slow server",
        "timed out",
    )


def _same_host_redirect(url: str, location: Any) -> str:
    """The redirect's target when it stays on the scheme, host and port of ``url``."""
    if not isinstance(location, str) or not location:
        raise BackendError(f"{url}: a redirect without a Location")
    target = urllib.parse.urljoin(url, location)
    a, b = urllib.parse.urlsplit(url), urllib.parse.urlsplit(target)
    if (a.scheme, a.hostname, a.port) != (b.scheme, b.hostname, b.port):
        raise BackendError(
            f"{url}: redirected to another host ({target[:200]}); not followed, give that "
            "server's --base-url if it is the one meant"
        )
    return target


def _server_info(entry: dict[str, Any]) -> dict[str, Any]:
    """What ``/v1/models`` says of the model that changes samples (vLLM reports these)."""
    info: dict[str, Any] = {}
    quantization = entry.get("quantization")
    if isinstance(quantization, str) and len(quantization) <= 64:
        info["quantization"] = quantization
    length = entry.get("max_model_len")
    if isinstance(length, int) and not isinstance(length, bool) and 0 < length < 2**40:
        info["max_model_len"] = length
    return info


def _choices(answer: dict[str, Any], n: int, seed: int | None) -> list[ServedCompletion]:
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        got = len(choices) if isinstance(choices, list) else "no"
        raise BackendError(
            f"asked for n={n} completions, the server returned {got} choices"
            + ("; a server that answers one per request needs --batch-size 1" if got == 1 else "")
        )
    if not all(isinstance(c, dict) for c in choices):
        raise BackendError("a choice that is not an object")
    indexes = [c.get("index") for c in choices]
    if all(i is None for i in indexes):
        indexes = list(range(n))
    elif sorted(i for i in indexes if type(i) is int) != list(range(n)):
        shown = ", ".join(repr(i)[:20] for i in indexes[:5])
        raise BackendError(
            f"the choices' index fields must be the integers 0..{n - 1}, once each (got {shown})"
        )
    out = []
    for _, choice in sorted(zip(indexes, choices, strict=True), key=lambda pair: pair[0]):
        text = choice.get("text")
        if not isinstance(text, str):
            raise BackendError(f"a choice without text: {str(choice)[:200]}")
        out.append(ServedCompletion(text, _finish_reason(choice.get("finish_reason")), seed))
    return out


def _finish_reason(value: Any) -> str:
    if value is None:
        return "stop"
    return value if isinstance(value, str) and value in FINISH_REASONS else "unknown"


def _error_message(raw: bytes) -> str:
    try:
        error = json.loads(raw[:65536]).get("error")
        if isinstance(error, dict):
            return str(error.get("message", error))[:500]
        if error is not None:
            return str(error)[:500]
    except (ValueError, AttributeError, RecursionError):
        pass
    return raw[:500].decode("utf-8", "replace")


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return min(float(value), 300.0) if value is not None else None
    except ValueError:
        return None
