"""How the OpenMP threads behind torch's CPU kernels wait: passively, in the commands
that serve completions while other work runs (``lsp``, ``serve``, ``app``).

torch's CPU build runs its parallel kernels on GNU OpenMP (libgomp), whose threads by
default spin for a while at the end of each parallel region, waiting for the next. On a
machine with more runnable threads than cores (an editor's language server while the
user builds, tests or trains) a spinning thread burns the time slice its partner needs
to finish the region, and a prompt read on every core slows down many times. Measured on
2 cores (AMD EPYC Zen 4) with the machine loaded (load average 10-14): one-token
completions of 1,200-character prompts through ``codeparrot lsp`` took 367 ms (median)
with spinning waits and 37 ms with passive ones (``bench/first_token.py``).

Training (``train``, ``quickstart``) keeps spinning, but briefly
(:func:`prefer_short_spins`: ``GOMP_SPINCOUNT=10000`` against libgomp's 300,000). Measured
with ``bench/train_waits.py`` on the quickstart's recipe (2 cores, AMD EPYC Zen 4), steady
tokens/s against libgomp's default: alone 1.12x (passive 0.93-1.04x); beside two busy
processes 2.20x (passive 2.01-2.46x), where the default fell to 1,110-1,373 tokens/s from
~6,000.

``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` are read once, when libgomp is loaded (with
torch), so only a command's entry point calls these, before torch is imported; a value the
user set is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

VARIABLE = "OMP_WAIT_POLICY"
SPINS = "GOMP_SPINCOUNT"
TRAINING_SPINS = 10_000  # iterations a waiting thread spins before it sleeps


def prefer_passive_waits(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose a policy. Returns whether the
    process's threads will wait passively: False where the user chose otherwise, or where
    torch (and libgomp with it) is already loaded and it is too late to choose."""
    environ = os.environ if environ is None else environ
    if VARIABLE in environ:
        return environ[VARIABLE].strip().upper() == "PASSIVE"
    if "torch" in sys.modules:
        return False
    environ[VARIABLE] = "PASSIVE"
    return True


def prefer_short_spins(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``GOMP_SPINCOUNT`` to :data:`TRAINING_SPINS` unless the user chose a wait policy
    or a spin count. Returns whether it did: False where the user chose, or where torch is
    already loaded and it is too late to choose."""
    environ = os.environ if environ is None else environ
    if VARIABLE in environ or SPINS in environ or "torch" in sys.modules:
        return False
    environ[SPINS] = str(TRAINING_SPINS)
    return True
