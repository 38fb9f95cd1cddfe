"""A lean decode path for GPT-2 checkpoints: the model's own weights, a pre-allocated KV cache.

``transformers``' forward is general (cache objects, mask builders, output records) and
for the small models this project trains its Python overhead costs more than the
arithmetic. :class:`GPT2Decoder` runs the same computation, nanoGPT style, over the
parameters of a loaded ``GPT2LMHeadModel`` (references, no copies), so one loaded
model still serves every caller. Other architectures use the ``transformers`` forward.

What it saves, per call:
- the prompt is prefilled once, for one row, and its keys/values are copied to the
  ``n`` candidate rows (``model.generate`` prefills ``n`` copies of the prompt);
- logits are computed for the last position only (not for the whole prompt);
- keys/values go into a buffer sized for the whole call (no ``torch.cat`` per token);
- no attention mask: the prompt uses causal attention, one new token sees everything.

On a CPU a one-token step is bound by how fast the weights stream from memory, not by
arithmetic. :meth:`GPT2Decoder.quantize_int8` adds int8 copies of the matrices
(symmetric, one scale per output channel) that the small-batch steps read instead: a
quarter of the bytes, multiplied by the faster of torch's two CPU int8 kernels here
(:mod:`codeparrot.generation.int8`). Prompts keep the full-precision weights.
A one-token step without a shared prefix runs as one TorchScript function
(:mod:`codeparrot.generation.scripted_gpt2`) where it applies: the same logits, without
Python between its ~500 operations.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from codeparrot.generation.bf16_prompts import (
    PackedBF16,
    pack_bf16,
    packed_bf16_supported,
    packed_linear,
)
from codeparrot.generation.int8 import (
    HEAD_PROBE_ROWS,
    Int8Matrix,
    choose_kernel,
    int8_linear,
    int8_prompts_faster,
    pack_rows,
    quantize_rows,
)
from codeparrot.generation.int8 import INT8_MAX_ROWS as INT8_MAX_ROWS
from codeparrot.generation.int8 import int8_supported as int8_supported
from codeparrot.models.lean_variants import gpt2_config_problem

logger = logging.getLogger(__name__)


@dataclass
class _Layer:
    ln_1: tuple[torch.Tensor, torch.Tensor]
    c_attn: tuple[torch.Tensor, torch.Tensor]  # weight (C, 3C), bias (3C,)
    c_proj: tuple[torch.Tensor, torch.Tensor]
    ln_2: tuple[torch.Tensor, torch.Tensor]
    c_fc: tuple[torch.Tensor, torch.Tensor]
    mlp_proj: tuple[torch.Tensor, torch.Tensor]
    scaling: float


_LINEARS = ("c_attn", "c_proj", "c_fc", "mlp_proj")  # scripted_gpt2's matrices 0-3


class KVCache:
    """Keys and values of every layer for ``rows`` sequences, room for ``length`` positions.

    With a ``prefix`` (a one-row cache of the prompt that every row shares), the buffers
    hold only the positions after it: n samples of one prompt keep and read the prompt's
    keys/values once instead of n times.
    """

    def __init__(
        self, keys: list[torch.Tensor], values: list[torch.Tensor], prefix: KVCache | None = None
    ) -> None:
        self.keys = keys  # per layer (B, nh, T_max, hs)
        self.values = values
        self.prefix = prefix
        self.offset = prefix.length if prefix is not None else 0  # positions in the prefix
        self.length = self.offset  # positions filled, the prefix's included
        # a prompt cache entry's logits after its last position (see PromptCache.store)
        self.logits: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.keys[0].size(0)

    def nbytes(self) -> int:
        return sum(t.nelement() * t.element_size() for t in (*self.keys, *self.values))

    def view(self, length: int) -> KVCache:
        """The same buffers, claiming only the first ``length`` positions (a read-only share)."""
        out = KVCache(list(self.keys), list(self.values))
        out.length = length
        return out

    def copy_prefix(self, other: KVCache, length: int) -> None:
        """Fill the first ``length`` positions from ``other`` (a cached prompt)."""
        for mine, theirs in zip(
            (*self.keys, *self.values), (*other.keys, *other.values), strict=True
        ):
            mine[:, :, :length] = theirs[:, :, :length]
        self.length = length

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (finished candidates leave the batch). Copies the filled part."""
        t = self.length - self.offset
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                kept = buf.new_empty((len(rows), *buf.shape[1:]))
                kept[:, :, :t] = buf[rows, :, :t]
                store[i] = kept


