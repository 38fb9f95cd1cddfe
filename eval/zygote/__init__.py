"""The sandbox's process side: a long-lived zygote that runs one sample per request.

Started as ``python -I -S -c LAUNCHER FOLDER MODE SLOT CONFIG_JSON`` (``zygote_command``
in ``eval/sandbox.py``): standard library only, not as part of the ``codeparrot`` package.
The harness imports only ``codec``, to check kept recordings (``eval/recordings.py``).
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

The parts, each imported before ``build_root`` (``main`` imports them all at its top: no
import of a part may wait until later, when the checkout is out of reach): ``codec``
(frames, the plain-data codec, a replay plan's words; it imports none of the others),
``seccomp`` (B's filter), ``root`` (the runtime copy, ``build_root``, mounts), ``sample``
(B), ``checker`` (A, and what the worker's checker C runs) and ``main`` (Z).
"""
