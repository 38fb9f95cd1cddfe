"""Local acceptance statistics: which suggestions were shown, accepted or dismissed.

The server appends one JSON object per event to a local file (nothing leaves the
machine); ``codeparrot lsp stats [FILE]`` summarises it per checkpoint. Events:

- ``shown``: a suggestion was answered; with ``latencyMs`` (request to answer) and ``chars``;
- ``accepted``: the editor said so (``codeparrot/acceptCompletion``, or the item's command),
  or the next edit of the document inserted the whole suggestion (``"via": "inferred"``);
- ``partial``: the next edit inserted only the start of it (``acceptedChars``);
- ``dismissed``: the editor said so (``codeparrot/rejectCompletion``), or the next edit
  was something else, or a newer suggestion replaced it first.

Each record carries ``id`` (the suggestion's ``requestId``), ``checkpoint`` and ``time``.
A file that cannot be written, or holds lines that are not JSON, never stops the server:
it says so once in its log.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import CodeparrotError

logger = logging.getLogger("codeparrot.lsp")

EVENTS = ("shown", "accepted", "partial", "dismissed")
# Suggestions awaiting a verdict (the newest per document decides; older ones are dismissed).
MAX_OPEN = 256


def default_stats_file() -> Path:
    """``$XDG_STATE_HOME/codeparrot/lsp-stats.jsonl`` (``~/.local/state`` by default)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "codeparrot" / "lsp-stats.jsonl"


@dataclass
class _Shown:
    uri: str
    offset: int  # where the suggestion is inserted, in characters of the document
    text: str


class StatsRecorder:
    """Appends acceptance events to ``path`` (``None``: records nothing)."""

    def __init__(self, path: Path | None, checkpoint: str | None) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self._open: OrderedDict[str, _Shown] = OrderedDict()
        self._failed = False
        self._torn_logged = False

    def shown(self, request_id: str, uri: str, offset: int, text: str, latency_ms: float) -> None:
        if request_id in self._open:
            return  # the same suggestion asked for again: still the one shown
        for old_id in [i for i, s in self._open.items() if s.uri == uri]:
            self._decide(old_id, "dismissed", via="replaced")
        self._open[request_id] = _Shown(uri, offset, text)
        while len(self._open) > MAX_OPEN:
            self._open.popitem(last=False)
        self._write(
            {
                "event": "shown",
                "id": request_id,
                "latencyMs": round(latency_ms, 2),
                "chars": len(text),
            }
        )

    def accepted(self, request_id: str, via: str = "notification") -> None:
        self._decide(request_id, "accepted", via=via)

    def rejected(self, request_id: str, via: str = "notification") -> None:
        self._decide(request_id, "dismissed", via=via)

    def edited(self, uri: str, offset: int, removed: int, inserted: str) -> None:
        """The document changed: decide the suggestion open on ``uri`` from the edit."""
        for request_id, shown in [(i, s) for i, s in self._open.items() if s.uri == uri]:
            if removed == 0 and offset == shown.offset and inserted:
                if inserted.replace("\r\n", "\n") == shown.text.replace("\r\n", "\n"):
                    self._decide(request_id, "accepted", via="inferred")
                    continue
                if shown.text.startswith(inserted):
                    self._decide(request_id, "partial", via="inferred", accepted=len(inserted))
                    continue
            self._decide(request_id, "dismissed", via="inferred")

    def _decide(self, request_id: str, event: str, via: str, accepted: int | None = None) -> None:
        shown = self._open.pop(request_id, None)
        if shown is None:
            return  # unknown, or already decided (an inferred verdict and then the editor's)
        record: dict[str, Any] = {"event": event, "id": request_id, "via": via}
        if accepted is not None:
            record["acceptedChars"] = accepted
        record["chars"] = len(shown.text)
        self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        if self.path is None or self._failed:
            return
        record = {"time": round(time.time(), 3), "checkpoint": self.checkpoint, **record}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as fh:  # one line per event, always at the end
                line = json.dumps(record) + "\n"
                if _torn(fh):
                    line = "\n" + line
                    if not self._torn_logged:
                        self._torn_logged = True
                        logger.warning(
                            "statistics file %s ended in a torn or foreign line; "
                            "`codeparrot lsp stats` skips such lines",
                            self.path,
                        )
                fh.write(line.encode("utf-8"))
        except OSError as e:
            self._failed = True
            logger.warning("acceptance statistics off for this session: %s: %s", self.path, e)


def _torn(fh: Any) -> bool:
    """Does the (binary) file end inside a line? A record must not be glued to it."""
    fh.seek(0, os.SEEK_END)
    if fh.tell() == 0:
        return False
    fh.seek(-1, os.SEEK_END)
    return fh.read(1) != b"\n"


class StatsError(CodeparrotError):
    """A statistics file that cannot be read at all."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))]


def summarise(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """Per checkpoint: counts of each event, acceptance rates and latency percentiles;
    and the number of lines skipped as corrupt."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise StatsError(f"statistics file {path}: cannot read it ({e.strerror})") from e
    per: dict[str, dict[str, Any]] = {}
    latencies: dict[str, list[float]] = {}
    skipped = 0
    for line in lines:
        try:
            record = json.loads(line)
            event = record["event"]
            if event not in EVENTS:
                raise ValueError(event)
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        name = str(record.get("checkpoint"))
        counts = per.setdefault(name, dict.fromkeys(EVENTS, 0))
        counts[event] += 1
        if event == "shown" and isinstance(record.get("latencyMs"), int | float):
            latencies.setdefault(name, []).append(float(record["latencyMs"]))
    for name, counts in per.items():
        shown = counts["shown"] or 1
        counts["acceptanceRate"] = counts["accepted"] / shown
        counts["acceptedOrPartialRate"] = (counts["accepted"] + counts["partial"]) / shown
        ms = latencies.get(name, [])
        counts["latencyP50Ms"] = statistics.median(ms) if ms else None
        counts["latencyP95Ms"] = _percentile(ms, 0.95) if ms else None
    return per, skipped


def format_summary(per: dict[str, dict[str, Any]], skipped: int, path: Path) -> str:
    out = [f"{path}:"]
    if not per:
        out.append("  no suggestions recorded")
    for name, c in sorted(per.items()):
        latency = (
            f"latency p50 {c['latencyP50Ms']:.1f} ms, p95 {c['latencyP95Ms']:.1f} ms"
            if c["latencyP50Ms"] is not None
            else "no latency recorded"
        )
        out.append(
            f"  {name}: {c['shown']} shown, {c['accepted']} accepted, {c['partial']} partially, "
            f"{c['dismissed']} dismissed; acceptance {c['acceptanceRate']:.1%} "
            f"({c['acceptedOrPartialRate']:.1%} with partial); {latency}"
        )
    if skipped:
        out.append(f"  {skipped} line(s) skipped: not statistics records")
    return "\n".join(out)