class PromptCache:
    """Keys/values of the last few prompts, so that a prompt starting the same way skips
    that part of the prefill (an editor asks again after every keystroke).

    Entries are one-row caches that nobody writes below their prompt's length, so
    threads share them read-only; the table itself is guarded by a lock. Least recently
    used entries go first when there are more than ``entries`` or more than ``max_bytes``.
    """

    def __init__(self, entries: int = 4, max_bytes: int = 256 * 2**20) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._table: OrderedDict[tuple[int, ...], KVCache] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, ids: list[int]) -> tuple[KVCache | None, int]:
        """The entry sharing the longest start with ``ids``, and how many tokens it shares."""
        best, shared = None, 0
        with self._lock:
            for key in self._table:
                n = _common_prefix(key, ids)
                if n > shared:
                    best, shared = key, n
            if best is None:
                return None, 0
            self._table.move_to_end(best)
            return self._table[best], shared

    def store(self, ids: list[int], cache: KVCache, logits: torch.Tensor | None = None) -> None:
        """Keep ``cache``'s first ``len(ids)`` positions for prompts starting with ``ids``,
        and ``logits`` after the last of them: the same prompt again then gets the very
        logits its first call sampled from (prefilling its last position again, alone and
        perhaps in another precision than the whole prompt was, would move them)."""
        if self.entries <= 0 or cache.nbytes() > self.max_bytes:
            return
        entry = cache.view(len(ids))
        entry.logits = None if logits is None else logits.detach().clone()
        with self._lock:
            self._table[tuple(ids)] = entry
            self._table.move_to_end(tuple(ids))
            total = sum(c.nbytes() for c in self._table.values())
            while len(self._table) > self.entries or total > self.max_bytes:
                _, dropped = self._table.popitem(last=False)
                total -= dropped.nbytes()

    def clear(self) -> None:
        with self._lock:
            self._table.clear()


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == tuple(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == tuple(b[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


class GPT2Decoder:
    """Forward passes of a ``GPT2LMHeadModel`` written out over its parameters."""

    # how scripted_gpt2 multiplies the float matrices and splits the fused projection
    _float_kernel = 0  # FLOAT_CONV1D
    _split_kind = 0  # SPLIT_GPT2

    def __init__(self, model: Any) -> None:
        cfg = model.config
        t = model.transformer
        self.n_head = cfg.n_head
        self.n_kv_head = cfg.n_head  # key/value heads (fewer where grouped, see new_cache)
        self.n_embd = cfg.n_embd
        self.head_dim = cfg.n_embd // cfg.n_head
        self.eps = cfg.layer_norm_epsilon
        self.context_length = cfg.n_positions
        self.wte = t.wte.weight  # (V, C)
        self.wpe = t.wpe.weight  # (T_ctx, C)
        self.ln_f = (t.ln_f.weight, t.ln_f.bias)
        self._init_head(model)
        # gelu_new is the tanh approximation; torch has it as one fused kernel.
        self.fast_gelu = cfg.activation_function in ("gelu_new", "gelu_pytorch_tanh")
        self.acts = [block.mlp.act for block in t.h]
        hs = cfg.n_embd // cfg.n_head
        self.layers = []
        for i, block in enumerate(t.h):
            scaling = hs**-0.5 if cfg.scale_attn_weights else 1.0
            if cfg.scale_attn_by_inverse_layer_idx:
                scaling /= float(i + 1)
            self.layers.append(
                _Layer(
                    ln_1=(block.ln_1.weight, block.ln_1.bias),
                    c_attn=(block.attn.c_attn.weight, block.attn.c_attn.bias),
                    c_proj=(block.attn.c_proj.weight, block.attn.c_proj.bias),
                    ln_2=(block.ln_2.weight, block.ln_2.bias),
                    c_fc=(block.mlp.c_fc.weight, block.mlp.c_fc.bias),
                    mlp_proj=(block.mlp.c_proj.weight, block.mlp.c_proj.bias),
                    scaling=scaling,
                )
            )

    def _init_head(self, model: Any) -> None:
        """The output head and the state every decoder starts from (after ``self.wte``)."""
        self.lm_head = model.lm_head.weight  # (V, C), usually tied to wte
        self.lm_bias = getattr(model.lm_head, "bias", None)
        self.lm_head_bf16: torch.Tensor | None = None  # see use_bf16_head
        # per layer {name: packed bf16 matrix} for bf16 prompts; see use_bf16_prompt_weights
        self.bf16_prompt: list[dict[str, PackedBF16]] | None = None
        # see quantize_int8: per layer {name: int8 matrix}, the head's, and their kernel
        self.int8: list[dict[str, Int8Matrix]] | None = None
        self.lm_head_int8: Int8Matrix | None = None
        self.int8_kernel: str | None = None
        self.int8_head_kernel: str | None = None  # the output projection's
        # see choose_int8_prompts: prompts (any rows) read the int8 copies too
        self.int8_prompts = False
        self._compiled: Any = None  # see compile_steps
        # scripted one-token steps by int8, made on first use for the weights they read
        # (quantize_int8 starts again); see LlamaDecoder._scripted_step
        self._scripted: dict[bool, Any] = {}
        self.dtype = self.wte.dtype
        self.device = self.wte.device

    @classmethod
    def supports(cls, model: Any) -> bool:
        """Does this decoder compute ``model`` (see :meth:`why_not`)?"""
        return not cls.why_not(model)

    @classmethod
    def why_not(cls, model: Any) -> str:
        """Empty for a plain GPT-2 LM (no cross-attention) whose modules we know, else what
        this decoder does not cover."""
        if type(model).__name__ != "GPT2LMHeadModel":
            return f"{type(model).__name__} is not a GPT-2 model"
        return gpt2_config_problem(model.config)

    def new_cache(self, rows: int, length: int, prefix: KVCache | None = None) -> KVCache:
        """Room for ``length`` positions of ``rows`` sequences (after ``prefix``, if given):
        the key/value heads only."""
        shape = (rows, self.n_kv_head, length, self.head_dim)
        make = lambda: torch.empty(shape, dtype=self.dtype, device=self.device)  # noqa: E731
        return KVCache([make() for _ in self.layers], [make() for _ in self.layers], prefix)

    def forward(
        self, ids: torch.Tensor, cache: KVCache, *, bf16: bool = False, int8: bool = False
    ) -> torch.Tensor:
        """Logits of the last position of ``ids`` (B, T), appending T positions to ``cache``.

        ``bf16`` runs the blocks' matrix products in bfloat16 (CPU autocast; worth it for
        a long prompt on a CPU with native bf16). Residuals, cache and logits stay in the
        model's dtype. ``int8`` reads the int8 weights (after :meth:`quantize_int8`) for a
        one-token step of at most ``INT8_MAX_ROWS`` rows; callers pass it for generated
        tokens only. Every other call reads them where :attr:`int8_prompts` is set
        (:meth:`choose_int8_prompts`); a prompt gives the same keys and values however it
        was split either way (see :func:`~codeparrot.generation.int8.int8_linear`).
        """
        step = int8 and ids.size(1) == 1 and len(ids) <= INT8_MAX_ROWS
        int8 = self.int8 is not None and (step or self.int8_prompts)
        if bf16 and not int8 and self.bf16_prompt is not None:
            x = self._blocks(ids, cache, packed=True)
        elif bf16:
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                x = self._blocks(ids, cache, int8)
        else:  # entering even a disabled autocast costs a step some microseconds
            x = self._blocks(ids, cache, int8)
        return self._head(self._final_norm(x[:, -1]), int8)  # (B, V)

    def _head(self, last: torch.Tensor, int8: bool = False) -> torch.Tensor:
        """The logits (B, V) of the final-normed last positions ``last`` (B, C)."""
        if int8 and self.lm_head_int8 is not None:
            return int8_linear(last, self.lm_head_int8)
        if self.lm_head_bf16 is not None:
            logits = F.linear(last.to(torch.bfloat16), self.lm_head_bf16)  # (B, V)
            return logits.float() if self.lm_bias is None else logits.float() + self.lm_bias
        return F.linear(last, self.lm_head, self.lm_bias)  # (B, V)

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.n_embd,), *self.ln_f, self.eps)

    def step(self, ids: torch.Tensor, cache: KVCache, *, int8: bool = False) -> torch.Tensor:
        """:meth:`forward` for generated tokens: the compiled step where it applies.

        The compiled step (:meth:`compile_steps`) serves one row without a shared prefix,
        the editor's case; other calls go to the eager :meth:`forward` directly. The
        compiled step never compiles again: a call its guards do not cover (another thread
        count, say) runs eagerly instead of stalling the request for a recompile.
        """
        compiled = self._compiled
        if compiled is None or ids.size(0) != 1 or cache.prefix is not None:
            return self.forward(ids, cache, int8=int8)
        return compiled(ids, cache, int8=int8)

    def compile_steps(self) -> None:
        """torch.compile the one-row, one-token step that :meth:`step` uses.

        Blocks while inductor compiles (10-20 s on 2 CPU cores, less with its on-disk
        cache warm); needs a C++ compiler on a CPU. Shapes are symbolic, so one compile
        serves every prompt length. The step's kernels take the calling thread's
        intra-op thread count, so call this with the count the steps will run with.
        Measured on the tiny preset: the 31 one-token steps of a 32-token completion
        25.9 -> 20.4 ms, with the same logits (RESULTS.md). Not with the ``dynamic`` int8
        kernel (see :meth:`quantize_int8`): its eager steps are the faster.
        """
        if self.int8_kernel == "dynamic":
            # dynamo cannot trace the kernel's packed weights: with a graph break at every
            # product the compiled step ran slower than the eager one, which also beats
            # compiled weight-only steps (164M GPTBigCode, one thread, a shared machine:
            # 26.8 and 27.4 ms against 14-17 ms eager)
            logger.info("compiled steps skipped: the dynamic int8 kernel runs faster eagerly")
            return
        compiled = torch.compile(self.forward, dynamic=True, options={"size_asserts": False})
        with torch.inference_mode():  # as in the engine: its tensors are inference tensors
            cache = self.new_cache(1, 16)
            self.forward(torch.zeros((1, 4), dtype=torch.long, device=self.device), cache)
            token = torch.zeros((1, 1), dtype=torch.long, device=self.device)
            for _ in range(3):  # the first lengths are specialised; the third is generic
                compiled(token, cache, int8=True)  # as the engine calls it
        # run-only: use what was compiled here, never compile again (a per-call setting,
        # unlike torch.compiler.set_stance, which would bind every thread of the process)
        self._compiled = torch._dynamo.run(compiled)

    def prepare_steps(self) -> None:
        """Script the one-token step the engine's steps will take (a fraction of a
        second), so that the first completion does not wait for it."""
        self._scripted_step(self.int8 is not None)

    def _scripted_step(self, int8: bool) -> tuple[Any, tuple[Any, ...]] | None:
        """The scripted one-token blocks (:mod:`codeparrot.generation.scripted_gpt2`) and
        the arguments that follow the cache's, made once per weights (:meth:`quantize_int8`
        starts again), or None where they do not apply or TorchScript is missing."""
        kept = self._scripted.get(int8, False)
        if kept is not False:
            return kept
        made = None
        if self._scriptable(int8):
            function = self._script_steps()
            if function is not None:
                made = (function, self._scripted_arguments(int8))
        self._scripted[int8] = made
        return made

    def _script_steps(self) -> Any:
        """The family's scripted one-token blocks, or None where TorchScript fails."""
        from codeparrot.generation.scripted_gpt2 import script_steps

        return script_steps()

    def _scriptable(self, int8: bool) -> bool:
        if self.dtype != torch.float32 or self.device.type != "cpu" or not self.fast_gelu:
            return False
        if int8:
            if self.int8 is None:
                return False
            kinds = {(m.kernel, m.reduce_range) for layer in self.int8 for m in layer.values()}
            return len(kinds) == 1
        return True

    def _scripted_arguments(self, int8: bool) -> tuple[Any, ...]:
        """The blocks' tensors as :func:`~codeparrot.generation.scripted_gpt2.one_token_blocks`
        takes them (after the input, position and cache)."""
        from codeparrot.generation import scripted_gpt2 as sg

        norms = [[*layer.ln_1, *layer.ln_2] for layer in self.layers]
        weights, scales, biases, packed = [], [], [], []
        kernel, reduce_range = self._float_kernel, True
        for i, layer in enumerate(self.layers):
            if int8:
                mats = [self.int8[i][name] for name in _LINEARS]  # type: ignore[index]
                kernel = sg.DYNAMIC if mats[0].kernel == "dynamic" else sg.WEIGHT_ONLY
                reduce_range = mats[0].reduce_range
                if kernel == sg.DYNAMIC:
                    packed.append([m.packed for m in mats])
                else:
                    weights.append([m.weight for m in mats])
                scales.append([m.scales for m in mats])
                biases.append([m.bias for m in mats])
            else:
                weights.append([getattr(layer, name)[0] for name in _LINEARS])
                biases.append([getattr(layer, name)[1] for name in _LINEARS])
        shape = [self.n_head, self.head_dim, self._split_kind]
        scalings = [layer.scaling for layer in self.layers]
        return (norms, weights, scales, biases, packed, scalings, shape, kernel, reduce_range,
                self.eps)  # fmt: skip

    def use_bf16_head(self) -> None:
        """Keep a bf16 copy of the output projection and use it for the logits.

        The projection is the largest matrix a step reads (vocabulary x width); on a CPU
        with native bf16 the copy halves that traffic and its product is 2-3x faster,
        for logits rounded to bf16 (as on a GPU). Costs vocabulary x width x 2 bytes.
        (For the blocks' matrices see :meth:`use_bf16_prompt_weights`.)
        """
        if self.lm_head.dtype == torch.float32:
            self.lm_head_bf16 = self.lm_head.detach().to(torch.bfloat16)

    def use_bf16_prompt_weights(self) -> bool:
        """Keep bf16 copies of the blocks' matrices, packed for oneDNN, that bf16 prompts
        (:meth:`forward` with ``bf16``) multiply by instead of casting the float32 ones
        under autocast at every prompt (:mod:`~codeparrot.generation.bf16_prompts`).
        Costs two bytes a parameter of the matrices. Returns whether they are kept: not
        off a CPU, for weights not in float32, or where torch lacks the kernel. The
        Llama family's groups (queries, keys and values; gate and up) are one product
        each."""
        if self.device.type != "cpu" or self.dtype != torch.float32:
            return False
        if not packed_bf16_supported():
            return False
        self.bf16_prompt = [
            {name: pack_bf16(w, b) for name, (w, b) in self._int8_sources(i).items()}
            for i in range(len(self.layers))
        ]
        return True

    def quantize_int8(
        self, kernel: str = "auto", rows_cache: Any = None, head_kernel: str | None = None
    ) -> None:
        """Add int8 copies of every matrix (and the output projection) for one-token steps.

        Symmetric, one scale per output channel: the steps read a quarter of the bytes of
        float32 weights. ``kernel`` is one of :data:`~codeparrot.generation.int8.KERNELS`,
        or ``auto``: the faster of them on the first block's matrices, timed here in a few
        milliseconds (:func:`~codeparrot.generation.int8.choose_kernel`). Logits move by
        1-2% of their spread at most (tests bound it); prompts run on the model's own
        weights unless :meth:`choose_int8_prompts` finds the copies faster. Costs a
        quarter of the model's float32 size in memory.
        ``rows_cache`` (a :class:`~codeparrot.generation.int8_cache.RowsCache`) gives the
        int8 rows of an earlier start, or keeps these for the next. ``head_kernel``: the
        output projection's, chosen alike (None: as ``kernel`` says), see
        :data:`~codeparrot.generation.int8.HEAD_PROBE_ROWS`.
        """
        if not int8_supported():
            raise RuntimeError("this torch build has no int8 CPU kernel")
        from codeparrot.generation.threads import cpu_cores

        self.int8_kernel = choose_kernel(self._int8_sources(0), kernel)
        head = {"the output projection": (self.lm_head[:HEAD_PROBE_ROWS], None)}
        self.int8_head_kernel = choose_kernel(head, head_kernel or kernel, "int8 output")
        sources = [self._int8_sources(i) for i in range(len(self.layers))]
        jobs = [(w, b) for layer in sources for w, b in layer.values()]
        jobs.append((self.lm_head, self.lm_bias))
        kept = None if rows_cache is None else rows_cache.load([tuple(w.shape) for w, _ in jobs])
        # the kernel's packing runs on one thread: a matrix per core (0.80 against 1.07 s
        # for a 164M model on 2 cores), most of a language server's start after its imports
        inference = torch.is_inference_mode_enabled()  # per thread: the workers take the caller's

        def quantize(i: int) -> tuple[tuple[torch.Tensor, torch.Tensor], Int8Matrix]:
            weight, bias = jobs[i]
            with torch.inference_mode(inference):
                rows = kept[i] if kept is not None else quantize_rows(weight)
                chosen = self.int8_head_kernel if i == len(jobs) - 1 else self.int8_kernel
                return rows, pack_rows(*rows, bias, chosen)

        # the largest matrices first (the output projection is a quarter of a 164M model's
        # packing), so that no core is left packing one alone at the end
        order = sorted(range(len(jobs)), key=lambda i: -jobs[i][0].numel())
        with ThreadPoolExecutor(max_workers=cpu_cores()) as pool:
            packed = dict(zip(order, pool.map(quantize, order), strict=True))
        results = [packed[i] for i in range(len(jobs))]
        if rows_cache is not None and kept is None:
            rows_cache.store([rows for rows, _ in results])
        done = iter(matrix for _, matrix in results)
        self.int8 = [{name: next(done) for name in layer} for layer in sources]
        self.lm_head_int8 = next(done)
        self._scripted = {}

    def choose_int8_prompts(self, bf16: bool, kept: bool | None = None) -> None:
        """Read prompts on the int8 copies too (after :meth:`quantize_int8`) where the first
        block's products of ``PROMPT_PROBE_ROWS`` rows take at most ``PROMPT_INT8_SHARE``
        of the time they take as prompts read them otherwise (in bf16 under autocast with
        ``bf16``): timed here in some 50 ms, one log line says which and the figures.

        Measured on an AMD EPYC (Zen 4, VNNI), 2 threads (``bench/int8_prompts.py``,
        RESULTS.md): prompts of 256 and 768 tokens took 0.72x and 0.94x the time of bf16
        ones for a 164M GPTBigCode model (attention is the rest), 0.65x and 0.74x for a
        0.5B Qwen2 one; the quickstart model's loss on code it never saw rose by 0.01%.
        Where bf16 products are the faster (a CPU with AMX may be such a one), prompts
        keep them. ``kept``: the answer of an earlier start here (nothing is timed).
        """
        if self.int8 is None:
            raise RuntimeError("choose_int8_prompts needs quantize_int8 first")
        if kept is not None:
            self.int8_prompts = kept
            return
        self.int8_prompts = int8_prompts_faster(self._int8_sources(0), self.int8[0], bf16)

    def _int8_sources(self, i: int) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
        """Layer ``i``'s matrices for :meth:`quantize_int8`: name -> weight (out, in), bias."""
        layer = self.layers[i]
        return {
            name: (self._out_in(getattr(layer, name)[0]), getattr(layer, name)[1])
            for name in _LINEARS
        }

    @staticmethod
    def _out_in(weight: torch.Tensor) -> torch.Tensor:
        """A block matrix as (out, in), the int8 kernel's layout (Conv1D keeps (in, out))."""
        return weight.t()

    def _split_qkv(self, qkv: torch.Tensor, B: int, T: int) -> tuple[torch.Tensor, ...]:
        """The fused projection's output (B*T, 3C) -> q, k, v, each (B, nh, T, hs)."""
        return qkv.view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)

    def _linear(
        self, x: torch.Tensor, i: int, name: str, layer: _Layer, int8: bool
    ) -> torch.Tensor:
        weight, bias = getattr(layer, name)
        if int8:
            return int8_linear(x, self.int8[i][name])  # type: ignore[index]
        return torch.addmm(bias, x, weight)

    def _packed_linear(
        self, x: torch.Tensor, i: int, name: str, layer: _Layer, int8: bool
    ) -> torch.Tensor:
        """:meth:`_linear` of a bf16 prompt on the packed copies (use_bf16_prompt_weights)."""
        return packed_linear(x, self.bf16_prompt[i][name])  # type: ignore[index]

    def _blocks(
        self, ids: torch.Tensor, cache: KVCache, int8: bool = False, packed: bool = False
    ) -> torch.Tensor:
        """The blocks' output (B, T, C) after ``ids``, their keys/values appended to
        ``cache``; ``packed``: the products in bf16 on :attr:`bf16_prompt`'s copies."""
        B, T = ids.shape
        t0 = cache.length
        t1 = t0 + T
        C = self.n_embd
        x = F.embedding(ids, self.wte) + self.wpe[t0:t1]  # (B, T, C)
        linear = self._packed_linear if packed else self._linear
        if T == 1 and cache.prefix is None and not torch.is_autocast_enabled(self.device.type):
            # one new token per row: the same ops as one TorchScript function, where it applies
            scripted = None if torch.compiler.is_compiling() else self._scripted_step(int8)
            if scripted is not None:
                function, arguments = scripted
                x = function(x.view(B, C), t0, cache.keys, cache.values, *arguments)
                cache.length = t1
                return x.view(B, 1, C)
        for i, layer in enumerate(self.layers):
            h = F.layer_norm(x, (C,), *layer.ln_1, self.eps)
            qkv = linear(h.view(B * T, C), i, "c_attn", layer, int8)  # (B*T, 3C)
            q, k, v = self._split_qkv(qkv, B, T)  # (B, nh, T, hs); k, v (B, nkv, T, hs)
            y = attend(q, k, v, cache, i, t0, layer.scaling)  # (B, nh, T, hs)
            y = y.transpose(1, 2).reshape(B * T, C)  # (B*T, C)
            x = x + linear(y, i, "c_proj", layer, int8).view(B, T, C)
            h = F.layer_norm(x, (C,), *layer.ln_2, self.eps).view(B * T, C)
            if packed and self.fast_gelu:  # GELU on the product's accumulators
                fc = self.bf16_prompt[i]["c_fc"]  # type: ignore[index]
                h = packed_linear(h, fc, gelu_tanh=True)  # (B*T, 4C)
            else:
                h = linear(h, i, "c_fc", layer, int8)  # (B*T, 4C)
                h = F.gelu(h, approximate="tanh") if self.fast_gelu else self.acts[i](h)
            x = x + linear(h, i, "mlp_proj", layer, int8).view(B, T, C)
        cache.length = t1
        return x


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: KVCache,
    i: int,
    t0: int,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of layer ``i``'s new positions ``t0:t0+T`` over the cache, after storing
    their keys and values there. ``q`` (B, nh, T, hs), ``k``, ``v`` (B, nkv, T, hs) ->
    (B, nh, T, hs). With fewer key/value heads than query heads (grouped or multi-query
    attention) each key/value head serves ``nh // nkv`` consecutive query heads. With a
    ``window``, a position sees only the ``window`` positions up to itself (a sliding
    window, as transformers masks it)."""
    T = q.size(2)
    t1 = t0 + T
    o = cache.offset  # positions held by a shared prefix (0 without one)
    cache.keys[i].narrow(2, t0 - o, T).copy_(k)
    cache.values[i].narrow(2, t0 - o, T).copy_(v)
    start = 0 if window is None else max(0, t0 + 1 - window)  # first position seen
    if cache.prefix is not None and t0 > 0:  # one new token per row after a shared prompt
        kp, vp = cache.prefix.keys[i], cache.prefix.values[i]
        a, b = min(start, o), max(start - o, 0)
        return _shared_prefix_attention(
            q,
            (kp[:, :, a:o], vp[:, :, a:o]),
            (cache.keys[i][:, :, b : t1 - o], cache.values[i][:, :, b : t1 - o]),
            scale,
        )
    if t0 == 0:  # the prompt (or its first chunk): causal attention over itself
        keys, values, start = k, v, 0
    else:
        keys = cache.keys[i].narrow(2, start, t1 - start)  # (B, nkv, t1 - start, hs)
        values = cache.values[i].narrow(2, start, t1 - start)
        if keys.dtype != q.dtype:  # under autocast
            keys, values = keys.to(q.dtype), values.to(q.dtype)
    if T == 1:  # one new token sees every position kept: no mask
        return _grouped_query(q, keys, values, scale)
    grouped = keys.size(1) != q.size(1)
    if window is None or t1 <= window:
        if t0 == 0:
            return F.scaled_dot_product_attention(
                q, keys, values, is_causal=True, scale=scale, enable_gqa=grouped
            )
        # a chunk after cached positions: a causal mask offset by the t0 before it
        mask = torch.ones(T, t1, dtype=torch.bool, device=q.device).tril(t0)
    else:  # query t0 + r sees key positions p with t0 + r - window < p <= t0 + r
        rows = torch.arange(t0, t1, device=q.device)[:, None]
        cols = torch.arange(start, t1, device=q.device)[None]
        mask = (cols <= rows) & (cols > rows - window)
    return F.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, scale=scale, enable_gqa=grouped
    )


def _grouped_query(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
) -> torch.Tensor:
    """One query per row and head (``q`` (B, nh, 1, hs)) over keys/values (B, nkv, S, hs):
    the query heads of a key/value head become its ``nh // nkv`` queries, so grouped
    keys are read once, never repeated."""
    B, nh, _, hs = q.shape
    nkv = keys.size(1)
    if nkv == nh:  # one query per key/value head: nothing to group
        return F.scaled_dot_product_attention(q, keys, values, scale=scale)
    grouped = q.reshape(B, nkv, nh // nkv, hs)  # (B, nkv, g, hs)
    y = F.scaled_dot_product_attention(grouped, keys, values, scale=scale)
    return y.reshape(B, nh, 1, hs)


def _shared_prefix_attention(
    q: torch.Tensor,
    prefix: tuple[torch.Tensor, torch.Tensor],
    own: tuple[torch.Tensor, torch.Tensor],
    scale: float,
) -> torch.Tensor:
    """Attention of one new token per row over a prefix every row shares, then its own past.

    ``q`` (B, nh, 1, hs); prefix keys/values (1, nkv, P, hs); own (B, nkv, S, hs). The
    rows (and the query heads of each key/value head) become the B x g queries of the
    single prefix sequence, so its keys and values are read once for the batch; one
    softmax over both score blocks keeps the result exact.
    """
    (kp, vp), (ks, vs) = prefix, own
    B, nh, _, hs = q.shape
    nkv, P = kp.size(1), kp.size(2)
    g = nh // nkv
    grouped = q.reshape(B, nkv, g, hs)  # (B, nkv, g, hs)
    stacked = grouped.transpose(0, 1).reshape(1, nkv, B * g, hs)  # the rows as queries
    scores_prefix = (stacked @ kp.transpose(-1, -2)).view(nkv, B, g, P).transpose(0, 1)
    scores_own = grouped @ ks.transpose(-1, -2)  # (B, nkv, g, S)
    weights = torch.softmax(torch.cat([scores_prefix, scores_own], dim=-1) * scale, dim=-1)
    w_prefix, w_own = weights[..., :P], weights[..., P:]  # (B, nkv, g, P), (B, nkv, g, S)
    stacked_w = w_prefix.transpose(0, 1).reshape(1, nkv, B * g, P)
    from_prefix = (stacked_w @ vp).view(nkv, B, g, hs).transpose(0, 1)  # (B, nkv, g, hs)
    return (from_prefix + w_own @ vs).reshape(B, nh, 1, hs)
