"""``codeparrot serve``: OpenAI's completions API over one checkpoint, for clients without LSP.

``POST /v1/completions`` (``prompt``, ``suffix``, ``max_tokens``, ``temperature``,
``top_p``, ``n``, ``stop``, ``stream``, ``seed``) and ``GET /v1/models``, answered in the
shapes OpenAI's API and its ``openai`` client use, so Continue, llm.nvim (llm-ls) and
``curl`` can talk to it. Streaming is server-sent events: one ``data: {...}`` chunk per
piece of text, then ``data: [DONE]``.

The standard library's threading HTTP server, bounded at every step:

- at most ``max_connections`` connections are served at once (a thread each); one more
  is answered 503 at once and closed, so trickling clients cannot pile up threads;
- a request must arrive whole (headers and body) within ``request_deadline`` seconds,
  however steadily its bytes trickle in;
- who sends it is checked first (``Host``, ``Origin``, ``Content-Type``: see
  :mod:`codeparrot.serve.request`), then sizes from ``Content-Length`` before the
  body is read, then values before any model work;
- :class:`GenerationLine` lets one generation run at a time with a bounded number
  waiting, so a flood is refused at once with 503 instead of queueing without end;
- every failure is an answer: a bad value is a 400 naming it, and anything else, a panic
  of the tokenizer's native code included, a short 500 in OpenAI's error shape.

One :class:`~codeparrot.generation.Engine` serves every request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import select
import socket
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.generation.repetition import LineEndRepetitionStream, cut_line_end_repetition
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import (
    ApiError,
    CompletionRequest,
    bad,
    check_json_content_type,
    check_sender,
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

    def response(self, events: Iterator[Any], prompt: str = "") -> dict[str, Any]:
        """A whole completion response, from every event of a stream (each text cut before
        a run at a line end with ``cut_repetition``; ``prompt`` is the text before it)."""
        done = sorted((e for e in events if e.completion is not None), key=lambda e: e.index)
        _log_generation([e.completion for e in done])
        choices = [
            _choice(e.index, self._cut(e.completion.text, prompt), e.completion) for e in done
        ]
        return self._envelope(choices) | {"usage": _usage([e.completion for e in done])}

    def chunks(
        self, events: Iterator[Any], include_usage: bool, prompt: str = ""
    ) -> Generator[dict[str, Any] | None, None, None]:
        """Streamed chunks: one per piece of text, the last of a choice with its reason.

        With ``cut_repetition`` each choice's text passes a hold-back: what is sent is what
        the whole answer starts with, so joined chunks equal :meth:`response`'s text. None
        stands for new text held back (nothing to send)."""
        envelope = self._envelope([])
        finished = []
        held: dict[int, LineEndRepetitionStream] = {}
        for event in events:
            text = event.delta
            if self.config.cut_repetition:
                cut = held.setdefault(event.index, LineEndRepetitionStream(prompt))
                text = cut.feed(text) + (cut.finish() if event.completion is not None else "")
            if event.completion is None and not text:
                if event.delta:
                    yield None  # text held back: a moment to see whether the client is there
                continue
            if event.completion is not None:
                finished.append(event.completion)
            yield envelope | {"choices": [_choice(event.index, text, event.completion)]}
        _log_generation(finished)
        if include_usage:
            yield envelope | {"usage": _usage(finished)}

    def _cut(self, text: str, prompt: str) -> str:
        return cut_line_end_repetition(text, prompt) if self.config.cut_repetition else text

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
    """The HTTP server; ``service`` answers, the handler only moves bytes.

    A connection takes one of ``max_connections`` slots for as long as its thread runs;
    one that finds none free is answered 503 from the accepting thread and closed.
    """

    daemon_threads = True

    def __init__(self, config: ServeConfig, service: CompletionService) -> None:
        self.config = config
        self.service = service
        self.slots = threading.BoundedSemaphore(config.max_connections)
        super().__init__((config.host, config.port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)  # starts its thread
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _refuse(self, request: socket.socket) -> None:
        """503 without waiting on the client: a write that does not fit is dropped."""
        with contextlib.suppress(OSError):
            request.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                request.recv(65536)  # what has arrived, so that closing does not reset
            request.send(_BUSY)
        self.shutdown_request(request)


def _error_response(status: int, reason: str, error: ApiError) -> bytes:
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


_BUSY = _error_response(
    503,
    "Service Unavailable",
    ApiError(
        503,
        "The server has as many connections open as it serves at once; try again in a moment.",
        type="server_busy",
    ),
)


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each cut to what is left of the request's deadline.

    A per-read timeout alone lets a client hold a thread for ever by sending one byte
    just before each read would time out.
    """

    def __init__(self, sock: socket.socket, read_timeout: float) -> None:
        self.sock = sock
        self.read_timeout = read_timeout
        self.deadline = time.monotonic() + read_timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request deadline has passed")
        self.sock.settimeout(min(left, self.read_timeout))
        try:
            return self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.read_timeout)  # writes keep the plain timeout


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CompletionServer

    def setup(self) -> None:
        config = self.server.config
        self.timeout = config.read_timeout  # a slow reader cannot hold a thread either
        super().setup()
        self.rfile.close()
        self.reader = _DeadlineReader(self.connection, config.read_timeout)
        self.rfile = io.BufferedReader(self.reader)
        self.cors_origin: str | None = None

    def handle_one_request(self) -> None:
        self.reader.deadline = time.monotonic() + self.server.config.request_deadline
        self.cors_origin = None
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def do_OPTIONS(self) -> None:
        self.close_connection = True  # a body, if any, stays unread
        self._answer(self._preflight)

    def _not_allowed(self) -> None:
        self.close_connection = True  # a body, if any, stays unread

        def refuse() -> None:
            raise ApiError(405, f"Method {self.command} is not allowed; use GET or POST.")

        self._answer(refuse)

    do_PUT = do_DELETE = do_PATCH = _not_allowed

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
                self._send_json(200, service.response(events, request.prompt))
                return
            self._stream(service.chunks(events, request.include_usage, request.prompt), cancel)

    def _preflight(self) -> None:
        """A CORS preflight, answered for the origins of ``--allow-origin`` alone."""
        if self.cors_origin is None:
            raise ApiError(405, "Method OPTIONS is not allowed; use GET or POST.")
        self.send_response(204)
        self._cors_headers()
        self.send_header("Access-Control-Allow-Methods", "GET, POST")
        asked = self.headers.get("Access-Control-Request-Headers")
        self.send_header("Access-Control-Allow-Headers", asked or "Content-Type, Authorization")
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()

    def _answer(self, route: Any) -> None:
        """Check who sends the request, run ``route``, and answer whatever happens."""
        try:
            self.cors_origin = check_sender(
                self.server.config,
                self.headers.get("Host"),
                self.headers.get("Origin"),
                self.headers.get("Sec-Fetch-Site"),
            )
            route()
        except ApiError as e:
            self._send_error(e)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # a Rust panic (pyo3's PanicException) is no Exception
            logger.exception("request %s %s failed", self.command, self.path)
            self._send_error(_internal_error(e))

    def _send_error(self, error: ApiError) -> None:
        if error.status in (403, 421):
            self.close_connection = True  # the body, if any, stays unread
        try:
            self._send_json(error.status, error.body())
        except OSError:  # the client has gone: nobody to tell
            self.close_connection = True

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _body(self) -> bytes:
        """The request body: declared JSON, refused from its headers alone when too large,
        and whole within the request's deadline."""
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
        try:
            check_json_content_type(self.headers.get("Content-Type"))
        except ApiError:
            self.close_connection = True  # the body stays unread
            raise
        body = self._read(length)
        if len(body) != length:
            self.close_connection = True
            raise bad(
                f"The request body ended after {len(body):,} of {length:,} bytes (the "
                "connection closed, or the rest did not come within "
                f"{self.server.config.request_deadline:g} s)."
            )
        return body

    def _read(self, length: int) -> bytes:
        """Up to ``length`` bytes: fewer when the client stops or its deadline passes."""
        pieces: list[bytes] = []
        got = 0
        while got < length:
            try:
                piece = self.rfile.read1(length - got)
            except OSError:  # TimeoutError included
                break
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)

    def _cors_headers(self) -> None:
        if self.cors_origin is not None:
            self.send_header("Access-Control-Allow-Origin", self.cors_origin)
            self.send_header("Vary", "Origin")

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._cors_headers()
        if status == 503:
            self.send_header("Retry-After", "1")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self, chunks: Generator[dict[str, Any] | None, None, None], cancel: threading.Event
    ) -> None:
        """Server-sent events until ``[DONE]``; a client that goes away cancels generation."""
        self.close_connection = True  # the body ends when the connection does
        self.send_response(200)
        self._cors_headers()
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for chunk in chunks:
                if chunk is not None:
                    self._event(chunk)
                elif self._client_gone():  # no write would tell while text is held back
                    raise ConnectionResetError("the client closed the connection")
        except OSError:  # reset, broken pipe or a reader slower than read_timeout
            cancel.set()
            logger.info("client %s went away; generation cancelled", self.address_string())
            return
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # the headers are gone: the error goes in the stream
            cancel.set()
            logger.exception("streamed request %s failed", self.path)
            with contextlib.suppress(OSError):
                self._event(_internal_error(e).body())
            return
        finally:
            chunks.close()
        with contextlib.suppress(OSError):
            self.wfile.write(b"data: [DONE]\n\n")

    def _client_gone(self) -> bool:
        """Has the client closed its end? (Readable with nothing to read: end of file.)"""
        sock = self.connection
        if not select.select([sock], [], [], 0)[0]:
            return False
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")


def _internal_error(e: BaseException) -> ApiError:
    """A short 500: the exception's type (``PanicException`` for a tokenizer's native code
    that gave up), never its traceback, which goes to the server log."""
    return ApiError(
        500, f"Internal error ({type(e).__name__}); see the server log.", type="server_error"
    )


def model_name_of(config: ServeConfig) -> str:
    return config.model_name or config.checkpoint.resolve().name


def make_server(config: ServeConfig, engine: Any) -> CompletionServer:
    """A bound server for ``engine`` (not yet serving: call ``serve_forever``)."""
    return CompletionServer(config, CompletionService(config, engine, model_name_of(config)))


def load_engine(config: ServeConfig) -> Any:
    from codeparrot.generation import Engine
    from codeparrot.hub import with_revision

    return Engine.load(
        with_revision(config.checkpoint, config.revision),
        device=config.device,
        dtype=config.dtype,
        quantize=config.quantize,
    )
