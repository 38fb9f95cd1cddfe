"""The playground in a real browser: Debian's Chromium driven by Playwright's sync API.

Playwright cannot download browsers here; CI installs ``chromium`` from Debian and this
test points Playwright at it. The sync API runs in its own thread, away from any event
loop pytest-asyncio may hold. The screenshot is kept under ``artifacts/app/``.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "app"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"no Chromium at {CHROMIUM}: `apt-get install chromium` to run the browser test",
    ),
    # gradio's queue uses pandas options that pandas 3 deprecates; not ours to fix
    pytest.mark.filterwarnings(
        "ignore:.*no_silent_downcasting:Warning", "ignore:The copy keyword is deprecated:Warning"
    ),
]


def note_session(request, sessions: dict[str, str]) -> None:
    """The session hash of a generation the page asked for, by the way it asked."""
    for way in ("codeparrot/generate", "queue/join"):
        if request.method == "POST" and way in request.url:
            sessions[way] = json.loads(request.post_data or "{}").get("session_hash", "")


def drive_browser(url: str, screenshot: Path) -> dict[str, str]:
    """Load the page, pick an example, type a prompt, generate, then generate from an
    empty prompt; return what the page shows and the paths it posted to."""
    from playwright.sync_api import sync_playwright

    seen: dict[str, str] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            posts: list[str] = []  # the paths the page posts to, in order
            sessions: dict[str, str] = {}  # the session each way of generating carries
            page.on("request", lambda r: r.method == "POST" and posts.append(r.url))
            page.on("request", lambda r: note_session(r, sessions))
            page.goto(url)
            page.locator("#card").get_by_text("tokens trained").wait_for(timeout=30_000)
            seen["card"] = page.locator("#card").inner_text()

            page.get_by_text("Area of a rectangle", exact=True).click()
            editor = page.locator("#prompt .cm-content")
            page.wait_for_function(
                "() => document.querySelector('#prompt .cm-content').innerText"
                ".includes('area_of_rectangle')",
                timeout=10_000,
            )
            seen["example"] = editor.inner_text()

            editor.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("def fibonacci(n):\n")
            page.locator("#stop-mode").get_by_text("none", exact=True).click()
            seed = page.locator("#seed input")
            seed.fill("7")
            seed.press("Tab")
            page.locator("#generate").click()
            page.locator("#candidate-1").get_by_text("tokens/s").wait_for(timeout=60_000)
            seen["label"] = page.locator("#candidate-1").get_by_text("tokens/s").inner_text()
            seen["candidate"] = page.locator("#candidate-1 .cm-content").inner_text()
            page.screenshot(path=str(screenshot), full_page=True)
            seen["generation posts"] = " ".join(p for p in posts if "predict" not in p)

            # a refused request: the stream's answer is a refusal, and Gradio's /generate
            # (the page's fallback) shows it as it shows every error
            editor.click()
            page.keyboard.press("Control+A")
            page.keyboard.press("Delete")
            page.locator("#generate").click()
            page.get_by_text("The prompt is empty").first.wait_for(timeout=30_000)
            seen["refusal posts"] = " ".join(p for p in posts if "predict" not in p)
            seen.update({f"session of {k}": v for k, v in sessions.items()})
        finally:
            browser.close()
    return seen


def test_browser_types_a_prompt_and_sees_a_completion(playground, tmp_path):
    pytest.importorskip("playwright.sync_api")
    screenshot = tmp_path / "playground.png"
    with ThreadPoolExecutor(max_workers=1) as pool:
        seen = pool.submit(drive_browser, playground.url, screenshot).result(timeout=150)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(screenshot, ARTIFACTS / "playground.png")
    assert screenshot.stat().st_size > 10_000

    assert "149.2k" in seen["card"] and "12.3M" in seen["card"]
    assert "area_of_rectangle" in seen["example"]
    # the first candidate shows the typed prompt followed by new text, with its speed
    assert seen["candidate"].startswith("def fibonacci(n):")
    assert len(seen["candidate"].strip()) > len("def fibonacci(n):")
    assert seen["label"].startswith("candidate 1 ·") and "tokens/s" in seen["label"]
    # the page streamed the candidate through its own route, not Gradio's queue
    assert seen["generation posts"].endswith("/codeparrot/generate")
    assert "queue/join" not in seen["generation posts"]
    # the refusal: the stream was asked first, then Gradio's queue showed the error
    stream, queue = seen["refusal posts"].split()[-2:]
    # the stream carries the page's Gradio session: Stop (/stop, that session) ends it
    assert seen["session of codeparrot/generate"]
    assert seen["session of codeparrot/generate"] == seen["session of queue/join"]
    assert stream.endswith("/codeparrot/generate") and "/gradio_api/queue/join" in queue
