"""``codeparrot serve``: OpenAI's completions API over one checkpoint, for clients without LSP.

``POST /v1/completions`` (``prompt``, ``suffix``, ``max_tokens``, ``temperature``,
``top_p``, ``n``, ``stop``, ``stream``, ``seed``) and ``GET /v1/models``, answered in the
shapes OpenAI's API and its ``openai`` client use, so Continue, llm.nvim (llm-ls) and
``curl`` can talk to it. Streaming is server-sent events: one ``data: {...}`` chunk per
piece of text, then ``data: [DONE]``.

The standard library's threading HTTP server: a thread reads and checks each request
(sizes from ``Content-Length`` before the body is read; values before any model work),
and :class:`GenerationLine` lets one generation run at a time with a bounded number
waiting, so a flood is refused at once with 503 instead of queueing without end. One
:class:`~codeparrot.generation.Engine` serves every request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.lsp.serve_config import ServeConfig
from codeparrot.lsp.serve_request import (
    ApiError,
    CompletionRequest,
    bad,
    parse_body,
    parse_completion_request,
)

logger = logging.getLogger(__name__)

COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"

# The engine's finish reasons in OpenAI's words ("cancelled": the client went away).
_FINISH_REASONS = {"stop": "stop", "eos": "stop", "length": "length", "cancelled": "stop"}


class GenerationLine:
    """One generation at a time and at most ``waiting`` requests waiting for their turn.

    A request that finds the line full is refused at once (503): on a small CPU machine
    a longer line only makes every client wait longer for answers it has given up on.
    """

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self._count = threading.Lock()
        self._in_line = 0
        self._running = threading.Lock()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        with self._count:
            if self._in_line > self.waiting:
                raise ApiError(
                    503,
                    f"The server is busy: a generation runs and {self.waiting} request(s) "
                    "wait for their turn. Try again in a moment.",
                    type="server_busy",
                )
            self._in_line += 1
        try:
            with self._running:
                yield
        finally:
            with self._count:
                self._in_line -= 1


class CompletionService:
    """Turns checked requests into engine calls and engine results into OpenAI's shapes."""

    def __init__(self, config: ServeConfig, engine: Any, model_name: str) -> None:
        self.config = config
        self.engine = engine
        self.model_name = model_name
        self.created = int(time.time())
        self.line = GenerationLine(config.queue_size)

    def models(self) -> dict[str, Any]:
        model = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "codeparrot",
        }
        return {"object": "list", "data": [model]}

    def request(self, data: dict[str, Any]) -> CompletionRequest:
        request = parse_completion_request(data, self.config, self.engine.context_length)
        fim = {"fim_order": self.config.fim_order, "fim_tokens": self.config.fim_tokens}
        request = dataclasses.replace(request, generation=request.generation.replace(**fim))
        if (
            request.suffix is not None
            and self.engine.infill_template(self.config.fim_tokens) is None
        ):
            raise bad(
                "suffix: this checkpoint cannot fill in the middle (its tokenizer has no "
                "fill-in-the-middle tokens of a known family, or its model was trained "
                "without them; start the server with --fim-tokens to name them); send the "
                "prompt alone.",
                "suffix",
            )
        return request

    def events(self, request: CompletionRequest, cancel: threading.Event) -> Iterator[Any]:
        """The engine's stream for ``request``; checks that need the tokenizer raise here."""
        extra = {} if request.suffix is None else {"suffix": request.suffix}
        try:
            return self.engine.stream(request.prompt, request.generation, cancel, **extra)
        except ConfigError as e:
            raise bad(str(e)) from None

    def response(self, events: Iterator[Any]) -> dict[str, Any]:
        """A whole completion response, from every event of a stream."""
        done = sorted((e for e in events if e.completion is not None), key=lambda e: e.index)
        _log_generation([e.completion for e in done])
        choices = [_choice(e.index, e.completion.text, e.completion) for e in done]
        return self._envelope(choices) | {"usage": _usage([e.completion for e in done])}

    def chunks(
        self, events: Iterator[Any], include_usage: bool
    ) -> Generator[dict[str, Any], None, None]:
        """Streamed chunks: one per piece of text, the last of a choice with its reason."""
        envelope = self._envelope([])
        finished = []
        for event in events:
            if event.completion is None and not event.delta:
                continue
            if event.completion is not None:
                finished.append(event.completion)
            yield envelope | {"choices": [_choice(event.index, event.delta, event.completion)]}
        _log_generation(finished)
        if include_usage:
            yield envelope | {"usage": _usage(finished)}

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
        }


