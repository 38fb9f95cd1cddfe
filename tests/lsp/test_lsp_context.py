"""Workspace context: snippets of other open documents in the prompt, in budget."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from codeparrot.generation import Engine
from codeparrot.lsp.config import LspConfig
from codeparrot.lsp.documents import Document
from codeparrot.lsp.server import build_server
from codeparrot.prompting import workspace_snippets

HELPERS = (
    "import math\n\n\n"
    "def compute_total(items, tax_rate):\n"
    "    subtotal = sum(item.price for item in items)\n"
    "    return subtotal * (1 + tax_rate)\n"
)
UNRELATED = "class Colour:\n    red = 1\n    green = 2\n"
CURRENT = "from shop.helpers import compute_total\n\ntotal = compute_total(basket, "


@pytest.fixture
def prompts(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = Engine.stream

    def spy(self, prompt, config, cancel=None, **kwargs):
        seen.append(prompt)
        return real(self, prompt, config, cancel, **kwargs)

    monkeypatch.setattr(Engine, "stream", spy)
    return seen


def ask(checkpoint, docs: dict[str, str], **settings) -> None:
    server = build_server(LspConfig(checkpoint=checkpoint, cache_size=0, **settings))
    for uri, text in docs.items():
        server.documents[uri] = Document(uri, text, 1)
        server.touched(uri)
    server.load_engine()
    uri = "file:///w/shop/main.py"
    server.documents[uri] = Document(uri, CURRENT, 1)
    server.touched(uri)
    try:
        asyncio.run(server.suggestion(uri, types.Position(2, len(CURRENT.split("\n")[2]))))
    finally:
        server._generator.shutdown(wait=True)


def test_snippets_of_other_open_documents_lead_the_prompt(tiny_checkpoint, prompts):
    docs = {"file:///w/shop/helpers.py": HELPERS, "file:///w/shop/colour.py": UNRELATED}
    ask(tiny_checkpoint, docs, workspace_share=0.5, context_tokens=240, max_new_tokens=8)
    (prompt,) = prompts
    assert prompt.startswith("# Path: shop/helpers.py\n# import math\n")
    assert "#     return subtotal * (1 + tax_rate)\n" in prompt
    assert "Colour" not in prompt  # nothing in common with the cursor's code
    assert prompt.endswith(CURRENT)
    snippets = prompt[: prompt.index(CURRENT)]
    engine = Engine.load(tiny_checkpoint)
    assert engine.count_tokens(snippets) <= int(240 * 0.5)


def test_no_snippets_by_default(tiny_checkpoint, prompts):
    ask(tiny_checkpoint, {"file:///w/shop/helpers.py": HELPERS})
    (prompt,) = prompts
    assert "# Path:" not in prompt


def test_budget_huge_and_binary_documents():
    count = len  # one token per character
    others = [("file:///w/a.py", HELPERS)]
    assert workspace_snippets(CURRENT, others, 10_000, count).startswith("# Path: w/a.py")
    assert workspace_snippets(CURRENT, others, 20, count) == ""  # no snippet fits
    assert workspace_snippets(CURRENT, [("file:///b.bin", "compute_total\x00")], 999, count) == ""
    huge = [("file:///w/big.py", "compute_total = 1\n" * 100_000)]
    assert workspace_snippets(CURRENT, huge, 10_000, count) == ""
