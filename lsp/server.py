"""The pygls language server: ghost text and completion items from the shared engine.

Handlers are thin: they turn a request into a call of :func:`codeparrot.lsp.completion.suggest`
and its answer back into LSP types. What makes it feel responsive lives in
:meth:`CodeparrotServer.suggestion`:

- generation runs in one worker thread, never on the event loop;
- a newer request supersedes every older one, for any document (an editor shows one
  suggestion, at the cursor it last asked about): their cancel events are set, decoding
  stops within one token and queued generations return at once, so the newest request is
  served next; the older ones answer with an empty result;
- ``$/cancelRequest`` cancels the handler's task, which sets the same event;
- an LRU cache answers repeated requests and a user typing through a suggestion.

Documents are kept by :class:`codeparrot.lsp.documents.Document` (LSP line breaks, positions in the
negotiated encoding, large files indexed once per version), not by pygls' workspace.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from codeparrot import __version__
from codeparrot.errors import CodeparrotError
from codeparrot.generation.config import FimSettings
from codeparrot.generation.syntax import fits_in_window
from codeparrot.lsp.cache import PREFIX_KEY, SuggestionCache
from codeparrot.lsp.completion import Outcome, suffix_tokens, suggest
from codeparrot.lsp.config import LspConfig, apply_settings
from codeparrot.lsp.documents import UTF16, Document, Position, Window, cursor_window
from codeparrot.lsp.postprocess import block_indent
from codeparrot.lsp.stats import StatsRecorder, default_stats_file
from codeparrot.prompting import prompt_quantum, window_chars

logger = logging.getLogger("codeparrot.lsp")

TRIGGER_CHARACTERS = [".", "(", "[", "{", ",", " ", "=", ":"]
# Characters of the document on each side of the cursor the syntax check may read (it
# parses only the top-level statement around the cursor within them).
SYNTAX_CHECK_CHARS = 20_000
# What the shipped editor set-ups run when a suggestion is accepted: a client-side command
# that sends ACCEPT_NOTIFICATION (llm-ls's llm-ls/acceptCompletion has the same shape).
ACCEPT_COMMAND = "codeparrot.accept"
ACCEPT_NOTIFICATION = "codeparrot/acceptCompletion"
REJECT_NOTIFICATION = "codeparrot/rejectCompletion"
_WORD_END = re.compile(r"\w*$")


@dataclass(frozen=True)
class Suggestion:
    """A suggestion placed in a document: insert ``text`` at ``position``.

    ``word_start`` is where the identifier under the cursor starts, ``word`` its text:
    completion items replace it so that editors filtering by it keep the item.
    ``request_id`` names it in the acceptance statistics.
    """

    text: str
    position: types.Position
    word_start: types.Position
    word: str
    request_id: str = ""

    def accept_command(self) -> types.Command:
        verdict = {"requestId": self.request_id, "acceptedCompletion": 0, "shownCompletions": [0]}
        return types.Command(
            title="codeparrot: accepted", command=ACCEPT_COMMAND, arguments=[verdict]
        )


class CodeparrotProtocol(LanguageServerProtocol):
    """pygls' protocol with our own document store and errors for malformed requests.

    The document handlers are plain functions, not generators like pygls' own: pygls
    keeps a future per generator-handled notification for the life of the connection.
    """

    _server: CodeparrotServer

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        doc = params.text_document
        self._server.documents[doc.uri] = Document(doc.uri, doc.text, doc.version)
        self._server.touched(doc.uri)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        self._server.apply_changes(params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        self._server.close_document(params.text_document.uri)

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException:
            # pygls drops a request it cannot parse; answer it so the client does not wait
            if isinstance(data, dict) and "id" in data and "method" in data:
                error = JsonRpcInvalidParams(f"invalid params for {data.get('method')}")
                self._send_response(data["id"], error=error.to_response_error())
            raise


class CodeparrotServer(LanguageServer):
    """The language server; one instance per client connection."""

    def __init__(self, config: LspConfig) -> None:
        super().__init__(
            "codeparrot",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=CodeparrotProtocol,
        )
        self.config = config
        self.documents: dict[str, Document] = {}
        self._recent: dict[str, None] = {}  # open documents, least recently edited first
        self.cache = SuggestionCache(config.cache_size)
        self.acceptance = StatsRecorder(
            (config.stats_file or default_stats_file()) if config.stats else None,
            None if config.checkpoint is None else str(config.checkpoint),
        )
        self._generator = ThreadPoolExecutor(1, thread_name_prefix="codeparrot-generate")
        self._engine: Future | None = None
        self._tuning: Any = None  # the loaded engine's LiveTuning (generation thread only)
        self._compile_error_logged = False
        self._fim_notice_logged = False
        self._engine_path: Any = None
        self._load_error_shown = False
        self._pending: dict[str, threading.Event] = {}
        self.stats = {
            "requests": 0,
            "generated": 0,
            "cached": 0,
            "superseded": 0,
            "cancelled": 0,
            "engineCalls": 0,  # requests that reached the model (not superseded before)
            "servedDuringCompile": 0,  # of those, run while the step still compiled
            "promptTokens": 0,
            "promptTokensReused": 0,  # keys/values the engine kept from earlier prompts
            "newTokens": 0,
            "syntaxFailed": 0,  # suggestions that failed the syntax check (draws were made)
            "syntaxRedrawn": 0,  # of those, replaced by a draw that passes
            "syntaxCut": 0,  # syntax checks whose draws their deadline stopped
        }

    # -- configuration and model -------------------------------------------------------
    @property
    def encoding(self) -> str:
        try:
            enc = self.workspace.position_encoding
        except RuntimeError:  # not initialised yet
            return UTF16
        return str(enc.value if hasattr(enc, "value") else enc or UTF16)

    def load_engine(self) -> None:
        """Start loading the configured checkpoint in the generation thread (once per path)."""
        from codeparrot.hub import ModelRef

        path = self.config.checkpoint
        if path is not None:
            path = ModelRef.parse(path, self.config.revision)
        if path is None or path == self._engine_path:
            return
        self._engine_path = path
        self._load_error_shown = False
        self._compile_error_logged = False
        self._fim_notice_logged = False
        self._engine = self._generator.submit(self._load, path, self.config)
        self.cache.clear()

    def _load(self, path: Any, config: LspConfig) -> Any:
        """The engine of ``path`` (generation thread), with a ``LiveTuning`` where the first
        suggestions choose its steps' threads: on a CPU, unless ``threads`` or compiled
        steps fixed them at load."""
        from codeparrot.generation.heap import settle_heap

        try:
            engine = _load(
                path,
                config.device,
                config.threads,
                config.quantize,
                config.compile,
                FimSettings.of(config),
            )
        finally:
            settle_heap()  # the start is over (lsp.cli paused collections for it)
        self._tuning = engine.tuning
        return engine

    def update_settings(self, settings: Any, source: str) -> None:
        """Apply editor settings; bad values are reported and the old settings kept."""
        try:
            config, warnings = apply_settings(self.config, settings)
        except CodeparrotError as e:
            self.show(types.MessageType.Error, f"codeparrot: {source} rejected: {e}")
            return
        for warning in warnings:
            self.show(types.MessageType.Warning, f"codeparrot: {source}: {warning}")
        if config != self.config:
            logger.info("settings from %s: %s", source, config.to_dict())
            self.config = config
            self.cache = SuggestionCache(config.cache_size)
            self.acceptance.checkpoint = (
                None if config.checkpoint is None else str(config.checkpoint)
            )
            self.load_engine()

    def show(self, kind: types.MessageType, message: str) -> None:
        logger.warning(message)
        try:
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))
        except Exception:  # no client attached (unit use)
            pass

    async def engine(self):
        """The loaded engine, or ``None`` (with one message to the user) when there is none."""
        if self._engine is None:
            if not self._load_error_shown:
                self._load_error_shown = True
                self.show(
                    types.MessageType.Error,
                    "codeparrot: no checkpoint configured; start the server with "
                    "--checkpoint DIR or set `checkpoint` in initializationOptions",
                )
            return None
        try:
            # shielded: a cancelled request must not cancel a load still in the queue
            engine = await asyncio.shield(asyncio.wrap_future(self._engine))
        except Exception as e:  # CheckpointError, or whatever torch raised while loading
            if not self._load_error_shown:
                self._load_error_shown = True
                logger.exception("loading %s failed", self._engine_path)
                self.show(types.MessageType.Error, f"codeparrot: {e}")
            return None
        self._follow_fim_settings(engine)
        if engine.compile_error is not None and not self._compile_error_logged:
            self._compile_error_logged = True  # the eager step serves on: a log line only
            logger.warning("compiling the decoding step failed: %s", engine.compile_error)
        return engine

    def _follow_fim_settings(self, engine: Any) -> None:
        """Give the engine the editor's FIM settings where they changed since it was
        loaded (resolved then, once, not at each keystroke); settings its tokenizer
        cannot use are reported and the engine's kept."""
        wanted = FimSettings.of(self.config)
        have = engine.fim_layout.settings
        if wanted == have:
            return
        try:
            engine.use_fim(wanted)
        except CodeparrotError as e:
            self.show(types.MessageType.Error, f"codeparrot: settings rejected: {e}")
            self.config = self.config.replace(**have.to_dict())
            return
        self.cache.clear()  # suggestions made with the old layout
        logger.info("%s: fill-in-the-middle settings %s", self._engine_path, wanted.to_dict())

    # -- documents -----------------------------------------------------------------------
    def touched(self, uri: str) -> None:
        """Remember ``uri`` as the most recently opened or edited document."""
        self._recent.pop(uri, None)
        self._recent[uri] = None

    def other_documents(self, uri: str) -> list[tuple[str, str]]:
        """``(uri, text)`` of the open documents but ``uri``, most recently edited first."""
        order = [u for u in reversed(self._recent) if u != uri and u in self.documents]
        return [(u, self.documents[u].text) for u in order]

    def apply_changes(self, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = self.documents.get(uri)
        if doc is None:
            logger.warning("change to %s, which is not open", uri)
            return
        self.touched(uri)
        for change in params.content_changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                r = change.range
                start = doc.offset_at(r.start.line, r.start.character, self.encoding)
                end = doc.offset_at(r.end.line, r.end.character, self.encoding)
                self.acceptance.edited(uri, start, end - start, change.text)
                doc.apply_change(
                    change.text,
                    Position(r.start.line, r.start.character),
                    Position(r.end.line, r.end.character),
                    self.encoding,
                )
            else:
                self.acceptance.edited(uri, -1, -1, change.text)  # a whole new text
                doc.apply_change(change.text)
        doc.version = params.text_document.version

    def close_document(self, uri: str) -> None:
        self.documents.pop(uri, None)
        self._recent.pop(uri, None)
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.set()

    # -- the one path from a cursor to a suggestion ---------------------------------------
    async def suggestion(self, uri: str, position: types.Position) -> Suggestion | None:
        started = time.perf_counter()
        self.stats["requests"] += 1
        doc = self.documents.get(uri)
        if doc is None:
            return None
        config, encoding = self.config, self.encoding
        offset = doc.offset_at(position.line, position.character, encoding)
        window = cursor_window(
            doc,
            offset,
            window_chars(config.context_tokens),
            config.suffix_chars,
            grid=prompt_quantum(config.context_tokens),
        )
        base = block_indent(window) if config.multiline else None
        fits = None
        if config.syntax_samples:  # the check reads the statement around the cursor, whole
            around = cursor_window(doc, offset, SYNTAX_CHECK_CHARS, SYNTAX_CHECK_CHARS)
            fits = fits_in_window(around.prefix, around.suffix)

        self._supersede_pending()
        cancel = threading.Event()
        self._pending[uri] = cancel
        try:
            text = self.cache.get(uri, window.prefix, window.suffix)
            if text is not None:
                self.stats["cached"] += 1
            else:
                others = self.other_documents(uri) if config.workspace_share > 0 else []
                outcome = await self._generate(window, base, config, cancel, others, fits)
                if outcome is None:
                    return None  # superseded, cancelled or no model
                # "" remembers that there was nothing worth showing here
                text = outcome.suggestion or ""
                self.cache.put(uri, window.prefix, window.suffix, text)
            if not text:
                return None
            found = self._place(doc, window, offset, text, encoding)
            latency_ms = (time.perf_counter() - started) * 1000
            self.acceptance.shown(found.request_id, uri, offset, found.text, latency_ms)
            return found
        except asyncio.CancelledError:  # $/cancelRequest
            cancel.set()
            self.stats["cancelled"] += 1
            raise
        finally:
            if self._pending.get(uri) is cancel:
                del self._pending[uri]

    def _supersede_pending(self) -> None:
        """Cancel every request still waiting or generating, whatever its document."""
        for previous in self._pending.values():
            previous.set()
            self.stats["superseded"] += 1
        self._pending.clear()

    async def _generate(
        self,
        window: Window,
        base: int | None,
        config: LspConfig,
        cancel: threading.Event,
        others: list[tuple[str, str]],
        fits: Callable[[str], bool] | None = None,
    ) -> Outcome | None:
        if config.debounce_ms:
            await asyncio.sleep(config.debounce_ms / 1000)
            if cancel.is_set():
                return None
        engine = await self.engine()
        if engine is None or cancel.is_set():
            return None
        future = self._generator.submit(
            self._suggest, engine, window, base, config, cancel, others, fits
        )
        try:
            outcome: Outcome | None = await asyncio.wrap_future(future)
        except Exception:  # one failed suggestion must not take the editor's server down
            logger.exception("generation failed")
            return None
        if outcome is None:
            return None
        self.stats["generated"] += 1
        self.stats["promptTokens"] += outcome.prompt_tokens
        self.stats["promptTokensReused"] += outcome.cached_prompt_tokens
        self.stats["newTokens"] += outcome.new_tokens
        self.stats["syntaxFailed"] += outcome.failed
        self.stats["syntaxRedrawn"] += outcome.redrawn
        self.stats["syntaxCut"] += outcome.cut
        logger.debug("generated %r (%s)", outcome.raw, outcome.finish_reason)
        return outcome

    def _suggest(
        self,
        engine: Any,
        window: Window,
        base: int | None,
        config: LspConfig,
        cancel: threading.Event,
        others: Sequence[tuple[str, str]] = (),
        fits: Callable[[str], bool] | None = None,
    ) -> Outcome | None:
        """:func:`suggest` in the generation thread; a request superseded while queued
        returns here without touching the model."""
        if cancel.is_set():
            return None
        self.stats["engineCalls"] += 1
        if config.fim and getattr(engine, "fim", None) is None and not self._fim_notice_logged:
            self._fim_notice_logged = True
            logger.info(
                "%s cannot fill in the middle (no fill-in-the-middle sentinels, or a model "
                "trained without them): prompts hold the text before the cursor only",
                self._engine_path,
            )
        if config.compile and engine.can_compile_steps and not engine.steps_compiled.is_set():
            self.stats["servedDuringCompile"] += 1  # by the eager step, without waiting
        tuning = (
            self._tuning if self._tuning is not None and self._tuning.engine is engine else None
        )
        outcome = suggest(engine, window, base, config, cancel, others, fits)
        if tuning is not None and outcome is not None and outcome.timing is not None:
            chosen = tuning.observe(outcome.timing)
            if chosen is not None:
                logger.info("%s: %s", self._engine_path, chosen)
        return outcome

    def cursor_context(self, uri: str, line: int, character: int) -> dict[str, Any] | None:
        """What a request at this position would see (the ``codeparrot.cursorContext``
        command: for "why this suggestion?" and for tests)."""
        doc = self.documents.get(uri)
        if doc is None:
            return None
        offset = doc.offset_at(line, character, self.encoding)
        window = cursor_window(doc, offset, 4 * PREFIX_KEY, self.config.suffix_chars)
        here = doc.position_at(offset, self.encoding)
        return {
            "encoding": self.encoding,
            "offset": offset,
            "position": {"line": here.line, "character": here.character},
            "lineHead": window.line_head,
            "lineTail": window.line_tail,
            "prefixEnd": window.prefix[-200:],
            "blockIndent": block_indent(window),
            "lineCount": doc.line_count,
            "version": doc.version,
        }

    def _place(
        self, doc: Document, window: Window, offset: int, text: str, encoding: str
    ) -> Suggestion:
        if window.eol != "\n":
            text = text.replace("\n", window.eol)
        word = _WORD_END.search(window.line_head).group(0)
        here = doc.position_at(offset, encoding)
        start = doc.position_at(offset - len(word), encoding)
        return Suggestion(
            text=text,
            position=types.Position(here.line, here.character),
            word_start=types.Position(start.line, start.character),
            word=word,
            request_id=_suggestion_id(doc, offset, text),
        )

    def report_server_error(self, error: Exception, source: Any) -> None:
        # protocol errors (malformed messages) are answered or logged, not shown in pop-ups
        logger.error("%s: %s", getattr(source, "__name__", source), error)


def _load(
    path: Any,
    device: str | None,
    threads: int,
    quantize: str,
    compile: bool,
    fim: FimSettings | None = None,
) -> Any:
    """Runs in the generation thread, which is the one that decodes: the editor profile
    (:mod:`codeparrot.generation.loading`), the FIM settings ``fim`` resolved once. Unless
    ``threads`` or compiled steps fix them there, the steps' threads are chosen by the
    first suggestions (``engine.tuning``)."""
    from codeparrot.generation import Engine

    return Engine.load(
        path,
        device=device,
        quantize=quantize,
        profile="editor",
        threads=threads,
        compile=compile,
        fim=fim,
    )


# -- handlers: one feature each, LSP types in and out ------------------------------------


def build_server(config: LspConfig) -> CodeparrotServer:
    """A server with every feature registered; call ``start_io``/``start_tcp`` on it."""
    server = CodeparrotServer(config)

    @server.feature(types.INITIALIZE)
    def initialize(ls: CodeparrotServer, params: types.InitializeParams) -> None:
        if params.initialization_options is not None:
            ls.update_settings(params.initialization_options, "initializationOptions")
        ls.load_engine()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(
        ls: CodeparrotServer, params: types.DidChangeConfigurationParams
    ) -> None:
        ls.update_settings(params.settings, "workspace/didChangeConfiguration")

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: CodeparrotServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList:
        found = await ls.suggestion(params.text_document.uri, params.position)
        if found is None:
            return types.InlineCompletionList(items=[])
        item = types.InlineCompletionItem(
            insert_text=found.text,
            range=types.Range(found.position, found.position),
            command=found.accept_command(),
        )
        return types.InlineCompletionList(items=[item])

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS),
    )
    async def completion(
        ls: CodeparrotServer, params: types.CompletionParams
    ) -> types.CompletionList:
        found = await ls.suggestion(params.text_document.uri, params.position)
        if found is None:
            return types.CompletionList(is_incomplete=True, items=[])
        item = completion_item(found)
        # incomplete: the client asks again as the user types, rather than filtering
        return types.CompletionList(is_incomplete=True, items=[item])

    @server.feature(ACCEPT_NOTIFICATION)
    def accept_completion(ls: CodeparrotServer, params: Any) -> None:
        request_id = _request_id(params)
        if request_id is not None:
            ls.acceptance.accepted(request_id)

    @server.feature(REJECT_NOTIFICATION)
    def reject_completion(ls: CodeparrotServer, params: Any) -> None:
        request_id = _request_id(params)
        if request_id is not None:
            ls.acceptance.rejected(request_id)

    @server.command("codeparrot.cursorContext")
    def cursor_context(ls: CodeparrotServer, uri: str, line: int, character: int):
        return ls.cursor_context(uri, line, character)

    @server.command("codeparrot.stats")
    def stats(ls: CodeparrotServer):
        out = {**ls.stats, "cacheHits": ls.cache.hits, "cacheEntries": len(ls.cache)}
        loaded = ls._engine
        if loaded is not None and loaded.done() and loaded.exception() is None:
            engine = loaded.result()
            tuning = ls._tuning
            out["threads"] = {
                "prompt": engine.prompt_threads,
                "steps": engine.decode_threads,
                # False while the first suggestions still time the steps (LiveTuning)
                "chosen": tuning is None or tuning.engine is not engine or tuning.settled,
            }
            out["promptMsPerToken"] = engine.prompt_ms_per_token
            if engine.fim is not None:
                out["fimSuffixTokens"] = suffix_tokens(engine, ls.config)
        return out

    return server