def _log_generation(completions: list[Any]) -> None:
    """The seed and counts of a generation: a sampled answer can be drawn again."""
    if completions:
        first = completions[0]
        logger.info(
            "generated n=%d seed=%s prompt_tokens=%d new_tokens=%d in %.3f s",
            len(completions),
            first.seed,
            first.prompt_tokens,
            sum(c.new_tokens for c in completions),
            max(c.seconds for c in completions),
        )


def _choice(index: int, text: str, completion: Any | None) -> dict[str, Any]:
    reason = None if completion is None else _FINISH_REASONS.get(completion.finish_reason, "stop")
    return {"text": text, "index": index, "logprobs": None, "finish_reason": reason}


def _usage(completions: list[Any]) -> dict[str, int]:
    prompt = completions[0].prompt_tokens if completions else 0
    new = sum(c.new_tokens for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new}


class CompletionServer(ThreadingHTTPServer):
    """The HTTP server; ``service`` answers, the handler only moves bytes."""

    daemon_threads = True

    def __init__(self, config: ServeConfig, service: CompletionService) -> None:
        self.config = config
        self.service = service
        super().__init__((config.host, config.port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CompletionServer

    def setup(self) -> None:
        self.timeout = self.server.config.read_timeout  # a slow client cannot hold a thread
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def _not_allowed(self) -> None:
        self.close_connection = True  # a body, if any, stays unread

        def refuse() -> None:
            raise ApiError(405, f"Method {self.command} is not allowed; use GET or POST.")

        self._answer(refuse)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _get(self) -> None:
        if self._path() != MODELS_PATH:
            raise ApiError(404, f"No such path: GET {self._path()}.", code="unknown_url")
        self._send_json(200, self.server.service.models())

    def _post(self) -> None:
        if self._path() != COMPLETIONS_PATH:
            self.close_connection = True  # the body stays unread
            raise ApiError(404, f"No such path: POST {self._path()}.", code="unknown_url")
        service = self.server.service
        request = service.request(parse_body(self._body()))
        cancel = threading.Event()
        with service.line.turn():
            events = service.events(request, cancel)
            if not request.stream:
                self._send_json(200, service.response(events))
                return
            self._stream(service.chunks(events, request.include_usage), cancel)

    def _answer(self, route: Any) -> None:
        try:
            route()
        except ApiError as e:
            self._send_json(e.status, e.body())
        except Exception:
            logger.exception("request %s %s failed", self.command, self.path)
            self._send_json(500, ApiError(500, "Internal error (see the server log).").body())

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _body(self) -> bytes:
        """The request body, refused from its headers alone when it is too large."""
        limit = self.server.config.max_body_bytes
        if self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length") is None:
            self.close_connection = True
            raise ApiError(411, "Send the request body with a Content-Length header.")
        try:
            length = int(self.headers["Content-Length"])
        except ValueError:
            self.close_connection = True
            raise bad("The Content-Length header is not a number.") from None
        if length < 0 or length > limit:
            self.close_connection = True
            raise ApiError(
                413, f"The request body is {length:,} bytes; this server accepts at most {limit:,}."
            )
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            raise bad(f"The request body ended after {len(body)} of {length} bytes.")
        return body

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.send_header("Retry-After", "1")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self, chunks: Generator[dict[str, Any], None, None], cancel: threading.Event
    ) -> None:
        """Server-sent events until ``[DONE]``; a client that goes away cancels generation."""
        self.close_connection = True  # the body ends when the connection does
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for chunk in chunks:
                self._event(chunk)
        except OSError:  # reset, broken pipe or a reader slower than read_timeout
            cancel.set()
            logger.info("client %s went away; generation cancelled", self.address_string())
            return
        except Exception:  # the headers are gone: the error goes in the stream
            cancel.set()
            logger.exception("streamed request %s failed", self.path)
            with contextlib.suppress(OSError):
                self._event(ApiError(500, "Internal error (see the server log).").body())
            return
        finally:
            chunks.close()
        with contextlib.suppress(OSError):
            self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")


def model_name_of(config: ServeConfig) -> str:
    return config.model_name or config.checkpoint.resolve().name


def make_server(config: ServeConfig, engine: Any) -> CompletionServer:
    """A bound server for ``engine`` (not yet serving: call ``serve_forever``)."""
    return CompletionServer(config, CompletionService(config, engine, model_name_of(config)))


def load_engine(config: ServeConfig) -> Any:
    from codeparrot.generation import Engine

    return Engine.load(
        config.checkpoint, device=config.device, dtype=config.dtype, quantize=config.quantize
    )
