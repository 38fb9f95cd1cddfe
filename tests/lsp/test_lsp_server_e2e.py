"""The language server as a real subprocess, driven by pytest-lsp's client over stdio.

The tiny checkpoint has random weights: these tests check protocol behaviour and the
rules of post-processing, not the quality of suggestions. The tests that follow what happens
to a suggestion use a checkpoint set to always suggest one word (``suggesting_checkpoint``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sys
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types as t
from pygls.exceptions import JsonRpcException
from pytest_lsp.client import LanguageClient, make_test_lsp_client

pytestmark = pytest.mark.asyncio(loop_scope="module")

URI = "file:///project/example.py"


async def start(checkpoint: Path | None, *flags: str, **init) -> LanguageClient:
    client = make_test_lsp_client()
    args = ["-m", "codeparrot.lsp", *flags]
    if checkpoint is not None:
        args += ["--checkpoint", str(checkpoint)]
    await client.start_io(sys.executable, *args)
    encodings = init.pop("encodings", None)
    caps = t.ClientCapabilities(
        general=t.GeneralClientCapabilities(position_encodings=encodings) if encodings else None
    )
    client.init_result = await client.initialize_session(
        t.InitializeParams(capabilities=caps, **init)
    )
    return client


async def stop(client: LanguageClient) -> None:
    await client.shutdown_session()
    await client.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_checkpoint: Path):
    c = await start(tiny_checkpoint)
    yield c
    await stop(c)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def suggesting(suggesting_checkpoint: tuple[Path, str]):
    """A server over the checkpoint that suggests its word wherever it is asked."""
    c = await start(suggesting_checkpoint[0])
    yield c
    await stop(c)


def open_doc(client: LanguageClient, text: str, uri: str = URI, version: int = 1) -> str:
    client.text_document_did_open(
        t.DidOpenTextDocumentParams(t.TextDocumentItem(uri, "python", version, text))
    )
    return uri


def inline_params(uri: str, line: int, character: int) -> t.InlineCompletionParams:
    return t.InlineCompletionParams(
        context=t.InlineCompletionContext(trigger_kind=t.InlineCompletionTriggerKind.Automatic),
        text_document=t.TextDocumentIdentifier(uri),
        position=t.Position(line, character),
    )


async def inline(client, uri, line, character) -> t.InlineCompletionList:
    return await client.text_document_inline_completion_async(inline_params(uri, line, character))


async def complete(client, uri, line, character) -> t.CompletionList:
    return await client.text_document_completion_async(
        t.CompletionParams(t.TextDocumentIdentifier(uri), t.Position(line, character))
    )


async def context(client, uri, line, character) -> dict:
    return await client.workspace_execute_command_async(
        t.ExecuteCommandParams("codeparrot.cursorContext", [uri, line, character])
    )


async def stats(client) -> dict:
    return await client.workspace_execute_command_async(
        t.ExecuteCommandParams("codeparrot.stats", [])
    )


def send_raw(client: LanguageClient, method: str, params) -> asyncio.Future:
    """Send a request the typed client would refuse to build; its answer's future."""
    msg_id = f"raw-{uuid.uuid4()}"
    answer: concurrent.futures.Future = concurrent.futures.Future()
    client.protocol._request_futures[msg_id] = answer
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    client._server.stdin.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    return asyncio.wrap_future(answer)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def check_suggestion(text: str) -> None:
    """What every suggestion must be, whatever the weights."""
    assert text.strip(), "whitespace-only suggestion"
    assert not text.endswith((" ", "\t", "\n")), "trailing whitespace"


# -- initialisation -------------------------------------------------------------------


async def test_capabilities(client: LanguageClient):
    caps = client.init_result.capabilities
    # pygls advertises inline completion as an empty options object: check presence
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None
    assert "." in caps.completion_provider.trigger_characters
    assert caps.position_encoding == t.PositionEncodingKind.Utf16
    assert caps.text_document_sync.change == t.TextDocumentSyncKind.Incremental
    assert client.init_result.server_info.name == "codeparrot"


# -- both completion methods ------------------------------------------------------------


