"""The sandbox's process side: a long-lived zygote that runs one sample per request.

Run as ``python -I -S _zygote.py MODE SLOT CONFIG_JSON`` (standard library only; the
harness imports it only for its codec, to check kept recordings: ``eval/recordings.py``).
The harness (``eval/sandbox.py``) talks to it over stdin/stdout in length-prefixed frames.
In the namespaced modes Z first builds, once, a root that holds only the Python runtime
(read-only) and pivots into it (``build_root``), then forks the worker's reporter R, the
one writer of its stdout (``start_reporter``). Z itself never runs sample code, nor holds
a verdict; per sample it forks:

    zygote Z ── A: checker, PID 1 of a fresh PID namespace (unshare NS|IPC|UTS):
                private /proc, tmpfs /tmp and /dev/shm, own IPC objects
              └─ B: the sample, unprivileged uid, rlimits, seccomp, stdio → /dev/null

(Z re-enters its own PID namespace after each fork; in mode userns it is PID 1 of a
namespace of its own, which its user namespace owns.) B runs ``prompt + completion`` and
then only answers call requests from A over two pipes, with values in a strict
plain-data encoding. A runs the trusted test code with the entry point replaced by a
proxy that calls into B, so every comparison of the test happens in A on values A itself
decoded: an ``__eq__`` that always says True cannot cross the boundary, and nothing B
does (exit codes, output, frames, signals) reaches A's report to R. When A exits, the
kernel kills everything left in its PID namespace.

A test replayed against its recording (the calls known before the sample runs) needs no
A: B alone, PID 1 of its namespaces, answers every call at once; Z reads the answers
(never decoding them) for the worker's long-lived checker C, which runs the test against
them and reports to R (``run_replayed``).

Modes: ``root`` (Z started inside ``unshare --net`` as root; B gets a uid of its own),
``userns`` (Z inside ``unshare --user --map-root-user --net --pid --fork``; B drops its
capabilities), ``none`` (no namespaces: process groups and rlimits only).
"""

import array
import mmap
import os
import resource
import select
import signal
import struct
import sys
import time

MAX_FRAME = 16 * 1024 * 1024
MAX_DEPTH = 200
UID_BASE = 2_000_000_000 // 1000 * 1000  # uids no account uses; B of slot i runs as UID_BASE + i

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_READ_ONLY = MS_RDONLY | MS_NOSUID | MS_NODEV
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
CHECKER_SITE = "/checker/site"  # the checker's extra packages; hidden from the sample
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# Per sample: its own PIDs, mounts, SysV/POSIX IPC objects (they die with the sample)
# and host name. The network namespace is the worker's (a fresh one per sample costs 10-20%
# of the throughput): no socket outlives the sample's processes, since none can be sent
# "in flight" (sendmsg is denied), and Z makes itself a new one should any be left.
NAMESPACES = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS


# -- frames ---------------------------------------------------------------------------


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


# -- the seccomp filter of B ----------------------------------------------------------------

# System calls a HumanEval sample never needs, per architecture: io_uring, the kernel
# keyrings (per uid, so they would outlive the sample), bpf, perf_event_open, ptrace and
# process_vm_*, userfaultfd, new namespaces, mounts, module and kexec loading, handles;
# machine-wide pools and work: the AIO calls (the host's fs.aio-nr events), sync and
# syncfs; and what reads or drops the page cache of files shared with the host and with
# later samples (mincore, cachestat, fadvise, process_madvise; madvise's MADV_COLD and
# MADV_PAGEOUT below), a channel across samples and runs; sendmsg and sendmmsg, the only
# way to put a descriptor "in flight" (SCM_RIGHTS), where a socket and its abstract name
# outlive every process of the sample (send and sendto remain). And every kernel-global
# counter a sample could both advance and read, which would carry "which answer did I try
# last" to the next sample, the next worker, the next run: sockets (SO_COOKIE, their inode
# numbers), pipes and POSIX message queues (inode numbers from the one counter of pseudo
# files), memfds and pidfds (their file systems' counters), inotify, and file locks (flock,
# fcntl's record and OFD locks below), which reach the runtime copy every worker shares.
DENIED = {
    "x86_64": {
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "add_key": 248, "request_key": 249, "keyctl": 250,
        "bpf": 321, "perf_event_open": 298, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "userfaultfd": 323,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176,
        "name_to_handle_at": 303, "open_by_handle_at": 304,
        "io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209,
        "io_cancel": 210, "io_pgetevents": 333, "sync": 162, "syncfs": 306,
        "mincore": 27, "cachestat": 451, "fadvise64": 221, "process_madvise": 440,
        "sendmsg": 46, "sendmmsg": 307,
        "socket": 41, "socketpair": 53, "getsockopt": 55, "setsockopt": 54,
        "pipe": 22, "pipe2": 293, "memfd_create": 319, "memfd_secret": 447, "mq_open": 240,
        "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424, "flock": 73,
        "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
        "fanotify_init": 300,
    },
    "aarch64": {
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "add_key": 217, "request_key": 218, "keyctl": 219,
        "bpf": 280, "perf_event_open": 241, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "userfaultfd": 282,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106,
        "name_to_handle_at": 264, "open_by_handle_at": 265,
        "io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3, "io_getevents": 4,
        "io_pgetevents": 292, "sync": 81, "syncfs": 267,
        "mincore": 232, "cachestat": 451, "fadvise64": 223, "process_madvise": 440,
        "sendmsg": 211, "sendmmsg": 269,
        "socket": 198, "socketpair": 199, "getsockopt": 209, "setsockopt": 208,
        "pipe2": 59, "memfd_create": 279, "memfd_secret": 447, "mq_open": 180,
        "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424, "flock": 32,
        "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262,
    },
}  # fmt: skip
# (audit arch, fcntl, clone, clone3, madvise)
ARCH = {
    "x86_64": (0xC000003E, 72, 56, 435, 28),
    "aarch64": (0xC00000B7, 25, 220, 435, 233),
}
MADV_COLD = 20
MADV_PAGEOUT = 21
# fcntl commands: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
# F_SETLEASE, F_GETLEASE, F_NOTIFY
FCNTL_DENIED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
# CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET, and CLONE_PIDFD
CLONE_DENIED = 0x7E020000 | 0x1000
X32_BIT = 0x40000000
EPERM = 1
ENOSYS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000
LD_ABS_W = 0x20
JEQ = 0x15
JGE = 0x35
JSET = 0x45
RET = 0x06


def seccomp_program(machine):
    """A classic-BPF seccomp filter (list of (code, jt, jf, k)) for ``machine``, or None.

    Denied calls fail with EPERM; clone3 fails with ENOSYS (its flags sit in memory the
    filter cannot read), so the C library falls back to clone, whose flags it checks.
    The call's number is found by a binary search (``_search``): a few comparisons per
    call, where a list of them cost ~70 for every allowed call, and the kernel runs the
    filter for every number as it is installed, once per sample, to cache what it allows.
    """
    if machine not in ARCH:
        return None
    audit_arch, fcntl, clone, clone3, madvise = ARCH[machine]
    deny = (RET, 0, 0, RET_ERRNO | EPERM)
    program = [(LD_ABS_W, 0, 0, 4), (JEQ, 1, 0, audit_arch), (RET, 0, 0, RET_KILL_PROCESS)]
    program.append((LD_ABS_W, 0, 0, 0))  # the system call number
    if machine == "x86_64":
        program += [(JGE, 0, 1, X32_BIT), deny]
    locks = len(FCNTL_DENIED)
    cases = {number: [deny] for number in DENIED[machine].values()}
    cases[clone3] = [(RET, 0, 0, RET_ERRNO | ENOSYS)]
    cases[fcntl] = [(LD_ABS_W, 0, 0, 24)]  # arg 1: the command
    cases[fcntl] += [(JEQ, locks - i, 0, cmd) for i, cmd in enumerate(FCNTL_DENIED)]
    cases[fcntl] += [(RET, 0, 0, RET_ALLOW), deny]
    cases[clone] = [(LD_ABS_W, 0, 0, 16), (JSET, 0, 1, CLONE_DENIED), deny, (RET, 0, 0, RET_ALLOW)]
    cases[madvise] = [(LD_ABS_W, 0, 0, 32), (JEQ, 1, 0, MADV_COLD)]  # arg 2: the advice
    cases[madvise] += [(JEQ, 0, 1, MADV_PAGEOUT), deny, (RET, 0, 0, RET_ALLOW)]
    return program + _search(sorted(cases.items()))


def _search(cases):
    """Instructions that run the block of the case whose number is in the accumulator
    (``cases``: sorted ``(number, block)`` pairs, each block ending in returns), else
    allow: halves compared with JGE down to four cases, then each with JEQ."""
    if len(cases) > 4:
        middle = len(cases) // 2
        below, above = _search(cases[:middle]), _search(cases[middle:])
        if len(below) > 255:
            raise ValueError("seccomp filter too large for a jump")
        return [(JGE, len(below), 0, cases[middle][0]), *below, *above]
    code = [(RET, 0, 0, RET_ALLOW)]
    for number, block in reversed(cases):
        code = [(JEQ, 0, len(block), number), *block, *code]
    return code


def prepare_seccomp():
    """The filter for this machine as a ``sock_fprog`` ready for prctl, or None.

    Built once in the zygote: the sample, once unprivileged, may not be able to import.
    """
    import ctypes

    program = seccomp_program(os.uname().machine)
    if program is None:
        return None

    class SockFilter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        ]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(program))(*program)
    fprog = SockFprog(len(program), filters)
    fprog.keep = filters
    return ctypes.byref(fprog), fprog


