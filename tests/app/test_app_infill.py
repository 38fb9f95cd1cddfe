"""The playground's infill mode: code after the cursor, the middle streamed in place.

Fake engines stand in for a checkpoint with and without the FIM sentinels, so the test
knows the middle exactly; the real tiny checkpoint (no sentinels) checks the fallback.
"""

from __future__ import annotations

import json
import time

import pytest

from codeparrot.app.limits import RequestRefused, check_request
from codeparrot.app.model_card import read_model_card
from codeparrot.app.ui import FILLS_IN
from codeparrot.fim import SENTINELS
from codeparrot.generation import Completion, StreamEvent

gradio_client = pytest.importorskip("gradio_client")

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:Warning", "ignore:The copy keyword is deprecated:Warning"
)

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"
MIDDLE = ["return", " a", " +", " b"]


class InfillEngine:
    """Writes ``MIDDLE`` one piece an event; records what it was asked."""

    context_length = 256

    def __init__(self, fim: bool) -> None:
        self.fim = object() if fim else None
        self.suffixes: list[str | None] = []
        self.fitted: list[str] = []  # suffixes fitted to the context (in the engine's order)

    def encode_prompt(self, prompt, max_new_tokens):
        return [0, 1], False

    def encode_infill(self, prefix, suffix, max_new_tokens):
        self.fitted.append(suffix)
        return [0, 1, 2, 3], False

    def count_tokens(self, text):
        return 2

    def stream(self, prompt, config, cancel=None, suffix=None):
        self.suffixes.append(suffix)
        for piece in MIDDLE:
            yield StreamEvent(0, piece)
            time.sleep(0.05)  # the page gets a frame per piece
        yield StreamEvent(0, "", Completion("".join(MIDDLE), "eos", 4, len(MIDDLE), 0.01, seed=0))


def generate(url, playground, prompt=PREFIX, suffix=SUFFIX):
    client = gradio_client.Client(url, verbose=False)
    checkpoint = next(iter(playground.pool.checkpoints))
    job = client.submit(
        checkpoint, prompt, 16, 0.2, 0.95, 1, 0, "none", "", True, suffix, api_name="/generate"
    )
    job.result()
    return job.outputs()


def test_the_middle_is_streamed_between_prompt_and_suffix(served):
    engine = InfillEngine(fim=True)
    url, playground = served(engine)
    outputs = generate(url, playground)
    # fitted and laid out as the engine's FIM settings say (resolved at load)
    assert engine.suffixes == [SUFFIX] and engine.fitted == [SUFFIX]
    # (whole updates, or mid-stream the editor's text alone)
    editors = [o[2] if isinstance(o[2], str) else o[2].get("value") for o in outputs]
    editors = [e for e in editors if e is not None]
    # (Gradio's code editor strips the whitespace at both ends of what it shows)
    assert editors[-1] == (PREFIX + "".join(MIDDLE) + SUFFIX).strip()
    assert all(e.startswith(PREFIX) and e.endswith(SUFFIX.rstrip()) for e in editors)
    middles = [e[len(PREFIX) : len(e) - len(SUFFIX.rstrip())] for e in editors]
    partial = {m for m in middles if m and m != "".join(MIDDLE)}
    assert partial and all("".join(MIDDLE).startswith(m) for m in partial)  # grew in place
    details = outputs[-1][1]
    assert details[0]["text"] == "".join(MIDDLE) and details[0]["finish_reason"] == "eos"
    assert playground.infill_note(next(iter(playground.pool.checkpoints))).startswith(
        "This checkpoint fills in the middle"
    )


def test_without_sentinels_the_page_says_the_suffix_is_not_used(served):
    engine = InfillEngine(fim=False)
    url, playground = served(engine)
    outputs = generate(url, playground)
    assert engine.suffixes == [None]  # completed left to right, never asked for a middle
    notice = outputs[-1][0]
    assert "no fill-in-the-middle sentinels" in notice["value"]
    assert outputs[-1][2]["value"] == PREFIX + "".join(MIDDLE)
    note = playground.infill_note(next(iter(playground.pool.checkpoints)))
    assert "no fill-in-the-middle sentinels" in note