async def test_inline_and_completion_items_agree(
    suggesting: LanguageClient, suggesting_checkpoint: tuple[Path, str]
):
    text = "import os\n\n\ndef read(path):\n    with open(path) as fh:\n        data = fh.re"
    uri = open_doc(suggesting, text, "file:///project/agree.py")
    line, col = 5, len("        data = fh.re")
    items = (await inline(suggesting, uri, line, col)).items
    listing = await complete(suggesting, uri, line, col)
    assert listing.is_incomplete
    (item,) = items
    assert item.insert_text == suggesting_checkpoint[1]  # the word, up to the line end
    check_suggestion(item.insert_text)
    assert item.range.start == item.range.end == t.Position(line, col)
    assert "\n" not in item.insert_text  # single line: not at an empty block
    (citem,) = listing.items
    edit = citem.text_edit
    # the item replaces the word under the cursor ("re") so editors filtering by it keep it
    assert edit.range.start == t.Position(line, col - 2)
    assert edit.range.end == t.Position(line, col)
    assert edit.new_text == "re" + item.insert_text
    assert citem.filter_text.startswith("re")


async def test_repeated_request_is_served_from_cache(client: LanguageClient):
    uri = open_doc(client, "def add(a, b):\n    return a", "file:///project/cache.py")
    first = await inline(client, uri, 1, 12)
    before = await stats(client)
    second = await inline(client, uri, 1, 12)
    after = await stats(client)
    assert second == first
    assert after["generated"] == before["generated"]
    assert after["cached"] == before["cached"] + 1


async def test_typing_through_a_suggestion_uses_the_cache(
    suggesting: LanguageClient, suggesting_checkpoint: tuple[Path, str]
):
    client = suggesting
    head = "value_0 = compute(0"
    uri = open_doc(client, head, "file:///project/typing.py")
    items = (await inline(client, uri, 0, len(head))).items
    suggestion = items[0].insert_text
    assert suggestion == suggesting_checkpoint[1] and len(suggestion) >= 2
    typed = suggestion[0]
    client.text_document_did_change(
        t.DidChangeTextDocumentParams(
            t.VersionedTextDocumentIdentifier(version=2, uri=uri),
            [
                t.TextDocumentContentChangePartial(
                    range=t.Range(t.Position(0, len(head)), t.Position(0, len(head))),
                    text=typed,
                )
            ],
        )
    )
    before = await stats(client)
    rest = (await inline(client, uri, 0, len(head) + utf16_len(typed))).items
    after = await stats(client)
    assert after["generated"] == before["generated"]  # no model call
    assert [i.insert_text for i in rest] == [suggestion[1:]]


# -- positions ----------------------------------------------------------------------------


async def test_utf16_positions_with_emoji(client: LanguageClient, suggesting: LanguageClient):
    line0 = 's = "😀😀" + go'
    uri = open_doc(client, line0 + "\nnext = 1\n", "file:///project/emoji.py")
    end16 = utf16_len(line0)  # 16 units for 14 code points
    ctx = await context(client, uri, 0, end16)
    assert ctx["lineHead"] == line0 and ctx["lineTail"] == ""
    assert ctx["position"] == {"line": 0, "character": end16}
    # between the emoji (unit 7), and inside the second one's surrogate pair (unit 8)
    ctx = await context(client, uri, 0, 7)
    assert ctx["lineHead"] == 's = "😀'
    ctx = await context(client, uri, 0, 8)
    assert ctx["lineHead"] == 's = "😀' and ctx["position"]["character"] == 7
    # a model that suggests at every position: its item replaces the word "go", in units
    uri = open_doc(suggesting, line0 + "\nnext = 1\n", "file:///project/emoji.py")
    listing = await complete(suggesting, uri, 0, end16)
    assert listing.items
    for item in listing.items:
        assert item.text_edit.range.start == t.Position(0, end16 - 2)
        assert item.text_edit.range.end == t.Position(0, end16)