def install_seccomp(libc, seccomp):
    """Load the filter into this process (no_new_privs must already be set)."""
    if seccomp is not None and libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, seccomp[0], 0, 0):
        os._exit(75)


# -- B: the sample ----------------------------------------------------------------------


def set_limits(limits):
    cpu = int(limits["timeout"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size"], limits["file_size"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # RLIMIT_NPROC counts every process of the real uid. In mode root the sample has a
    # uid of its own; otherwise it shares the harness user's, whose processes Z counted.
    nproc = limits["processes"] + limits["user_processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def own_uid(mode):
    """Whether the sample gets a uid of its own: as real root (mode root, or none as root)."""
    return mode == "root" or (mode == "none" and os.geteuid() == 0)


def drop_privileges(mode, slot, libc):
    if own_uid(mode):
        uid = UID_BASE + slot
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise RuntimeError("could not drop privileges")
    if libc is not None:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if mode == "userns":
        import ctypes
        import platform

        number = SYS_CAPSET.get(platform.machine())
        if number is None:
            raise RuntimeError("cannot drop capabilities on this architecture")
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (ctypes.c_uint32 * 6)()
        if libc.syscall(number, header, data) != 0:
            raise RuntimeError("capset failed")


def hide_from_sample(libc):
    """In a mount namespace of its own: detach the checker's packages (not the sample's),
    and cover /proc (:func:`cover_proc`). Only where the checker has packages: else A
    covered /proc before forking the sample, and the sample shares A's namespace."""
    if libc.unshare(CLONE_NEWNS) != 0:
        os._exit(74)
    if libc.umount2(b"/checker", MNT_DETACH) != 0:
        os._exit(74)
    cover_proc(libc)


def cover_proc(libc):
    """Cover /proc with an empty read-only tmpfs. The sample needs nothing there, and it
    shows machine-wide counters a sample could advance and a later one read (the forks in
    /proc/stat, the inode numbers of shared memory in /proc/self/maps)."""
    flags = MS_READ_ONLY | MS_NOEXEC
    if libc.mount(b"tmpfs", b"/proc", b"tmpfs", flags, b"size=4k,mode=555") != 0:
        os._exit(74)


def sample_mounts(libc, limits, mode, slot, cover):
    """In the sample's new mount and IPC namespaces: a fresh /proc, private tmpfs over /tmp
    and /dev/shm, the namespace's shared memory within the memory limit, /proc covered once
    done with (``cover``), and an empty working directory for B, whose path it returns."""
    _mount(libc, None, b"/", None, MS_REC | MS_PRIVATE)
    _mount(libc, b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    size = b"size=%d,mode=1777" % limits["file_size"]
    for path in PRIVATE_TMP:
        if os.path.isdir(path):
            _mount(libc, b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size)
    _limit_ipc(libc, limits["memory"], mode == "root", limits["namespaces"])
    if cover:
        cover_proc(libc)
    workdir = "/tmp/sandbox"
    os.mkdir(workdir, 0o700)
    if mode == "root":
        os.chown(workdir, UID_BASE + slot, UID_BASE + slot)
    return workdir


def run_answers(program, frames, limits, mode, slot, libc, out_fd):
    """B of a replayed test in a namespaced mode, PID 1 of the sample's own namespaces with no
    checker beside it: never returns. Makes its namespaces as A would, runs the program,
    writes its "ready" and its answers to every recorded call to ``out_fd`` (what B would
    send A; Z reads them for the worker's checker) and exits."""
    workdir = sample_mounts(libc, limits, mode, slot, cover=False)
    if limits["checker"] and libc.umount2(b"/checker", MNT_DETACH) != 0:
        os._exit(74)
    cover_proc(libc)
    os.chdir(workdir)
    entry_point = frames[2].decode("utf-8", "surrogatepass")
    calls = [decode(key) for key in replay_plan(frames[3])[1]]
    os.dup2(out_fd, 4)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 4)
    os.closerange(5, 65536)
    set_limits(limits)
    drop_privileges(mode, slot, libc)
    install_seccomp(libc, limits["seccomp"])
    namespace = {}
    try:
        exec(compile(program, "<sample>", "exec"), namespace)
    except BaseException as e:
        write_frame(4, encode(("err", f"{type(e).__name__}: {e}"[:500])))
        os._exit(1)
    write_frame(4, encode(("ready",)))
    try:
        payload = outcomes_payload(answer_calls(namespace[entry_point], calls))
    except BaseException as e:
        try:
            payload = encode(("err", f"{type(e).__name__}: {e}"[:500]))
        except BaseException:
            payload = encode(("err", "unprintable exception"))
    if payload is not None:
        write_frame(4, payload)
    os._exit(0)


def run_sample(program, req_fd, resp_fd, limits, mode, slot, libc):
    """B: never returns. Runs the program, then serves call requests from A."""
    os.dup2(req_fd, 3)
    os.dup2(resp_fd, 4)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(5, 65536)
    if mode != "none" and limits["checker"]:
        hide_from_sample(libc)
    set_limits(limits)
    drop_privileges(mode, slot, libc)
    install_seccomp(libc, limits["seccomp"])
    if mode == "none":
        os.setsid()
    namespace = {}
    try:
        exec(compile(program, "<sample>", "exec"), namespace)
    except BaseException as e:
        write_frame(4, encode(("err", f"{type(e).__name__}: {e}"[:500])))
        os._exit(1)
    write_frame(4, encode(("ready",)))
    while True:
        try:
            request = decode(read_frame(3))
        except EOFError:
            os._exit(0)
        try:
            if request[0] == "calls":
                payload = outcomes_payload(answer_calls(namespace[request[1]], request[2]))
                if payload is None:  # sent in parts
                    continue
            elif request[0] == "names":
                found = [n for n in request[1] if callable(namespace.get(n))]
                payload = encode(("ok", found))
            else:
                _, name, args, kwargs = request
                payload = encode(("ok", namespace[name](*args, **kwargs)))
        except BaseException as e:
            try:
                payload = encode(("err", f"{type(e).__name__}: {e}"[:500]))
            except BaseException:
                payload = encode(("err", "unprintable exception"))
        write_frame(4, payload)


def outcomes_payload(outcomes):
    """The frame of ("ok", outcomes). Where several calls' outcomes do not fit in one, None,
    having sent ("parts", n), then each outcome in a frame of its own (one too large for a
    frame is an error, as it is when calls are answered one by one)."""
    try:
        return encode(("ok", outcomes))
    except TooLarge:
        if len(outcomes) < 2:
            raise
    write_frame(4, encode(("parts", len(outcomes))))
    for outcome in outcomes:
        try:
            part = encode(outcome)
        except (ValueError, TypeError) as e:
            part = encode(("err", f"{type(e).__name__}: {e}"[:500]))
        write_frame(4, part)
    return None


def answer_calls(function, calls):
    """B's answers to every call of a recorded test, in order, before any is checked: per
    call ("ok", result, the arguments if it changed them in place, else None) or ("err",
    message)."""
    outcomes = []
    for args, kwargs in calls:
        before = None if _frozen(args) else encode(args)  # nothing to change in place
        try:
            result = function(*args, **kwargs)
        except Exception as e:
            outcomes.append(("err", f"{type(e).__name__}: {e}"[:500]))
            continue
        changed = before is not None and encode(args) != before
        outcomes.append(("ok", result, args if changed else None))
    return outcomes


_SCALARS = (int, float, complex, str, bytes, bool, type(None))


def _frozen(value, depth=0):
    """Whether ``value`` (as decoded: exact types) holds nothing that can change in place."""
    t = type(value)
    if t in _SCALARS:
        return True
    if t in (tuple, frozenset) and depth < 4:
        return all(_frozen(item, depth + 1) for item in value)
    return False


# -- A: the checker ---------------------------------------------------------------------


class SampleFailed(Exception):
    pass


class Channel:
    """A's end of the pipes to B."""

    def __init__(self, req_fd, resp_fd):
        self.req_fd = req_fd
        self.resp_fd = resp_fd
        self.calls = 0
        self.broken = None  # set for good once the sample dies or breaks the protocol

    def send(self, payload):
        write_frame(self.req_fd, payload)

    def frame(self):
        return read_frame(self.resp_fd)

    def exact(self, n):
        return read_exact(self.resp_fd, n)

    def ask(self, request):
        if self.broken:
            raise SampleFailed(self.broken)
        try:
            self.send(encode(request))
            reply = decode(self.frame())
        except (EOFError, BrokenPipeError):
            self.broken = "the sample process exited"
        except (ValueError, TypeError, IndexError, OverflowError, UnicodeError) as e:
            self.broken = f"malformed reply from the sample ({type(e).__name__})"
        else:
            if type(reply) is tuple and len(reply) == 2 and reply[0] == "ok":
                return reply[1]
            if type(reply) is tuple and len(reply) == 2 and reply[0] == "err":
                raise SampleFailed(str(reply[1]))
            self.broken = "malformed reply from the sample"
        raise SampleFailed(self.broken)

    def proxy(self, name):
        def candidate(*args, **kwargs):
            self.calls += 1
            return self.ask(("call", name, args, kwargs))

        candidate.__name__ = name
        return candidate


class Answered(Channel):
    """What B wrote before the checker began (its "ready" and its answers to every
    recorded call), as bytes that Z read from B's pipe: read as the checker reads the
    pipe, with nothing to send (B is dead by then)."""

    def __init__(self, data):
        super().__init__(-1, -1)
        self.data = data
        self.at = 0

    def send(self, payload):
        pass

    def exact(self, n):
        if self.at + n > len(self.data):
            raise EOFError("the sample's answers end early")
        self.at += n
        with memoryview(self.data) as view:
            return bytes(view[self.at - n : self.at])

    def frame(self):
        head = self.exact(10)
        if not head.isdigit():
            raise ValueError("malformed frame header")
        if int(head) > MAX_FRAME:
            raise ValueError(f"frame of {int(head)} bytes exceeds the {MAX_FRAME}-byte limit")
        return self.exact(int(head))


class NotRecorded(BaseException):
    """The test made a call the reference's run did not: it depends on the answers.
    (Not an Exception: a test's ``except Exception`` must not swallow it.)"""


RECORD = b"record"
REPLAY = b"replay"
RECORDING = "\n\0recording:"  # between a record job's verdict and its recording
# The seed of the checker's ``random`` when a test is recorded or replayed: a test that
# draws its inputs from an unseeded ``random`` (HumanEval/38, /50, /53) makes the same
# calls at both, and replays instead of falling back to calls one by one.
TEST_SEED = 0


def _seed_tests():
    import random

    random.seed(TEST_SEED)


def _outcome(reply):
    """One call's outcome as B sent it, checked: ("ok", result, after) or ("err", text)."""
    ok = type(reply) is tuple and len(reply) == 3 and reply[0] == "ok"
    if ok and (reply[2] is None or type(reply[2]) is tuple):
        return reply
    if type(reply) is tuple and len(reply) == 2 and reply[0] == "err":
        return ("err", str(reply[1]))
    raise SampleFailed("malformed reply from the sample")


def _write_back(args, after):
    """Apply the sample's in-place changes of the arguments to the test's own objects."""
    if type(after) is not tuple or len(after) != len(args):
        raise SampleFailed("malformed reply from the sample")
    for arg, new in zip(args, after, strict=True):
        if type(arg) is list and type(new) is list:
            arg[:] = new
        elif type(arg) in (dict, set) and type(new) is type(arg):
            arg.clear()
            arg.update(new)


def _answer(outcome, args):
    if outcome[0] == "err":
        raise SampleFailed(outcome[1])
    if outcome[2] is not None:
        _write_back(args, outcome[2])
    return outcome[1]


def recorder(channel, name, record):
    """The candidate of a record job (B runs the reference): each call's arguments, as
    encoded before the call, and its outcome are appended to ``record``."""

    def candidate(*args, **kwargs):
        channel.calls += 1
        key = encode((args, kwargs))
        replies = channel.ask(("calls", name, [(args, kwargs)]))
        if type(replies) is not list or len(replies) != 1:
            raise SampleFailed("malformed reply from the sample")
        outcome = _outcome(replies[0])
        record.append((key, outcome))
        return _answer(outcome, args)

    return candidate


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


def replayer(channel, name, plan, sample):
    """The candidate of a replayed test: B answers every recorded call in one go, within
    the plan's size cap; B is then killed, and the test meets only these answers, so
    whether a call happens never depends on an earlier answer.

    A call the recording does not list next, but that repeats an earlier one (the same
    arguments: an assert's message that calls the candidate again, say), gets a copy of
    that call's answer; any other stops the replay (``NotRecorded``).
    """
    cap, keys = replay_plan(plan)
    outcomes = _read_outcomes(channel, name, keys, cap, sample)
    first = {}
    for j, key in enumerate(keys):
        first.setdefault(key, j)
    position = [0]  # the next recorded call

    def outcome(at, copy):
        item = outcomes[at]
        if type(item) is not bytes:  # checked: decode(encode()) makes a copy
            return decode(encode(item)) if copy else item
        try:  # an answer sent in a frame of its own, decoded as the test meets it
            return _outcome(decode(item))
        except (ValueError, TypeError, IndexError, OverflowError, UnicodeError, SampleFailed):
            channel.broken = "malformed reply from the sample"
            raise SampleFailed(channel.broken) from None

    def candidate(*args, **kwargs):
        j = channel.calls
        channel.calls += 1
        try:
            key = encode((args, kwargs))
        except (ValueError, TypeError, OverflowError) as e:
            raise NotRecorded(f"call {j}: {type(e).__name__}") from None
        at = position[0]
        if at < len(keys) and key == keys[at]:
            position[0] += 1
            return _answer(outcome(at, False), args)
        at = first.get(key, len(keys))
        if at >= position[0]:
            raise NotRecorded(f"call {j} was not recorded")
        return _answer(outcome(at, True), args)  # a copy: the test may change one

    return candidate


def _read_outcomes(channel, name, keys, cap, sample):
    """B's outcomes of the calls ``keys``, at most ``cap`` bytes of them; B is killed once
    they are read. Each is checked, or where B sent them in parts (they do not fit in one
    frame: a right sample of HumanEval+'s /130 answers 76 MiB), its bytes, decoded only
    when the test makes its call: the checker never holds more than one decoded."""
    # encode(("calls", name, calls)), from the calls as they are already encoded
    request = b"t*" + _LENGTH.pack(3) + encode("calls") + encode(name)
    request += b"l*" + _LENGTH.pack(len(keys)) + b"".join(keys)
    parts = []
    try:
        channel.send(request)
        head = channel.exact(10)
        if not head.isdigit() or int(head) > cap:
            raise SampleFailed(f"answers larger than the cap of {cap} bytes")
        reply = decode(channel.exact(int(head)))
        if reply == ("parts", len(keys)):
            left = cap - int(head)
            for _ in keys:
                head = channel.exact(10)
                if not head.isdigit() or int(head) > min(left, MAX_FRAME):
                    raise SampleFailed(f"answers larger than the cap of {cap} bytes")
                left -= int(head)
                parts.append(channel.exact(int(head)))
    except (EOFError, BrokenPipeError):
        raise SampleFailed("the sample process exited") from None
    except (ValueError, TypeError, IndexError, OverflowError, UnicodeError) as e:
        raise SampleFailed(f"malformed reply from the sample ({type(e).__name__})") from None
    finally:
        if sample:
            os.kill(sample, signal.SIGKILL)
    if parts:
        return parts
    if type(reply) is tuple and len(reply) == 2 and reply[0] == "err":
        raise SampleFailed(str(reply[1]))
    if type(reply) is not tuple or len(reply) != 2 or reply[0] != "ok":
        raise SampleFailed("malformed reply from the sample")
    if type(reply[1]) is not list or len(reply[1]) != len(keys):
        raise SampleFailed("malformed reply from the sample")
    return [_outcome(r) for r in reply[1]]


BYTECODE = b"\0bytecode\0"  # + the magic number of the harness's Python + marshal data


def trusted_code(frame):
    """The prompt or the test in a job frame: its text, or the code object the harness
    compiled from it (``BYTECODE``, the magic number of its Python, ``marshal`` data; sent
    only to a zygote of the harness's own interpreter, and refused from any other)."""
    if not frame.startswith(BYTECODE):
        return frame.decode("utf-8", "surrogatepass")
    import marshal
    from importlib._bootstrap_external import MAGIC_NUMBER

    magic = frame[len(BYTECODE) : len(BYTECODE) + len(MAGIC_NUMBER)]
    if magic != MAGIC_NUMBER:
        raise ValueError("bytecode of another Python version")
    code = marshal.loads(frame[len(BYTECODE) + len(MAGIC_NUMBER) :])
    if type(code) is not type(trusted_code.__code__):
        raise ValueError("the bytecode is not a code object")
    return code


def _compiled(source, name):
    """``source`` compiled (as the harness compiles it), or the code object it already is."""
    if type(source) is str:
        return compile(source, name, "exec", dont_inherit=True, optimize=0)
    return source


def referenced_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= referenced_names(const)
    return names


def check(prompt, test, entry_point, channel, plan=b"", sample=0, record=None):
    """A's verdict: "passed" only if the test code ran to its end on proxied values.

    ``plan``: empty for calls answered one by one; RECORD to record each call and its
    outcome in ``record``; REPLAY + cap + recording to have B (pid ``sample``) answer all
    recorded calls at once and the test replay them. Both seed ``random`` (TEST_SEED)."""
    import builtins

    try:
        ready = decode(channel.frame())
    except EOFError:
        raise SampleFailed("the sample process exited") from None
    if type(ready) is not tuple or not ready or ready[0] != "ready":
        detail = ready[1] if type(ready) is tuple and len(ready) > 1 else ready
        return f"failed: {detail}"
    namespace = {}
    if entry_point and (plan == RECORD or plan.startswith(REPLAY)):
        _seed_tests()
    exec(_compiled(prompt, "<prompt>"), namespace)
    code = _compiled(test, "<test>")
    if entry_point and plan.startswith(REPLAY):
        proxied = set()
        namespace[entry_point] = replayer(channel, entry_point, plan, sample)
    elif entry_point and plan == RECORD:
        proxied = set()
        namespace[entry_point] = recorder(channel, entry_point, record)
    elif entry_point:
        proxied = {entry_point}
    else:  # free-form tests (the code_eval metric): proxy the sample's functions they use
        wanted = sorted(
            n for n in referenced_names(code) if n not in namespace and not hasattr(builtins, n)
        )
        found = channel.ask(("names", wanted)) if wanted else []
        proxied = set(wanted) & {n for n in found if type(n) is str}
    for name in proxied:
        namespace[name] = channel.proxy(name)
    exec(code, namespace)
    if channel.broken:  # a test that swallows exceptions must not turn a dead sample into a pass
        return f"failed: {channel.broken}"
    if channel.calls == 0:
        return "failed: the test never called the sample"
    return "passed"


NO_VERDICT = "failed: the checker exited without a verdict"
PIPE_BUF = 4096  # a pipe takes a write of up to this many bytes whole, or not at all
REPORT_TEXT = PIPE_BUF - 64  # the most of a verdict's text a report carries


def report(fd, seq, start, verdict, whole=False):
    """Send the worker's reporter the verdict of sample ``seq`` (started at ``start``): in
    one write of less than PIPE_BUF bytes, so that it is whole whoever else writes; or,
    ``whole``, at any length (a record job's, references only, which Z reports once A is
    gone: nothing else writes then)."""
    text = verdict.encode("utf-8", "replace")
    text = text if whole else text[:REPORT_TEXT]
    write_frame(fd, b"%010d" % seq + b"%.6f " % (time.monotonic() - start) + text)


def start_reporter(libc):
    """Fork the worker's reporter R and give it the harness's end of Z's standard output:
    R's pid and the write end of its pipe, which A and the worker's checker inherit.

    Every process of a sample is forked from Z, with a copy of its memory, freed blocks
    included, which a sample can read. So a sample's verdict never goes through Z: A (or
    the checker) reports it to R, which alone writes to the harness, and which no sample
    is forked from. Z learns only that a sample is done; it reports a verdict itself only
    where A or the checker could not (timed out, or gone without a report). R passes on
    the first report of each sample and drops any later one (Z's own, should A have
    reported first)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            serve_reports(r)
        finally:
            os._exit(75)
    os.close(r)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # Z's children no longer inherit the harness's pipe either
    os.close(devnull)
    return pid, w


def serve_reports(fd):
    """R: never returns. Passes on to the harness the first report of each sample."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    last = -1
    while True:
        try:
            frame = read_frame(fd, limit=1 << 40)
        except EOFError:
            os._exit(0)
        seq = int(frame[:10])
        if seq > last:
            last = seq
            write_frame(1, frame[10:])


def run_checker(job, limits, mode, slot, libc, job_fd, res_fd, workdir):
    """A: never returns. Sets up the namespace, forks B, runs the test, reports."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    if mode != "none":
        # /proc's last use: the sample needs no namespace of its own
        workdir = sample_mounts(libc, limits, mode, slot, cover=not limits["checker"])
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.chdir(workdir)
    if limits.get("records"):  # no sample: the references run in children of A
        _checker_limits(limits)
        try:
            _prompt, job, _entry, _plan = [read_frame(job_fd) for _ in range(4)]
            verdict = record_all(job.decode("utf-8", "surrogatepass"))
        except BaseException as e:
            verdict = f"failed: {type(e).__name__}: {e}"[:1000]
        write_frame(res_fd, verdict.encode("utf-8", "replace"))
        os._exit(0)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    b = os.fork()
    if b == 0:
        try:
            os.close(job_fd)
            os.close(res_fd)
            run_sample(job["program"], req_r, resp_w, limits, mode, slot, libc)
        finally:
            os._exit(70)
    os.close(req_r)
    os.close(resp_w)
    _checker_limits(limits)
    record = []

    def run():
        frames = [read_frame(job_fd) for _ in range(4)]  # prompt, test, entry point, plan
        os.close(job_fd)
        return judge(frames, Channel(req_w, resp_r), b, record)

    verdict, _ = verdict_of(run)
    if record:  # a record job: the reference's calls follow its verdict
        import base64

        verdict += RECORDING + base64.b64encode(encode(record)).decode()
    status = 72
    try:
        if job["report"] is None:  # a record job's: Z reports it
            write_frame(res_fd, verdict.encode("utf-8", "replace"))
        else:
            report(*job["report"], verdict)
        status = 0  # Z reports a verdict of its own where A exits otherwise
    finally:
        if mode == "none":
            for kill in (os.killpg, os.kill):
                try:
                    kill(b, signal.SIGKILL)
                except OSError:
                    pass
        os._exit(status)


def judge(frames, channel, sample=0, record=None):
    """``check`` on a job's frames: the prompt, the test, the entry point and the plan."""
    prompt, test = trusted_code(frames[0]), trusted_code(frames[1])
    entry_point = frames[2].decode("utf-8", "surrogatepass")
    return check(prompt, test, entry_point, channel, frames[3], sample, record)


def verdict_of(run):
    """``run()``'s verdict, its exceptions made the verdict a sample gets, and whether it
    ended as a check ends (passed, failed an assert, a sample's failure or a call not
    recorded): anything else may have left the checker's process in a state of its own."""
    try:
        return run()[:1000], True
    except NotRecorded as e:
        return f"not recorded: {e}"[:1000], True
    except SampleFailed as e:
        return f"failed: {e}"[:1000], True
    except AssertionError as e:
        return f"failed: AssertionError {e}".rstrip()[:1000], True
    except BaseException as e:
        return f"failed: {type(e).__name__}: {e}"[:1000], False


def _checker_limits(limits, cpu=True):
    if limits["checker"]:  # importable by the trusted test code only
        sys.path.extend(limits["checker"])
        os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if cpu:
        seconds = int(limits["timeout"]) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# -- A recording several references in one run --------------------------------------------


def record_all(job):
    """A's verdict for a job that records several problems' tests against their reference
    solutions: JSON, one record job's verdict per problem (``"passed" + RECORDING + the
    recording``, or why not).

    ``job`` is JSON: ``[prompt, reference, test, entry point, seconds]`` per problem. A
    reference is the problem file's code, as its test is, so it runs where its test runs:
    in a child of A (a process group of its own), one problem after another, each within
    its ``seconds``, the reference in a namespace beside the test's, every call crossing
    the codec as it would cross the pipes from B (:func:`local_recorder`). A problem that
    hangs or ends the child loses its own recording only: the next gets a new child. (One
    child per problem cost ~10 ms each on a loaded 2-core machine, as much as a sample.)
    """
    import json

    items = json.loads(job)
    if type(items) is not list:
        raise ValueError("a records job is a list")
    for item in items:
        if type(item) is not list or len(item) != 5 or not all(type(t) is str for t in item[:4]):
            raise ValueError("a records job's item is [prompt, reference, test, entry, seconds]")
        item[4] = float(item[4])
    verdicts = []
    while len(verdicts) < len(items):
        verdicts += _record_in_child(items[len(verdicts) :])
    return json.dumps(verdicts)


def _record_in_child(items):
    """The record verdicts of ``items``, in a child of A, as far as it gets: at least the
    first's ("timed out" or "failed" where it did not finish)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            os.setpgid(0, 0)
            for prompt, reference, test, entry_point, _ in items:
                verdict = record_reference(prompt, reference, test, entry_point)
                write_frame(w, verdict.encode("utf-8", "surrogatepass"))
        finally:
            os._exit(0)
    os.close(w)
    try:
        os.setpgid(child, child)
    except OSError:
        pass  # it did so itself, or has exited
    verdicts = []
    try:
        for item in items:
            try:
                reply = _read_frame_until(r, time.monotonic() + item[4])
            except EOFError:
                verdicts.append("failed: the reference's process exited")
                break
            if reply is None:
                verdicts.append("timed out")
                break
            verdicts.append(reply.decode("utf-8", "replace"))
    finally:
        os.close(r)
        for kill in (os.killpg, os.kill):
            try:
                kill(child, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(child, 0)
    return verdicts


def _read_frame_until(fd, end):
    """A frame from ``fd`` (and nothing past it), or None if it is not whole by ``end``;
    EOFError if ``fd`` closes first or the frame is malformed."""
    data = bytearray()
    need = 10
    while len(data) < need:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, min(1 << 20, need - len(data)))
        if not chunk:
            raise EOFError("pipe closed")
        data += chunk
        if need == 10 and len(data) == 10:
            if not data.isdigit() or int(data) > MAX_FRAME:
                raise EOFError("malformed frame")
            need = 10 + int(data)
    return bytes(data[10:])


def record_reference(prompt, reference, test, entry_point):
    """A record job's verdict, the reference run in this process: as ``run_checker``'s."""
    record = []
    try:
        solution = {}
        exec(compile(reference, "<sample>", "exec"), solution)
        function = solution.get(entry_point)
        namespace = {}
        _seed_tests()
        exec(compile(prompt, "<prompt>", "exec"), namespace)
        code = compile(test, "<test>", "exec")
        if not callable(function):
            raise SampleFailed(f"KeyError: {entry_point!r}")
        namespace[entry_point] = local_recorder(function, record)
        exec(code, namespace)
        verdict = "passed" if record else "failed: the test never called the sample"
    except SampleFailed as e:
        verdict = f"failed: {e}"
    except AssertionError as e:
        verdict = f"failed: AssertionError {e}".rstrip()
    except BaseException as e:
        verdict = f"failed: {type(e).__name__}: {e}"
    verdict = verdict[:1000]
    if verdict == "passed":
        import base64

        verdict += RECORDING + base64.b64encode(encode(record)).decode()
    return verdict


def local_recorder(function, record):
    """``recorder``'s candidate with the reference in this process: each call's arguments
    and outcome cross the codec both ways, as between A and B, so that the recording is
    the one B would give."""

    def candidate(*args, **kwargs):
        key = encode((args, kwargs))
        try:
            reply = decode(encode(("ok", answer_calls(function, [decode(key)]))))
        except BaseException as e:  # B answers these (and unencodable results) with "err"
            raise SampleFailed(f"{type(e).__name__}: {e}"[:500]) from None
        outcome = _outcome(reply[1][0])
        record.append((key, outcome))
        return _answer(outcome, args)

    return candidate


def _limit_ipc(libc, memory, strict, host_namespaces):
    """The sample's IPC namespace: a neutral host name, and shared memory within its limit.

    SysV shared memory is not counted by ``RLIMIT_AS`` until attached, so the namespace's
    own ``shmmax``/``shmall`` cap it at the sample's memory limit; ``shmmni``/``msgmni``
    keep the kernel memory of segments and message queues small.
    """
    for kind in ("ipc", "uts"):  # never the zygote's, let alone the host's
        if os.stat(f"/proc/self/ns/{kind}").st_ino == host_namespaces[kind]:
            raise RuntimeError(f"not in a private {kind} namespace")
    libc.sethostname(b"sandbox", 7)
    pages = max(1, memory // os.sysconf("SC_PAGE_SIZE"))
    for name, value in (("shmmax", memory), ("shmall", pages), ("shmmni", 16), ("msgmni", 16)):
        try:  # os-level: the io stack costs more than the write in a fresh process
            fd = os.open(f"/proc/sys/kernel/{name}", os.O_WRONLY)
            try:
                os.write(fd, str(value).encode())
            finally:
                os.close(fd)
        except OSError:  # not writable from a user namespace on older kernels
            if strict:
                raise


def runtime_paths(extra_objects=()):
    """What the sample may see of the host, read-only: the Python runtime.

    The standard library (this process runs with ``-I -S``: ``sys.path`` holds nothing
    else), the shared objects the interpreter has mapped, and the shared libraries that
    those, the standard library's extension modules and ``extra_objects`` (the checker's
    packages) load, file by file: not the C library's whole directory, which holds every
    library the system has (a larger surface, and more pages to signal through). Nothing
    under ``extra_objects`` itself: the checker's packages are bound at CHECKER_SITE.
    """
    paths = {os.path.realpath(p) for p in sys.path if os.path.isdir(p)}
    objects = [os.path.realpath(p) for p in mapped_objects()]
    for folder in sorted(paths):  # lib-dynload is on sys.path itself
        objects += [os.path.join(folder, n) for n in os.listdir(folder) if ".so" in n]
    for root in extra_objects:
        for folder, _, names in os.walk(root):
            objects += [os.path.join(folder, n) for n in names if ".so" in n]
    libraries = library_closure([p for p in objects if os.path.isfile(p)])
    if libraries is None:  # not an ELF layout this reads: the C library's directory instead
        libc = next((p for p in objects if os.path.basename(p).startswith("libc.")), None)
        libraries = {os.path.dirname(libc)} if libc else set()
    checker = tuple(root + os.sep for root in extra_objects)
    found = paths | {p for p in objects if os.path.isfile(p)} | libraries
    ordered = sorted(p for p in found if not p.startswith(checker))
    return [p for p in ordered if not any(p.startswith(q + os.sep) for q in ordered)]


HIDDEN_PACKAGES = ("site-packages", "dist-packages")  # under the stdlib: not the sample's


def warm_page_cache(paths):
    """Have the kernel read every file under ``paths`` into the page cache (readahead).

    The sample's files are the host's, so their cached pages are shared with every later
    sample and run: a page nothing had read would carry one bit (read or not, told apart
    by timing a read). With every page resident there is none left to write, and the
    sample cannot drop one (fadvise, MADV_PAGEOUT and MADV_COLD are denied).
    """
    for root in paths:
        if os.path.isdir(root):
            walk = os.walk(root)
        else:
            walk = [(os.path.dirname(root), [], [os.path.basename(root)])]
        for folder, folders, names in walk:
            folders[:] = [d for d in folders if d not in HIDDEN_PACKAGES]
            for name in names:
                try:
                    fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                except OSError:
                    pass
                finally:
                    os.close(fd)


def mapped_objects():
    """The shared objects this process has loaded (from /proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        mapped = {line.split(None, 5)[5].strip() for line in maps if line.count(" /") == 1}
    return sorted(p for p in mapped if ".so" in os.path.basename(p))


# Libraries the C library loads by name at run time, bound when present beside it.
DLOPENED = ("libgcc_s.so.1",)
DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 1, 5, 10, 15, 29


def elf_dependencies(path):
    """``(needed names, search folders)`` of a 64-bit little-endian ELF object, or None."""
    import struct

    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4:6] != b"\x02\x01":
            return None
        phoff = struct.unpack_from("<Q", head, 32)[0]
        size, count = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(size * count)
        loads, dynamic = [], None
        for i in range(count):
            kind, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, i * size)
            if kind == 1:  # PT_LOAD
                loads.append((vaddr, offset, filesz))
            elif kind == 2:  # PT_DYNAMIC
                dynamic = (offset, filesz)
        if dynamic is None:
            return [], []
        f.seek(dynamic[0])
        raw = f.read(dynamic[1])
        entries = [struct.unpack_from("<qQ", raw, j) for j in range(0, len(raw) - 15, 16)]
        found = {tag: value for tag, value in entries if tag in (DT_STRTAB, DT_STRSZ)}
        address = found.get(DT_STRTAB)
        where = [off + address - va for va, off, n in loads if va <= address < va + n]
        if not where:
            return None
        f.seek(where[0])
        strings = f.read(found.get(DT_STRSZ, 0))

    def name(offset):
        return strings[offset : strings.index(b"\0", offset)].decode("utf-8", "replace")

    origin = os.path.dirname(path)
    folders = [name(v) for t, v in entries if t in (DT_RPATH, DT_RUNPATH)]
    folders = [d.replace("$ORIGIN", origin) for f in folders for d in f.split(":") if d]
    return [name(v) for t, v in entries if t == DT_NEEDED], folders


def library_closure(objects):
    """Every library ``objects`` load, transitively, as the paths the loader opens (each
    resolved file bound at its name); None where an object is not an ELF this reads."""
    libc = next((p for p in objects if os.path.basename(p).startswith("libc.")), None)
    if libc is None:
        return None
    system = [os.path.dirname(libc)]
    arch = os.path.basename(system[0])
    for folder in (f"/lib/{arch}", f"/usr/lib/{arch}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
        if os.path.isdir(folder) and os.path.realpath(folder) not in system:
            system.append(os.path.realpath(folder))
    found = {
        os.path.join(system[0], n) for n in DLOPENED if os.path.isfile(os.path.join(system[0], n))
    }
    todo, seen = list(objects) + sorted(found), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        dependencies = elf_dependencies(path)
        if dependencies is None:
            return None
        needed, folders = dependencies
        for name in needed:
            for folder in [*folders, *system]:
                candidate = os.path.join(os.path.realpath(folder), name)
                if os.path.isfile(candidate):
                    found.add(candidate)
                    todo.append(candidate)
                    break
    return found


def build_root(libc, secret, checker, user_namespace, runtime=None):
    """Enter a private mount namespace whose root holds only the runtime (read-only),
    empty mount points for each sample's /proc, /tmp and /dev/shm, and the checker's
    packages under CHECKER_SITE. Done once per zygote; samples inherit it.

    ``runtime``: the run's copy of the runtime (``{"tree": folder, "bound": paths}``, made
    by :func:`prepare_runtime`), bound whole, with the host's objects Z has loaded bound
    over their empty places in it; None binds the host's standard library itself (for
    the harness's own probe program only: its file-name lookups are cached by the host).
    """
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes_errno(), "unshare(CLONE_NEWNS) failed")
    _mount(libc, None, b"/", None, MS_REC | MS_PRIVATE)
    new = "/tmp"  # only in this process's private mount namespace
    # Every source is held open before the staging tmpfs covers /tmp: a runtime or a package
    # that lives under /tmp (a checkout or virtualenv there) would otherwise be hidden by it.
    runtime_binds = _runtime_sources(checker, runtime, new)
    devices = [(_hold(path), new + path, 0) for path in DEVICES]
    packages = [
        (_hold(os.path.realpath(path)), f"{new}{CHECKER_SITE}/{name}", MS_NODEV)
        for path, name in checker or ()
    ]
    _mount(libc, b"tmpfs", new.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755")
    stdlib = [p for p in sys.path if os.path.isdir(p)]
    for held, target, flags in (*runtime_binds, *devices):
        _bind_read_only(libc, held, target, flags)
    for name in ("lib", "lib32", "lib64", "libx32"):  # the loader's default search path
        if os.path.islink("/" + name):
            os.symlink(os.readlink("/" + name), f"{new}/{name}")
    for path, mode in (("/proc", 0o555), ("/tmp", 0o1777), ("/dev/shm", 0o1777)):
        os.makedirs(new + path, exist_ok=True)
        os.chmod(new + path, mode)
    if user_namespace:
        # The kernel lets a user namespace mount a new proc only where one is already
        # fully visible: keep the host's under the mount point; every sample's own
        # /proc is mounted over it.
        _mount(libc, b"/proc", (new + "/proc").encode(), None, MS_BIND | MS_REC)
    hidden = [os.path.join(p, d) for p in stdlib for d in HIDDEN_PACKAGES]
    for path in [*hidden, *secret]:  # e.g. pip install-ed data under the runtime
        if os.path.isdir(new + path):
            _mount(libc, b"tmpfs", (new + path).encode(), b"tmpfs", MS_READ_ONLY, b"size=4k")
    if checker:
        os.mkdir(new + "/checker")
        _mount(libc, b"tmpfs", (new + "/checker").encode(), b"tmpfs", 0, b"size=64k,mode=755")
        for held, target, flags in packages:
            _bind_read_only(libc, held, target, flags)
        _remount_read_only(libc, new + "/checker", MS_NODEV)
    os.mkdir(new + "/.old")
    if libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], new.encode(), b"/tmp/.old") != 0:
        raise OSError(ctypes_errno(), "pivot_root failed")
    os.chdir("/")
    if libc.umount2(b"/.old", MNT_DETACH) != 0:
        raise OSError(ctypes_errno(), "could not detach the host's root")
    os.rmdir("/.old")
    _remount_read_only(libc, "/", MS_NODEV)
    for (fd, _is_dir), _target, _flags in (*runtime_binds, *devices, *packages):
        os.close(fd)


