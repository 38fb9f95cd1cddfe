"""The playground through ``gradio_client``: endpoints, streaming, errors, trimming."""

from __future__ import annotations

import time

import pytest

gradio_client = pytest.importorskip("gradio_client")

# gradio's queue uses pandas options that pandas 3 deprecates; not ours to fix
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:Warning", "ignore:The copy keyword is deprecated:Warning"
)

MAX_CANDIDATES = 8


@pytest.fixture(scope="module")
def client(playground):
    return gradio_client.Client(playground.url, verbose=False)


def generate_args(checkpoint, prompt="def add(a, b):\n", **kw):
    args = {
        "max_new_tokens": 16,
        "temperature": 1.0,
        "top_p": 0.95,
        "n": 1,
        "seed": 0,
        "stop_mode": "none",
        "stop_text": "",
    }
    args.update(kw)
    return (str(checkpoint), prompt, *args.values())


def editor_value(update):
    return update["value"] if isinstance(update, dict) else update


def test_every_public_endpoint_answers(client, playground):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    calls = {
        "/generate": generate_args(playground.trained),
        "/model_card": (str(playground.trained),),
        "/stop": (),
    }
    assert set(endpoints) == set(calls), "a new endpoint needs a call in this test"
    for name, args in calls.items():
        result = client.predict(*args, api_name=name)
        assert result or name == "/stop", name


def test_generation_streams_partial_output(client, playground):
    prompt = "def add(a, b):\n"
    job = client.submit(
        *generate_args(playground.trained, prompt, max_new_tokens=24, n=2), api_name="/generate"
    )
    updates = list(job)
    outputs = job.outputs()
    assert len(updates) > 2 and len(outputs) > 2
    final_details = outputs[-1][1]
    assert [d["candidate"] for d in final_details] == [1, 2]
    for d in final_details:
        assert d["finish_reason"] in ("length", "eos")
        assert 0 <= d["new_tokens"] <= 24
        assert d["seed"] == 0 and d["prompt_truncated"] is False
    # the first editor grows one piece at a time and ends with prompt + completion
    lengths = [len(editor_value(o[2])) for o in outputs]
    assert any(prompt_len < len(prompt) + len(final_details[0]["text"]) for prompt_len in lengths)
    assert lengths == sorted(lengths)
    assert editor_value(outputs[-1][2]) == prompt + final_details[0]["text"]
    assert editor_value(outputs[-1][3]) == prompt + final_details[1]["text"]
    # editors beyond n are hidden (the last frame sets every property; the first one only
    # those that differ from what this client's page shows: its earlier generation had n=1)
    assert outputs[-1][4]["visible"] is False
    assert isinstance(outputs[0][3], dict) and outputs[0][3]["visible"] is True
    assert all(not isinstance(o[4], dict) or o[4].get("visible") is not True for o in outputs)
    # mid-stream frames carry the editors' texts as plain values (cheaper for Gradio)
    assert any(isinstance(o[2], str) for o in outputs[1:-1])


def test_candidate_labels_show_time_and_speed(client, playground):
    job = client.submit(*generate_args(playground.trained, n=3), api_name="/generate")
    job.result()
    last = job.outputs()[-1]
    for i in range(3):
        label = last[2 + i]["label"]
        assert label.startswith(f"candidate {i + 1} ·") and "tokens/s" in label and " s ·" in label


def test_user_stop_sequences_end_candidates(client, playground):
    # "e" is frequent: with it as a stop string no candidate may contain it
    result = client.predict(
        *generate_args(
            playground.trained, max_new_tokens=64, n=4, stop_mode="stop sequences", stop_text="e"
        ),
        api_name="/generate",
    )
    details = result[1]
    assert all("e" not in d["text"] for d in details)
    assert any(d["finish_reason"] == "stop" for d in details)