async def test_crlf_document(client: LanguageClient):
    text = "def f(x):\r\n    y = x + 1\r\n    return y\r\n\r\ndef g(a):\r\n"
    uri = open_doc(client, text, "file:///project/crlf.py")
    ctx = await context(client, uri, 1, 9)
    assert ctx["lineHead"] == "    y = x" and ctx["lineTail"] == " + 1"
    assert "\r" not in ctx["prefixEnd"]
    # past the end of a line means its end, never the "\r"
    ctx = await context(client, uri, 2, 500)
    assert ctx["lineHead"] == "    return y" and ctx["position"]["character"] == 12
    # an empty block: the suggestion may span lines, with the document's line breaks
    ctx = await context(client, uri, 4, 9)
    assert ctx["blockIndent"] == 0
    await inline(client, uri, 4, 9)  # answered (its CRLF breaks: test_lsp_completion.py)


async def test_last_line_and_beyond(client: LanguageClient, suggesting: LanguageClient):
    text = "x = 1\ny = x +"
    uri = open_doc(client, text, "file:///project/last.py")
    ctx = await context(client, uri, 1, 7)
    assert ctx["lineHead"] == "y = x +" and ctx["offset"] == len(text)
    ctx = await context(client, uri, 9, 0)  # past the last line: the end of the text
    assert ctx["offset"] == len(text)
    uri_s = open_doc(suggesting, text, "file:///project/last.py")
    items = (await inline(suggesting, uri_s, 1, 7)).items
    assert items and all(item.range.start == t.Position(1, 7) for item in items)
    # a document ending with a line break has an empty last line
    uri2 = open_doc(client, "x = 1\n", "file:///project/last2.py")
    ctx = await context(client, uri2, 1, 0)
    assert ctx["lineCount"] == 2 and ctx["offset"] == 6 and ctx["lineHead"] == ""


async def test_empty_document(client: LanguageClient, suggesting: LanguageClient):
    uri = open_doc(client, "", "file:///project/empty.py")
    await inline(client, uri, 0, 0)
    uri_s = open_doc(suggesting, "", "file:///project/empty.py")
    result = await inline(suggesting, uri_s, 0, 0)
    assert result.items
    for item in result.items:
        check_suggestion(item.insert_text)
        assert item.range.start == t.Position(0, 0)
    await complete(client, uri, 0, 0)


async def test_incremental_changes_follow_lsp_line_breaks(client: LanguageClient):
    # a form feed is no line break in LSP (str.splitlines would split there)
    uri = open_doc(client, "a = 1\x0cb = 2\nc = 3\n", "file:///project/ff.py")
    client.text_document_did_change(
        t.DidChangeTextDocumentParams(
            t.VersionedTextDocumentIdentifier(version=2, uri=uri),
            [
                t.TextDocumentContentChangePartial(
                    range=t.Range(t.Position(1, 4), t.Position(1, 5)), text="30"
                )
            ],
        )
    )
    ctx = await context(client, uri, 1, 6)
    assert ctx["lineHead"] == "c = 30" and ctx["version"] == 2
    client.text_document_did_change(
        t.DidChangeTextDocumentParams(
            t.VersionedTextDocumentIdentifier(version=3, uri=uri),
            [t.TextDocumentContentChangeWholeDocument(text="z = 0\n")],
        )
    )
    ctx = await context(client, uri, 0, 5)
    assert ctx["lineHead"] == "z = 0" and ctx["lineCount"] == 2


async def test_ten_megabyte_document(client: LanguageClient, suggesting: LanguageClient):
    block = "def helper_{i}(value):\n    return value * {i}\n\n"
    parts, size = [], 0
    i = 0
    while size < 10_000_000:
        chunk = block.format(i=i)
        parts.append(chunk)
        size += len(chunk)
        i += 1
    text = "".join(parts) + "def last(x):\n    return helper_1(x) +"
    uri = open_doc(client, text, "file:///project/big.py")
    last = text.count("\n")
    col = len("    return helper_1(x) +")
    await asyncio.wait_for(inline(client, uri, last, col), timeout=60)
    uri_s = open_doc(suggesting, text, "file:///project/big.py")  # a model that suggests
    result = await asyncio.wait_for(inline(suggesting, uri_s, last, col), timeout=60)
    assert result.items and all(i.range.start == t.Position(last, col) for i in result.items)
    ctx = await context(client, uri, last, col)
    assert ctx["offset"] == len(text)
    mid = await context(client, uri, 3 * 1000 + 1, 4)
    assert mid["lineHead"] == "    " and mid["lineTail"] == "return value * 1000"
    client.text_document_did_close(t.DidCloseTextDocumentParams(t.TextDocumentIdentifier(uri)))


