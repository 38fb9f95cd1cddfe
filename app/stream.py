"""The page's own way to ``/generate``: one streamed HTTP request beside Gradio's queue.

Through Gradio's queue a generation costs the page a join request, a turn of the
queue's dispatch loop and, per update, Gradio's event processing and its event stream
(measured: some 7 ms before the first token, on a small CPU). The page asks
:data:`STREAM_PATH` instead: a ``POST`` of the same inputs, answered by
:meth:`codeparrot.app.ui.Playground.frames` (the one check of the request, the same
line of generation slots, the same engines and the same Stop as ``/generate``) as
newline-delimited JSON, one frame a line, written as the frame is made.

A line is ``{"frame": {index: value}}``: the outputs (notice, details, candidate 1,
...) that changed since the last line, by their index; a value is what Gradio's queue
would send (a plain value or a ``gr.update`` dict), or ``{"__append__": text}`` for an
editor whose text grew by ``text``. ``{"error": message}`` ends a stream that failed
after it began; a request refused before the first frame gets a 4xx/5xx answer
``{"error": message}``.

In the page (:data:`PAGE_JS`, run when the hidden pump element loads) **Generate** reads
this stream and hands each frame to Gradio through a JavaScript-only event of the pump
(Gradio applies its values and updates, nothing goes to the server). Where the stream
cannot start (the route is missing behind a proxy, a network error, the request is
refused) the page clicks the hidden button of Gradio's ``/generate`` instead, which
shows a refusal as Gradio shows every error. ``gradio_client`` and other API clients use
``/generate``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import gradio as gr
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from codeparrot.app.config import MAX_CANDIDATES

if TYPE_CHECKING:
    from codeparrot.app.ui import Playground

log = logging.getLogger(__name__)

# Under the page's root (Gradio's own routes are under /gradio_api and its files).
STREAM_PATH = "codeparrot/generate"
# Inputs of a generation, in the order of Playground.frames' parameters after `session`
# (and of the page's inputs of /generate); the last two may be left out.
GENERATION_FIELDS = (
    "checkpoint",
    "prompt",
    "max_new_tokens",
    "temperature",
    "top_p",
    "n",
    "seed",
    "stop_mode",
    "stop_text",
    "cut_repetition",
    "suffix",
)
OPTIONAL_FIELDS = frozenset({"cut_repetition", "suffix"})
# The outputs of a frame: notice, details, the candidates' editors.
FRAME_OUTPUTS = 2 + MAX_CANDIDATES
# Bytes of a request body per character of prompt the server accepts (JSON escapes
# included), plus room for the other inputs.
BODY_BYTES_PER_CHAR = 6
BODY_SLACK_BYTES = 1 << 20
SESSION_CHARS = 256
INTERNAL_ERROR = "Generation failed on the server (the server's log has the details)."


class FrameDeltas:
    """Frames as the lines of the stream: only what changed since the last frame, an
    editor's grown text as what it gained."""

    def __init__(self) -> None:
        self._shown: list[Any] = []  # each output's value as the page has it

    def encode(self, frame: Sequence[Any]) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        shown = list(self._shown) + [_UNSENT] * (len(frame) - len(self._shown))
        for i, value in enumerate(frame):
            before = shown[i]
            text = value.get("value", before) if _is_update(value) else value
            if not _is_update(value) and (value is before or _same_text(value, before)):
                continue  # the page has it
            if (
                isinstance(value, str)
                and isinstance(before, str)
                and len(value) > len(before)
                and value.startswith(before)
            ):
                changes[str(i)] = {"__append__": value[len(before) :]}
            else:
                changes[str(i)] = value
            shown[i] = text
        self._shown = shown
        return changes


_UNSENT = object()


def _is_update(value: Any) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update"


