"""``/v1/chat/completions`` over the tiny checkpoint: the plain template for a base model,
the checkpoint's own template when it has one, whole and streamed, and by the openai client."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from codeparrot.serve.chat import PLAIN_STOP, plain_prompt
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.server import make_server

MESSAGES = [
    {"role": "system", "content": "You write Python."},
    {"role": "user", "content": "def add(a, b):"},
]
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


class Recording:
    """The real engine, recording the token ids of each prompt."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.prompts = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def stream_ids(self, ids, config, cancel=None, **reuse):
        self.prompts.append((list(ids), config))
        return self.engine.stream_ids(ids, config, cancel, **reuse)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from codeparrot.generation import Engine

    return Engine.load(tiny_checkpoint, device="cpu", quantize="none")


@pytest.fixture
def serving():
    servers = []

    def run(engine, checkpoint, **settings):
        config = ServeConfig(checkpoint=checkpoint, port=0, model_name="tiny", **settings)
        srv = make_server(config, engine)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield run
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def chat(srv, payload):
    req = urllib.request.Request(
        srv.url + "/v1/chat/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            body = resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    if not payload.get("stream"):
        return 200, json.loads(body)
    chunks = [c.removeprefix("data: ") for c in body.split("\n\n") if c]
    assert chunks[-1] == "[DONE]"
    return 200, [json.loads(c) for c in chunks[:-1]]


GREEDY = {"messages": MESSAGES, "max_tokens": 16, "temperature": 0, "seed": 0}


def test_a_base_model_answers_with_the_plain_template(engine, tiny_checkpoint, serving):
    from codeparrot.generation import GenerationConfig

    recording = Recording(engine)
    srv = serving(recording, tiny_checkpoint)
    status, answer = chat(srv, GREEDY)
    assert status == 200, answer
    assert answer["object"] == "chat.completion"
    ids, config = recording.prompts[-1]
    text = "You write Python.\n\nUser: def add(a, b):\n\nAssistant:"
    assert plain_prompt(MESSAGES) == text
    assert engine.tokenizer.decode(ids) == text
    assert PLAIN_STOP in config.stop
    direct = GenerationConfig(max_new_tokens=16, temperature=0, seed=0, stop=(PLAIN_STOP,))
    expected = next(e.completion.text for e in engine.stream_ids(ids, direct) if e.completion)
    choice = answer["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": expected}
    assert choice["finish_reason"] in ("stop", "length")
    assert answer["usage"]["prompt_tokens"] == len(ids)


def test_a_streamed_chat_sends_the_role_then_the_same_text(engine, tiny_checkpoint, serving):
    srv = serving(engine, tiny_checkpoint)
    _, whole = chat(srv, GREEDY)
    _, chunks = chat(srv, GREEDY | {"stream": True})
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_the_checkpoints_own_template_is_used(tiny_checkpoint, tmp_path, serving):
    import shutil

    from transformers import AutoTokenizer

    from codeparrot.generation import Engine

    checkpoint = tmp_path / "chat"
    shutil.copytree(tiny_checkpoint, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(checkpoint)
    engine = Engine.load(checkpoint, device="cpu", quantize="none")
    recording = Recording(engine)
    srv = serving(recording, checkpoint, chat_template="checkpoint")
    status, answer = chat(srv, GREEDY)
    assert status == 200, answer
    ids, config = recording.prompts[-1]
    expected = "<system>You write Python.\n<user>def add(a, b):\n<assistant>"
    assert engine.tokenizer.decode(ids) == expected
    assert PLAIN_STOP not in config.stop


def test_a_model_without_template_and_no_plain_fallback_is_a_400(engine, tiny_checkpoint, serving):
    srv = serving(engine, tiny_checkpoint, chat_template="checkpoint")
    status, answer = chat(srv, GREEDY)
    assert status == 400 and answer["error"]["param"] == "messages"
    assert "chat template" in answer["error"]["message"]


@pytest.mark.parametrize(
    "messages",
    [[], "hi", [{"role": "wizard", "content": "x"}], [{"role": "user", "content": 3}], [3]],
)
def test_bad_messages_are_a_400_naming_them(engine, tiny_checkpoint, serving, messages):
    srv = serving(engine, tiny_checkpoint)
    status, answer = chat(srv, GREEDY | {"messages": messages})
    assert status == 400 and answer["error"]["param"] == "messages"


def test_evalplus_shape_with_a_fixed_max_tokens_is_answered(engine, tiny_checkpoint, serving):
    """evalplus's openai backend: a system and a user message, max_tokens 768 whatever the
    model, top_p 0.95; a 256-token model clamps max_tokens to what its context leaves."""
    srv = serving(engine, tiny_checkpoint)
    messages = [
        {"role": "system", "content": "You are a helpful assistant good at coding."},
        {"role": "user", "content": "Complete this function:\n```python\ndef add(a, b):\n```"},
    ]
    payload = {"model": "tiny", "messages": messages, "max_tokens": 768}
    payload |= {"temperature": 0.0, "n": 1, "top_p": 0.95}
    status, answer = chat(srv, payload)
    assert status == 200, answer
    used = answer["usage"]["prompt_tokens"]
    assert answer["usage"]["completion_tokens"] <= engine.context_length - used


def test_openai_client_chats_and_streams(engine, tiny_checkpoint, serving):
    openai = pytest.importorskip("openai")
    srv = serving(engine, tiny_checkpoint)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
    whole = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=16, temperature=0, seed=0
    )
    streamed = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=16, temperature=0, seed=0, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == whole.choices[0].message.content