def _runtime_sources(checker, runtime, new):
    """What ``build_root`` binds of the runtime: ``(held, target, flags)`` each."""
    if runtime is None:  # the probe's root: one trusted program, one mount namespace
        paths = runtime_paths([os.path.realpath(path) for path, _ in checker or ()])
        return [(_hold(path), new + path, MS_NODEV) for path in paths]
    tree = runtime["tree"]
    binds = []
    for name in sorted(os.listdir(tree)):
        # A runtime under /tmp (a checkout or virtualenv there) is bound a level down, so
        # that the root's /tmp stays the staging tmpfs's own folder: every sample mounts
        # its private /tmp over it.
        top = os.path.join(tree, name)
        inner = sorted(os.listdir(top)) if name in MOUNT_POINTS else None
        if inner is None:
            binds.append((_hold(top), f"{new}/{name}", MS_NODEV))
        else:
            binds += [(_hold(os.path.join(top, c)), f"{new}/{name}/{c}", MS_NODEV) for c in inner]
    binds += [(_hold(path), new + path, MS_NODEV) for path in runtime["bound"]]
    return binds


MOUNT_POINTS = ("proc", "tmp", "dev")  # folders of the root that build_root makes itself


# Parts of the standard library no sample needs, left out of the run's copy: test suites,
# the IDE and demos, the bootstrap installer, help()'s texts, installed packages.
LEFT_OUT = ("test", "tests", "idle_test", "idlelib", "turtledemo", "lib2to3", "ensurepip")
LEFT_OUT += ("pydoc_data", *HIDDEN_PACKAGES)


