"""One-token steps of static shape, replayed as a captured CUDA graph on a GPU.

A small model's step on a GPU is bound by kernel launches, not arithmetic: some 150
kernels a step for the quickstart's 4-layer model, each launched from Python. A CUDA
graph launches them all at once, but replays only the very same kernels on the very same
buffers, so the step here has a static shape:

- the keys/values live in a :class:`StaticCache` of fixed capacity for a fixed number of
  rows, zero-filled (a masked position's value is then never a NaN);
- the position is a device tensor (:attr:`StaticCache.position`): keys and values are
  written with ``index_copy_`` at it, the rotary angles (or GPT-2's position embedding)
  read with ``index_select``, and the step advances it itself;
- attention reads the whole capacity, the positions not yet written masked out (and those
  outside a sliding window), so that no length ever reaches the host.

:func:`static_step` is that computation, a function of tensors that runs on any device
(tests check it on a CPU against the eager step). :class:`GraphedStep` captures one call
of it on a CUDA device and replays it; :class:`StaticSlots` keeps a few captured steps
(one per rows-and-capacity shape) for the engine's calls, and :class:`StaticSteps` is a
call's prefill and steps over one of them (:meth:`Decoder.steps
<codeparrot.generation.decoder.Decoder.steps>` with ``cuda_graphs``).

Covered: the GPT-2 and Llama-family decoders (Qwen3 included) in their own weights (no
int8: that is a CPU format). Sampling stays outside the graph, on the step's logits.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from codeparrot.generation.gpt2 import GPT2Decoder
from codeparrot.generation.llama import LlamaDecoder, _rms_norm, _rotate_rolled

logger = logging.getLogger(__name__)

# capacities are powers of two from this many positions up (a few shapes serve every call)
MIN_CAPACITY = 256
# the most positions a static cache holds (a longer call takes the eager steps)
MAX_CAPACITY = 4096
# captured steps kept (least recently used go first): each holds its cache and graph pool
SLOTS = 4
# eager calls before a capture: the first call of a kernel may allocate or tune
WARMUP_CALLS = 2


def static_problem(decoder: Any) -> str:
    """Empty where :func:`static_step` computes ``decoder``'s steps, else what it lacks."""
    if decoder is None:
        return "static steps need the lean decoder"
    if type(decoder) is not GPT2Decoder and not isinstance(decoder, LlamaDecoder):
        return f"static steps cover GPT-2 and the Llama family, not {type(decoder).__name__}"
    if decoder.int8 is not None:
        return "static steps read the model's own weights, not int8 copies"
    return ""


class StaticCache:
    """Keys/values of ``rows`` sequences with room for ``capacity`` positions, and the
    next position to write as a device tensor; buffers that never move."""

    def __init__(self, decoder: GPT2Decoder, rows: int, capacity: int) -> None:
        if capacity > decoder.context_length:
            raise ValueError(
                f"a static cache of {capacity} positions exceeds the model's context of "
                f"{decoder.context_length}"
            )
        shape = (rows, decoder.n_kv_head, capacity, decoder.head_dim)
        device, dtype = decoder.device, decoder.dtype
        zeros = lambda: torch.zeros(shape, dtype=dtype, device=device)  # noqa: E731
        self.keys = [zeros() for _ in decoder.layers]
        self.values = [zeros() for _ in decoder.layers]
        self.capacity = capacity
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # the next one
        self.positions = torch.arange(capacity, device=device)  # for the masks
        self.ids = torch.zeros(rows, dtype=torch.long, device=device)  # the step's input
        self.rotary: tuple[torch.Tensor, torch.Tensor] | None = None
        if isinstance(decoder, LlamaDecoder):  # cos and signed sin of every position
            self.rotary = decoder._rotary(0, capacity)

    @property
    def rows(self) -> int:
        return self.ids.size(0)

    def load_prompt(self, prompt: Any, length: int) -> None:
        """Copy the first ``length`` positions of ``prompt`` (a one-row
        :class:`~codeparrot.generation.gpt2.KVCache`) into every row; the next step
        writes position ``length``."""
        if length >= self.capacity:
            raise ValueError(
                f"a prompt of {length} tokens leaves no room in a static cache of "
                f"{self.capacity} positions"
            )
        for mine, theirs in zip(
            (*self.keys, *self.values), (*prompt.keys, *prompt.values), strict=True
        ):
            mine[:, :, :length].copy_(theirs[:, :, :length].expand(self.rows, -1, -1, -1))
        self.position.fill_(length)


