"""The sample's file system: the Python runtime, read-only, and nothing else.

The run's copy of the runtime (``prepare_runtime``), the root built from it once per
zygote (``build_root``), and the mounts and cgroups they need.
"""

import os
import sys

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
