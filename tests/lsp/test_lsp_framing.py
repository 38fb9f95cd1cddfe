"""A message header cannot take the language server down: a ``Content-Length`` beyond the
cap, or that is no number, is answered with an error and its message skipped."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time

from codeparrot.lsp.framing import GuardedReader, content_length, stdio_reader


def frame(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}


def read_frames(stream, count: int, timeout: float = 60) -> list[dict]:
    """``count`` framed messages from the server's stdout."""
    out, deadline = [], time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        length = None
        while True:
            line = stream.readline()
            assert line, f"the server closed its output after {out}"
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif not line.strip():
                break
        out.append(json.loads(stream.read(length)))
    return out


def test_a_huge_content_length_is_answered_and_the_server_stays_up():
    """``Content-Length: 1000000000000`` ended `codeparrot lsp` (MemoryError) in 1.3 s."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "codeparrot.lsp"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # a header that is no number: answered, then the next message is read as usual
        proc.stdin.write(b"Content-Length: lots\r\n\r\n" + frame(INITIALIZE))
        proc.stdin.flush()
        [error] = read_frames(proc.stdout, 1)  # before the answer to initialize
        assert error.get("id", 0) is None and "is not a number" in error["error"]["message"]
        [answer] = read_frames(proc.stdout, 1)
        assert answer["id"] == 1 and "capabilities" in answer["result"]
        proc.stdin.write(b"Content-Length: 1000000000000\r\n\r\n" + b"x" * 4096)
        proc.stdin.flush()
        [error] = read_frames(proc.stdout, 1)
        assert "1,000,000,000,000 is more than the 67,108,864 bytes" in error["error"]["message"]
        time.sleep(1.5)
        assert proc.poll() is None  # alive, not reading a terabyte into memory
        proc.stdin.close()  # the stream ends inside the skipped message: a clean exit
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_skipped_message_is_discarded_whole_and_the_next_one_read():
    body = b"y" * 5000
    data = (
        b"Content-Length: 5000\r\nContent-Type: application/json\r\n\r\n" + body
        + frame(INITIALIZE)
    )  # fmt: skip
    stream, answers = io.BytesIO(data), []
    reader = stdio_reader(stream, answers.append)
    reader.limit = 1000

    async def lines():
        got = [await reader.readline() for _ in range(2)]
        return got, await reader.readexactly(int(got[0].split(b":")[1]))

    (header, blank), message = asyncio.run(lines())
    assert header == b"Content-Length: %d\r\n" % len(json.dumps(INITIALIZE)) and blank == b"\r\n"
    assert json.loads(message) == INITIALIZE
    assert len(answers) == 1 and b"5,000 is more than the 1,000 bytes" in answers[0]
    assert isinstance(reader, GuardedReader) and reader.refused == 1


def test_content_length_values():
    assert content_length(b" 42\r\n") == (42, None)
    assert content_length(b"-1\r\n")[1] is not None
    assert content_length(b"1e9\r\n")[1] is not None
    assert content_length(b"9" * 30)[1] is not None
    assert content_length(b"%d" % (64 * 2**20 + 1))[1] is not None


def test_over_tcp_a_huge_content_length_is_answered_and_the_server_stays_up():
    """``lsp --tcp`` reads through the same guard as stdio: a terabyte header is answered
    with an error, the next message is read, and the server keeps its memory."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "codeparrot.lsp", "--tcp", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no TCP server"
                time.sleep(0.2)
        with client, client.makefile("rb") as stream:
            # a header line past the line cap comes in pieces, and is no length
            client.sendall(b"X-Junk: " + b"j" * 20_000 + b"\r\nContent-Length: nine\r\n\r\n")
            [error] = read_frames(stream, 1)
            assert error["id"] is None and "is not a number" in error["error"]["message"]
            client.sendall(frame(INITIALIZE))  # the next message is read as usual
            [answer] = read_frames(stream, 1)
            assert answer["id"] == 1 and "capabilities" in answer["result"]
            client.sendall(b"Content-Length: 1000000000000\r\n\r\n" + b"x" * 4096)
            [error] = read_frames(stream, 1)
            assert (
                "1,000,000,000,000 is more than the 67,108,864 bytes" in error["error"]["message"]
            )
            time.sleep(1.5)
            assert proc.poll() is None  # alive, not reading a terabyte into memory
        # the client left inside the skipped message: the server ends, as pygls' does
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