def _same_text(value: Any, before: Any) -> bool:
    return isinstance(value, str) and isinstance(before, str) and value == before


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _refused(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it is over ``limit`` bytes (nothing more read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def parse_generation(body: bytes) -> tuple[str, dict[str, Any]]:
    """(session, the inputs of :meth:`Playground.frames` by name) of a request body;
    :class:`ValueError` saying what is wrong with it."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"the request body is not JSON ({e})") from None
    if not isinstance(message, dict) or not isinstance(message.get("inputs"), dict):
        raise ValueError('the request body must be {"session_hash": ..., "inputs": {...}}')
    session = message.get("session_hash") or ""
    if not isinstance(session, str) or len(session) > SESSION_CHARS:
        raise ValueError(f"session_hash must be text of at most {SESSION_CHARS} characters")
    inputs = message["inputs"]
    unknown = sorted(set(inputs) - set(GENERATION_FIELDS))
    if unknown:
        raise ValueError(f"unknown inputs: {', '.join(unknown)}")
    missing = [f for f in GENERATION_FIELDS if f not in inputs and f not in OPTIONAL_FIELDS]
    if missing:
        raise ValueError(f"missing inputs: {', '.join(missing)}")
    return session, inputs


def stream_route(playground: Playground) -> Route:
    """The route of :data:`STREAM_PATH` over ``playground`` (for the server app's routes)."""
    limit = BODY_BYTES_PER_CHAR * playground.config.max_prompt_chars + BODY_SLACK_BYTES

    async def generate(request: Request) -> Response:
        # Only JSON: a page of another site can post text/plain or a form without asking
        # (no CORS preflight), but not application/json.
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return _refused("The request body must be sent as application/json.", 415)
        body = await _read_body(request, limit)
        if body is None:
            return _refused(f"The request is over {limit:,} bytes.", 413)
        try:
            session, inputs = parse_generation(body)
        except ValueError as e:
            return _refused(f"Bad request: {e}.")
        frames = playground.frames(session, **inputs)
        try:  # the checks, the line and the first token: refusals get a plain answer
            first = await anext(frames)
        except gr.Error as e:
            return _refused(str(e.message))
        except StopAsyncIteration:  # frames always yields; kept for a clear failure
            return _refused(INTERNAL_ERROR, 500)
        except Exception:
            log.exception("generation failed before its first frame")
            return _refused(INTERNAL_ERROR, 500)
        return StreamingResponse(
            _lines(first, frames),
            media_type="application/x-ndjson",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return Route("/" + STREAM_PATH, generate, methods=["POST"], name="codeparrot_generate")


async def _lines(first: Any, frames: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """The stream's lines; the generation ends (its slot freed) when the page goes away."""
    deltas = FrameDeltas()
    try:
        yield _line({"frame": deltas.encode(first)})
        async for frame in frames:
            yield _line({"frame": deltas.encode(frame)})
    except gr.Error as e:
        yield _line({"error": str(e.message)})
    except Exception:
        log.exception("generation failed")
        yield _line({"error": INTERNAL_ERROR})
    finally:
        await frames.aclose()  # type: ignore[attr-defined]


# Run by the pump element when the page loads (Gradio's `js_on_load`: `element`,
# `trigger`); %(names)s, %(outputs)s, %(path)s and %(queue)s filled in by page_js().
PAGE_JS = """
const NAMES = %(names)s, OUTPUTS = %(outputs)s, PATH = %(path)s, QUEUE = %(queue)s;
const isUpdate = (v) => v !== null && typeof v === "object" && v.__type__ === "update";
const cp = { values: [], pending: null, stream: null };
window.codeparrotStream = cp;
// the frame waiting for Gradio's pump event (merged: an update keeps its props)
cp.take = () => { const frame = cp.pending || []; cp.pending = null; return frame; };
cp.show = (changes) => {
  const frame = cp.pending || new Array(OUTPUTS);
  for (const [key, raw] of Object.entries(changes)) {
    const i = Number(key), before = frame[i];
    let value = raw;
    if (raw !== null && typeof raw === "object" && "__append__" in raw) {
      value = (cp.values[i] ?? "") + raw.__append__;
    }
    if (!isUpdate(value)) cp.values[i] = value;
    else if ("value" in value) cp.values[i] = value.value;
    frame[i] = !isUpdate(before) ? value
      : isUpdate(value) ? { ...before, ...value } : { ...before, value };
  }
  cp.pending = frame;
  trigger("apply");
};
cp.problem = (text) => cp.show({ 0: { __type__: "update", value: "⚠️ " + text, visible: true } });
cp.fallback = () => { document.querySelector(QUEUE)?.click(); };
cp.run = async (...args) => {
  const controller = new AbortController();
  cp.stream?.abort();
  cp.stream = controller;
  const inputs = {};
  NAMES.forEach((name, i) => { inputs[name] = args[i]; });
  const root = (window.gradio_config?.root || location.origin).replace(/\\/*$/, "/");
  let answer = null;
  try {
    answer = await fetch(root + PATH, {
      method: "POST", headers: { "Content-Type": "application/json" }, signal: controller.signal,
      body: JSON.stringify({ session_hash: window.__gradio_session_hash__ || "", inputs }),
    });
  } catch (e) { answer = null; }
  if (!answer || !answer.ok || !answer.body) {
    if (!controller.signal.aborted) cp.fallback();  // Gradio's /generate says what is wrong
    return [];
  }
  cp.values = [];
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\\n")) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        if (!line) continue;
        const message = JSON.parse(line);
        if (message.error !== undefined) cp.problem(message.error);
        else cp.show(message.frame);
      }
    }
  } catch (e) {
    if (!controller.signal.aborted) cp.problem("The connection to the server broke: " + e);
  } finally {
    if (cp.stream === controller) cp.stream = null;
  }
  return [];
};
"""

# Generate's click: the stream when the page script is there, else Gradio's /generate.
RUN_JS = """(...args) => {
  if (window.codeparrotStream) return window.codeparrotStream.run(...args);
  document.querySelector(%(queue)s)?.click();
  return [];
}"""
# The pump's event: the frame waiting, as the outputs' values.
APPLY_JS = "() => window.codeparrotStream.take()"


def page_js(queue_selector: str) -> str:
    """:data:`PAGE_JS` filled in; ``queue_selector`` finds the button of ``/generate``."""
    return PAGE_JS % {
        "names": json.dumps(list(GENERATION_FIELDS)),
        "outputs": FRAME_OUTPUTS,
        "path": json.dumps(STREAM_PATH),
        "queue": json.dumps(queue_selector),
    }


def run_js(queue_selector: str) -> str:
    return RUN_JS % {"queue": json.dumps(queue_selector)}
