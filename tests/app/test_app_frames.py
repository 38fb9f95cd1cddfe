"""Frames of /generate: the page's first update sets only what differs from the page."""

from __future__ import annotations

from codeparrot.app.config import MAX_CANDIDATES
from codeparrot.app.frames import CandidatesView, PageRecords, candidate_label
from codeparrot.generation import Completion, StreamEvent


def is_update(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update"


def finished_page(n: int) -> tuple:
    """What the page shows after a generation of ``n`` candidates ended."""
    view = CandidatesView("x = ", n)
    for i in range(n):
        view.add(StreamEvent(i, "", Completion("1", "length", 1, 1, 0.01, seed=0)))
    view.frame("", every_prop=True)
    return view.page


def test_an_unknown_page_gets_every_property():
    frame = CandidatesView("x = ", 2).frame("")
    assert all(is_update(v) for v in (frame[0], *frame[2:]))
    assert [v["visible"] for v in frame[2:]] == [True, True] + [False] * (MAX_CANDIDATES - 2)


def test_a_known_page_gets_only_what_changed():
    view = CandidatesView("x = ", 1, page=finished_page(1))
    view.add(StreamEvent(0, "1"))
    notice, _details, first, *hidden = view.frame("")
    assert notice == ""  # hidden before, hidden now: a plain value
    assert is_update(first) and first["label"] == candidate_label(0, None)
    assert first["value"] == "x = 1"  # as gr.Code shows it
    assert hidden == [""] * (MAX_CANDIDATES - 1)  # still hidden: no property to send


def test_more_candidates_than_before_show_their_editors():
    view = CandidatesView("x = ", 3, page=finished_page(1))
    frame = view.frame("⚠️ trimmed")
    assert is_update(frame[0]) and frame[0]["visible"] is True
    assert [is_update(v) and v["visible"] for v in frame[2:5]] == [True, True, True]
    assert frame[5:] == ("",) * (MAX_CANDIDATES - 3)
    fewer = CandidatesView("x = ", 1, page=view.page).frame("")
    assert is_update(fewer[0]) and fewer[0]["visible"] is False
    assert [v["visible"] for v in fewer[3:5]] == [False, False]  # hidden again
    assert fewer[5:] == ("",) * (MAX_CANDIDATES - 3)


def test_the_last_frame_sets_every_property():
    view = CandidatesView("x = ", 1, page=finished_page(1))
    frame = view.frame("", every_prop=True)
    assert all(is_update(v) for v in (frame[0], *frame[2:]))


def test_page_records_keep_the_newest_sessions():
    records = PageRecords(size=2)
    page = finished_page(1)
    for session in ("a", "b", "c"):
        records.put(session, page)
    assert records.get("a") is None and records.get("c") == page
    records.put("c", None)  # a generation that did not end normally: not known
    assert records.get("c") is None
    records.put("", page)  # no session: nothing to remember it by
    assert records.get("") is None
