"""How many CPU threads a prompt and a one-token step get, chosen by measuring.

A prompt is a few large matrix products: a model of real size reads it fastest on every
core (a small model's, where OpenMP's threads wait passively, on one:
:func:`choose_prompt_threads` times both). A one-token step
is a few dozen small kernels: a small model's runs fastest on one thread (a second mostly
waits for its turn, and the editor keeps a core), while a model of real size (a 164M
StarCoder-shaped one: 27.8 against 18.0 ms a step on 2 cores, RESULTS.md) gains from
every core. :func:`tune_decode_threads` times a few steps of the loaded model on one
thread and on all, and keeps the faster; small models skip the second measurement.

:func:`time_prompt` measures how long the model reads a prompt, per token: the language
server sizes what it reads again at every keystroke by it (``lsp --fim-suffix-tokens``).

:func:`tune_decode_threads` takes about 0.6 s on 2 cores for a model of real size, before
the first suggestion. :class:`LiveTuning` makes the same choice from the calls themselves
instead: the first calls' own step timings, with nothing run for the measurement.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# A step this fast on one thread is a small model's: more threads cost more than they give.
ONE_THREAD_BELOW_MS = 8.0
# More threads must be this much faster to be kept (they also take the editor's core).
MORE_THREADS_GAIN = 1.15
PROBE_PROMPT = 16  # prompt tokens before the timed steps
PROBE_WARMUP = 2  # steps not timed (first allocations)
PROBE_STEPS = 6
PROBE_PROMPT_TOKENS = 64  # the timed prompt of time_prompt
# LiveTuning: calls that decode fewer tokens say little about a step's time
LIVE_MIN_STEPS = 6
# LiveTuning: models this large start their steps on every core (164M: 27.8 against 18.0
# ms a step on 2 cores; 0.5B: 86 against 57 ms; RESULTS.md)
LARGE_MODEL_PARAMETERS = 100_000_000


def cpu_cores() -> int:
    """Cores this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ThreadChoice:
    """The steps' thread count and the figures behind it (``None``: not measured)."""

    threads: int
    one_ms: float
    many_ms: float | None
    cores: int

    def describe(self) -> str:
        if self.many_ms is None:
            why = f"one thread: {self.one_ms:.1f} ms a step" + (
                f", under {ONE_THREAD_BELOW_MS:g} ms" if self.cores > 1 else ""
            )
        else:
            why = f"{self.one_ms:.1f} ms a step on 1, {self.many_ms:.1f} ms on {self.cores}"
        return f"decoding steps on {self.threads} thread(s) ({why})"