# -- responsiveness -------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_suggesting(suggesting_checkpoint: tuple[Path, str]):
    """The same wait over the model that suggests its word wherever it is asked, so that
    the newest request's answer can be checked, not only the counters."""
    c = await start(suggesting_checkpoint[0], "--debounce-ms", "400", "--cache-size", "0")
    yield c
    await stop(c)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_client(tiny_checkpoint: Path):
    """A server that waits 400 ms before generating: requests overlap reliably."""
    c = await start(tiny_checkpoint, "--debounce-ms", "400", "--cache-size", "0")
    yield c
    await stop(c)


async def test_supersession(
    slow_suggesting: LanguageClient, suggesting_checkpoint: tuple[Path, str]
):
    slow_client = slow_suggesting
    uri = open_doc(slow_client, "def f(a, b):\n    return a +", "file:///project/super.py")
    before = await stats(slow_client)
    burst = [
        asyncio.ensure_future(inline(slow_client, uri, 1, 14)),
        asyncio.ensure_future(inline(slow_client, uri, 1, 13)),
        asyncio.ensure_future(complete(slow_client, uri, 1, 14)),
    ]
    await asyncio.sleep(0.05)
    newest = await inline(slow_client, uri, 1, 14)
    older = await asyncio.gather(*burst)
    assert older[0].items == () and older[1].items == () and older[2].items == ()
    assert older[2].is_incomplete  # the client asks again
    after = await stats(slow_client)
    assert after["superseded"] - before["superseded"] == 3
    assert after["generated"] - before["generated"] == 1  # only the newest ran the model
    # and the newest is answered
    assert [item.insert_text.strip() for item in newest.items] == [suggesting_checkpoint[1]]


async def test_the_newest_request_overall_is_served_next(
    slow_suggesting: LanguageClient, suggesting_checkpoint: tuple[Path, str]
):
    """500 requests pending over 500 documents: a new one supersedes them all, so only it
    reaches the model (the debounce keeps the 500 pending while the 501st is sent)."""
    slow_client = slow_suggesting
    slow_client.workspace_did_change_configuration(
        t.DidChangeConfigurationParams(settings={"debounceMs": 3000})
    )
    try:
        uris = [
            open_doc(slow_client, f"value_{i} = compute(", f"file:///project/many{i}.py")
            for i in range(501)
        ]
        before = await stats(slow_client)
        pending = [asyncio.ensure_future(inline(slow_client, uri, 0, 16)) for uri in uris[:500]]
        await asyncio.sleep(0.05)  # the tasks send their requests
        newest = await inline(slow_client, uris[500], 0, 16)
        older = await asyncio.gather(*pending)
        after = await stats(slow_client)
    finally:
        slow_client.workspace_did_change_configuration(
            t.DidChangeConfigurationParams(settings={"debounceMs": 400})
        )
    assert all(answer.items == () for answer in older)
    assert after["superseded"] - before["superseded"] == 500
    assert after["engineCalls"] - before["engineCalls"] == 1  # the newest, and only it
    assert after["generated"] - before["generated"] == 1
    assert [item.insert_text.strip() for item in newest.items] == [suggesting_checkpoint[1]]