def static_step(decoder: GPT2Decoder, cache: StaticCache) -> torch.Tensor:
    """Logits (rows, V) after ``cache.ids`` at ``cache.position``; writes that position's
    keys/values and advances the position. No host synchronisation: shapes depend on the
    cache alone, so one captured graph replays every step."""
    pos = cache.position
    seen = cache.positions <= pos  # (S,) positions written, this one included
    if isinstance(decoder, LlamaDecoder):
        x = _llama_blocks(decoder, cache, seen)
    else:
        x = _gpt2_blocks(decoder, cache, seen)
    logits = decoder._head(decoder._final_norm(x))
    pos.add_(1)
    return logits


def _gpt2_blocks(decoder: GPT2Decoder, cache: StaticCache, seen: torch.Tensor) -> torch.Tensor:
    B, C, nh, hs = cache.rows, decoder.n_embd, decoder.n_head, decoder.head_dim
    x = F.embedding(cache.ids, decoder.wte) + decoder.wpe.index_select(0, cache.position)
    mask = seen.view(1, 1, 1, -1)
    for i, layer in enumerate(decoder.layers):
        h = F.layer_norm(x, (C,), *layer.ln_1, decoder.eps)
        q, k, v = torch.addmm(layer.c_attn[1], h, layer.c_attn[0]).view(B, 3, nh, hs).unbind(1)
        y = _attend(cache, i, q, k, v, mask, layer.scaling)
        x = x + torch.addmm(layer.c_proj[1], y, layer.c_proj[0])
        h = F.layer_norm(x, (C,), *layer.ln_2, decoder.eps)
        h = torch.addmm(layer.c_fc[1], h, layer.c_fc[0])
        h = F.gelu(h, approximate="tanh") if decoder.fast_gelu else decoder.acts[i](h)
        x = x + torch.addmm(layer.mlp_proj[1], h, layer.mlp_proj[0])
    return x


def _llama_blocks(decoder: LlamaDecoder, cache: StaticCache, seen: torch.Tensor) -> torch.Tensor:
    B, nh, nkv, hs = cache.rows, decoder.n_head, decoder.n_kv_head, decoder.head_dim
    assert cache.rotary is not None
    cos, sin = (t.index_select(0, cache.position) for t in cache.rotary)  # (1, hs)
    x = F.embedding(cache.ids, decoder.wte)  # (B, C)
    masks: dict[int | None, torch.Tensor] = {}
    for i, block in enumerate(decoder.blocks):
        if block.window not in masks:
            mask = seen
            if block.window is not None:  # position p sees p - window < q <= p
                mask = seen & (cache.positions > cache.position - block.window)
            masks[block.window] = mask.view(1, 1, 1, -1)
        qkv = decoder._lin(decoder._norm(x, block.norms[0]), i, "qkv", False)
        qkv = qkv.view(B, nh + 2 * nkv, hs)
        qk = qkv[:, : nh + nkv]
        if block.qk_gain is not None:
            qk = _rms_norm(qk, None, decoder.eps) * block.qk_gain
        qk = _rotate_rolled(qk, cos, sin)
        v = qkv[:, nh + nkv :]
        y = _attend(cache, i, qk[:, :nh], qk[:, nh:], v, masks[block.window], decoder.scaling)
        x = x + decoder._lin(y, i, "o", False, cast=False)
        h = decoder._norm(x, block.norms[1])
        x = x + decoder._lin(decoder._mlp(h, i, False), i, "down", False, cast=False)
    return x


