"""``/v1/chat/completions``: messages to a prompt, with the checkpoint's chat template or
the plain one.

The checkpoint's template is the tokenizer's ``chat_template`` (a Jinja template that
transformers renders in its sandbox: no code of the checkpoint runs). A base model has
none; ``--chat-template auto`` (the default) then uses :data:`PLAIN` so that chat clients
(evalplus's ``--backend openai``, Continue's chat) can still ask it::

    {system message}

    User: {content}

    Assistant: {content}

    User: {content}

    Assistant:

with ``"\\nUser:"`` as a stop string, so that the answer ends where the model starts to
write the user's next turn. ``--chat-template checkpoint`` refuses chat to a model
without its own template (400 naming ``messages``).
"""

from __future__ import annotations

from typing import Any

from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import (
    OPENAI_DEFAULTS,
    SAMPLING_FIELDS,
    ServedRequest,
    bad,
    check_fields,
    json_type,
    sampling_request,
)

ROLES = ("system", "developer", "user", "assistant")
PLAIN_LABELS = {"user": "User", "assistant": "Assistant"}
PLAIN_STOP = "\nUser:"
MAX_MESSAGES = 256
CHAT_FIELDS = SAMPLING_FIELDS | {"messages", "max_tokens", "max_completion_tokens"}
CHAT_FIELDS |= {"cut_repetition"}


def parse_chat_request(data: dict[str, Any], config: ServeConfig, engine: Any) -> ServedRequest:
    """A chat request checked and turned into a prompt of token ids (400s name the field)."""
    check_fields(data, CHAT_FIELDS)
    messages = check_messages(data.get("messages"), config.max_prompt_chars)
    template = template_kind(config, engine)
    if template is None:
        raise bad(
            "messages: this checkpoint has no chat template and the server was started with "
            "--chat-template checkpoint; use /v1/completions, or start it with "
            "--chat-template auto or plain.",
            "messages",
        )
    name = "max_completion_tokens" if "max_completion_tokens" in data else "max_tokens"
    cut = data.get("cut_repetition")
    if cut is not None and not isinstance(cut, bool):
        raise bad(f"cut_repetition must be true or false, got {json_type(cut)}.", "cut_repetition")
    ids = tuple(render(messages, engine, template))
    request = sampling_request(
        data,
        config,
        engine.context_length,
        ids,
        None,
        data.get(name),
        OPENAI_DEFAULTS,
        cut=cut,
        names={"max_new_tokens": name, "prompt": "messages"},
    )
    if template == "plain":
        stops = (*request.generation.stop, PLAIN_STOP)
        request = _replace_generation(request, stop=stops)
    return _named(request)


def template_kind(config: ServeConfig, engine: Any) -> str | None:
    """``"checkpoint"``, ``"plain"``, or None when chat cannot be served."""
    own = getattr(engine.tokenizer, "chat_template", None)
    if config.chat_template == "plain":
        return "plain"
    if own:
        return "checkpoint"
    return "plain" if config.chat_template == "auto" else None


def check_messages(value: Any, limit: int) -> list[dict[str, str]]:
    """``messages`` as [{"role", "content"}] with text content (OpenAI's list of text
    parts joined), within ``limit`` characters in all."""
    if not isinstance(value, list) or not value:
        raise bad(f"messages must be a non-empty array, got {json_type(value)}.", "messages")
    if len(value) > MAX_MESSAGES:
        raise bad(f"messages has {len(value)} items; at most {MAX_MESSAGES}.", "messages")
    out, total = [], 0
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad(f"{where} must be an object, got {json_type(message)}.", "messages")
        role = message.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role must be one of {', '.join(ROLES)}.", "messages")
        content = _content(message.get("content"), where)
        total += len(content)
        if total > limit:
            raise bad(f"messages hold over {limit:,} characters in all.", "messages")
        out.append({"role": "system" if role == "developer" else role, "content": content})
    return out


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in value
    ):
        text = "".join(p["text"] for p in value)
    else:
        raise bad(
            f"{where}.content must be a string or a list of text parts, got {json_type(value)}.",
            "messages",
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise bad(f"{where}.content holds a lone UTF-16 surrogate.", "messages")
    return text


def plain_prompt(messages: list[dict[str, str]]) -> str:
    """The plain template (module docstring): system text first, then labelled turns."""
    parts = []
    for message in messages:
        if message["role"] == "system":
            parts.append(message["content"])
        else:
            parts.append(f"{PLAIN_LABELS[message['role']]}: {message['content']}")
    return "\n\n".join([*parts, "Assistant:"])


def render(messages: list[dict[str, str]], engine: Any, template: str) -> list[int]:
    tokenizer = engine.tokenizer
    if template == "plain":
        text = plain_prompt(messages)
        return [*engine.bos_ids, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as e:  # the template's own refusal (roles out of order, ...)
        raise bad(
            f"messages: the checkpoint's chat template refused them ({e}).", "messages"
        ) from None
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _replace_generation(request: ServedRequest, **changes: Any) -> ServedRequest:
    import dataclasses

    return dataclasses.replace(request, generation=request.generation.replace(**changes))


def _named(request: ServedRequest) -> ServedRequest:
    import dataclasses

    return dataclasses.replace(request, prompt_field="messages")
