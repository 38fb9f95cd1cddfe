"""What a sample sees of the runtime is the run's own copy, on a tmpfs, read-only.

Bound from the host, the standard library's folders would cache every name a sample
looks up in them (existing or not) for every later sample and run: a channel, read back
by timing lookups (``bench/lookup_channel.py``). These checks are deterministic: the
sample's standard library is not the host's folder, lives on a tmpfs (which keeps no
failed lookup), is a new copy for every run, cannot be written, and is removed when the
run ends, however it ends.
"""

from __future__ import annotations

import ast
import os
import sysconfig
from pathlib import Path

import pytest

from codeparrot.eval import execution, sandbox
from codeparrot.eval.execution import Program, run_programs
from codeparrot.eval.sandbox import RUNTIME_PREFIX, RuntimeCopy, detect_isolation

# The sample's view of its standard library: identity, file system, and a write attempt.
IDENTITY = """
import ctypes, os
def f(x):
    folder = os.path.dirname(os.__file__)
    st = os.stat(folder)
    buffer = ctypes.create_string_buffer(256)  # struct statfs: f_type first (the sample's
    ctypes.CDLL(None).statfs(folder.encode(), buffer)  # /proc is empty: no mountinfo)
    magic = int.from_bytes(buffer.raw[:8], 'little')
    kind = 'tmpfs' if magic == 0x01021994 else hex(magic)
    try:
        open(os.path.join(folder, 'left-by-a-sample'), 'w').close()
        wrote = 'wrote'
    except OSError as e:
        wrote = e.strerror
    return [folder, st.st_dev, st.st_ino, kind, wrote]
"""
REPORT = "assert False, repr(f(0))\n"


@pytest.fixture(scope="module")
def strong():
    isolation = detect_isolation()
    if isolation.mode == "none":
        pytest.skip("no namespaces here: mode none shows the host's files")
    return isolation


def views(isolation, count=1, workers=1):
    verdicts = run_programs(
        [Program(IDENTITY, REPORT, "f")] * count, workers=workers, isolation=isolation
    )
    out = []
    for v in verdicts:
        assert v.result.startswith("failed: AssertionError ["), v.result
        out.append(ast.literal_eval(v.result.removeprefix("failed: AssertionError ")))
    return out


def leftovers() -> list[Path]:
    base = sandbox.shared_tmpfs()
    return sorted(Path(base).glob(f"{RUNTIME_PREFIX}{os.getpid()}-*")) if base else []


def test_each_run_gets_a_fresh_read_only_copy_on_a_tmpfs_not_the_hosts_folder(strong):
    if sandbox.shared_tmpfs() is None:
        pytest.skip("no writable tmpfs here: the host's runtime is bound, with a warning")
    host = os.stat(sysconfig.get_paths()["stdlib"])
    first = views(strong, count=2, workers=2)
    (second,) = views(strong)
    folder, dev, ino, kind, wrote = first[0]
    assert folder == os.path.realpath(sysconfig.get_paths()["stdlib"])  # same paths
    assert (dev, ino) != (host.st_dev, host.st_ino), "the host's own folder is bound"
    assert kind == "tmpfs", kind
    assert wrote == "Read-only file system"
    assert first[1] == first[0], "the workers of a run share one copy"
    assert second[1:3] != [dev, ino], "a later run sees the same copy"
    assert leftovers() == []