async def test_cancel_request_and_malformed_params(slow_client: LanguageClient):
    uri = open_doc(slow_client, "import sys\nprint(sys.", "file:///project/cancel.py")
    before = await stats(slow_client)
    msg_id = str(uuid.uuid4())
    pending = asyncio.ensure_future(
        slow_client.protocol.send_request_async(
            t.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, 1, 10), msg_id=msg_id
        )
    )
    await asyncio.sleep(0.1)  # sent, and waiting in the server's debounce
    slow_client.cancel_request(t.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcException) as info:
        await pending
    assert info.value.code == t.LSPErrorCodes.RequestCancelled
    after = await stats(slow_client)
    assert after["cancelled"] - before["cancelled"] == 1
    assert after["generated"] == before["generated"]  # cancelled before any model work

    # malformed: the server answers with an error (or nothing) and keeps running
    bad = send_raw(
        slow_client,
        t.TEXT_DOCUMENT_INLINE_COMPLETION,
        {"textDocument": 5, "position": "end"},
    )
    with pytest.raises(JsonRpcException) as info:
        await asyncio.wait_for(bad, timeout=10)
    assert info.value.code == -32602  # InvalidParams
    also_bad = send_raw(slow_client, t.TEXT_DOCUMENT_COMPLETION, [1, 2, 3])
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(also_bad, timeout=10)
    unknown = await inline(slow_client, "file:///never/opened.py", 0, 0)
    assert unknown.items == ()
    negative = await context(slow_client, uri, -3, -7)
    assert negative["offset"] == 0
    # still serving
    result = await inline(slow_client, uri, 1, 10)
    for item in result.items:
        check_suggestion(item.insert_text)


# -- configuration --------------------------------------------------------------------------


async def test_utf8_and_checkpoint_from_initialization_options(tiny_checkpoint: Path):
    """No --checkpoint: the editor names it; the client prefers utf-8 positions."""
    c = await start(
        None,
        encodings=[t.PositionEncodingKind.Utf8, t.PositionEncodingKind.Utf16],
        initialization_options={"codeparrot": {"checkpoint": str(tiny_checkpoint), "maxTokens": 4}},
    )
    try:
        assert c.init_result.capabilities.position_encoding == t.PositionEncodingKind.Utf8
        line0 = "naïve = '😀' + x"
        uri = open_doc(c, line0)
        end8 = len(line0.encode("utf-8"))
        ctx = await context(c, uri, 0, end8)
        assert ctx["encoding"] == "utf-8"
        assert ctx["lineHead"] == line0
        ctx = await context(c, uri, 0, len("naï".encode()))
        assert ctx["lineHead"] == "naï"
        for item in (await inline(c, uri, 0, end8)).items:
            check_suggestion(item.insert_text)
            assert item.range.start == t.Position(0, end8)
        assert (await stats(c))["generated"] == 1  # the model from initializationOptions
        # a bad value is reported and the old settings stay
        c.workspace_did_change_configuration(
            t.DidChangeConfigurationParams(settings={"temperature": -1, "bogus": 1})
        )
        await asyncio.sleep(0.3)
        texts = " ".join(m.message for m in c.messages)
        assert "setting 'temperature': cannot use -1: must be a number >= 0" in texts
    finally:
        await stop(c)


async def test_non_finite_settings_are_refused_and_logged(tmp_path: Path):
    log = tmp_path / "lsp.log"
    c = await start(
        None, "--log-file", str(log), initialization_options={"temperature": float("inf")}
    )
    try:
        c.workspace_did_change_configuration(
            t.DidChangeConfigurationParams(settings={"codeparrot": {"temperature": float("nan")}})
        )
        c.workspace_did_change_configuration(
            t.DidChangeConfigurationParams(settings={"topP": "-Infinity"})
        )
        await asyncio.sleep(0.3)
        refusals = [m.message for m in c.messages if "finite" in m.message]
        assert len(refusals) == 3
        assert "initializationOptions rejected" in refusals[0] and "inf" in refusals[0]
        assert "didChangeConfiguration rejected" in refusals[1] and "nan" in refusals[1]
    finally:
        await stop(c)
    logged = log.read_text()
    assert "initializationOptions rejected" in logged and "cannot use nan" in logged


async def test_no_checkpoint_answers_empty_and_says_why():
    c = await start(None)
    try:
        uri = open_doc(c, "x = ")
        assert (await inline(c, uri, 0, 4)).items == ()
        await asyncio.sleep(0.2)
        assert any("checkpoint" in m.message for m in c.messages)
    finally:
        await stop(c)


# -- acceptance statistics ----------------------------------------------------------------


