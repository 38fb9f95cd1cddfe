"""B: the sample, forked per sample, unprivileged, under rlimits and seccomp.

B runs ``prompt + completion``, then answers A's call requests (``run_sample``), or, for a
replayed test, every recorded call at once (``run_answers``).
"""

import os
import resource

from .codec import TooLarge, decode, encode, read_frame, replay_plan, write_frame
from .root import (
    CLONE_NEWNS,
    MNT_DETACH,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_READ_ONLY,
    MS_REC,
    _mount,
)
from .seccomp import install_seccomp

UID_BASE = 2_000_000_000 // 1000 * 1000  # uids no account uses; B of slot i runs as UID_BASE + i
PR_SET_NO_NEW_PRIVS = 38
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


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
        drop_capabilities(libc)


CAP_KILL = 5
PR_CAPBSET_DROP = 24


def drop_capabilities(libc, keep=()):
    """Leave this process no capability but those numbered in ``keep``: none to gain back
    by exec either (``no_new_privs``, and the bounding set where it may be lowered)."""
    import ctypes
    import platform

    number = SYS_CAPSET.get(platform.machine())
    if number is None:
        raise RuntimeError("cannot drop capabilities on this architecture")
    for cap in range(64):
        if cap not in keep:
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # (fails past the last, or unprivileged)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) for 0-31, 32-63
    for cap in keep:
        data[3 * (cap // 32)] |= 1 << (cap % 32)
        data[3 * (cap // 32) + 1] |= 1 << (cap % 32)
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
    namespace = start_program(program)
    try:
        payload = outcomes_payload(answer_calls(namespace[entry_point], calls))
    except BaseException as e:
        payload = error_payload(e)
    if payload is not None:
        write_frame(4, payload)
    os._exit(0)


def start_program(program):
    """B, sandboxed: run the program; its globals once "ready" is sent on fd 4, or (it
    raised) the error sent and B gone."""
    namespace = {}
    try:
        exec(compile(program, "<sample>", "exec"), namespace)
    except BaseException as e:
        write_frame(4, encode(("err", f"{type(e).__name__}: {e}"[:500])))
        os._exit(1)
    write_frame(4, encode(("ready",)))
    return namespace


def error_payload(e):
    """The frame of a call that raised ``e`` (in the sample: its text may not print)."""
    try:
        return encode(("err", f"{type(e).__name__}: {e}"[:500]))
    except BaseException:
        return encode(("err", "unprintable exception"))


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
    namespace = start_program(program)
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
            payload = error_payload(e)
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
