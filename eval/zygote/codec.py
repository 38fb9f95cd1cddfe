"""Frames and the plain-data codec: what crosses between the harness, Z, A and B.

Imports nothing of its siblings, so the harness can load it alone: kept recordings are
read back only through this codec (``eval/recordings.py``). Also the words of a replay
plan (``RECORD``, ``REPLAY``, ``RECORDING``, ``replay_plan``), which B and A both read,
and the check of one call's outcome as B sent it (``_outcome``), which A, the worker's
checker and the harness's reading of a kept recording all make.
"""

import array
import os
import struct
import sys

MAX_FRAME = 16 * 1024 * 1024
MAX_DEPTH = 200


def write_frame(fd, payload):
    data = b"%010d" % len(payload) + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_into(fd, n):
    """``n`` bytes from ``fd``, read into one buffer (no copy of the parts): a bytearray."""
    data = bytearray(n)
    with memoryview(data) as room:
        at = 0
        while at < n:
            got = os.readv(fd, [room[at:]])
            if not got:
                raise EOFError("pipe closed")
            at += got
    return data


def grow_pipe(fd, size=1 << 20):
    """Have the pipe of ``fd`` hold ``size`` bytes (as far as the system lets it): fewer
    wake-ups for the megabytes of a HumanEval+ sample's answers."""
    import fcntl

    try:
        fcntl.fcntl(fd, 1031, size)  # F_SETPIPE_SZ
    except OSError:
        pass


def read_frame(fd, limit=MAX_FRAME):
    head = read_exact(fd, 10)
    if not head.isdigit():
        raise ValueError("malformed frame header")
    size = int(head)
    if size > limit:
        raise ValueError(f"frame of {size} bytes exceeds the {limit}-byte limit")
    return read_exact(fd, size)


# -- the plain-data codec (the only thing that crosses from the sample to the checker) --
#
# Binary, never pickle: one tag byte per value, then its payload.
#   N T F                 None, True, False
#   i <q>                 an int of 64 bits;  I <Q n> n bytes: any other int, two's
#                         complement (linear in its size: a decimal text of a million
#                         digits takes CPython minutes to write and read back)
#   f <d>   c <d><d>      float, complex (bit for bit: nan, -0.0 and inf survive)
#   s <Q n> n bytes       str (UTF-8, lone surrogates kept); b <Q n> n bytes: bytes
#   l t S z + kind <Q n>  list, tuple, set, frozenset of n items; kind "*": n values
#                         follow. Kind "f" / "i" (at least half of them floats / 64-bit
#                         ints): n packed 8-byte values, then <Q k> and k times <Q position>
#                         and a value, for the k items of other types (zeros in the column).
#                         HumanEval+ answers of a million floats cost a few C loops, not a
#                         million calls.
#   d <Q n>               dict: n keys and values, alternating
# Every length is checked against what is left of the data before anything is built, so a
# reply can make the checker allocate little more than its own (capped) size.

_INT64 = struct.Struct("<q")
_LENGTH = struct.Struct("<Q")
_FLOAT = struct.Struct("<d")
_COMPLEX = struct.Struct("<dd")
_CONTAINERS = {list: b"l", tuple: b"t", set: b"S", frozenset: b"z"}
_BUILD = {ord("l"): list, ord("t"): tuple, ord("S"): set, ord("z"): frozenset}
_PACKED = {float: ("d", b"f"), int: ("q", b"i")}  # element type: array typecode, kind byte
_UNPACKED = {ord("f"): "d", ord("i"): "q"}


class TooLarge(ValueError):
    """A value encodes to more than the limit's bytes."""


def encode(obj, limit=MAX_FRAME):
    """The bytes of plain data ``obj``; TooLarge past ``limit`` bytes, ValueError too deep, TypeError
    for anything but None, bool, int, float, complex, str, bytes, list, tuple, set,
    frozenset and dict (exact types: a subclass could carry code)."""
    out = bytearray()
    _encode(obj, out, 0, limit)
    if len(out) > limit:
        raise TooLarge(f"value of over {limit} bytes")
    return bytes(out)


