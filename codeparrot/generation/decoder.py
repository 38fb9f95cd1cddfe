"""The decoder side of the engine: token ids to next-token logits.

:class:`Decoder` runs a prompt (``prefill``) and one-token steps (``decode``) over the lean
forward of :mod:`codeparrot.generation.lean` (GPT-2, GPTBigCode, the Llama family and
Qwen3; optionally int8 and compiled steps), or over any causal LM's ``transformers``
forward. It owns the thread policy: how many intra-op threads a prompt and a step get
(:mod:`codeparrot.generation.threads` measures them).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.generation.config import QUANTIZE
from codeparrot.generation.threads import intra_op_threads

logger = logging.getLogger(__name__)

# Prompt chunks at least this long are prefilled with bf16 matrix products on a CPU
# that has them natively (shorter ones do not pay for the casts).
BF16_PREFILL_MIN_TOKENS = 64


class Decoder:
    """A loaded model's forward passes: prefill and one-token steps, on its threads.

    ``bf16_prefill``: run long prompts' matrix products in bf16 (CPU autocast; for the
    GPT-2 family with ``quantize="none"``, on bf16 copies packed once for oneDNN, see
    :mod:`~codeparrot.generation.bf16_prompts`), and the output projection of every step
    from a bf16 copy (lean path).
    ``prompt_cache_entries``: recent prompts whose keys/values are kept for reuse.
    ``reuse_prompt_starts``: a prompt that starts as a kept one prefills only the rest
    (an editor's latency while typing). Off, a kept prompt is reused only when it comes
    again whole, so that a prompt's logits never depend on what ran before: prefilling
    the rest after a reused start splits the prompt elsewhere than one pass does, and
    the matrix kernels round rows differently for each split (a logit moves in its last
    bits, and bf16 logits tie often, so greedy text can change).
    ``lean_gpt2``: use the lean decoder (:mod:`codeparrot.generation.lean`) for the
    models it covers (``False``: the ``transformers`` forward, as for others).
    ``decode_threads``: intra-op threads for the one-token steps (``None``: torch's
    setting). Prompts use :attr:`prompt_threads` (``None``: torch's setting). A step is
    a few dozen small kernels; on a busy machine a second thread mostly waits for its
    turn (:func:`codeparrot.generation.threads.tune_decode_threads` measures both).
    ``quantize``: ``"int8"`` runs the one-token steps on int8 copies of the matrices
    (the lean decoder's models, on a CPU), through whichever of torch's two int8 kernels
    a probe finds faster, for the blocks' matrices and again for the output projection
    (:mod:`codeparrot.generation.int8`): 2-4x faster steps than float32, logits within
    ~2% of their spread; prompts read them too where a second probe finds that faster
    than bf16. ``"none"``: the model's own weights.
    ``int8_rows_cache``: a :class:`~codeparrot.generation.int8_cache.RowsCache` that
    keeps the int8 rows of these weights from one start to the next.
    ``kept_speeds``: a :class:`~codeparrot.generation.speeds_cache.KeptSpeeds` whose
    answers of an earlier start here replace the probes; answers measured now are
    kept in it for the next.
    ``cuda_graphs``: one-token steps of static shape (a fixed-capacity cache, the
    position a device tensor) captured once as a CUDA graph and replayed
    (:mod:`codeparrot.generation.static_step`): the lean decoder's GPT-2 and Llama-family
    models in their own weights; off by default until measured. On a CPU the same static
    steps run uncaptured (for tests: slower than the eager ones there).
    """

    def __init__(
        self,
        model: Any,
        *,
        vocab_size: int,
        path: Path | None = None,
        bf16_prefill: bool = False,
        prompt_cache_entries: int = 4,
        reuse_prompt_starts: bool = False,
        lean_gpt2: bool = True,
        decode_threads: int | None = None,
        quantize: str = "none",
        int8_rows_cache: Any = None,
        kept_speeds: Any = None,
        cuda_graphs: bool = False,
    ) -> None:
        from codeparrot.generation.gpt2 import PromptCache
        from codeparrot.generation.lean import lean_decoder

        self.model = model
        self.path = path
        self.vocab_size = vocab_size  # ids the tokenizer can decode (<= the model's)
        self.device = next(model.parameters()).device
        # the lean decoder of the models it covers (codeparrot.generation.lean)
        self.lean = lean_decoder(model) if lean_gpt2 else None
        self.bf16_prefill = bf16_prefill
        self.decode_threads = decode_threads
        # intra-op threads for prompts (None: the caller's setting); see generation.threads
        self.prompt_threads: int | None = None
        self.kept_speeds = kept_speeds
        if bf16_prefill and self.lean is not None:
            self.lean.use_bf16_head()
            if quantize == "none":  # int8 engines' prompts may read the int8 copies
                self.lean.use_bf16_prompt_weights()
        if quantize not in QUANTIZE:
            raise ConfigError(f"quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")
        self.quantize = quantize
        if quantize == "int8":
            self.enable_int8(int8_rows_cache)
        self.prompt_cache = PromptCache(prompt_cache_entries)
        # the static, captured steps where asked for (see static_step.StaticSlots)
        self.static_slots: Any = None
        if cuda_graphs:
            from codeparrot.generation.static_step import StaticSlots, static_problem

            problem = static_problem(self.lean)
            if problem:
                raise ConfigError(f"cuda_graphs: {problem}")
            self.static_slots = StaticSlots(self.lean)
        self.reuse_prompt_starts = reuse_prompt_starts
        # see compile_steps: set once the compile has finished, well or not
        self.steps_compiled = threading.Event()
        self.compile_error: BaseException | None = None

    def steps(
        self, ids: list[int], n: int, max_new_tokens: int, reuse_start: bool | None = None
    ) -> Any:
        """The forward steps of one call: ``prefill()``, ``decode(next_ids)``, ``keep(rows,
        next_ids)`` and ``cached_tokens``. ``reuse_start``: may the prompt reuse a kept
        prompt's start (None: :attr:`reuse_prompt_starts`)."""
        if self.lean is None:
            return HFSteps(self.model, ids, n, self.device)
        if self.static_slots is not None:
            from codeparrot.generation.static_step import StaticSteps

            positions = len(ids) + max_new_tokens
            slot = self.static_slots.acquire(n, positions)
            if slot is not None:
                prompt = LeanSteps(self, ids, 1, 0, reuse_start)  # the prompt alone
                return StaticSteps(prompt, slot, n, positions)
            logger.debug(
                "eager steps for %d rows of %d positions: no free static cache fits", n, positions
            )
        return LeanSteps(self, ids, n, max_new_tokens, reuse_start)

    def _why_not_lean(self) -> str:
        from codeparrot.generation.lean import why_no_lean_decoder

        return why_no_lean_decoder(self.model) or "turned off for this engine"

    def enable_int8(self, rows_cache: Any = None) -> None:
        """One-token steps (and prompts, where a probe finds that faster) on int8 copies."""
        from codeparrot.generation.gpt2 import int8_supported
        from codeparrot.generation.int8 import KERNELS, kernel_supported

        if self.lean is None:
            raise ConfigError(f"quantize 'int8' needs the lean decode path: {self._why_not_lean()}")
        if self.device.type != "cpu":
            raise ConfigError(f"quantize 'int8' is for CPU decoding; the model is on {self.device}")
        if not int8_supported():
            raise ConfigError(
                "quantize 'int8' needs one of torch's int8 CPU kernels (quantized::"
                "linear_dynamic or aten._weight_int8pack_mm), which this torch build lacks"
            )
        # the probes' answers of an earlier start here, where kept (speeds_cache)
        speeds = self.kept_speeds
        kernel, head = (
            speeds.get(name) if speeds is not None else None
            for name in ("int8 kernel", "int8 output kernel")
        )
        if kernel not in KERNELS or not kernel_supported(kernel):
            kernel = None
        if head not in KERNELS or not kernel_supported(head):
            head = None
        self.lean.quantize_int8(kernel or "auto", rows_cache=rows_cache, head_kernel=head or "auto")
        prompts = speeds.get("int8 prompts") if speeds is not None else None
        if not isinstance(prompts, bool):
            prompts = None
        self.lean.choose_int8_prompts(self.bf16_prefill, prompts)
        for name, kept, answer, line in (
            ("int8 kernel", kernel, self.lean.int8_kernel, "int8 steps: the %s kernel"),
            ("int8 output kernel", head, self.lean.int8_head_kernel, "int8 output: the %s kernel"),
            ("int8 prompts", prompts, self.lean.int8_prompts, "int8 prompts: %s"),
        ):
            if kept is not None:
                shown = answer if isinstance(answer, str) else "yes" if answer else "no"
                logger.info(line + " (as an earlier start here measured)", shown)
            elif speeds is not None:
                speeds.put(name, answer)

    @property
    def can_compile_steps(self) -> bool:
        """Does :meth:`compile_steps` apply (a model on the lean decode path)?"""
        return self.lean is not None

    def compile_steps_if_possible(self) -> bool:
        """:meth:`compile_steps` in the background where it applies; else one log line
        saying why not. Returns whether a compile was started."""
        if self.lean is None:
            logger.info(
                "--compile skipped for %s: compiled steps need the lean decoder (%s)",
                self.path or "the model",
                self._why_not_lean(),
            )
            return False
        self.compile_steps()
        return True

    def compile_steps(self, *, background: bool = True) -> threading.Thread | None:
        """torch.compile the one-token step of single completions (lean decoder models).

        A server's warm-up: inductor takes 10-20 s of CPU on 2 cores, so by default it
        compiles in a daemon thread while requests keep being served by the eager step;
        each request switches over once :attr:`steps_compiled` is set. A failed compile
        (no C++ compiler, an unsupported torch) leaves the eager step in place and the
        exception in :attr:`compile_error`. Measured on the tiny preset (weight-only int8
        steps): a 32-token completion's steps 21% faster, the same tokens (RESULTS.md).
        Steps on the dynamic int8 kernel stay eager (the compiler cannot trace its packed
        weights, and they are faster eager than compiled weight-only ones).
        ``background=False`` compiles in the calling thread and raises on failure.
        """
        if self.lean is None:
            raise ConfigError(f"compiled steps need the lean decode path: {self._why_not_lean()}")
        import torch

        decoder = self.lean
        # the compiled kernels keep the thread count they were built with, and the
        # guards refuse another: the steps' own count, or else the caller's
        threads = self.decode_threads or torch.get_num_threads()

        def work() -> None:
            try:
                with intra_op_threads(threads):
                    decoder.compile_steps()
            except Exception as e:  # inductor and the C++ toolchain raise many types
                self.compile_error = e
                if not background:
                    raise
            finally:
                self.steps_compiled.set()

        if not background:
            work()
            return None
        thread = threading.Thread(target=work, name="codeparrot-compile", daemon=True)
        thread.start()
        return thread


class LeanSteps:
    """Prefill and decode steps over :class:`~codeparrot.generation.gpt2.GPT2Decoder`."""

    def __init__(
        self,
        owner: Decoder,
        ids: list[int],
        n: int,
        max_new_tokens: int,
        reuse_start: bool | None = None,
    ) -> None:
        self.decoder, self.ids, self.n = owner.lean, ids, n
        self.prompts = owner.prompt_cache
        self.reuse_starts = owner.reuse_prompt_starts if reuse_start is None else reuse_start
        self.bf16_prefill = owner.bf16_prefill
        self.length = len(ids) + max_new_tokens
        self.cache: Any = None
        self.cached_tokens = 0

    def prefill(self) -> Any:
        one = self.decoder.new_cache(1, self.length)
        earlier, shared = self.prompts.lookup(self.ids)
        if (
            earlier is not None
            and earlier.logits is not None
            and earlier.length == shared == len(self.ids)
        ):  # the same prompt again: its keys/values and the logits its first call had
            one.copy_prefix(earlier, shared)
            self.cached_tokens = shared
            logits = earlier.logits.clone()
        elif self.reuse_starts:
            logits = self._run_prompt(one, earlier, shared)
        else:  # the whole prompt in one pass, as a first call of it runs it
            logits = self._run_prompt(one, None, 0)
        if self.n == 1:
            self.cache = one
        else:  # the n rows share the prompt's keys/values and keep only their own
            prompt = one.view(len(self.ids))
            self.cache = self.decoder.new_cache(self.n, self.length - len(self.ids), prompt)
        return logits.float().expand(self.n, -1)

    def _run_prompt(self, one: Any, earlier: Any, shared: int) -> Any:
        """Prefill the prompt into ``one`` after the ``shared`` positions ``earlier`` holds;
        the logits after its last position (kept with its keys/values for a repeat)."""
        import torch

        shared = min(shared, len(self.ids) - 1)  # the last position must run: its logits
        if earlier is not None and shared > 0:
            one.copy_prefix(earlier, shared)
        self.cached_tokens = shared
        rest = torch.tensor([self.ids[shared:]], device=self.decoder.device)
        bf16 = self.bf16_prefill and rest.size(1) >= BF16_PREFILL_MIN_TOKENS
        logits = self.decoder.forward(rest, one, bf16=bf16)
        self.prompts.store(self.ids, one, logits)
        return logits

    def decode(self, next_ids: Any) -> Any:
        return self.decoder.step(next_ids.unsqueeze(-1), self.cache, int8=True).float()

    def keep(self, rows: list[int], next_ids: Any) -> Any:
        import torch

        index = torch.tensor(rows, device=next_ids.device)
        self.cache.select(index)
        return next_ids[index]


class HFSteps:
    """The same steps over a ``transformers`` forward (any causal LM)."""

    cached_tokens = 0

    def __init__(self, model: Any, ids: list[int], n: int, device: Any) -> None:
        self.model, self.ids, self.n, self.device = model, ids, n, device
        self.past: Any = None  # the model's own Cache object after the first step

    def _forward(self, input_ids: Any) -> Any:
        name = cache_argument(self.model)
        cache = {name: self.past}
        try:
            out = self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **cache)
        except TypeError:  # an older model class without logits_to_keep
            out = self.model(input_ids=input_ids, use_cache=True, **cache)
        self.past = getattr(out, name)
        return out.logits[:, -1, :].float()

    def prefill(self) -> Any:
        import torch

        input_ids = torch.tensor([self.ids], device=self.device)
        logits = self._forward(input_ids)
        if self.n > 1:
            if hasattr(self.past, "batch_repeat_interleave"):
                self.past.batch_repeat_interleave(self.n)
            else:
                self.past = None
                return self._forward(input_ids.expand(self.n, -1))
        return logits.expand(self.n, -1)

    def decode(self, next_ids: Any) -> Any:
        return self._forward(next_ids.unsqueeze(-1))

    def keep(self, rows: list[int], next_ids: Any) -> Any:
        import torch

        index = torch.tensor(rows, device=next_ids.device)
        self.past = select_rows(self.past, index)
        return next_ids[index]


def cache_argument(model: Any) -> str:
    """The name under which the model's forward takes and returns its key/value cache:
    ``cache`` since transformers 5.24 (``past_key_values`` is deprecated there and goes in
    5.40), ``past_key_values`` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def select_rows(past: Any, rows: Any) -> Any:
    """Keep only ``rows`` of a key/value cache (a transformers Cache or legacy tuples)."""
    if hasattr(past, "batch_select_indices"):
        past.batch_select_indices(rows)
        return past
    if hasattr(past, "reorder_cache"):
        past.reorder_cache(rows)
        return past
    return tuple(tuple(t[rows] for t in layer) for layer in past)