def tree_files(root, secret=()):
    """``(relative path, mtime in ns)`` of what a sample gets of ``root`` (a file or a
    folder): no LEFT_OUT folder, no ``config-*`` (the static library), no optimised
    bytecode (``.opt-N.pyc``), nothing under a ``secret`` folder."""
    if not os.path.isdir(root):
        return [("", os.stat(root).st_mtime_ns)]
    hidden = {os.path.realpath(path) for path in secret}
    real_root = os.path.realpath(root)
    found = []
    todo = [""]
    while todo:  # as os.walk: a link to a folder is not followed, a link to a file is
        relative = todo.pop()
        try:
            entries = list(os.scandir(os.path.join(root, relative)))
        except OSError:  # unreadable: skipped, as os.walk does
            continue
        for entry in entries:
            inner = os.path.join(relative, entry.name)
            if entry.is_dir():
                if (
                    not entry.is_symlink()
                    and entry.name not in LEFT_OUT
                    and not entry.name.startswith("config-")
                    and os.path.join(real_root, inner) not in hidden
                ):
                    todo.append(inner)
            elif ".opt-" not in entry.name and entry.is_file():
                found.append((inner, entry.stat().st_mtime_ns))
    return found


def _copy_file(source, destination, mtime, made=None):
    """Copy ``source`` to the new file ``destination`` (mode 0755) in the kernel, keeping
    its modification time (bytecode is checked against its source's). ``made``: the
    folders made so far (a set, updated)."""
    folder = os.path.dirname(destination)
    if made is None or folder not in made:
        os.makedirs(folder, exist_ok=True)
        if made is not None:
            made.add(folder)
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        out = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o755)
        try:
            while os.sendfile(out, src, None, 1 << 24):
                pass
        finally:
            os.close(out)
    finally:
        os.close(src)
    os.utime(destination, ns=(mtime, mtime))