def test_the_copy_is_removed_when_a_run_fails(strong, monkeypatch):
    if sandbox.shared_tmpfs() is None:
        pytest.skip("no writable tmpfs here")

    def interrupted(self, *args, **kwargs):
        assert leftovers(), "no copy while samples run"
        raise KeyboardInterrupt

    monkeypatch.setattr(execution.Sandbox, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_programs([Program(IDENTITY, REPORT, "f")] * 2, workers=2, isolation=strong)
    assert leftovers() == []


def test_a_killed_harnesss_copy_is_removed_by_the_next_run(strong):
    base = sandbox.shared_tmpfs()
    if base is None:
        pytest.skip("no writable tmpfs here")
    stale = Path(base, f"{RUNTIME_PREFIX}99999999-killed")  # no such pid can exist
    (stale / "usr").mkdir(parents=True)
    with RuntimeCopy(strong.mode, secret_dirs=()) as copy:
        assert not stale.exists()
        tree = Path(copy.manifest["tree"])
        assert tree.is_dir() and tree.name.startswith(f"{RUNTIME_PREFIX}{os.getpid()}-")
        for path in copy.manifest["bound"]:  # the zygote's loaded objects: empty places
            assert (tree / path.lstrip("/")).stat().st_size == 0
    assert not tree.exists()


def test_a_sandbox_used_alone_makes_and_removes_its_own_copy(strong):
    if sandbox.shared_tmpfs() is None:
        pytest.skip("no writable tmpfs here")
    with sandbox.Sandbox(strong, slot=6, secret_dirs=()) as box:
        verdict = box.run(IDENTITY, REPORT, "f")
        assert len(leftovers()) == 1
    view = ast.literal_eval(verdict.result.removeprefix("failed: AssertionError "))
    assert view[3] == "tmpfs" and view[4] == "Read-only file system"
    assert leftovers() == []


def test_without_a_writable_tmpfs_the_hosts_runtime_is_bound_with_a_warning(strong, monkeypatch):
    monkeypatch.setattr(sandbox, "shared_tmpfs", lambda: None)
    with pytest.warns(RuntimeWarning, match="no writable tmpfs"):
        (view,) = views(strong)
    host = os.stat(sysconfig.get_paths()["stdlib"])
    assert view[1:3] == [host.st_dev, host.st_ino] and view[4] == "Read-only file system"


def _files(tree: str) -> set[str]:
    return {str(p.relative_to(tree)) for p in Path(tree).rglob("*") if not p.is_dir()}


def test_a_copy_begun_before_its_task_was_known_gets_what_the_checkers_packages_load(strong):
    # `eval execute` begins the copy before the problem file says which task (and so which
    # checker packages) it is: the packages' libraries are added to the same folder
    numpy = pytest.importorskip("numpy")
    if sandbox.shared_tmpfs() is None:
        pytest.skip("no writable tmpfs here")
    from codeparrot.eval.sandbox import Limits

    with RuntimeCopy(strong.mode, ("numpy",), secret_dirs=()) as direct:
        wanted = _files(direct.manifest["tree"])
    copy = RuntimeCopy(strong.mode, secret_dirs=())
    copy.start()
    try:
        copy.require(("numpy",))
        copy.create()
        tree = copy.manifest["tree"]
        assert _files(tree) == wanted
        package = os.path.dirname(os.path.realpath(numpy.__file__))
        assert not (Path(tree) / package.lstrip("/")).exists(), "the checker's package is copied"
        program = Program("def f():\n    return 1\n", "import numpy\nassert f() == 1\n", "f")
        limits = Limits(checker_packages=("numpy",))
        (verdict,) = run_programs([program], isolation=strong, limits=limits, runtime=copy)
        assert verdict.passed, verdict.result
    finally:
        copy.close()
    assert leftovers() == []


def test_zygotes_started_while_the_copy_is_made_see_the_copy_once_it_is_made(strong):
    # the workers' zygotes start before the copy is made and build their roots only once
    # it is: their samples see the copy, never the host's folder
    if sandbox.shared_tmpfs() is None:
        pytest.skip("no writable tmpfs here")
    host = os.stat(sysconfig.get_paths()["stdlib"])
    copy = RuntimeCopy(strong.mode, secret_dirs=())
    copy.start()
    try:
        assert copy.begun()
        verdicts = run_programs(
            [Program(IDENTITY, REPORT, "f")] * 2, workers=2, isolation=strong, runtime=copy
        )
        for v in verdicts:
            view = ast.literal_eval(v.result.removeprefix("failed: AssertionError "))
            assert view[1:3] != [host.st_dev, host.st_ino], "the host's own folder is bound"
            assert view[3] == "tmpfs" and view[4] == "Read-only file system"
    finally:
        copy.close()
    assert leftovers() == []


def _failing(self, tree=None):
    raise sandbox.SandboxError("could not copy the runtime for the sandbox: disk full")


def worker_groups() -> list[Path]:
    return [
        g for base in sandbox.cgroup_bases()[1] for g in base.glob(f"codeparrot-{os.getpid()}-*")
    ]


def test_a_copy_that_fails_while_the_zygotes_wait_fails_the_run(strong, monkeypatch):
    monkeypatch.setattr(RuntimeCopy, "_make", _failing)
    copy = RuntimeCopy(strong.mode, secret_dirs=())
    copy.start()
    try:
        with pytest.raises(sandbox.SandboxError, match="disk full"):
            run_programs(
                [Program(IDENTITY, REPORT, "f")] * 4, workers=2, isolation=strong, runtime=copy
            )
    finally:
        copy.close()
    assert leftovers() == []
    assert worker_groups() == []  # (a worker that began after the copy failed, too)


def test_a_worker_started_after_the_copy_failed_leaves_no_cgroup(strong, monkeypatch):
    """Its start raises (the worker waiting first saw the failure: the copy is no longer
    being made), after its cgroup was made: the group goes too (no one closes the box)."""
    if strong.accounting == "none":
        pytest.skip("no cgroup can be made here")
    monkeypatch.setattr(RuntimeCopy, "_make", _failing)
    box = sandbox.Sandbox(strong, slot=7, secret_dirs=(), runtime=RuntimeCopy(strong.mode, ()))
    with pytest.raises(sandbox.SandboxError, match="disk full"):
        box.start()
    assert worker_groups() == []