def test_greedy_is_repeatable(client, playground):
    def texts():
        args = generate_args(playground.foreign, temperature=0.0, seed=-1, n=2)
        return [d["text"] for d in client.predict(*args, api_name="/generate")[1]]

    first = texts()
    assert first == texts() and first[0] == first[1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": "   \n"}, "prompt is empty"),
        ({"checkpoint": "missing"}, "no such directory"),
        ({"checkpoint": "/etc"}, "not in the list of choices|not one this playground serves"),
        ({"stop_mode": "stop sequences", "stop_text": ""}, "at least one sequence"),
        ({"n": MAX_CANDIDATES + 1}, "greater than maximum value|Number of candidates"),
    ],
)
def test_errors_arrive_as_errors(client, playground, kwargs, message):
    checkpoint = kwargs.pop("checkpoint", "trained")
    checkpoint = getattr(playground, checkpoint, checkpoint)
    prompt = kwargs.pop("prompt", "x = 1\n")
    with pytest.raises(gradio_client.exceptions.AppError, match=message):
        client.predict(*generate_args(checkpoint, prompt, **kwargs), api_name="/generate")


@pytest.mark.parametrize("on_the_loop", [True, False], ids=["on the loop", "in a thread"])
def test_long_prompt_is_trimmed_with_a_notice(client, playground, monkeypatch, on_the_loop):
    from codeparrot.app import ui

    if not on_the_loop:  # a prompt this long is tokenized in a thread
        monkeypatch.setattr(ui, "TOKENIZE_ON_THE_LOOP_CHARS", 0)
    prompt = "".join(f"value_{i} = {i} * {i}\n" for i in range(200))  # far beyond 256 tokens
    result = client.predict(
        *generate_args(playground.trained, prompt, max_new_tokens=32), api_name="/generate"
    )
    notice, details = result[0], result[1]
    assert notice["visible"] is True and "Prompt trimmed" in notice["value"]
    assert "leaves 224 for the prompt" in notice["value"]  # context 256 - 32 new tokens
    kept = details[0]["prompt_tokens"]
    assert details[0]["prompt_truncated"] is True and 0 < kept <= 224
    assert f"saw only the last {kept} tokens" in notice["value"]


def test_model_card_endpoint_shows_the_facts(client, playground):
    card, facts, _image, _plot, curve_note, humaneval, _he_image = client.predict(
        str(playground.trained), api_name="/model_card"
    )
    for text in ("149.2k", "12.3M", "1,500", "3.211", "24.80", "pass@1 | 1.25%", "pass@10 | 3.75%"):
        assert text in card
    assert card == facts
    assert "metrics.jsonl" in editor_value(curve_note) and "16 logged steps" in editor_value(
        curve_note
    )
    assert "| pass@10 | 3.75% |" in humaneval and "`HumanEval/0` (1/20)" in humaneval

    foreign, *_ = client.predict(str(playground.foreign), api_name="/model_card")
    assert "no report beside this checkpoint" in foreign and "counted from the weights" in foreign
    missing, *_ = client.predict(str(playground.missing), api_name="/model_card")
    assert "no such directory" in missing


class PacedEngine:
    """Writes a piece to each candidate every 20 ms until cancelled or 10,000 pieces; a
    generation of the real tiny model ends before a client's /stop can reach it."""

    context_length = 256
    fim = None

    def encode_prompt(self, prompt, max_new_tokens):
        return [0, 1], False

    def count_tokens(self, text):
        return 2

    def stream(self, prompt, config, cancel=None):
        from codeparrot.generation import Completion, StreamEvent

        pieces = 0
        while pieces < 10_000 and not (cancel is not None and cancel.is_set()):
            pieces += 1
            for i in range(config.n):
                yield StreamEvent(i, "x ")
            time.sleep(0.02)
        reason = "cancelled" if pieces < 10_000 else "length"
        for i in range(config.n):
            yield StreamEvent(i, "", Completion("x " * pieces, reason, 2, pieces, 0.1, seed=0))


def test_stop_ends_the_running_generation(served):
    url, playground = served(PacedEngine())
    client = gradio_client.Client(url, verbose=False)  # its own session
    checkpoint = next(iter(playground.pool.checkpoints))
    job = client.submit(*generate_args(checkpoint, n=3), api_name="/generate")
    deadline = time.monotonic() + 60
    while len(job.outputs()) < 3 and not job.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    client.predict(api_name="/stop")
    details = job.result()[1]
    assert [d["finish_reason"] for d in details] == ["cancelled"] * 3
    assert all(0 < d["new_tokens"] < 10_000 for d in details)
    label = job.outputs()[-1][2]["label"]
    assert label.endswith("cancelled")
