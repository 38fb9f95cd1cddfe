"""Kept recordings: each problem's recorded test calls, kept for the next run.

A run without per-call feedback (:mod:`codeparrot.eval.replay`) records each problem's
test against its reference solution once. The recording depends only on the problem (its
prompt, reference, test and entry point) and on the sandbox's code, so it is kept in a
folder, one file per problem, named by a SHA-256 of those and of the sandbox's own files
(every file of ``eval/zygote/`` and ``eval/replay.py``): a change to any records again.

The folder is the user's: ``$CODEPARROT_RECORDINGS_CACHE``, by default
``$XDG_CACHE_HOME/codeparrot/recordings`` (else ``~/.cache/codeparrot/recordings``), made
with mode 0700; ``CODEPARROT_RECORDINGS_CACHE=0`` turns it off. It is not used when it is
a link, is not owned by the user or can be written by others, nor in sandbox mode
``none`` (where samples run as the harness user and could write it). Samples never see
it: the sandbox's root holds only the runtime.

A kept file is input all the same. It is written whole (a temporary file, then a rename),
and read back only through the sandbox's own codec: its header must name its problem and
the sandbox's version, its body must match the SHA-256 in the header and decode to a
recording of the right shape (:func:`valid_recording`), within :data:`~codeparrot.eval.
replay.MAX_PLAN`. Anything else is ignored and the problem is recorded again. Even a
well-formed file that lies cannot make a sample pass: a recording only chooses which calls
a sample answers ahead; the test still runs in full against those answers, and any call
the recording does not list in order sends the sample back to calls one by one.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from codeparrot.kept_files import cache_folder

logger = logging.getLogger(__name__)

ENV = "CODEPARROT_RECORDINGS_CACHE"
MAGIC = b"codeparrot recording 1\n"
MAX_FILES = 4096  # the newest kept at the end of a run that wrote some
SUFFIX = ".rec"


@functools.lru_cache(maxsize=1)
def sandbox_version() -> str:
    """A SHA-256 of the files whose change can change a recording."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted((here / "zygote").glob("*.py")), here / "replay.py"]:
        data = path.read_bytes()
        digest.update(b"%s %d:" % (path.name.encode(), len(data)) + data)
    return digest.hexdigest()


def recording_key(prompt: str, reference: str, test: str, entry_point: str) -> str:
    """The name of a problem's recording: a SHA-256 of the problem and the sandbox."""
    digest = hashlib.sha256(sandbox_version().encode())
    for part in (prompt, reference, test, entry_point):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(b"%d:" % len(data) + data)
    return digest.hexdigest()


def recording_codec() -> Any:
    """The sandbox's own codec (``eval/zygote/codec.py``, whose top level only defines)."""
    from codeparrot.eval.zygote import codec

    return codec


def recorded_calls(data: bytes) -> list[bytes] | None:
    """The calls of a recording, in order (each the encoded ``(args tuple, kwargs dict)``),
    or None where ``data`` does not decode (with the sandbox's codec) to a recording: a
    non-empty list of (a call, its outcome), an outcome being ``("ok", result, None or
    the arguments after the call)`` or ``("err", message)``."""
    codec = recording_codec()
    try:
        record = codec.decode(data)
        if type(record) is not list or not record:
            return None
        for item in record:
            if type(item) is not tuple or len(item) != 2 or type(item[0]) is not bytes:
                return None
            call = codec.decode(item[0])
            ok = type(call) is tuple and len(call) == 2 and type(call[0]) is tuple
            if not (ok and type(call[1]) is dict and all(type(k) is str for k in call[1])):
                return None
            codec._outcome(item[1])
    except (ValueError, TypeError, IndexError, OverflowError, UnicodeError, codec.SampleFailed):
        return None
    return [key for key, _ in record]


def valid_recording(data: bytes) -> bool:
    """Whether ``data`` is a recording (:func:`recorded_calls`)."""
    return recorded_calls(data) is not None


def _private_folder(folder: Path) -> bool:
    """Make ``folder`` (0700) if missing; whether it is a folder of this user's alone."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError as e:
        logger.warning("recordings are not kept: %s", e)
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        logger.warning(
            "recordings are not kept: %s is not a folder of this user's alone (a link, "
            "someone else's, or writable by others)",
            folder,
        )
        return False
    return True


class RecordingCache:
    """The kept recordings in ``folder``: :meth:`get` one, :meth:`put` one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.written = 0
        self.ignored = 0  # files that were there but not valid

    @classmethod
    def default(cls) -> RecordingCache | None:
        """The user's folder (see the module's docs); None where it is off or unsafe."""
        folder = cache_folder(ENV, "recordings")
        if folder is None or not _private_folder(folder):
            return None
        return cls(folder)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def get(self, key: str) -> bytes | None:
        """The recording kept under ``key``, or None (none, or not a valid one)."""
        from codeparrot.eval.replay import MAX_PLAN

        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_PLAN + 256)
        except OSError:
            return None
        header = MAGIC + key.encode() + b"\n"
        body = data[len(header) + 65 :]
        digest = data[len(header) : len(header) + 64]
        valid = (
            data.startswith(header)
            and len(data) <= MAX_PLAN
            and data[len(header) + 64 : len(header) + 65] == b"\n"
            and hashlib.sha256(body).hexdigest().encode() == digest
            and valid_recording(body)
        )
        if not valid:
            self.ignored += 1
            logger.warning("ignored a kept recording that is not valid: %s", self._path(key))
            return None
        return body

    def put(self, key: str, recording: bytes) -> None:
        """Keep ``recording`` under ``key`` (written whole, then renamed); a failure is
        logged, never raised."""
        if not valid_recording(recording):
            return
        data = MAGIC + key.encode() + b"\n"
        data += hashlib.sha256(recording).hexdigest().encode() + b"\n" + recording
        try:
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, self._path(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            logger.warning("could not keep a recording in %s: %s", self.folder, e)
            return
        self.written += 1

    def prune(self, keep: int = MAX_FILES) -> None:
        """Remove all but the ``keep`` newest recordings."""
        try:
            files = sorted(self.folder.glob(f"*{SUFFIX}"), key=lambda f: f.lstat().st_mtime_ns)
            for old in files[:-keep] if keep else files:
                old.unlink(missing_ok=True)
        except OSError as e:
            logger.warning("could not prune the kept recordings in %s: %s", self.folder, e)