def _attend(
    cache: StaticCache,
    i: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Store layer ``i``'s key and value (B, nkv, hs) at the position, then attend with
    the query (B, nh, hs) over the whole capacity under ``mask``: (B, nh * hs). The query
    heads of a key/value head become its queries (grouped keys are read once)."""
    keys, values = cache.keys[i], cache.values[i]  # (B, nkv, S, hs)
    keys.index_copy_(2, cache.position, k.unsqueeze(2).to(keys.dtype))
    values.index_copy_(2, cache.position, v.unsqueeze(2).to(values.dtype))
    B, nh, hs = q.shape
    nkv = keys.size(1)
    grouped = q.reshape(B, nkv, nh // nkv, hs)
    y = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask, scale=scale)
    return y.reshape(B, nh * hs)


class GraphedStep:
    """One call of ``step`` (no arguments: it reads and writes fixed tensors) captured as
    a CUDA graph at the first call, and replayed at every call after.

    The capture follows torch's recipe: a few eager calls on a side stream first, then the
    capture. ``state`` are the tensors the step advances (the position): restored after
    the eager calls and the capture, so that the first replay is the first step. A capture
    that fails (an operation CUDA graphs cannot hold, in some torch build) is logged once
    and the step runs uncaptured from then on: slower, never wrong. ``cuda`` is
    ``torch.cuda`` (a test gives a stand-in).
    """

    def __init__(
        self, step: Callable[[], torch.Tensor], state: Sequence[torch.Tensor], cuda: Any = None
    ) -> None:
        self.step = step
        self.state = list(state)
        self.cuda = cuda if cuda is not None else torch.cuda
        self.graph: Any = None
        self.output: torch.Tensor | None = None  # the graph's output buffer
        self.error: BaseException | None = None  # a failed capture's

    def __call__(self) -> torch.Tensor:
        if self.error is not None:
            return self.step()
        if self.graph is None:
            kept = [t.clone() for t in self.state]
            try:
                self._capture(kept)
            except RuntimeError as e:  # torch reports capture errors as RuntimeError
                self._restore(kept)
                self.error = e
                logger.warning(
                    "decoding steps run uncaptured: the CUDA graph capture failed (%s)", e
                )
                return self.step()
        self.graph.replay()
        assert self.output is not None
        return self.output

    def _capture(self, kept: list[torch.Tensor]) -> None:
        cuda = self.cuda
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.step()
        cuda.current_stream().wait_stream(side)
        self._restore(kept)
        graph = cuda.CUDAGraph()
        # thread_local: other threads' kernels (another call's prefill) may run meanwhile
        with cuda.graph(graph, capture_error_mode="thread_local"):
            self.output = self.step()
        self._restore(kept)
        self.graph = graph

    def _restore(self, kept: list[torch.Tensor]) -> None:
        for t, value in zip(self.state, kept, strict=True):
            t.copy_(value)


class StaticSlot:
    """A static cache and its step (captured on a CUDA device, plain elsewhere); one call
    at a time holds it (:attr:`lock`)."""

    def __init__(self, decoder: GPT2Decoder, rows: int, capacity: int, cuda: Any) -> None:
        self.cache = StaticCache(decoder, rows, capacity)
        self.lock = threading.Lock()
        step = lambda: static_step(decoder, self.cache)  # noqa: E731
        if decoder.device.type == "cuda" or cuda is not None:
            self.run: Callable[[], torch.Tensor] = GraphedStep(step, [self.cache.position], cuda)
        else:  # a CPU: the same static computation, uncaptured (tests, a dry run)
            self.run = step


class StaticSlots:
    """The engine's static steps, one :class:`StaticSlot` per (rows, capacity), at most
    :data:`SLOTS` of them. ``cuda``: a stand-in for ``torch.cuda`` (tests)."""

    def __init__(self, decoder: GPT2Decoder, cuda: Any = None) -> None:
        self.decoder = decoder
        self.cuda = cuda
        self.max_capacity = min(MAX_CAPACITY, decoder.context_length)
        self._slots: OrderedDict[tuple[int, int], StaticSlot] = OrderedDict()
        self._lock = threading.Lock()

    def capacity_for(self, positions: int) -> int | None:
        """The capacity of a call of ``positions`` positions, None where none fits."""
        if positions > self.max_capacity:
            return None
        capacity = MIN_CAPACITY
        while capacity < positions:
            capacity *= 2
        return min(capacity, self.max_capacity)

    def acquire(self, rows: int, positions: int) -> StaticSlot | None:
        """A free slot for ``rows`` rows and ``positions`` positions, locked for the
        caller (release its :attr:`StaticSlot.lock`), or None: too long, or the slot of
        that shape is busy with another call."""
        capacity = self.capacity_for(positions)
        if capacity is None:
            return None
        key = (rows, capacity)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                with torch.inference_mode(False), torch.no_grad():
                    slot = StaticSlot(self.decoder, rows, capacity, self.cuda)
                self._slots[key] = slot
                while len(self._slots) > SLOTS:
                    oldest = next(iter(self._slots))
                    if self._slots[oldest].lock.locked():
                        break
                    del self._slots[oldest]
            self._slots.move_to_end(key)
            return slot if slot.lock.acquire(blocking=False) else None

    def shapes(self) -> list[tuple[int, int]]:
        """(rows, capacity) of the slots kept, least recently used first."""
        with self._lock:
            return list(self._slots)


class StaticSteps:
    """A call's prefill and steps over a :class:`StaticSlot`: the prompt runs eagerly for
    one row (:class:`~codeparrot.generation.decoder.LeanSteps`, with the prompt cache),
    its keys/values are copied to the slot's rows, then every step is the slot's.

    Finished candidates stay in the batch (the shapes must not change): their rows go on
    with a stale token and their logits are dropped. Each row holds its own copy of the
    prompt's keys/values (the eager steps share one): memory, not time, on a GPU at these
    sizes. ``close`` frees the slot."""

    def __init__(self, prompt_steps: Any, slot: StaticSlot, n: int, positions: int) -> None:
        self.prompt_steps = prompt_steps  # LeanSteps of one row
        self.slot = slot
        self.n = n
        self.length = 0  # positions written, as the host counts them
        self.positions = positions
        self.active: torch.Tensor | None = None  # rows still in the call (None: all)

    @property
    def cached_tokens(self) -> int:
        return self.prompt_steps.cached_tokens

    def prefill(self) -> torch.Tensor:
        logits = self.prompt_steps.prefill()  # (1, V)
        self.length = len(self.prompt_steps.ids)
        self.slot.cache.load_prompt(self.prompt_steps.cache, self.length)
        return logits.expand(self.n, -1)

    def decode(self, next_ids: torch.Tensor) -> torch.Tensor:
        cache = self.slot.cache
        if self.length >= cache.capacity:
            raise RuntimeError(
                f"a static cache of {cache.capacity} positions is full: no step after "
                f"position {self.length - 1}"
            )
        if self.active is None:
            cache.ids.copy_(next_ids)
        else:
            cache.ids.index_copy_(0, self.active, next_ids)
        logits = self.slot.run()
        self.length += 1
        if self.active is not None:
            return logits.index_select(0, self.active).float()
        return logits.float() if logits.dtype != torch.float32 else logits.clone()

    def keep(self, rows: list[int], next_ids: torch.Tensor) -> torch.Tensor:
        index = torch.tensor(rows, device=next_ids.device)
        self.active = index if self.active is None else self.active[index]
        return next_ids[index]

    def close(self) -> None:
        """Free the slot for the next call (once)."""
        slot, self.slot = self.slot, None  # type: ignore[assignment]
        if slot is not None:
            slot.lock.release()
