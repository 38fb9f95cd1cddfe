"""The trusted prompts and tests of a run, compiled once in the harness for its zygotes
(:class:`CompiledCode`; ``eval/zygote/checker.py``'s ``trusted_code`` loads them)."""

from __future__ import annotations

import importlib.util
import marshal
import threading

BYTECODE = b"\0bytecode\0"  # eval/zygote/checker.py's trusted_code: + magic number + marshal data


class CompiledCode:
    """The trusted prompts and tests of a run, each compiled once in the harness for every
    zygote of it, which loads the bytecode instead of compiling the same text again for
    each sample (a sample's checker then starts its test sooner, and HumanEval+'s tests of
    megabytes are no longer parsed within each sample's time limit). Text that does not
    compile here is sent as it is: the checker reports the error as before. Thread-safe;
    at most ``max_bytes`` of bytecode are kept (then it starts afresh)."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self._frames: dict[tuple[str, str], bytes] = {}
        self._size = 0
        self._lock = threading.Lock()
        self._compiling = threading.Lock()

    def frame(self, text: str, name: str) -> bytes:
        """The job frame of trusted ``text`` compiled as ``name`` (``<prompt>``, ``<test>``)."""
        found = self._frames.get((name, text))
        if found is not None:
            return found
        # One compile at a time (they hold the GIL anyway): workers that start samples of
        # the same problem together wait for its one compile instead of each making one.
        with self._compiling:
            found = self._frames.get((name, text))
            if found is not None:
                return found
            try:  # as the checker compiles it: no future flags of this module, asserts kept
                code = compile(text, name, "exec", dont_inherit=True, optimize=0)
                found = BYTECODE + importlib.util.MAGIC_NUMBER + marshal.dumps(code)
            except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
                # (ints of over 4,300 digits, which the checker allows, among them)
                return text.encode("utf-8", "surrogatepass")
            with self._lock:
                if self._size + len(found) > self.max_bytes:
                    self._frames.clear()
                    self._size = 0
                self._frames[(name, text)] = found
                self._size += len(found)
        return found
