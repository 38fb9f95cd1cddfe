"""The language server's message framing, guarded: a header cannot make it allocate.

pygls reads a message's ``Content-Length`` header and then reads that many bytes at
once, so one header ``Content-Length: 1000000000000`` ended ``codeparrot lsp`` with a
MemoryError. :class:`GuardedReader` stands between the stream and pygls' reader loop
(``pygls.io_.run_async``, which asks for ``readline()`` and ``readexactly(n)``): a header
line is read up to :data:`MAX_HEADER_LINE` bytes, a ``Content-Length`` above
:data:`MAX_MESSAGE_BYTES` or that is no number is answered with a JSON-RPC error (id
``null``, as the specification says for a request that cannot be read), and its message
is skipped: the rest of its headers, then its body, discarded a block at a time, so the
next message is read as usual and memory stays bounded. Both transports are guarded:
stdio (:func:`start_io_guarded`) and ``--tcp`` (:func:`start_tcp_guarded`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 2**20
MAX_HEADER_LINE = 8192
_SKIP_BLOCK = 2**16
_DIGITS = re.compile(rb"^[0-9]{1,20}$")
INVALID_REQUEST = -32600


def content_length(value: bytes, limit: int = MAX_MESSAGE_BYTES) -> tuple[int | None, str | None]:
    """(length, None) of a ``Content-Length`` header's value, or (length or None, problem)."""
    text = value.strip()
    if not _DIGITS.match(text):
        shown = text[:40].decode("latin-1")
        return None, f"Content-Length {shown!r} is not a number of bytes"
    length = int(text)
    if length > limit:
        return length, (
            f"Content-Length {length:,} is more than the {limit:,} bytes a message may have; "
            "the message is skipped"
        )
    return length, None


def error_frame(message: str) -> bytes:
    """A framed JSON-RPC error answer to a message that could not be read."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    ).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class GuardedReader:
    """pygls' reader interface over ``read_line(limit)`` and ``read(n)`` coroutines."""

    def __init__(
        self,
        read_line: Callable[[int], Awaitable[bytes]],
        read: Callable[[int], Awaitable[bytes]],
        answer: Callable[[bytes], Any],
        limit: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._read_line = read_line
        self._read = read
        self._answer = answer
        self.limit = limit
        self.refused = 0

    async def readline(self) -> bytes:
        while True:
            line = await self._read_line(MAX_HEADER_LINE)
            name, colon, value = line.partition(b":")
            if not colon or name.strip().lower() != b"content-length":
                return line
            length, problem = content_length(value, self.limit)
            if problem is None:
                return b"Content-Length: %d\r\n" % length  # as pygls' pattern reads it
            self.refused += 1
            logger.warning("a message refused: %s", problem)
            self._answer(error_frame(problem))
            if not await self._skip(length):
                return b""  # the stream ended inside the skipped message

    async def readexactly(self, n: int) -> bytes:
        return await self._read(n)

    async def _skip(self, length: int | None) -> bool:
        """Discard the refused message's other headers and (when its length is a number)
        its body; False when the stream ends first."""
        while True:
            line = await self._read_line(MAX_HEADER_LINE)
            if not line:
                return False
            if not line.strip():
                break
        left = length or 0
        while left > 0:
            block = await self._read(min(left, _SKIP_BLOCK))
            if not block:
                return False
            left -= len(block)
        return True


def stdio_reader(stdin: BinaryIO, answer: Callable[[bytes], Any], executor: Any = None) -> Any:
    """A :class:`GuardedReader` over a blocking binary stream (read in ``executor``)."""

    def in_thread(call: Callable[[int], bytes]) -> Callable[[int], Awaitable[bytes]]:
        return lambda n: asyncio.get_running_loop().run_in_executor(executor, call, n)

    return GuardedReader(in_thread(stdin.readline), in_thread(stdin.read), answer)


def start_io_guarded(server: Any, stdin: BinaryIO | None = None, stdout: Any = None) -> None:
    """``server.start_io()`` (pygls' asynchronous stdio loop) with the guarded reader."""
    from threading import Event

    from pygls.io_ import StdoutWriter, run_async

    writer = StdoutWriter(stdout or sys.stdout.buffer)
    server.protocol.set_writer(writer)
    server._stop_event = Event()  # pygls' own attribute: shutdown() sets it

    reader = stdio_reader(stdin or sys.stdin.buffer, writer.write, server.thread_pool)
    try:
        asyncio.run(
            run_async(
                stop_event=server._stop_event,
                reader=reader,
                protocol=server.protocol,
                logger=logger,
                error_handler=server.report_server_error,
            )
        )
    except BrokenPipeError:
        logger.error("the connection to the client is lost; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


def stream_reader(stream: asyncio.StreamReader, answer: Callable[[bytes], Any]) -> GuardedReader:
    """A :class:`GuardedReader` over an asyncio stream (a ``--tcp`` connection). A header
    line longer than :data:`MAX_HEADER_LINE` comes back in pieces, as from stdio."""

    async def read_line(limit: int) -> bytes:
        try:
            return await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            return end.partial
        except asyncio.LimitOverrunError:
            return await stream.read(limit)

    async def read(n: int) -> bytes:
        try:
            return await stream.readexactly(n)
        except asyncio.IncompleteReadError as end:
            return end.partial

    return GuardedReader(read_line, read, answer)


def start_tcp_guarded(server: Any, host: str, port: int) -> None:
    """``server.start_tcp(host, port)`` (pygls' loop, a client at a time as pygls serves
    them) with the guarded reader: a connection's header cannot make the server allocate."""
    from threading import Event

    from pygls.io_ import run_async

    server._stop_event = stop_event = Event()  # pygls' own attribute: shutdown() sets it

    async def connection(stream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.protocol.set_writer(writer)
        await run_async(
            stop_event=stop_event,
            reader=stream_reader(stream, writer.write),
            protocol=server.protocol,
            logger=logger,
            error_handler=server.report_server_error,
        )
        server.shutdown()

    async def listen() -> None:
        # the stream's buffer limit bounds a header line; a body is read by its length
        server._server = await asyncio.start_server(connection, host, port, limit=MAX_HEADER_LINE)
        logger.info("serving on %s:%s", host, port)
        async with server._server:
            await server._server.serve_forever()

    try:
        asyncio.run(listen())
    except (asyncio.CancelledError, KeyboardInterrupt):
        pass


__all__ = [
    "MAX_MESSAGE_BYTES",
    "GuardedReader",
    "content_length",
    "error_frame",
    "start_io_guarded",
    "start_tcp_guarded",
    "stdio_reader",
    "stream_reader",
]
