"""The one inference engine: load a checkpoint, sample, stop per sequence, stream, cancel.

The playground, the language server and the HumanEval harness all call
:class:`Engine`; none of them talks to ``transformers`` directly.

A call runs ``prefill -> loop(sample, detokenize, check stops, drop finished rows)``.
The prompt is run once for one row and its keys/values are shared by the ``n``
candidates; GPT-2, GPTBigCode (StarCoder), Llama-family (CodeLlama, DeepSeek-Coder,
Qwen2.5-Coder, Mistral, Starcoder2) and Qwen3 checkpoints use the lean forward of
:mod:`codeparrot.generation.lean`, any other causal LM the ``transformers`` forward. Text is detokenized incrementally
(only the new token's bytes), so a step costs the same at token 5 and token 500.

Token healing (on by default): the prompt's last token is taken off and the new tokens
must write its text again before anything else: the first may be any token whose text
starts with it, or one whose text it starts with where the tokenizer itself splits the
text there when more follows (then the next must go on with the rest, and so on). A
prompt cut at a line break, or in the middle of a word, otherwise ends on a token that
rarely ended such text in training; and the usual tokens of what follows may split the
healed text differently (a line's indentation ``"\n    "`` is one token at the end of a
prompt, but ``"\n   "`` + ``" return"`` in the middle of code). A shorter start the
tokenizer never splits off (``")"`` of ``"):"``) would give the model a split it never
saw in training: a small model then repeated ``":"`` to the end of the line.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.fim import (
    BARE_MARKER,
    PSM,
    FimPrompter,
    detect_template,
    leading_special_ids,
    resolve_order,
)
from codeparrot.generation.config import (
    DTYPES,
    LOAD_QUANTIZE,
    QUANTIZE,
    GenerationConfig,
)
from codeparrot.generation.sampling import draw as _draw  # noqa: F401 (see below)
from codeparrot.generation.sampling import sample_next
from codeparrot.generation.sampling import sample_next as _sample  # noqa: F401
from codeparrot.generation.sampling import sample_nucleus_sorted as _sample_nucleus_sorted  # noqa: F401
from codeparrot.generation.stopping import HUMANEVAL_STOP_SEQUENCES as HUMANEVAL_STOP_SEQUENCES
from codeparrot.generation.stopping import StopStrings
from codeparrot.generation.stopping import first_block as first_block
from codeparrot.options import FIM_SUFFIX_SHARE

# The names above imported "as" something were this module's before the engine was split
# by job; they stay importable from here (the sampling tests use the private ones).

logger = logging.getLogger(__name__)


# A prompt longer than its budget loses a multiple of this many tokens at the start, so
# that the prompts of a growing document keep the same first token (and their cached
# keys/values) until it has grown by this much.
TRUNCATION_STRIDE = 64
# what may follow a healed text, for the tokenizer to show where it splits it (a word, a
# space and a word, a line break, a digit, punctuation): Engine._split_starts
HEAL_FOLLOWERS = ("x", " x", "\n", "1", "(", ".", ":", " ")

# Prompt chunks at least this long are prefilled with bf16 matrix products on a CPU
# that has them natively (shorter ones do not pay for the casts).
BF16_PREFILL_MIN_TOKENS = 64


@dataclass
class Completion:
    """One finished candidate."""

    text: str
    finish_reason: str  # "stop" | "eos" | "length" | "cancelled"
    prompt_tokens: int
    new_tokens: int
    seconds: float
    seed: int | None = None
    prompt_truncated: bool = False
    prompt_cached_tokens: int = 0  # prompt tokens whose keys/values came from an earlier call
    prompt_seconds: float = 0.0  # of ``seconds``: reading the prompt (its tokens not cached)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class StreamEvent:
    """New text for candidate ``index``; the last event of a candidate has ``completion``."""

    index: int
    delta: str
    completion: Completion | None = None

    @property
    def done(self) -> bool:
        return self.completion is not None


@dataclass
class _Candidate:
    decoder: Any  # an incremental detokenizer (tokenizers.decoders.DecodeStream) or None
    ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: int = 0  # characters already streamed
    finish_reason: str | None = None
    stop_at: int | None = None  # character index where the text ends
    heal_len: int = 0  # characters of a healed prompt's last token, decoded with the ids
    skip: int = 0  # of those, characters not yet dropped from the streamed text
    heal_rest: str = ""  # of those, text the next tokens must still write


@dataclass
class _Run:
    """One call of :meth:`Engine.stream` under way."""

    seed: int
    generator: Any  # torch.Generator
    started: float
    cands: list[_Candidate]
    stops: StopStrings
    ends: frozenset[int]  # token ids that end a candidate
    prompt_tokens: int
    truncated: bool
    step: Any  # _GPT2Steps | _HFSteps
    prompt_seconds: float = 0.0  # the prefill's


def _ends_in_word(text: str) -> bool:
    """Does ``text`` end inside an identifier or a number (a letter, digit or underscore)?"""
    return bool(text) and (text[-1].isalnum() or text[-1] == "_")


class Engine:
    """A loaded causal LM and its tokenizer, shared by any number of callers.

    Calls do not mutate the engine (each has its own cache and random generator), so
    one instance serves concurrent threads without copying weights.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        path: Path | None = None,
        bf16_prefill: bool = False,
        prompt_cache_entries: int = 4,
        lean_gpt2: bool = True,
        decode_threads: int | None = None,
        quantize: str = "none",
        infills: bool | None = None,
        own_checkpoint: bool = False,
        int8_rows_cache: Any = None,
        kept_speeds: Any = None,
    ) -> None:
        """Wrap a loaded model; :meth:`load` is the usual way in.

        ``bf16_prefill``: run long prompts' matrix products in bf16 (CPU autocast), and
        the output projection of every step from a bf16 copy (GPT-2 path).
        ``prompt_cache_entries``: recent prompts whose keys/values are kept for reuse.
        ``lean_gpt2``: use the lean decoder (:mod:`codeparrot.generation.lean`) for the
        models it covers (``False``: the ``transformers`` forward, as for others).
        ``decode_threads``: intra-op threads for the one-token steps (``None``: torch's
        setting). Prompts use :attr:`prompt_threads` (``None``: torch's setting). A step is
        a few dozen small kernels; on a busy machine a second thread mostly waits for its
        turn (:func:`codeparrot.generation.threads.tune_decode_threads` measures both).
        ``infills``: whether the model learnt fill-in-the-middle (None: it did if its
        tokenizer has the sentinels). A model that did not is never sent a suffix
        (:attr:`fim` is None) even when its tokenizer has the sentinels.
        ``own_checkpoint``: trained here (FIM order ``auto`` is then SPM, see
        :func:`codeparrot.fim.resolve_order`).
        ``quantize``: ``"int8"`` runs the one-token steps on int8 copies of the matrices
        (the lean decoder's models, on a CPU), through whichever of torch's two int8 kernels
        a probe finds faster (:mod:`codeparrot.generation.int8`): 2-4x faster steps than
        float32, logits within ~2% of their spread; prompts read them too where a second
        probe finds that faster than bf16 (``GPT2Decoder.choose_int8_prompts``).
        ``"none"``: the model's own weights.
        ``int8_rows_cache``: a :class:`~codeparrot.generation.int8_cache.RowsCache` that
        keeps the int8 rows of these weights from one start to the next (:meth:`load`
        gives one for a checkpoint read by the lean load).
        ``kept_speeds``: a :class:`~codeparrot.generation.speeds_cache.KeptSpeeds` whose
        answers of an earlier start here replace the probes (:meth:`load` gives one on a
        CPU); answers measured now are kept in it for the next.
        """
        from codeparrot.generation.gpt2 import PromptCache
        from codeparrot.generation.lean import lean_decoder

        self.model = model
        self.tokenizer = tokenizer
        self.path = path
        self.device = next(model.parameters()).device
        self.context_length = int(
            getattr(model.config, "n_positions", None)
            or getattr(model.config, "max_position_embeddings", 1024)
        )
        eos = tokenizer.eos_token_id
        self.eos_token_id: int | None = int(eos) if eos is not None else None
        # the family's fill-in-the-middle template found in the tokenizer (its tokens are
        # never text, they end a completion), and the same where the model learnt to use
        # it, else None: a suffix needs it (or an explicit --fim-tokens)
        self.sentinels: FimPrompter | None = detect_template(tokenizer)
        self.fim: FimPrompter | None = self.sentinels if infills is not False else None
        self.own_checkpoint = own_checkpoint
        # ids a prompt starts with where the tokenizer's own post-processor adds them (BOS)
        self.bos_ids: list[int] = list(leading_special_ids(tokenizer))
        # ids that end a completion: every end id of generation_config.json, and every
        # special token (a special token's text is never a completion's)
        self.end_ids: frozenset[int] = _end_ids_of(model, self.eos_token_id)
        self.special_ids: frozenset[int] = _special_ids(tokenizer) | self.end_ids
        # the lean decoder of the models it covers (codeparrot.generation.lean)
        self._gpt2 = lean_decoder(model) if lean_gpt2 else None
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        # a token decoded before the new ones, its text then dropped (see _decode_anchor)
        self._anchor: int | None = _decode_anchor(tokenizer)
        self.bf16_prefill = bf16_prefill
        self.decode_threads = decode_threads
        # intra-op threads for prompts (None: the caller's setting); see generation.threads
        self.prompt_threads: int | None = None
        # milliseconds a prompt token takes, where measured (the language server does at
        # load: generation.threads.time_prompt); None: not measured
        self.prompt_ms_per_token: float | None = None
        self.kept_speeds = kept_speeds
        self.vocab_size = len(tokenizer)  # ids the tokenizer can decode (<= the model's)
        if bf16_prefill and self._gpt2 is not None:
            self._gpt2.use_bf16_head()
        if quantize not in QUANTIZE:
            raise ConfigError(f"quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")
        self.quantize = quantize
        if quantize == "int8":
            self._enable_int8(int8_rows_cache)
        self.prompt_cache = PromptCache(prompt_cache_entries)
        # see compile_steps: set once the compile has finished, well or not
        self.steps_compiled = threading.Event()
        self.compile_error: BaseException | None = None
        self._table: tuple[list[str], list[int]] | None = None  # see _token_table
        self._table_lock = threading.Lock()
        self._splits: dict[str, frozenset[int]] = {}  # see _split_starts

    def _enable_int8(self, rows_cache: Any = None) -> None:
        from codeparrot.generation.gpt2 import int8_supported
        from codeparrot.generation.int8 import KERNELS, kernel_supported
        from codeparrot.generation.lean import why_no_lean_decoder

        if self._gpt2 is None:
            raise ConfigError(
                "quantize 'int8' needs the lean decode path: "
                f"{why_no_lean_decoder(self.model) or 'turned off for this engine'}"
            )
        if self.device.type != "cpu":
            raise ConfigError(f"quantize 'int8' is for CPU decoding; the model is on {self.device}")
        if not int8_supported():
            raise ConfigError(
                "quantize 'int8' needs one of torch's int8 CPU kernels (quantized::"
                "linear_dynamic or aten._weight_int8pack_mm), which this torch build lacks"
            )
        # the probes' answers of an earlier start here, where kept (speeds_cache)
        speeds = self.kept_speeds
        kernel = speeds.get("int8 kernel") if speeds is not None else None
        if kernel not in KERNELS or not kernel_supported(kernel):
            kernel = None
        self._gpt2.quantize_int8(kernel or "auto", rows_cache=rows_cache)
        prompts = speeds.get("int8 prompts") if speeds is not None else None
        if not isinstance(prompts, bool):
            prompts = None
        self._gpt2.choose_int8_prompts(self.bf16_prefill, prompts)
        for name, kept, answer, line in (
            ("int8 kernel", kernel, self._gpt2.int8_kernel, "int8 steps: the %s kernel"),
            ("int8 prompts", prompts, self._gpt2.int8_prompts, "int8 prompts: %s"),
        ):
            if kept is not None:
                shown = answer if isinstance(answer, str) else "yes" if answer else "no"
                logger.info(line + " (as an earlier start here measured)", shown)
            elif speeds is not None:
                speeds.put(name, answer)

    @property
    def can_compile_steps(self) -> bool:
        """Does :meth:`compile_steps` apply (a model on the lean decode path)?"""
        return self._gpt2 is not None

    def compile_steps_if_possible(self) -> bool:
        """:meth:`compile_steps` in the background where it applies; else one log line
        saying why not. Returns whether a compile was started."""
        if self._gpt2 is None:
            from codeparrot.generation.lean import why_no_lean_decoder

            logger.info(
                "--compile skipped for %s: compiled steps need the lean decoder (%s)",
                self.path or "the model",
                why_no_lean_decoder(self.model) or "turned off for this engine",
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
        if self._gpt2 is None:
            from codeparrot.generation.lean import why_no_lean_decoder

            raise ConfigError(
                "compiled steps need the lean decode path: "
                f"{why_no_lean_decoder(self.model) or 'turned off for this engine'}"
            )
        import torch

        decoder = self._gpt2
        # the compiled kernels keep the thread count they were built with, and the
        # guards refuse another: the steps' own count, or else the caller's
        threads = self.decode_threads or torch.get_num_threads()

        def work() -> None:
            try:
                with _intra_op_threads(threads):
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

    # -- loading ---------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | None = None,
        dtype: str = "auto",
        quantize: str = "none",
        lean_load: bool | None = None,
    ) -> Engine:
        """Load a checkpoint directory (ours, or any local Hugging Face causal LM).

        ``quantize="int8"``: one-token steps read int8 copies of the weights (CPU, models
        of the lean decoder); ``"auto"`` does so where that applies (the language server's
        default, where latency matters more than the last digit of a logit).

        ``dtype``: ``"auto"`` is bfloat16 on a GPU; on a CPU it keeps float32 weights (one
        token at a time, bf16 kernels are slower there) and prefills long prompts with
        bf16 matrix products when the CPU has them natively and fast
        (:func:`codeparrot.precision.cpu_has_fast_bf16`), which halves their cost (see
        RESULTS.md).

        ``lean_load``: on a CPU, a checkpoint of the lean decoder's families (not an
        adapter, safetensors weights, a variant the decoder computes) is read straight into
        a parameter tree for the decoder (:mod:`codeparrot.models.lean_load`: the same
        checks, about 2 s less to load a 164M model); :attr:`model` then has no
        transformers forward. ``False`` (or the environment's ``CODEPARROT_LEAN_LOAD=0``)
        always loads transformers' model class, as a GPU, an adapter and any other
        architecture do.
        """
        import torch

        from codeparrot.models.checkpoint import trained_to_infill
        from codeparrot.precision import cpu_has_fast_bf16

        if dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if quantize not in LOAD_QUANTIZE:
            raise ConfigError(
                f"quantize must be one of {', '.join(LOAD_QUANTIZE)}, got {quantize!r}"
            )
        path = Path(path)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        # every check (config, no custom code, weights complete, EOS, vocabulary, context)
        model, tokenizer, meta = cls._load_model(path, device, lean_load)
        try:
            model.to(device)
        except (RuntimeError, AssertionError) as e:
            raise ConfigError(f"device {device!r} is not usable here ({e})") from e
        bf16_prefill = False
        on_cpu = torch.device(device).type == "cpu"
        if dtype == "auto":
            dtype = "float32" if on_cpu else "bfloat16"
            bf16_prefill = on_cpu and cpu_has_fast_bf16()
        model.to(getattr(torch, dtype))
        model.eval()
        if quantize == "auto":
            missing = _int8_missing(model, on_cpu)
            quantize = "none" if missing else "int8"
            if missing:
                logger.info(
                    "quantize auto: decoding %s with its own weights (int8 steps need %s)",
                    path,
                    missing,
                )
        rows_cache = None
        weight_files = getattr(model, "weight_files", None)  # the lean load's
        if quantize == "int8" and weight_files:
            from codeparrot.generation.int8_cache import RowsCache

            rows_cache = RowsCache.for_weights(weight_files, next(model.parameters()).dtype)
        kept_speeds = None
        if on_cpu:
            from codeparrot.generation.speeds_cache import KeptSpeeds

            kept_speeds = KeptSpeeds.for_model(model, bf16_prefill)
        # one thread per one-token step on a CPU: measured 2-7x faster than two on a
        # shared 2-core machine (bench/generate.py); the prompt keeps torch's setting
        return cls(
            model,
            tokenizer,
            path=path,
            bf16_prefill=bf16_prefill,
            decode_threads=1 if on_cpu else None,
            quantize=quantize,
            infills=trained_to_infill(meta),
            own_checkpoint=bool(meta),
            int8_rows_cache=rows_cache,
            kept_speeds=kept_speeds,
        )

    @staticmethod
    def _load_model(path: Path, device: str, lean_load: bool | None) -> tuple[Any, Any, Any]:
        """(model, tokenizer, meta): the lean parameter tree where it applies (a CPU, the
        lean decoder's families, see :meth:`load`), else transformers' model class."""
        import os

        import torch

        from codeparrot.models.checkpoint import load_checkpoint

        if lean_load is None:
            lean_load = os.environ.get("CODEPARROT_LEAN_LOAD", "1") != "0"
        try:
            on_cpu = torch.device(device).type == "cpu"
        except RuntimeError:  # load reports an unusable device once the model is there
            on_cpu = False
        if lean_load and on_cpu:
            from codeparrot.models.lean_load import load_lean_checkpoint

            loaded = load_lean_checkpoint(path)
            if loaded is not None:
                return loaded
        return load_checkpoint(path, attn_implementation=None)

    # -- prompts ---------------------------------------------------------------------
    def encode_prompt(
        self, prompt: str, max_new_tokens: int, *, stride: int = TRUNCATION_STRIDE
    ) -> tuple[list[int], bool]:
        """Token ids of ``prompt`` fitted to the context: keeps the end. Returns (ids, truncated).

        A prompt over its budget (context minus ``max_new_tokens``) loses a multiple of
        ``stride`` tokens at its start: up to ``stride - 1`` tokens less than would fit,
        so that consecutive prompts of a document being typed share their start.
        """
        if max_new_tokens >= self.context_length:
            raise ConfigError(
                f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        ids = self.tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"]
        bos = self.bos_ids
        if not ids and not bos:
            ids = [self.eos_token_id if self.eos_token_id is not None else 0]
        budget = self.context_length - max_new_tokens - len(bos)
        if len(ids) <= budget:
            return [*bos, *ids], False
        cut = len(ids) - budget
        if stride > 1 and budget > stride:
            cut = -(-cut // stride) * stride
        return [*bos, *ids[cut:]], True

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    # -- fill in the middle ------------------------------------------------------------
    def encode_infill(
        self,
        prefix: str,
        suffix: str,
        max_new_tokens: int,
        order: str = PSM,
        suffix_share: float = FIM_SUFFIX_SHARE.default,
        fim_tokens: str = "",
    ) -> tuple[list[int], bool]:
        """Token ids of a fill-in-the-middle prompt fitted to the context; (ids, truncated).

        Prefix and suffix are encoded apart, with sentinel text inside them encoded as
        text. Over the budget (context minus ``max_new_tokens`` and the three sentinels),
        the prefix loses whole lines at its start and the suffix at its end; the suffix
        keeps at most ``suffix_share`` of the budget unless the prefix leaves more (the
        language server's split, ``--fim-suffix-share``). ``order`` may be ``"auto"`` (the
        template's own), ``fim_tokens`` an override template (``--fim-tokens``).
        """
        fim = self._require_fim(fim_tokens)
        prefix_ids, suffix_ids, truncated = self._fit_infill(
            prefix, suffix, max_new_tokens, suffix_share, fim
        )
        return self._infill_ids(fim, prefix_ids, suffix_ids, order), truncated

    def infill_template(self, fim_tokens: str = "") -> FimPrompter | None:
        """The template a suffix is laid out with: the ``fim_tokens`` override
        (``--fim-tokens``) if given, else :attr:`fim`; None when there is none."""
        if not fim_tokens:
            return self.fim
        try:
            return detect_template(self.tokenizer, fim_tokens)
        except ValueError as e:
            raise ConfigError(f"checkpoint {self.path or 'in memory'}: {e}") from None

    def fim_order(self, order: str, fim_tokens: str = "") -> str:
        """The order a FIM prompt is laid out in: ``order``, or for ``"auto"`` the template's."""
        template = self._require_fim(fim_tokens).template
        return resolve_order(order, template, self.own_checkpoint)

    def _require_fim(self, fim_tokens: str = "") -> FimPrompter:
        fim = self.infill_template(fim_tokens)
        if fim is None:
            why = (
                "its tokenizer has no fill-in-the-middle sentinels of a known family "
                "(StarCoder's <fim_prefix>, SantaCoder's <fim-prefix>, Qwen2.5-Coder's "
                "<|fim_prefix|>, CodeLlama's ▁<PRE>, DeepSeek-Coder's <｜fim▁begin｜>); name "
                "them with --fim-tokens PREFIX,SUFFIX,MIDDLE[,END] (the editor setting "
                "fim_tokens)"
                if self.sentinels is None
                else "it was trained without fill-in-the-middle examples (fim_rate 0), "
                "though its tokenizer has the sentinels"
            )
            raise CheckpointError(
                f"checkpoint {self.path or 'in memory'}: {why}, so it cannot complete with a "
                "suffix; complete the prefix alone or use a checkpoint trained with FIM"
            )
        return fim

    def _infill_ids(
        self, fim: FimPrompter, prefix_ids: list[int], suffix_ids: list[int], order: str
    ) -> list[int]:
        """BOS (where the tokenizer adds it), then the template's layout in ``order``."""
        order = resolve_order(order, fim.template, self.own_checkpoint)
        return [*self.bos_ids, *fim.layout(prefix_ids, suffix_ids, order)]

    def _infill_prompt(
        self, prefix: str, suffix: str, config: GenerationConfig
    ) -> tuple[list[int], bool, tuple[str, list[int]] | None]:
        """(ids, truncated, healed) of a FIM prompt.

        Healing backs up the prefix's last token only where the prefix runs into the
        middle: always in SPM (as left to right), and in PSM only when the prefix ends
        inside a word (there the model would otherwise continue a token it never saw cut);
        the sentinels and the suffix are never touched.
        """
        fim = self._require_fim(config.fim_tokens)
        order = resolve_order(config.fim_order, fim.template, self.own_checkpoint)
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ConfigError("the prefix and the suffix must be text")
        if not prefix and not suffix:
            raise ConfigError("the prompt is empty (no prefix and no suffix)")
        prefix_ids, suffix_ids, truncated = self._fit_infill(
            prefix, suffix, config.max_new_tokens, config.fim_suffix_share, fim
        )
        healed = self._heal(prefix_ids) if config.heal else None
        if healed is not None and order == PSM and not _ends_in_word(healed[0]):
            healed = None
        if healed is not None:
            prefix_ids = prefix_ids[:-1]
        return self._infill_ids(fim, prefix_ids, suffix_ids, order), truncated, healed

    def _fit_infill(
        self, prefix: str, suffix: str, max_new_tokens: int, suffix_share: float, fim: FimPrompter
    ) -> tuple[list[int], list[int], bool]:
        # three sentinels and the BOS the tokenizer adds
        budget = self.context_length - max_new_tokens - 3 - len(self.bos_ids)
        if budget < 1:
            raise ConfigError(
                f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        bare = fim.template.bare_suffix
        prefix_ids, suffix_ids = self._encode_text(prefix), self._encode_text(suffix, bare=bare)
        if len(prefix_ids) + len(suffix_ids) <= budget:
            return prefix_ids, suffix_ids, False
        suffix_cap = int(budget * suffix_share)
        prefix_room = min(len(prefix_ids), budget - min(len(suffix_ids), suffix_cap))
        suffix_room = budget - prefix_room
        if len(prefix_ids) > prefix_room:
            prefix_ids = self._last_lines(prefix, prefix_room)
        if len(suffix_ids) > suffix_room:
            suffix_ids = self._first_lines(suffix, suffix_room, bare=bare)
        return prefix_ids, suffix_ids, True

    def _encode_text(self, text: str, *, bare: bool = False) -> list[int]:
        """Ids of ``text`` with special-token text (sentinels, end-of-text) split as text.

        ``bare``: without the SentencePiece space a tokenizer may put before the first word
        (encoded after a marker character whose ids are then dropped, as CodeLlama's
        reference ``encode_infilling`` does).
        """
        if not text:
            return []
        if bare:
            marker = self._encode_text(BARE_MARKER)
            ids = self._encode_text(BARE_MARKER + text)
            if ids[: len(marker)] == marker:
                return ids[len(marker) :]
            return ids
        out = self.tokenizer(
            text, add_special_tokens=False, split_special_tokens=True, verbose=False
        )
        return list(out["input_ids"])

    def _last_lines(self, text: str, room: int) -> list[int]:
        """Ids of the most whole lines at the end of ``text`` within ``room`` tokens."""
        starts = [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]
        lo, hi = 0, len(starts)  # find the first start whose tail fits (tails shrink)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self._encode_text(text[starts[mid] :])) <= room:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(starts):
            return self._encode_text(text[starts[lo] :])
        return self._encode_text(text)[-room:] if room > 0 else []  # one line over the room

    def _first_lines(self, text: str, room: int, *, bare: bool = False) -> list[int]:
        """Ids of the most whole lines at the start of ``text`` within ``room`` tokens."""
        ends = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        lo, hi = 0, len(ends)  # count of line ends whose head fits (heads grow)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(self._encode_text(text[: ends[mid - 1]], bare=bare)) <= room:
                lo = mid
            else:
                hi = mid - 1
        if lo > 0:
            return self._encode_text(text[: ends[lo - 1]], bare=bare)
        return self._encode_text(text, bare=bare)[:room]  # the first line alone is over the room

    # -- generation ------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
        *,
        suffix: str | None = None,
    ) -> list[Completion]:
        """Sample ``config.n`` completions of ``prompt``; blocks until all are finished.

        With ``suffix`` (fill in the middle), ``prompt`` is the text before the gap and
        each completion the middle; see :meth:`stream`.
        """
        out: list[Completion | None] = [None] * (config or GenerationConfig()).n
        for event in self.stream(prompt, config, cancel, suffix=suffix):
            if event.completion is not None:
                out[event.index] = event.completion
        return [c for c in out if c is not None]

    def stream(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
        *,
        suffix: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Yield text as it is produced; each candidate stops on its own.

        Setting ``cancel`` ends every unfinished candidate within one token
        (finish reason ``"cancelled"``). Stop strings are never streamed: text that
        could still become a stop string is held back until it cannot.

        ``suffix`` (fill in the middle; needs a checkpoint with the sentinels, see
        :attr:`fim`): ``prompt`` is the prefix, and the model writes the middle in
        ``config.fim_order`` until end-of-text or a sentinel (finish reason ``"eos"``).
        """
        config = config or GenerationConfig()
        if suffix is not None:
            ids, truncated, healed = self._infill_prompt(prompt, suffix, config)
            return self._stream(ids, truncated, config, cancel, healed)
        if not isinstance(prompt, str) or not prompt:
            raise ConfigError("the prompt is empty")
        ids, truncated = self.encode_prompt(prompt, config.max_new_tokens)
        healed = self._heal(ids) if config.heal else None
        if healed is not None:
            ids = ids[:-1]
        # Checks done: the generator below starts work only when iterated.
        return self._stream(ids, truncated, config, cancel, healed)

    def _heal(self, ids: list[int]) -> tuple[str, list[int]] | None:
        """(text of the prompt's last token, ids of the tokens a first new token may be),
        or None.

        None when healing does not apply: a one-token prompt, a special token, or a
        token that is not text on its own (part of a UTF-8 character).
        """
        if len(ids) < 2 or ids[-1] in self.tokenizer.all_special_ids:
            return None
        text = self._text_of(ids[-1:])
        if not text or "\ufffd" in text:
            return None
        allowed = self._healing_ids(text)
        return (text, allowed) if allowed else None

    def _healing_ids(self, rest: str) -> list[int]:
        """Ordinary tokens that go on writing ``rest``: those whose text starts with it,
        and those whose text is a shorter start of it that the tokenizer splits off when
        more text follows (:meth:`_split_starts`; the next token writes the rest)."""
        texts, order = self._token_table()
        lo = bisect.bisect_left(texts, rest)
        hi = lo
        while hi < len(texts) and texts[hi].startswith(rest):
            hi += 1
        allowed = [order[i] for i in range(lo, hi)]
        shorter = []
        for k in range(1, len(rest)):
            at = bisect.bisect_left(texts, rest[:k])
            while at < len(texts) and texts[at] == rest[:k]:
                shorter.append(order[at])
                at += 1
        if shorter:
            split = self._split_starts(rest)
            allowed.extend(i for i in shorter if i in split)
        return allowed

    def _split_starts(self, rest: str) -> frozenset[int]:
        """The first tokens of ``rest`` followed by each of :data:`HEAL_FOLLOWERS`, as the
        tokenizer splits them (cached per text)."""
        with self._table_lock:
            found = self._splits.get(rest)
        if found is None:
            firsts = set()
            for follower in HEAL_FOLLOWERS:
                ids = self._encode_text(rest + follower, bare=True)
                if ids:
                    firsts.add(ids[0])
            found = frozenset(firsts)
            with self._table_lock:
                if len(self._splits) >= 4096:
                    self._splits.clear()
                self._splits[rest] = found
        return found

    def _token_table(self) -> tuple[list[str], list[int]]:
        """Decoded text of every ordinary token, sorted (ids in order where texts are
        equal), and the ids in that order (cached). Sorting the positions by text takes
        0.4x the time of sorting (text, id) pairs: Qwen2.5's 151,643 tokens in 0.05 s."""
        with self._table_lock:
            if self._table is None:
                special = set(self.special_ids)
                special |= self.sentinels.ids if self.sentinels is not None else set()
                ids = [i for i in range(self.vocab_size) if i not in special]
                texts = self._texts_of_each(ids)
                by_text = sorted(range(len(ids)), key=texts.__getitem__)  # stable: ids in order
                self._table = ([texts[k] for k in by_text], [ids[k] for k in by_text])
            return self._table

    def _texts_of_each(self, ids: list[int]) -> list[str]:
        """``_text_of([i])`` of each id: in one batch of the backend where the tokenizer's
        decode is the backend's (StarCoder's 49,152 tokens in 0.06 s against 0.36 s one by
        one: the first healed prompt waits for it), else one by one."""
        from codeparrot.models.start_cache import decodes_as_backend

        backend = self._backend
        if backend is None or not decodes_as_backend(self.tokenizer):
            return [self._text_of([i]) for i in ids]
        # a byte-level decoder writes each token's bytes after the anchor's whole "\n"
        # as alone: the anchor changes nothing there (pairs take 3.5x as long)
        if self._anchor is None or type(backend.decoder).__name__ == "ByteLevel":
            return backend.decode_batch([[i] for i in ids], skip_special_tokens=False)
        pairs = [[self._anchor, i] for i in ids]
        return [t[1:] for t in backend.decode_batch(pairs, skip_special_tokens=False)]

    def _stream(
        self,
        ids: list[int],
        truncated: bool,
        config: GenerationConfig,
        cancel: threading.Event | None,
        healed: tuple[str, list[int]] | None = None,
    ) -> Iterator[StreamEvent]:
        """prefill -> loop(sample, detokenize, check stops, drop finished rows)."""
        import torch

        run = self._start(ids, truncated, config, healed)
        with _intra_op_threads(self.prompt_threads):
            logits = self._prefill(run.step, healed)
        run.prompt_seconds = time.perf_counter() - run.started
        if healed is not None:
            for c in run.cands:
                c.heal_rest = healed[0]
        active = list(range(config.n))  # candidate index of each row still in the batch
        reason = "length"
        for _ in range(config.max_new_tokens):
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            with torch.inference_mode(), _intra_op_threads(self.decode_threads):
                # a padded vocabulary has ids the tokenizer cannot write: never sample them
                next_ids = sample_next(logits[:, : self.vocab_size], config, run.generator)
            still: list[int] = []
            keep_rows: list[int] = []
            for row, (i, tok) in enumerate(zip(active, next_ids.tolist(), strict=True)):
                event, finished = self._advance(run, i, tok)
                if event is not None:
                    yield event
                if not finished:
                    still.append(i)
                    keep_rows.append(row)
            if not still:
                return
            active = still
            if len(run.cands[active[0]].ids) >= config.max_new_tokens:
                break  # no forward pass for logits nobody would sample from
            with torch.inference_mode(), _intra_op_threads(self.decode_threads):
                if len(keep_rows) < len(next_ids):
                    next_ids = run.step.keep(keep_rows, next_ids)
                logits = run.step.decode(next_ids)
                logits = self._mask_healing(logits, [run.cands[i] for i in active])
        for i in active:
            yield self._finish(run, i, reason)

    def _start(
        self,
        ids: list[int],
        truncated: bool,
        config: GenerationConfig,
        healed: tuple[str, list[int]] | None,
    ) -> _Run:
        """The state of one call: seed, candidates, stops and the forward steps."""
        import torch

        seed = config.seed if config.seed is not None else int(time.time_ns() % (2**31))
        skip = len(healed[0]) if healed is not None else 0
        return _Run(
            seed=seed,
            generator=torch.Generator(device=self.device).manual_seed(seed),
            started=time.perf_counter(),
            cands=[
                _Candidate(self._new_decoder(), heal_len=skip, skip=skip) for _ in range(config.n)
            ],
            stops=StopStrings(tuple(config.stop)),
            ends=self._end_ids(config),
            prompt_tokens=len(ids) + (healed is not None),
            truncated=truncated,
            step=self._stepper(ids, config.n, config.max_new_tokens),
        )

    @staticmethod
    def _prefill(step: Any, healed: tuple[str, list[int]] | None) -> Any:
        """Logits after the prompt; after a healed prompt only tokens that start with its end.

        inference_mode is entered around the tensor work only, never across a yield: the
        caller's code between events must not run inside it.
        """
        import torch

        with torch.inference_mode():
            logits = step.prefill()
            if healed is not None:
                mask = torch.full_like(logits[0], float("-inf"))
                mask[torch.tensor(healed[1], device=mask.device)] = 0.0
                logits = logits + mask
        return logits

    def _mask_healing(self, logits: Any, cands: list[_Candidate]) -> Any:
        """Rows of candidates still writing a healed prompt's end keep only the tokens
        that go on with it."""
        import torch

        rows = [r for r, c in enumerate(cands) if c.heal_rest]
        if not rows:
            return logits
        mask = torch.zeros_like(logits)
        for r in rows:
            mask[r] = float("-inf")
            mask[r, torch.tensor(self._healing_ids(cands[r].heal_rest), device=mask.device)] = 0
        return logits + mask

    def _advance(self, run: _Run, i: int, tok: int) -> tuple[StreamEvent | None, bool]:
        """Give candidate ``i`` its next token: (event to yield or None, finished?)."""
        c = run.cands[i]
        if tok in run.ends:
            return self._finish(run, i, "eos"), True
        if c.heal_rest:
            piece = self._text_of([tok])
            done = piece.startswith(c.heal_rest) or not c.heal_rest.startswith(piece)
            c.heal_rest = "" if done else c.heal_rest[len(piece) :]
        c.ids.append(tok)
        before = len(c.text)
        self._append_text(c, tok)
        cut, safe = run.stops.scan(c.text, before)
        if cut is not None:
            c.stop_at = cut
            return self._finish(run, i, "stop"), True
        if safe > c.emitted:
            event = StreamEvent(i, c.text[c.emitted : safe])
            c.emitted = safe
            return event, False
        return None, False

    def _finish(self, run: _Run, i: int, reason: str) -> StreamEvent:
        """The last event of candidate ``i``: its remaining text and its completion."""
        c = run.cands[i]
        if reason != "stop":
            self._flush(c, run.stops)
            if c.stop_at is not None:
                reason = "stop"
        c.finish_reason = reason
        end = c.stop_at if c.stop_at is not None else len(c.text)
        delta = c.text[c.emitted : end]
        c.emitted = end
        return StreamEvent(
            i,
            delta,
            Completion(
                text=c.text[:end],
                finish_reason=reason,
                prompt_tokens=run.prompt_tokens,
                new_tokens=len(c.ids),
                seconds=time.perf_counter() - run.started,
                seed=run.seed,
                prompt_truncated=run.truncated,
                prompt_cached_tokens=run.step.cached_tokens,
                prompt_seconds=run.prompt_seconds,
            ),
        )

    def _end_ids(self, config: GenerationConfig) -> frozenset[int]:
        """Tokens that end a candidate: every end id (generation_config.json's, the
        tokenizer's end-of-text), every special token and every token of the FIM template
        (none of them is ever text). ``stop_at_eos=False`` (benchmarks of a fixed length)
        keeps going through the end ids alone."""
        ends = set(self.special_ids)
        for fim in (self.sentinels, self.infill_template(config.fim_tokens)):
            if fim is not None:
                ends |= fim.ids
        if not config.stop_at_eos:
            ends -= self.end_ids
        return frozenset(ends)

    # -- detokenization ----------------------------------------------------------------
    def _new_decoder(self) -> Any:
        if self._backend is None:
            return None
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=False)
        if self._anchor is not None:
            stream.step(self._backend, self._anchor)  # its text is not the completion's
        return stream

    def _append_text(self, c: _Candidate, tok: int) -> None:
        if c.decoder is not None:
            try:
                piece = c.decoder.step(self._backend, tok)
            except Exception:
                # byte-fallback tokenizers (the Llama family) make DecodeStream raise
                # "Invalid prefix encountered while decoding stream" where a prefix's bytes
                # decode differently once more follow: decode the whole text from now on
                c.decoder = None
                self._redecode(c)
                return
            if piece and c.skip:  # the start of a healed prompt's last token
                dropped = min(c.skip, len(piece))
                piece, c.skip = piece[dropped:], c.skip - dropped
            if piece:
                c.text += piece
        else:  # a slow tokenizer: decode everything (held back while it ends in U+FFFD)
            self._redecode(c)

    def _redecode(self, c: _Candidate) -> None:
        """``c.text`` decoded again from all its ids; text already streamed never changes."""
        full = self._decoded(c)
        streamed = c.text[: c.emitted]
        c.text = full if full.startswith(streamed) else streamed + full[len(streamed) :]

    def _decoded(self, c: _Candidate) -> str:
        """The whole text of ``c`` decoded again (without a healed prompt's end)."""
        return self._text_of(c.ids)[c.heal_len :]

    def _text_of(self, ids: list[int]) -> str:
        """The text ``ids`` write after other text (with the leading space a SentencePiece
        decoder strips at the start of a whole text: CodeLlama's ``▁in`` is `` in``)."""
        if self._anchor is None:
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        text = self.tokenizer.decode([self._anchor, *ids], skip_special_tokens=False)
        return text[1:]

    def _flush(self, c: _Candidate, stops: StopStrings) -> None:
        """Final text of an unstopped candidate: bytes still pending in the detokenizer."""
        full = self._decoded(c).rstrip("\ufffd")
        if full != c.text and full.startswith(c.text[: c.emitted]):
            c.text = full
        c.stop_at = stops.final(c.text, c.emitted)

    # -- forward passes ----------------------------------------------------------------
    def _stepper(self, ids: list[int], n: int, max_new_tokens: int) -> Any:
        if self._gpt2 is not None:
            return _GPT2Steps(self, ids, n, max_new_tokens)
        return _HFSteps(self.model, ids, n, self.device)

    def stream_ids(
        self,
        ids: list[int],
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[StreamEvent]:
        """:meth:`stream` for a prompt given as token ids, taken as they are: no healing,
        no BOS added; over its budget (context minus ``max_new_tokens``) the prompt keeps
        its end. Raises :class:`ConfigError` for an empty list or an id out of the
        vocabulary."""
        config = config or GenerationConfig()
        if not ids:
            raise ConfigError("the prompt is empty")
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ConfigError(
                f"token id {bad} is not in the vocabulary (0 to {self.vocab_size - 1})"
            )
        if config.max_new_tokens >= self.context_length:
            raise ConfigError(
                f"--max-new-tokens {config.max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        budget = self.context_length - config.max_new_tokens
        kept = list(ids[-budget:])
        return self._stream(kept, len(kept) < len(ids), config, cancel)


class _GPT2Steps:
    """Prefill and decode steps over :class:`~codeparrot.generation.gpt2.GPT2Decoder`."""

    def __init__(self, engine: Engine, ids: list[int], n: int, max_new_tokens: int) -> None:
        self.decoder, self.ids, self.n = engine._gpt2, ids, n
        self.prompts = engine.prompt_cache
        self.bf16_prefill = engine.bf16_prefill
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
        else:
            logits = self._run_prompt(one, earlier, shared)
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


class _HFSteps:
    """The same steps over a ``transformers`` forward (any causal LM)."""

    cached_tokens = 0

    def __init__(self, model: Any, ids: list[int], n: int, device: Any) -> None:
        self.model, self.ids, self.n, self.device = model, ids, n, device
        self.past: Any = None  # the model's own Cache object after the first step

    def _forward(self, input_ids: Any) -> Any:
        name = _cache_argument(self.model)
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
        self.past = _select_rows(self.past, index)
        return next_ids[index]


def _cache_argument(model: Any) -> str:
    """The name under which the model's forward takes and returns its key/value cache:
    ``cache`` since transformers 5.24 (``past_key_values`` is deprecated there and goes in
    5.40), ``past_key_values`` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _select_rows(past: Any, rows: Any) -> Any:
    """Keep only ``rows`` of a key/value cache (a transformers Cache or legacy tuples)."""
    if hasattr(past, "batch_select_indices"):
        past.batch_select_indices(rows)
        return past
    if hasattr(past, "reorder_cache"):
        past.reorder_cache(rows)
        return past
    return tuple(tuple(t[rows] for t in layer) for layer in past)


def _decode_anchor(tokenizer: Any) -> int | None:
    """A token whose text is ``"\n"`` alone and before any other, or None.

    Decoders of the Llama family's SentencePiece tokenizers (CodeLlama, Mistral) strip the
    leading space of a whole text, so a completion decoded alone loses the space its first
    token writes (``▁in``: "in", not " in"). Decoded after this token, then dropped, every
    token keeps its text, as Meta's reference decodes an infilled middle; for byte-level
    tokenizers nothing changes.
    """
    ids = tokenizer("\n", add_special_tokens=False)["input_ids"]
    for i in reversed(ids):
        if tokenizer.decode([i, i], skip_special_tokens=False) == "\n\n":
            return int(i)
    return None


@contextlib.contextmanager
def _intra_op_threads(n: int | None) -> Iterator[None]:
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


def _int8_missing(model: Any, on_cpu: bool) -> str:
    """What int8 decoding steps would need that this model or machine lacks ("": nothing)."""
    from codeparrot.generation.gpt2 import int8_supported
    from codeparrot.generation.lean import why_no_lean_decoder

    if not on_cpu:
        return "a CPU"
    why = why_no_lean_decoder(model)
    if why:
        return f"the lean decoder: {why}"
    if not int8_supported():
        return "torch's int8 weight-only CPU kernel"
    return ""


def _special_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of every special token of ``tokenizer`` (named ones and added ones marked special)."""
    ids = {int(i) for i in tokenizer.all_special_ids}
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids |= {int(i) for i, token in added.items() if getattr(token, "special", False)}
    return frozenset(ids)


def _end_ids_of(model: Any, eos: int | None) -> frozenset[int]:
    """End-of-text ids: the tokenizer's, and every one of the model's generation config
    (``eos_token_id`` of generation_config.json may be a list) and config."""
    ids = {eos} if eos is not None else set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        values = value if isinstance(value, (list, tuple)) else [value]
        ids |= {int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)}
    return frozenset(ids)