def _encode(obj, out, depth, limit):
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if len(out) > limit:
        raise TooLarge(f"value of over {limit} bytes")
    t = type(obj)
    if obj is None:
        out += b"N"
    elif obj is True:
        out += b"T"
    elif obj is False:
        out += b"F"
    elif t is int:
        if -(1 << 63) <= obj < 1 << 63:
            out += b"i" + _INT64.pack(obj)
        else:
            size = (obj.bit_length() + 8) // 8
            out += b"I" + _LENGTH.pack(size) + obj.to_bytes(size, "little", signed=True)
    elif t is float:
        out += b"f" + _FLOAT.pack(obj)
    elif t is complex:
        out += b"c" + _COMPLEX.pack(obj.real, obj.imag)
    elif t is str:
        raw = obj.encode("utf-8", "surrogatepass")
        out += b"s" + _LENGTH.pack(len(raw)) + raw
    elif t is bytes:
        out += b"b" + _LENGTH.pack(len(obj)) + obj
    elif t in _CONTAINERS:
        out += _CONTAINERS[t]
        if not (obj and _encode_packed(obj, out, depth, limit)):
            out += b"*" + _LENGTH.pack(len(obj))
            for item in obj:
                _encode(item, out, depth + 1, limit)
    elif t is dict:
        out += b"d" + _LENGTH.pack(len(obj))
        for key, value in obj.items():
            _encode(key, out, depth + 1, limit)
            _encode(value, out, depth + 1, limit)
    else:
        raise TypeError(f"a {t.__name__} cannot leave the sandbox (plain data only)")


def _encode_packed(items, out, depth, limit):
    """Write non-empty ``items`` as one packed column of floats (or 64-bit ints) when at
    least half of them are floats (ints); the others follow one by one, each after its
    position. False, having written nothing, when neither column fits."""
    values = list(items)
    types = list(map(type, values))
    column = next((t for t in _PACKED if types.count(t) * 2 >= len(types)), None)
    if column is None:
        return False
    typecode, kind = _PACKED[column]
    odd = []  # positions of the values not in the column (C-level scans: few, usually)
    for other in set(types) - {column}:
        at = -1
        for _ in range(types.count(other)):
            at = types.index(other, at + 1)
            odd.append(at)
    extras = {at: values[at] for at in odd}
    for at in odd:
        values[at] = column()
    try:
        packed = array.array(typecode, values)
    except OverflowError:  # ints of more than 64 bits: they join the others
        big = [at for at, v in enumerate(values) if not -(1 << 63) <= v < 1 << 63]
        extras.update((at, values[at]) for at in big)
        for at in big:
            values[at] = 0
        packed = array.array(typecode, values)
    if sys.byteorder == "big":
        packed.byteswap()
    out += kind + _LENGTH.pack(len(packed)) + packed.tobytes() + _LENGTH.pack(len(extras))
    for at in sorted(extras):
        out += _LENGTH.pack(at)
        _encode(extras[at], out, depth + 1, limit)
    return True


def decode(data):
    """The value of ``data`` (as :func:`encode` writes it); ValueError when malformed,
    TypeError when a set or dict key is unhashable."""
    view = memoryview(data)
    try:
        value, pos = _decode(view, 0, 0)
    except struct.error as e:
        raise ValueError(f"malformed value ({e})") from None
    if pos != len(view):
        raise ValueError("trailing data after value")
    return value


def _length(view, pos, unit=1):
    """A length at ``pos`` and where its payload starts; the payload must fit in ``view``."""
    (size,) = _LENGTH.unpack_from(view, pos)
    pos += 8
    if size * unit > len(view) - pos:
        raise ValueError("length runs past the end")
    return size, pos