RUNTIME_PREFIX = "codeparrot-runtime-"  # + the harness's pid: stale copies are found by it
LATE_RUNTIME = "late"  # the runtime's manifest comes as the first frame on stdin


def prepare_runtime(base, owner, secret, checker, tree=None):
    """Copy, once per run, what a sample sees of the runtime into a new folder under
    ``base`` (a tmpfs); print ``{"tree": folder, "bound": paths}`` for the zygotes.
    ``tree``: that run's folder, made already (before the checker's packages were known):
    only what it lacks is added.

    The standard library (trimmed, see ``tree_files``) and the libraries Z has not loaded
    are copied, at their host paths under the folder; each object Z has loaded (the
    interpreter's library, the C library: mapped, so their pages are the host's anyway)
    gets an empty place there, for Z to bind the host's file over. A tmpfs keeps no
    failed file-name lookup and its files are always in memory, and the copy is the
    run's own, removed at its end: looking names up or reading files in it leaves nothing
    for a later sample or run to time. Then the host's files a sample sees (those bound,
    and those Z maps) are read into the page cache (``warm_page_cache``).
    """
    import ctypes
    import json
    import tempfile

    ctypes.CDLL(None, use_errno=True)  # Z's loaded objects are this process's
    os.umask(0o022)
    paths = runtime_paths([os.path.realpath(path) for path, _ in checker])
    loaded = {os.path.realpath(path) for path in mapped_objects()}
    made_here = tree is None
    if made_here:
        tree = tempfile.mkdtemp(prefix=f"{RUNTIME_PREFIX}{owner}-", dir=base)
    elif os.path.dirname(tree) != base or not os.path.basename(tree).startswith(RUNTIME_PREFIX):
        raise ValueError(f"not a runtime copy under {base}: {tree}")
    bound = []
    made = set()
    try:
        for path in paths:
            if not os.path.isdir(path) and os.path.realpath(path) in loaded:
                if not os.path.lexists(tree + path):
                    os.makedirs(os.path.dirname(tree + path), exist_ok=True)
                    open(tree + path, "x").close()
                bound.append(path)
                continue
            if not made_here and os.path.isdir(path) and os.path.isdir(tree + path):
                continue  # a folder is copied whole, whatever the checker's packages
            for relative, mtime in tree_files(path, secret):
                source = os.path.join(path, relative) if relative else path
                if made_here or not os.path.lexists(tree + source):
                    _copy_file(source, tree + source, mtime, made)
    except BaseException:
        import shutil

        if made_here:
            shutil.rmtree(tree, ignore_errors=True)
        raise
    # The host's files a sample sees: those bound (loaded here) and those Z maps (this
    # process has run as much of this script as Z runs before its root is built).
    warm_page_cache(mapped_objects())
    sys.stdout.write(json.dumps({"tree": tree, "bound": bound}))


