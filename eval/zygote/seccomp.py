"""The seccomp filter of B: built once in Z (``prepare_seccomp``), installed in B."""

import os

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