@contextlib.contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads (OpenMP's setting is per calling thread)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def decoder_of(engine: Any) -> Any:
    """The :class:`~codeparrot.generation.decoder.Decoder` of an engine (or the decoder)."""
    return getattr(engine, "decoder", engine)


def time_steps(engine: Any, threads: int) -> float:
    """Milliseconds of one one-token step of ``engine`` (an Engine or its Decoder) on
    ``threads`` threads (mean)."""
    import torch

    engine = decoder_of(engine)
    vocab = max(1, engine.vocab_size - 1)
    ids = [(7 + 31 * i) % vocab for i in range(PROBE_PROMPT)]
    with torch.inference_mode(), intra_op_threads(threads):
        steps = engine.steps(ids, 1, PROBE_WARMUP + PROBE_STEPS + 1)
        nxt = steps.prefill().argmax(dim=-1)
        for _ in range(PROBE_WARMUP):
            nxt = steps.decode(nxt).argmax(dim=-1)
        start = time.perf_counter()
        for _ in range(PROBE_STEPS):
            nxt = steps.decode(nxt).argmax(dim=-1)
        return (time.perf_counter() - start) * 1000 / PROBE_STEPS


def tune_decode_threads(engine: Any, cores: int | None = None) -> ThreadChoice:
    """Set ``engine.decode_threads`` to the faster of one thread and ``cores`` (default:
    :func:`cpu_cores`) for its steps, and ``engine.prompt_threads`` to ``cores``; returns
    the choice with its figures. The probe's prompt is left out of the prompt cache."""
    engine = decoder_of(engine)
    cores = cores or cpu_cores()
    one = time_steps(engine, 1)
    many = None
    threads = 1
    if cores > 1 and one >= ONE_THREAD_BELOW_MS:
        many = time_steps(engine, cores)
        if one / many >= MORE_THREADS_GAIN:
            threads = cores
    engine.prompt_cache.clear()
    engine.decode_threads = threads
    engine.prompt_threads = cores
    return ThreadChoice(threads, one, many, cores)


def time_prompt(engine: Any, threads: int | None = None) -> float:
    """Milliseconds per token for ``engine`` to read a prompt of
    :data:`PROBE_PROMPT_TOKENS` tokens on ``threads`` threads (default: its prompt
    threads); the fastest of two reads, after one untimed. Left out of the prompt cache.

    A short prompt attends to few positions, so a suffix read again after hundreds of
    cached positions costs a little more a token (measured ~1.2x at 768 positions)."""
    import torch

    engine = decoder_of(engine)
    vocab = max(1, engine.vocab_size - 1)
    best = float("inf")
    with torch.inference_mode(), intra_op_threads(threads or engine.prompt_threads):
        for round_ in range(3):
            # a new prompt each round, so that none is served from the prompt cache
            ids = [(11 + 37 * i + round_) % vocab for i in range(PROBE_PROMPT_TOKENS)]
            start = time.perf_counter()
            engine.steps(ids, 1, 1).prefill()
            if round_:
                best = min(best, time.perf_counter() - start)
    engine.prompt_cache.clear()
    return best * 1000 / PROBE_PROMPT_TOKENS


# a kept prompt speed is timed again at every this many starts, the faster figure kept
PROMPT_REMEASURE_EVERY = 8


def kept_or_timed_prompt(engine: Any, threads: int) -> tuple[float, bool]:
    """``(ms a prompt token, was_kept)``: the figure an earlier start here measured for
    this model, threads and quantization (``engine.kept_speeds``, at most a week old), else
    :func:`time_prompt`'s, kept for the next start. Every :data:`PROMPT_REMEASURE_EVERY`-th
    start times it again and keeps the faster figure: a figure taken while other work
    slowed the machine (a smaller suffix window) does not stay."""
    from codeparrot.generation.speeds_cache import measured_or_kept

    engine = decoder_of(engine)

    def faster(new: float, old: Any) -> float:
        return min(new, old) if isinstance(old, (int, float)) and old > 0 else new

    waits = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() or "default"
    name = f"prompt ms a token, {threads} threads, quantize {engine.quantize}, waits {waits}"
    value, kept = measured_or_kept(
        engine.kept_speeds,
        name,
        lambda: round(time_prompt(engine, threads), 4),
        every=PROMPT_REMEASURE_EVERY,
        best=faster,
    )
    if not isinstance(value, (int, float)) or not value > 0:  # a hand-edited file
        return time_prompt(engine, threads), False
    return float(value), kept


@dataclass(frozen=True)
class PromptChoice:
    """The prompts' thread count and the figures behind it (ms a prompt token; ``None``:
    not measured), and whether the figures were kept from an earlier start."""

    threads: int
    ms: float
    one_ms: float | None
    kept: bool

    def describe(self) -> str:
        how = " (as an earlier start here measured)" if self.kept else ""
        versus = "" if self.one_ms is None else f"; {self.one_ms:.3f} on 1"
        return f"prompts on {self.threads} thread(s): {self.ms:.3f} ms a token{versus}{how}"


def choose_prompt_threads(engine: Any, cores: int | None = None) -> PromptChoice:
    """Set ``engine.prompt_threads`` to the faster of every core and, for a model under
    :data:`LARGE_MODEL_PARAMETERS`, one thread (every core must be
    :data:`MORE_THREADS_GAIN` times faster to be kept); returns the choice with its
    figures (:func:`kept_or_timed_prompt`'s, per thread count).

    A small model's prompt is many short kernels. Where OpenMP's threads wait passively
    (the serving commands, :mod:`codeparrot.generation.waits`), waking the second thread
    for each costs more than it gives: measured on 2 cores (AMD EPYC Zen 4), the
    quickstart-sized model read a prompt at 0.047 ms a token on one thread against 0.069
    on two, and the language server answered 6 ms later than with spinning waits."""
    engine = decoder_of(engine)
    cores = cores or cpu_cores()
    many, kept = kept_or_timed_prompt(engine, cores)
    choice = PromptChoice(cores, many, None, kept)
    large = sum(p.numel() for p in engine.model.parameters()) >= LARGE_MODEL_PARAMETERS
    if cores > 1 and not large:
        one, kept_one = kept_or_timed_prompt(engine, 1)
        threads = cores if one / many >= MORE_THREADS_GAIN else 1
        best = many if threads == cores else one
        choice = PromptChoice(threads, best, one, kept and kept_one)
    engine.prompt_threads = choice.threads
    return choice


class LiveTuning:
    """The choice of :func:`tune_decode_threads`, made from an engine's own calls as they
    finish (:meth:`observe`), so that no probe runs before the first one.

    The steps start on one thread, or on every core for a model of at least
    :data:`LARGE_MODEL_PARAMETERS` (whose steps have always run faster so on a quiet
    machine). The first call that decodes at least :data:`LIVE_MIN_STEPS` tokens is not
    timed (its first steps set things up); the next ones time the steps on one thread and
    on every core, and the choice is :func:`tune_decode_threads`'s: one thread for a step
    under :data:`ONE_THREAD_BELOW_MS` on one (without timing more), else every core where
    they are :data:`MORE_THREADS_GAIN` times faster. Prompts run on every core until
    :func:`choose_prompt_threads` chooses.

    Call :meth:`observe` from the thread that runs the engine's calls: it changes
    ``engine.decode_threads`` between them.
    """

    def __init__(self, engine: Any, cores: int | None = None) -> None:
        self.engine = engine
        self.cores = cores or cpu_cores()
        self.choice: ThreadChoice | None = None  # set once the steps' threads are chosen
        self._seen = 0  # calls that decoded enough tokens
        self._ms: dict[int, float] = {}  # a step's milliseconds by thread count
        large = sum(p.numel() for p in engine.model.parameters()) >= LARGE_MODEL_PARAMETERS
        engine.decode_threads = self.cores if large else 1
        engine.prompt_threads = self.cores

    @property
    def settled(self) -> bool:
        """Are the steps' threads chosen?"""
        return self.choice is not None

    def observe(self, completion: Any) -> str | None:
        """Learn from one finished call (a :class:`~codeparrot.generation.engine.Completion`:
        its ``new_tokens``, ``seconds`` and ``prompt_seconds``); the choice, described, on
        the call that makes it, else None."""
        if self.settled or completion.new_tokens < LIVE_MIN_STEPS:
            return None
        self._seen += 1
        if self._seen == 1:
            return None
        ms = (completion.seconds - completion.prompt_seconds) * 1000 / completion.new_tokens
        self._ms[self.engine.decode_threads] = ms
        one, many = self._ms.get(1), self._ms.get(self.cores)
        if one is not None and (self.cores == 1 or one < ONE_THREAD_BELOW_MS):
            return self._choose(1, many if self.cores > 1 else None)
        if one is None or many is None:
            self.engine.decode_threads = self.cores if many is None else 1  # the next call
            return None
        return self._choose(self.cores if one / many >= MORE_THREADS_GAIN else 1, many)

    def _choose(self, threads: int, many_ms: float | None) -> str:
        self.choice = ThreadChoice(threads, self._ms[1], many_ms, self.cores)
        self.engine.decode_threads = threads
        return self.choice.describe()