def _decode_packed(view, pos, typecode, depth):
    """The values of a packed column at ``pos`` (its length first), the others put back."""
    size, pos = _length(view, pos, 8)
    packed = array.array(typecode)
    packed.frombytes(view[pos : pos + 8 * size])
    if sys.byteorder == "big":
        packed.byteswap()
    values = packed.tolist()
    count, pos = _length(view, pos + 8 * size, 9)  # a position and a tag each, at least
    for _ in range(count):
        (at,) = _LENGTH.unpack_from(view, pos)
        if at >= size:
            raise ValueError("position past the end of a packed column")
        values[at], pos = _decode(view, pos + 8, depth + 1)
    return values, pos


def _decode(view, pos, depth):
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if pos >= len(view):
        raise ValueError("value runs past the end")
    tag = view[pos]
    pos += 1
    if tag == 78:  # N
        return None, pos
    if tag == 84:  # T
        return True, pos
    if tag == 70:  # F
        return False, pos
    if tag == 105:  # i
        return _INT64.unpack_from(view, pos)[0], pos + 8
    if tag == 102:  # f
        return _FLOAT.unpack_from(view, pos)[0], pos + 8
    if tag == 99:  # c
        return complex(*_COMPLEX.unpack_from(view, pos)), pos + 16
    if tag in b"Isb":
        size, pos = _length(view, pos)
        raw = view[pos : pos + size]
        if tag == 73:  # I
            value = int.from_bytes(raw, "little", signed=True)
        else:
            value = str(raw, "utf-8", "surrogatepass") if tag == 115 else bytes(raw)
        return value, pos + size
    if tag in _BUILD:
        if pos >= len(view):
            raise ValueError("value runs past the end")
        kind = view[pos]
        if kind in _UNPACKED:
            values, pos = _decode_packed(view, pos + 1, _UNPACKED[kind], depth)
            return _BUILD[tag](values), pos
        if kind != 42:  # *
            raise ValueError(f"unknown container kind {kind!r}")
        size, pos = _length(view, pos + 1)
        items = []
        for _ in range(size):
            item, pos = _decode(view, pos, depth + 1)
            items.append(item)
        return _BUILD[tag](items), pos
    if tag == 100:  # d
        size, pos = _length(view, pos, 2)
        items = []
        for _ in range(2 * size):
            item, pos = _decode(view, pos, depth + 1)
            items.append(item)
        return dict(zip(items[0::2], items[1::2], strict=True)), pos
    raise ValueError(f"unknown tag {tag!r}")


class SampleFailed(Exception):
    pass


def _outcome(reply):
    """One call's outcome as B sent it, checked: ("ok", result, after) or ("err", text)."""
    ok = type(reply) is tuple and len(reply) == 3 and reply[0] == "ok"
    if ok and (reply[2] is None or type(reply[2]) is tuple):
        return reply
    if type(reply) is tuple and len(reply) == 2 and reply[0] == "err":
        return ("err", str(reply[1]))
    raise SampleFailed("malformed reply from the sample")


class NotRecorded(BaseException):
    """The test made a call the reference's run did not: it depends on the answers.
    (Not an Exception: a test's ``except Exception`` must not swallow it.)"""


RECORD = b"record"
REPLAY = b"replay"
RECORDING = "\n\0recording:"  # between a record job's verdict and its recording


def replay_plan(plan):
    """A REPLAY plan's size cap and recorded calls (each call's encoded (args, kwargs))."""
    try:
        cap = int(plan[len(REPLAY) : len(REPLAY) + 10])
        keys = decode(plan[len(REPLAY) + 10 :])
    except (ValueError, TypeError, IndexError, OverflowError, UnicodeError):
        raise NotRecorded("the recording is not valid") from None
    if type(keys) is not list or not all(type(key) is bytes for key in keys):
        raise NotRecorded("the recording is not valid")
    return cap, keys