def _hold(path):
    """An O_PATH descriptor of ``path`` (and whether it is a directory): bind-mounted later
    through /proc/self/fd even if a mount has covered ``path`` by then."""
    return os.open(path, os.O_PATH | os.O_CLOEXEC), os.path.isdir(path)


def _bind_read_only(libc, held, target, flags):
    fd, is_dir = held
    if is_dir:
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):  # the run's copy holds an empty place for it
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(libc, f"/proc/self/fd/{fd}".encode(), target.encode(), None, MS_BIND | MS_REC)
    _remount_read_only(libc, target, flags)


def _remount_read_only(libc, target, flags):
    # In a user namespace the source's nosuid/nodev/noexec/atime flags are locked: keep them.
    kept = os.statvfs(target).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048)
    flags |= MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept
    _mount(libc, None, target.encode(), None, flags)


def ctypes_errno():
    import ctypes

    return ctypes.get_errno()


def _mount(libc, source, target, fstype, flags, data=None):
    if libc.mount(source, target, fstype, flags, data) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"mount {target!r}: {os.strerror(err)}")


def join_cgroups(paths):
    """Move Z, and so everything it will fork whatever its session, into its worker's
    cgroups. (Over the memory limit the OOM killer picks the largest process: the
    sample's; should it pick Z, the harness restarts the worker.)"""
    for path in paths:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


# -- Z: the zygote ----------------------------------------------------------------------


def count_user_processes():
    """Processes (threads included) of this uid, as RLIMIT_NPROC counts them."""
    uid = os.getuid()
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


LIMIT_TYPES = {"timeout": float, "memory": int, "file_size": int, "processes": int}


def parse_limits(header):
    """The harness's ``Limits`` (JSON, its field names); anything else is refused. A
    ``"records": true`` beside them marks a job that records references (``record_all``)."""
    import json

    raw = json.loads(header)
    records = type(raw) is dict and raw.pop("records", False) is True
    if type(raw) is not dict or set(raw) != set(LIMIT_TYPES):
        raise ValueError(f"limits header has fields {sorted(raw)}, want {sorted(LIMIT_TYPES)}")
    limits = {name: kind(raw[name]) for name, kind in LIMIT_TYPES.items()}
    return limits | ({"records": True} if records else {})


