"""The sandbox's codec (``eval/zygote/codec.py``): what crosses from the sample to the checker.

Values come back with their exact types, integers travel in binary (HumanEval+ answers of
a million digits), and malformed or oversized data is refused with a ValueError, never
anything the checker would build without bound.
"""

from __future__ import annotations

import importlib.util
import math

import pytest

from codeparrot.eval.sandbox import ZYGOTE


@pytest.fixture(scope="module")
def codec():
    """The codec as the zygote loads it: a plain module, by its file (it imports none of
    the zygote's other parts)."""
    spec = importlib.util.spec_from_file_location("codeparrot_zygote_codec", ZYGOTE / "codec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same(a, b) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0, nor True)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is float:
        return repr(a) == repr(b)  # nan and -0.0 too
    return a == b


VALUES = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, -129, 10**5000,
    -(7**9000), 1.5, float("nan"), -0.0, float("inf"), 1 + 2j, "héllo \udc80", "", b"\x00\xff",
    [], (), set(), frozenset(), {}, [1, 2, 3], [1.0, 2.5], [1, 3, 2.0, 8.0], [True, False, 1],
    [1, 2**70, -(2**64), 5], [0.5, None, "x", 3, float("nan")], (1, "a", [b"x"]),
    {1: [2, 3], "k": (4.0,)}, {1, 2, 3}, frozenset({"a", 1.5}), [[1.0] * 3] * 2,
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_values_come_back_with_their_types(codec, value):
    assert same(codec.decode(codec.encode(value)), value)


def test_integers_travel_in_binary(codec):
    # a decimal text would hit the interpreter's 4,300-digit limit here, and take CPython
    # seconds per million digits both ways; two's complement is linear
    huge = 18 * 10**200_000
    data = codec.encode(huge)
    assert len(data) < huge.bit_length() // 8 + 16
    assert codec.decode(data) == huge
    assert codec.decode(codec.encode([huge, -huge, 1])) == [huge, -huge, 1]


def test_a_million_floats_cost_one_packed_column(codec):
    answer = [1, 3] + [1.0 + i / 2 for i in range(1_000_000)] + [math.inf]
    data = codec.encode(answer)
    assert len(data) < 8 * len(answer) + 100  # 8 bytes each, the two ints aside
    back = codec.decode(data)
    assert back == answer and type(back[0]) is int and type(back[2]) is float


@pytest.mark.parametrize(
    "data",
    [
        b"", b"X", b"Nx", b"i12", b"l", b"lq", b"l*" + b"\xff" * 8,
        b"s" + (10).to_bytes(8, "little") + b"ab",
        b"I" + (2**40).to_bytes(8, "little"),
        b"lf" + (3).to_bytes(8, "little") + b"\0" * 8,
        b"lf" + (1).to_bytes(8, "little") + b"\0" * 8 + (1).to_bytes(8, "little")
        + (5).to_bytes(8, "little") + b"N",
        b"d" + (2**62).to_bytes(8, "little"),
    ],
)  # fmt: skip
def test_malformed_data_is_a_value_error(codec, data):
    with pytest.raises(ValueError):
        codec.decode(data)


def test_every_cut_or_flipped_byte_is_refused_or_decoded(codec):
    data = codec.encode([1, 2.0, "x", [3, 4.5], {1: 2}, {5}, b"q", 2**80, None])
    for i in range(len(data)):
        for bad in (data[:i], data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]):
            try:
                codec.decode(bad)
            except (ValueError, TypeError):  # TypeError: an unhashable key
                pass


def test_values_past_the_cap_or_of_other_types_are_refused(codec):
    with pytest.raises(ValueError, match="over 500 bytes"):
        codec.encode([b"x" * 100] * 10, limit=500)
    with pytest.raises(ValueError, match="nested"):
        nested: list = []
        for _ in range(codec.MAX_DEPTH + 5):
            nested = [nested]
        codec.encode(nested)
    with pytest.raises(TypeError, match="cannot leave the sandbox"):
        codec.encode(type("Sneaky", (int,), {})(3))