async def suggestion_somewhere(c: LanguageClient, tag: str) -> tuple[str, str, t.Position]:
    """(uri, suggestion, position) on a fresh line of a server over the suggesting
    checkpoint, which suggests there."""
    head = f"result_{tag} = compute({len(tag)}, "
    uri = open_doc(c, head, f"file:///project/stats_{tag}.py")
    (item,) = (await inline(c, uri, 0, len(head))).items
    assert item.insert_text
    return uri, item, t.Position(0, len(head))


def insert(c: LanguageClient, uri: str, at: t.Position, text: str, version: int = 2) -> None:
    c.text_document_did_change(
        t.DidChangeTextDocumentParams(
            t.VersionedTextDocumentIdentifier(version=version, uri=uri),
            [t.TextDocumentContentChangePartial(range=t.Range(at, at), text=text)],
        )
    )


async def test_acceptance_statistics_through_the_server(
    suggesting_checkpoint: tuple[Path, str], tmp_path: Path
):
    from codeparrot.lsp.stats import summarise

    checkpoint, word = suggesting_checkpoint
    path = tmp_path / "stats.jsonl"
    c = await start(checkpoint, "--stats-file", str(path), "--cache-size", "0")
    try:
        # accepted by the editor's notification (the command the item carries)
        uri, item, _ = await suggestion_somewhere(c, "a")
        assert item.command.command == "codeparrot.accept"
        (verdict,) = item.command.arguments
        c.protocol.notify("codeparrot/acceptCompletion", verdict)
        # dismissed by the editor
        uri, item, _ = await suggestion_somewhere(c, "b")
        c.protocol.notify("codeparrot/rejectCompletion", item.command.arguments[0])
        # inferred: the next edit inserts the whole suggestion / something else
        uri, item, at = await suggestion_somewhere(c, "c")
        insert(c, uri, at, item.insert_text)
        uri, item, at = await suggestion_somewhere(c, "d")
        insert(c, uri, at, "#")
        uri, item, at = await suggestion_somewhere(c, "e")
        assert item.insert_text == word and len(word) >= 2
        insert(c, uri, at, item.insert_text[0])  # partially accepted
        ids = {key: value for key, value in (await stats(c)).items() if key == "generated"}
        assert ids["generated"] >= 5
    finally:
        await stop(c)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    decided = [(r["event"], r.get("via")) for r in records if r["event"] != "shown"]
    assert decided == [
        ("accepted", "notification"),
        ("dismissed", "notification"),
        ("accepted", "inferred"),
        ("dismissed", "inferred"),
        ("partial", "inferred"),
    ]
    assert all(r["checkpoint"] == str(checkpoint) for r in records)
    shown = [r for r in records if r["event"] == "shown"]
    assert len(shown) == 5 and all(r["latencyMs"] > 0 for r in shown)
    per, skipped = summarise(path)
    counts = per[str(checkpoint)]
    assert counts["accepted"] == 2 and skipped == 0
    assert counts["acceptanceRate"] == 2 / counts["shown"]


async def test_unwritable_or_corrupt_statistics_file_keeps_serving(
    suggesting_checkpoint: tuple[Path, str], tmp_path: Path
):
    checkpoint = suggesting_checkpoint[0]
    log = tmp_path / "lsp.log"
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    c = await start(checkpoint, "--stats-file", str(blocked), "--log-file", str(log))
    try:
        for n in range(3):
            uri = open_doc(c, f"x{n} = f(", f"file:///project/unwritable{n}.py")
            await inline(c, uri, 0, 6)
        generated = (await stats(c))["generated"]
    finally:
        await stop(c)
    assert generated == 3  # kept serving
    # said once, not at every event
    assert log.read_text().count("acceptance statistics off for this session") == 1

    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_bytes(b"\x00garbage{not json")
    c = await start(checkpoint, "--stats-file", str(corrupt), "--log-file", str(log))
    try:
        await suggestion_somewhere(c, "corrupt")
        await suggestion_somewhere(c, "corrupt2")
    finally:
        await stop(c)
    lines = corrupt.read_bytes().split(b"\n")
    assert lines[0] == b"\x00garbage{not json"  # left as it was, the records after it
    records = [json.loads(line) for line in lines[1:] if line]
    assert len(records) >= 2 and all(r["event"] for r in records)  # a suggestion each
    assert log.read_text().count("ended in a torn or foreign line") == 1