def completion_item(found: Any) -> types.CompletionItem:
    """The completion-list item of a suggestion: the word under the cursor and the text."""
    new_text = found.word + found.text
    first_line = new_text.splitlines()[0] if new_text.strip() else new_text
    label = first_line.strip() or new_text.strip()
    if "\n" in found.text.replace("\r", "\n"):
        label += " …"
    return types.CompletionItem(
        label=label[:80],
        kind=types.CompletionItemKind.Text,
        detail="codeparrot",
        documentation=types.MarkupContent(
            kind=types.MarkupKind.Markdown, value=f"```python\n{new_text}\n```"
        ),
        filter_text=new_text,
        sort_text="0",
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(
            range=types.Range(found.word_start, found.position), new_text=new_text
        ),
        preselect=True,
        command=found.accept_command(),
        data={"requestId": found.request_id},
    )


def _suggestion_id(doc: Document, offset: int, text: str) -> str:
    """The same suggestion at the same place of the same document version has the same
    id: asking again (the cache answers) shows nothing new."""
    key = f"{doc.uri}\0{doc.version}\0{offset}\0{text}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key, digest_size=16).hexdigest()


def _request_id(params: Any) -> str | None:
    """``requestId`` of an accept/reject notification (llm-ls's shape), or ``None``."""
    value = (
        params.get("requestId") if isinstance(params, dict) else getattr(params, "requestId", None)
    )
    if isinstance(value, str) and 0 < len(value) <= 64:
        return value
    logger.warning("acceptance notification without a requestId: %r", params)
    return None


def serve(config: LspConfig) -> None:
    """Run the server until the client exits (stdio) or forever (``--tcp``)."""
    from codeparrot.models.checkpoint import check_checkpoint_files

    # fail before the editor connects, without the imports of torch and transformers (~2 s),
    # so that `initialize` is answered at once; Engine.load checks everything
    if config.checkpoint is not None:
        check_checkpoint_files(config.checkpoint, revision=config.revision)
    else:  # nothing to load until an editor names a checkpoint
        from codeparrot.generation.heap import settle_heap

        settle_heap()
    logging.basicConfig(
        filename=config.log_file,
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    # pygls logs every message at INFO; keep the log about us
    logging.getLogger("pygls").setLevel(logging.WARNING)
    server = build_server(config)
    server.load_engine()  # start loading at once; initializationOptions may replace it
    address = config.address
    from codeparrot.lsp.framing import start_io_guarded, start_tcp_guarded

    # pygls' start_io / start_tcp, with a bounded Content-Length
    if address is None:
        start_io_guarded(server)
    else:
        start_tcp_guarded(server, *address)
