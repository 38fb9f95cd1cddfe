"""``codeparrot serve``: one checkpoint over HTTP, for clients without LSP.

OpenAI's ``POST /v1/completions``, ``POST /v1/chat/completions`` and ``GET /v1/models``
(:mod:`codeparrot.serve.openai`, :mod:`codeparrot.serve.chat`), and llama.cpp's ``POST
/infill``, ``POST /completion`` and ``GET /health`` (:mod:`codeparrot.serve.llama`), so
that Continue, llm.nvim, llama.vim, llama.vscode, evalplus and ``curl`` can talk to it.
Every endpoint is a :class:`Route`: a request parser and its answer shapes over the one
:class:`~codeparrot.serve.service.CompletionService`. Streaming is server-sent events.

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
import io
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.serve import llama, openai
from codeparrot.serve.chat import parse_chat_request
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import (
    ApiError,
    ServedRequest,
    bad,
    check_json_content_type,
    check_sender,
    parse_body,
    parse_completion_request,
)
from codeparrot.serve.service import CompletionService, GenerationLine, Piece

__all__ = ["CompletionServer", "CompletionService", "GenerationLine", "make_server"]

logger = logging.getLogger(__name__)

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
HEALTH_PATH = "/health"  # llama.cpp's
LLAMA_COMPLETION_PATH = "/completion"  # llama.cpp's
INFILL_PATH = "/infill"  # llama.cpp's


@dataclass(frozen=True)
class Route:
    """One POST endpoint: its request parser and its answer shapes, whole and streamed."""

    parse: Callable[[CompletionService, dict[str, Any]], ServedRequest]
    whole: Callable[[CompletionService, ServedRequest, list[Piece]], Any]  # a JSON value
    chunks: Callable[
        [CompletionService, ServedRequest, Iterator[Piece | None]],
        Generator[dict[str, Any] | None, None, None],
    ]
    done_marker: bool = True  # OpenAI ends a stream with data: [DONE]; llama.cpp does not


def _completions(service: CompletionService, data: dict[str, Any]) -> ServedRequest:
    request = parse_completion_request(data, service.config, service.engine.context_length)
    return service.fit(service.check_suffix(request))


def _chat(service: CompletionService, data: dict[str, Any]) -> ServedRequest:
    return service.fit(parse_chat_request(data, service.config, service.engine))


POST_ROUTES = {
    LLAMA_COMPLETION_PATH: Route(llama.parse_completion, llama.response, llama.chunks, False),
    INFILL_PATH: Route(llama.parse_infill, llama.response, llama.chunks, False),
    CHAT_PATH: Route(
        _chat,
        lambda service, request, pieces: openai.chat_response(service.model_name, pieces),
        lambda service, request, pieces: openai.chat_chunks(
            service.model_name, pieces, request.include_usage
        ),
    ),
    COMPLETIONS_PATH: Route(
        _completions,
        lambda service, request, pieces: openai.completion_response(service.model_name, pieces),
        lambda service, request, pieces: openai.completion_chunks(
            service.model_name, pieces, request.include_usage
        ),
    ),
}


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
        path = self._path()
        if path == MODELS_PATH:
            self._send_json(200, self.server.service.models())
        elif path == HEALTH_PATH:
            self._send_json(200, {"status": "ok"})
        else:
            raise ApiError(404, f"No such path: GET {path}.", code="unknown_url")

    def _post(self) -> None:
        route = POST_ROUTES.get(self._path())
        if route is None:
            self.close_connection = True  # the body stays unread
            raise ApiError(404, f"No such path: POST {self._path()}.", code="unknown_url")
        service = self.server.service
        request = route.parse(service, parse_body(self._body()))
        cancel = threading.Event()
        with service.line.turn():
            if request.max_tokens == 0:  # llama.cpp's n_predict 0: a warm-up, no text
                self._send_json(200, route.whole(service, request, []))
                return
            events = service.events(request, cancel)
            if not request.stream:
                pieces = service.whole(request, events, cancel)
                self._send_json(200, route.whole(service, request, pieces))
                return
            pieces_ = service.pieces(request, events, cancel)
            self._stream(route.chunks(service, request, pieces_), cancel, route.done_marker)

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

    def _send_json(self, status: int, payload: Any) -> None:
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
        self,
        chunks: Generator[dict[str, Any] | None, None, None],
        cancel: threading.Event,
        done_marker: bool = True,
    ) -> None:
        """Server-sent events (until ``[DONE]`` with ``done_marker``, OpenAI's end; llama.cpp
        sends none); a client that goes away cancels generation."""
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
        if done_marker:
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
    """A bound server for ``engine`` (not yet serving: call ``serve_forever``); the engine
    must have been loaded with the server's FIM settings (:func:`load_engine` does)."""
    from codeparrot.generation.config import FimSettings

    layout = getattr(engine, "fim_layout", None)
    if layout is not None and layout.settings != FimSettings.of(config):
        raise ConfigError(
            f"the engine was loaded with the FIM settings {layout.settings.to_dict()}, the "
            f"server's are {FimSettings.of(config).to_dict()}: load it with load_engine"
        )
    return CompletionServer(config, CompletionService(config, engine, model_name_of(config)))


def load_engine(config: ServeConfig) -> Any:
    """The engine of ``config``: the server profile, the server's FIM settings resolved
    once (a ``--fim-tokens`` the tokenizer lacks is refused here, naming it)."""
    from codeparrot.generation import Engine
    from codeparrot.generation.config import FimSettings
    from codeparrot.hub import ModelRef

    return Engine.load(
        ModelRef.parse(config.checkpoint, config.revision),
        device=config.device,
        dtype=config.dtype,
        quantize=config.quantize,
        profile="server",  # tuned at load as the language server's engine is
        fim=FimSettings.of(config),
    )
