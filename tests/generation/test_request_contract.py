"""The request contract: one CompletionRequest, checked once against the declared bounds,
refusing with the field's name as an attribute; each front door names it its own way."""

from __future__ import annotations

import math

import pytest

from codeparrot.config import field_bounds
from codeparrot.generation import GenerationConfig
from codeparrot.generation.request import (
    RULES,
    CompletionRequest,
    RequestError,
    RequestLimits,
)

LIMITS = RequestLimits(max_new_tokens=32, n=4, stop_sequences=2, stop_chars=5)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 33}, "max_new_tokens"),  # the front door's limit
        ({"max_new_tokens": "10"}, "max_new_tokens"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"n": 5}, "n"),
        ({"n": 0}, "n"),
        ({"seed": 2**70}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"stop": ("a", "b", "c")}, "stop"),
        ({"stop": ("abcdef",)}, "stop"),
        ({"stop": ("",)}, "stop"),
        ({"stop": (3,)}, "stop"),
        ({"stop": "a"}, "stop"),
        ({"prompt": 3}, "prompt"),
        ({"prompt": (1, -2)}, "prompt"),
        ({"suffix": ["x"]}, "suffix"),
    ],
)
def test_a_bad_value_is_refused_with_its_field_as_an_attribute(changes, field):
    values = {"prompt": "def f():", "max_new_tokens": 16} | changes
    with pytest.raises(RequestError) as info:
        CompletionRequest(**values, limits=LIMITS)
    assert info.value.field == field
    # a front door names the field its own way, from the attribute, not the text
    # the front door gives the name: the problem is said without it
    assert info.value.message("wire_name") == f"wire_name {info.value.problem}."
    assert info.value.problem.startswith(("must", "is", "holds"))


def test_the_bounds_are_the_declared_ones():
    # every number field's bounds are GenerationConfig's (both read codeparrot.options)
    for name, rule in RULES.items():
        if name != "seed":
            assert rule.bounds == field_bounds(GenerationConfig, name), name


def test_a_fine_request_gives_the_engine_its_config():
    request = CompletionRequest(
        "def f():", "    return 1\n", max_new_tokens=8, temperature=0, top_k=3, min_p=0.1,
        n=2, seed=7, stop=["\n\n"], limits=LIMITS,
    )  # fmt: skip
    assert request.stop == ("\n\n",)
    gen = request.generation(heal=False)
    assert (gen.max_new_tokens, gen.temperature, gen.top_k, gen.min_p, gen.n, gen.seed) == (
        8, 0, 3, 0.1, 2, 7,
    )  # fmt: skip
    assert gen.stop == ("\n\n",) and gen.heal is False  # a front door's own setting
    # a front door's limit never widens the declared bound
    with pytest.raises(RequestError, match=r"1\.\.4096"):
        CompletionRequest("x", max_new_tokens=5000, limits=RequestLimits(max_new_tokens=10**6))


def test_no_front_door_parses_an_error_message():
    """The field's wire name comes from each front door's map, not from an error's text."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("serve/*.py"), *root.glob("app/*.py"), *root.glob("lsp/*.py")]:
        text = path.read_text()
        assert "str(e).split" not in text and "splitlines()[1:]" not in text, path


def test_each_front_door_names_the_field_as_its_clients_do():
    from codeparrot.app.limits import LABELS
    from codeparrot.serve.llama import LLAMA_NAMES
    from codeparrot.serve.request import OPENAI_NAMES

    assert OPENAI_NAMES["max_new_tokens"] == "max_tokens"
    assert LLAMA_NAMES["max_new_tokens"] == "n_predict"
    assert set(LABELS) >= set(RULES) - {"top_k", "min_p"}  # the page sends no top_k, min_p