def run_one(header, program, libc, mode, slot, context):
    limits = {
        **parse_limits(header),
        **context,
        "user_processes": 0 if own_uid(mode) else count_user_processes(),
    }
    workdir = None
    if mode == "none":
        import tempfile

        workdir = tempfile.mkdtemp(prefix="codeparrot-sandbox-")
        if own_uid(mode):
            os.chown(workdir, UID_BASE + slot, UID_BASE + slot)
    frames = [read_frame(0) for _ in range(4)]  # prompt, test, entry point, plan
    start = time.monotonic()
    cap = replayed_by_checker(mode, limits, frames)
    if cap is not None:
        return run_replayed(program, frames, cap, limits, libc, mode, slot, context, start)
    # A reports a sample's verdict to the worker's reporter itself: it never crosses Z
    # (see ``start_reporter``). A record job's verdict (no sample: references only) comes
    # back to Z, which reports it.
    relay = bool(limits.get("records")) or frames[3] == RECORD
    to_report = None if relay else (context["report"], context["seq"], start)
    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    namespaced = mode != "none"
    x = _fork_into_new_pid_namespace(libc, context["pid_ns"]) if namespaced else os.fork()
    if x == 0:  # A
        try:
            os.close(job_w)
            os.close(res_r)
            if namespaced:
                os.close(context["pid_ns"])
            _close_checker(context)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            job = {"program": program, "report": to_report}
            if namespaced and libc.unshare(NAMESPACES & ~CLONE_NEWPID) != 0:
                os._exit(71)
            run_checker(job, limits, mode, slot, libc, job_r, res_w, workdir)
        finally:
            os._exit(73)
    os.close(job_r)
    os.close(res_w)
    deadline = start + limits["timeout"]
    data = _exchange(job_w, res_r, b"".join(b"%010d" % len(p) + p for p in frames), deadline)
    if data is None:
        os.kill(x, signal.SIGKILL)  # A's namespace dies with A
    # A (PID 1 of the sample's namespace) is reaped only after every process left in
    # that namespace is dead: waiting for A means nothing the sample started is still
    # alive when the verdict is reported.
    status = _reap(x, time.monotonic() + 2.0)
    if status is None:
        os.kill(x, signal.SIGKILL)
        status = os.waitpid(x, 0)[1]
    if data is None:  # (should A have reported first, the reporter keeps A's verdict)
        report(context["report"], context["seq"], start, "timed out")
    elif relay:
        found = len(data) >= 10 and data[:10].isdigit()
        verdict = data[10 : 10 + int(data[:10])] if found else b""
        text = verdict.decode("utf-8", "replace") if found else NO_VERDICT
        report(context["report"], context["seq"], start, text, whole=True)
    elif status != 0:  # A exits 0 only once it has reported
        report(context["report"], context["seq"], start, NO_VERDICT)
    if workdir is not None:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


ANSWERS_SLACK = 64 << 10  # what B writes beside its answers: "ready", frame headers


def replayed_by_checker(mode, limits, frames):
    """The answers' cap where a job runs as B alone, its answers checked by the worker's
    checker (else None): a test replayed against its recording in a namespaced mode
    (where Z can make B PID 1 of a namespace of its own), its plan valid."""
    if mode == "none" or limits.get("records") or not frames[2]:
        return None
    if not frames[3].startswith(REPLAY):
        return None
    try:
        return replay_plan(frames[3])[0]
    except NotRecorded:  # A says so, as before
        return None


def run_replayed(program, frames, cap, limits, libc, mode, slot, context, start):
    """A replayed test in a namespaced mode: B (PID 1 of a new PID namespace) runs the program and
    answers every recorded call; Z reads the answers (bytes, never decoded here) and the
    worker's checker (``serve_checks``) runs the test against them and reports the
    verdict (Z reports only a verdict the checker could not give)."""
    out_r, out_w = os.pipe()
    grow_pipe(out_r)
    deadline = start + limits["timeout"]
    b = _fork_into_new_pid_namespace(libc, context["pid_ns"])
    if b == 0:
        try:
            os.close(out_r)
            os.close(context["pid_ns"])
            _close_checker(context)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if libc.unshare(NAMESPACES & ~CLONE_NEWPID) != 0:
                os._exit(71)
            run_answers(program, frames, limits, mode, slot, libc, out_w)
        finally:
            os._exit(73)
    os.close(out_w)
    # The answers go into a mapping of their own, unmapped once the checker has them: in
    # Z's heap, freed but not cleared, every later sample of the worker (forked from Z)
    # could read them, and so what an earlier sample left there.
    buffer = mmap.mmap(-1, cap + ANSWERS_SLACK + 1)
    try:
        size = _read_until(out_r, deadline, buffer)
        os.kill(b, signal.SIGKILL)  # its namespace dies with it
        if _reap(b, time.monotonic() + 2.0) is None:
            os.kill(b, signal.SIGKILL)
            os.waitpid(b, 0)
        if size is None:
            report(context["report"], context["seq"], start, "timed out")
            return
        meta = b"%d %r" % (context["seq"], start)  # for the checker's report
        with memoryview(buffer)[:size] as answers:
            failure = ask_checker(context, limits, libc, [*frames, answers, meta], deadline)
    finally:
        buffer.close()
    if failure is not None:
        report(context["report"], context["seq"], start, failure)


def _read_until(fd, deadline, buffer):
    """Read what ``fd`` gives until its end into ``buffer`` (a byte more than the most
    wanted: the checker then finds the cap passed), never more than it holds: the size
    read, or None if ``fd`` has not ended by ``deadline``. No copy of it is made."""
    size = 0
    try:
        with memoryview(buffer) as room:
            while size < len(room):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return None
                got = os.readv(fd, [room[size : size + (1 << 20)]])
                if not got:
                    break
                size += got
    finally:
        os.close(fd)
    return size


def ask_checker(context, limits, libc, frames, deadline):
    """Have the worker's checker report its verdict on ``frames`` (a job's four, B's
    answers, the sample's number and start) by ``deadline``: None once it has, else the
    verdict for Z to report. A checker started for other limits, or gone, is replaced
    first; one that dies during the check is replaced and asked once more; one past the
    deadline is killed: "timed out", as a sample's checker past it is."""
    key = (limits["memory"], limits["file_size"], tuple(limits["checker"]))
    job = [part for f in frames for part in (b"%010d" % len(f), f)]
    for _ in range(2):
        checker = context.get("judge")
        if checker is None or checker[0] != key:
            stop_checker(context)
            checker = context["judge"] = (key, *start_checker(limits, libc, context))
        try:
            done = _exchange_with(checker[2], checker[3], job, deadline)
        except (EOFError, OSError):
            stop_checker(context)
            continue
        if done is None:
            stop_checker(context)
            return "timed out"
        return None
    return NO_VERDICT


def start_checker(limits, libc, context):
    """Fork the worker's checker, PID 1 of a PID namespace of its own: (pid, job pipe's
    write end, result pipe's read end)."""
    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    grow_pipe(job_w)
    pid = _fork_into_new_pid_namespace(libc, context["pid_ns"])
    if pid == 0:
        try:
            os.close(job_w)
            os.close(res_r)
            os.close(context["pid_ns"])
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0:
                os._exit(71)
            serve_checks(limits, libc, job_r, res_w)
        finally:
            os._exit(73)
    os.close(job_r)
    os.close(res_w)
    os.set_blocking(job_w, False)
    return pid, job_w, res_r


def _close_checker(context):
    """In a child of Z: close its copies of the pipes to the worker's checker."""
    checker = context.get("judge")
    if checker is not None:
        os.close(checker[2])
        os.close(checker[3])


def stop_checker(context):
    checker = context.pop("judge", None)
    if checker is not None:
        _, pid, job_w, res_r = checker
        os.close(job_w)
        os.close(res_r)
        os.kill(pid, signal.SIGKILL)  # its PID namespace dies with it
        os.waitpid(pid, 0)