def test_the_real_tiny_checkpoint_without_sentinels_falls_back(playground):
    client = gradio_client.Client(playground.url, verbose=False)
    result = client.predict(
        str(playground.foreign), "x = 1\n", 8, 0.0, 0.95, 1, 0, "none", "", True, "y = 2\n",
        api_name="/generate",
    )  # fmt: skip
    assert "no fill-in-the-middle sentinels" in result[0]["value"]
    assert result[2]["value"] == ("x = 1\n" + result[1][0]["text"]).strip()


def test_an_empty_prefix_with_a_suffix_is_a_request(served):
    engine = InfillEngine(fim=True)
    url, playground = served(engine)
    outputs = generate(url, playground, prompt="")
    assert outputs[-1][2]["value"] == ("".join(MIDDLE) + SUFFIX).strip()


def test_the_suffix_counts_toward_the_prompt_limit():
    from codeparrot.app.limits import RequestLimits

    limits = RequestLimits(
        prompt_chars=100, stop_sequences=1, stop_chars=5, candidates=1, max_new_tokens=8
    )
    args = dict(n=1, max_new_tokens=8, temperature=0.0, top_p=1.0, seed=-1, stop_text="")
    check_request(limits, prompt="a" * 50, suffix="b" * 50, **args)
    with pytest.raises(RequestRefused, match="code after the cursor are 101 characters"):
        check_request(limits, prompt="a" * 50, suffix="b" * 51, **args)


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        ([{"content": s, "special": True} for s in SENTINELS], True),
        # no family needs a pad token to infill
        ([{"content": s, "special": True} for s in SENTINELS[:3]], True),
        ([{"content": s, "special": True} for s in SENTINELS[:2]], False),
        # DeepSeek-Coder's tokenizer marks its FIM tokens as not special
        ([{"content": s, "special": False} for s in SENTINELS], True),
        (None, None),
    ],
)
def test_the_model_card_reads_the_sentinels_from_the_tokenizer(tmp_path, added, expected):
    if added is not None:
        tokenizer = {"added_tokens": [{"content": "<|endoftext|>", "special": True}, *added]}
        (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert read_model_card(tmp_path).fill_in_the_middle is expected


@pytest.mark.parametrize(("fim_rate", "expected"), [(0.0, False), (0.5, True)])
def test_the_model_card_says_no_infill_for_a_model_trained_without_fim(
    tmp_path, fim_rate, expected
):
    added = [{"content": s, "special": True} for s in SENTINELS]
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    facts = {"train_config": {"fim_rate": fim_rate}}
    (tmp_path / "codeparrot_checkpoint.json").write_text(json.dumps(facts))
    assert read_model_card(tmp_path).fill_in_the_middle is expected


@pytest.fixture(scope="module")
def fim_checkpoint(tmp_path_factory):
    """The engine tests' checkpoint that learnt one snippet in both FIM layouts."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "core" / "test_generation_fim.py"
    spec = importlib.util.spec_from_file_location("_engine_fim_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.build_fim_checkpoint(tmp_path_factory.mktemp("fim") / "checkpoint")
    return out, module.PREFIX, module.MIDDLE, module.SUFFIX


@pytest.mark.slow
def test_a_real_fim_checkpoint_fills_the_middle_in_the_page(fim_checkpoint):
    from codeparrot.app.config import AppConfig
    from codeparrot.app.ui import Playground, serve

    checkpoint, prefix, middle, suffix = fim_checkpoint
    config = AppConfig(checkpoints=(checkpoint,), port=0, stream_interval=0.0, compile=False)
    playground = Playground(config)
    assert playground.infill_note(str(checkpoint)) == FILLS_IN  # from the files, not loaded
    assert not playground.pool.is_loaded(str(checkpoint))
    demo, url = serve(playground, block=False)
    try:
        client = gradio_client.Client(url, verbose=False)
        result = client.predict(
            str(checkpoint), prefix, 20, 0.0, 0.95, 1, 0, "none", "", True, suffix,
            api_name="/generate",
        )  # fmt: skip
    finally:
        demo.close()
    assert result[1][0]["text"] == middle and result[1][0]["finish_reason"] == "eos"
    assert result[2]["value"] == (prefix + middle + suffix).strip()
    assert not result[0].get("visible")  # no notice: nothing trimmed, sentinels present