def serve_checks(limits, libc, job_fd, res_fd):
    """The worker's checker: never returns. In mount, IPC and UTS namespaces of its own
    (private tmpfs /tmp and /dev/shm), non-dumpable, within the memory limit, it runs each
    job's test against the answers B wrote (``Answered``), one job after another, in a
    fresh namespace of globals each time, ``random`` seeded as at the recording, and
    reports each verdict to the worker's reporter (then tells Z it is done). It never
    runs sample code: only the answers' plain data, decoded by its own codec, reach it.
    After a check that ended otherwise than a check ends (``verdict_of``) it exits, and Z
    starts another for the next sample."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _mount(libc, None, b"/", None, MS_REC | MS_PRIVATE)
    size = b"size=%d,mode=1777" % limits["file_size"]
    for path in PRIVATE_TMP:
        if os.path.isdir(path):
            _mount(libc, b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size)
    libc.sethostname(b"sandbox", 7)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.chdir("/tmp")
    _checker_limits(limits, cpu=False)  # Z holds each check to its sample's deadline
    while True:
        try:
            frames = [read_frame(job_fd) for _ in range(4)]
            head = read_exact(job_fd, 10)  # B's answers: Z held them to the plan's cap
            frames.append(read_into(job_fd, int(head)))
            seq, start = read_frame(job_fd).split()
        except EOFError:
            os._exit(0)
        verdict, clean = verdict_of(lambda frames=frames: judge(frames[:4], Answered(frames[4])))
        report(limits["report"], int(seq), float(start), verdict)
        write_frame(res_fd, b"")  # done: the verdict is with the reporter
        if not clean:
            os._exit(0)


def _exchange_with(job_w, res_r, job, deadline):
    """Send the checker a job (its parts, in order) and read its verdict, never past the
    deadline (None then); EOFError if the checker is gone."""
    parts = [memoryview(part) for part in reversed(job) if part]
    pending = parts.pop() if parts else None
    data = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        writers = [job_w] if pending else []
        readable, writable, _ = select.select([res_r], writers, [], left)
        if writable:
            try:
                pending = pending[os.write(job_w, pending) :]
            except BrokenPipeError:
                raise EOFError("the checker is gone") from None
            if not pending:
                pending = parts.pop() if parts else None
        if readable:
            chunk = os.read(res_r, 65536)
            if not chunk:
                raise EOFError("the checker is gone")
            data += chunk
            if len(data) >= 10:
                if not data[:10].isdigit():
                    raise EOFError("malformed reply from the checker")
                if len(data) >= 10 + int(data[:10]):
                    return data[10 : 10 + int(data[:10])].decode("utf-8", "replace")


def _fork_into_new_pid_namespace(libc, own_pid_namespace):
    """fork(), the child being PID 1 of a new PID namespace, while Z stays in its own.

    unshare(CLONE_NEWPID) moves only Z's future children; setns to the descriptor of its
    own namespace, held from start-up, undoes that once the child exists, so that the
    next sample gets a new namespace as well. (In mode userns Z could not re-enter the
    host's PID namespace, which the initial user namespace owns: it is started as PID 1
    of a PID namespace of its own, ``unshare --pid --fork``, which its user namespace
    owns.)
    """
    if libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes_errno(), "unshare(CLONE_NEWPID) failed")
    pid = -1
    try:
        pid = os.fork()
    finally:
        if pid != 0 and libc.setns(own_pid_namespace, CLONE_NEWPID) != 0:
            # Z's next child would be born into this sample's namespace: stop here, the
            # harness restarts the worker.
            raise OSError(ctypes_errno(), "setns back into the zygote's PID namespace failed")
    return pid


class _Alarm(Exception):
    pass


def _alarm(signum, frame):
    raise _Alarm


def _reap(pid, deadline):
    """Wait for ``pid`` until ``deadline``: its wait status, or None if it is still
    running then."""
    left = deadline - time.monotonic()
    if left <= 0:
        done, status = os.waitpid(pid, os.WNOHANG)
        return status if done == pid else None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, left)
    try:
        return os.waitpid(pid, 0)[1]
    except _Alarm:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _exchange(job_w, res_r, job, deadline):
    """Feed the job to A and collect what it writes back until it exits (nothing but a
    record job's verdict), never past the deadline: None then."""
    os.set_blocking(job_w, False)
    pending = memoryview(job)
    verdict = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            writers = [job_w] if pending else []
            readable, writable, _ = select.select([res_r], writers, [], left)
            if writable:
                try:
                    pending = pending[os.write(job_w, pending) :]
                except BrokenPipeError:
                    pending = memoryview(b"")
                if not pending:
                    os.close(job_w)
                    job_w = None
            if readable:
                chunk = os.read(res_r, 65536)
                if not chunk:
                    break
                verdict.append(chunk)
    finally:
        if job_w is not None:
            os.close(job_w)
        os.close(res_r)
    return b"".join(verdict)


# Standard-library modules that HumanEval/MBPP prompts, solutions and tests import, loaded
# once in Z (from the read-only root, after it is built): every sample would otherwise
# import them again in both its processes. A sample could import each of them anyway;
# ``random`` reseeds itself in every forked child, so samples do not share a seed. Not
# ``hashlib`` (one HumanEval problem in 164 imports it): it maps the crypto library, whose
# private pages (0.6 MiB) and mappings every fork would copy into the page tables of both
# processes of every sample, and every exit tear down.
PRELOADED = (
    "bisect", "collections", "copy", "functools", "heapq", "itertools",
    "math", "operator", "random", "re", "string", "typing",
)  # fmt: skip


def warm_up(libc):
    """Do, once in Z, the work that each sample's freshly forked processes would repeat.

    - ``compile`` builds the AST node types on its first call in a process (~120 classes,
      the largest CPU cost of a trivial sample before this);
    - the C library functions the per-sample processes call, resolved by ctypes on
      first use;
    - the common modules (``PRELOADED``);
    - ``gc.freeze``: Z's objects are left out of the children's collections, which would
      otherwise write to (and so copy) every page of Z's heap that holds a container;
    - the free blocks of the allocator's partly used pools are taken (``fill_free_blocks``):
      a child's new objects go to fresh pools, not to pages all over Z's heap, each
      copied on write (on a 2-core VM, about 12% fewer page faults and 6% less CPU a
      sample).

    Returns what Z must keep for its life.
    """
    import gc

    compile("", "<zygote>", "exec")
    for name in ("prctl", "unshare", "setns", "umount2", "sethostname", "syscall", "mount"):
        getattr(libc, name)
    for name in (*PRELOADED, "marshal", "importlib._bootstrap_external"):  # trusted_code's
        __import__(name)
    gc.collect()
    held = fill_free_blocks()
    gc.freeze()
    return held


POOL_SIZE = 16 << 10  # CPython's small-object allocator (3.11, 3.12): 16 KiB pools
POOL_HEADER = 48  # the offset of a pool's first block there


def fill_free_blocks(most=4096):
    """Objects taking the free blocks of the allocator's partly used pools, in each of its
    size classes (16 to 512 bytes) until one lands first in a fresh pool (at most ``most``
    a class). A heuristic: on another allocator the objects are merely held."""
    held = []
    for size in range(16, 513, 16):
        for i in range(most):
            if size == 16:
                obj = object()
            elif size == 32:
                obj = float(i) + 0.5  # 24 bytes
            else:
                obj = bytes(size - 33)  # its header takes 33
            held.append(obj)
            if id(obj) % POOL_SIZE == POOL_HEADER:
                break
    return held


def sockets_left(proc_fd):
    """Whether any AF_UNIX socket is left in Z's network namespace (read through ``proc_fd``,
    the host's /proc, held from start-up). Called once a sample's processes are all dead:
    whatever is still listed (a bound abstract name, say) outlived them."""
    # ("self": in mode userns Z is PID 1 of its own namespace, not of this /proc's)
    fd = os.open("self/net/unix", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    try:
        table = os.read(fd, 4096)
    finally:
        os.close(fd)
    return table.count(b"\n") > 1  # more than the header


def renew_network_namespace(libc, proc_fd):
    """Move Z (and so every later sample) into a new, empty network namespace if the last
    sample left a socket in this one; the old one goes with that socket."""
    if proc_fd >= 0 and sockets_left(proc_fd) and libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes_errno(), "unshare(CLONE_NEWNET) failed")


def main():
    import json

    if sys.argv[1:] == ["warm"]:  # run once per harness run, outside any worker's cgroup
        import ctypes  # loads what the zygote has loaded (libffi)

        warm_page_cache(mapped_objects())  # the rest of the sample's root is the run's copy
        return
    mode, slot, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    if config.get("prepare"):  # once per run, while the zygotes start (they wait for it)
        prepare = config["prepare"]
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -5)  # ahead of them (as root)
        except OSError:
            pass  # (not root: at their priority)
        prepare_runtime(
            prepare["base"], prepare["owner"], config["secret"], config["checker"],
            prepare.get("tree"),
        )  # fmt: skip
        return
    # HumanEval+ expects ints of over 4,300 digits (/83, /139), which a sample or a test
    # may write or read as text: the limit is lifted, as evalplus does. (They cross
    # between the sample and the checker in binary.)
    sys.set_int_max_str_digits(0)
    join_cgroups(config["cgroups"])
    namespaces = {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in ("ipc", "uts")}
    # Z's own PID namespace, to return to after forking each sample's first process.
    pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) if mode != "none" else -1
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    # What every sample's processes need from Z: the checker's sys.path, the seccomp
    # filter, and Z's namespaces (a sample's must differ).
    context = {"seccomp": prepare_seccomp(), "namespaces": namespaces, "pid_ns": pid_ns}
    checker = sorted({os.path.dirname(path) for path, _ in config["checker"]})
    proc_fd = -1
    runtime = config["runtime"]
    if mode != "none":
        proc_fd = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        if runtime == LATE_RUNTIME:  # the run's copy was still being made: its manifest
            try:
                runtime = json.loads(read_frame(0))
            except EOFError:  # the harness gave up before it was made
                os._exit(0)
        build_root(libc, config["secret"], config["checker"], mode == "userns", runtime)
        checker = [CHECKER_SITE] if checker else []
    context["checker"] = checker
    # (Not for the probe's one trusted program, on the host's runtime: nothing to share.)
    probe = mode != "none" and runtime is None
    held = None if probe else warm_up(libc)  # noqa: F841 (free blocks, kept for Z's life)
    reporter, context["report"] = start_reporter(libc)
    context["seq"] = 0
    while True:
        try:
            header = read_frame(0).decode()
            program = read_frame(0)
        except EOFError:  # the harness is done: Z ends last, once its checker and reporter
            stop_checker(context)  # have (the harness then removes the worker's cgroup)
            os.close(context["report"])
            os.waitpid(reporter, 0)
            os._exit(0)
        context["seq"] += 1
        run_one(header, program.decode("utf-8", "surrogatepass"), libc, mode, slot, context)
        renew_network_namespace(libc, proc_fd)


if __name__ == "__main__":
    main()
