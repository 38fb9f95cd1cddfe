"""The one inference engine: stream, stop and cancel over a prompt side and a decoder.

The playground, the language server and the HumanEval harness all call
:class:`Engine`; none of them talks to ``transformers`` directly. The engine is in parts:

- the prompt side, text to ids: :mod:`~codeparrot.generation.prompt` (context fitting,
  fill-in-the-middle layout), :mod:`~codeparrot.generation.healing` (token healing) and
  :mod:`~codeparrot.generation.detokenize` (ids back to text, incrementally);
- the decoder, ids to logits: :mod:`~codeparrot.generation.decoder` (the lean forward of
  GPT-2, GPTBigCode, the Llama family and Qwen3, int8 and compiled steps, or any causal
  LM's ``transformers`` forward; the thread policy), loaded by
  :mod:`~codeparrot.generation.loading` (device, dtype, int8, the profile's preparation);
- this module: a call runs ``prefill -> loop(sample, detokenize, check stops, drop
  finished rows)``. The prompt is run once for one row and its keys/values are shared by
  the ``n`` candidates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.generation.config import FimSettings, GenerationConfig
from codeparrot.generation.decoder import Decoder
from codeparrot.generation.detokenize import Candidate, Detokenizer
from codeparrot.generation.events import Completion as Completion
from codeparrot.generation.events import StreamEvent as StreamEvent
from codeparrot.generation.healing import Healer
from codeparrot.generation.prompt import Healed, PromptBuilder, end_ids_of, special_ids
from codeparrot.generation.sampling import draw as _draw  # noqa: F401 (see below)
from codeparrot.generation.sampling import sample_next
from codeparrot.generation.sampling import sample_next as _sample  # noqa: F401
from codeparrot.generation.sampling import sample_nucleus_sorted as _sample_nucleus_sorted  # noqa: F401
from codeparrot.generation.stopping import HUMANEVAL_STOP_SEQUENCES as HUMANEVAL_STOP_SEQUENCES
from codeparrot.generation.stopping import StopStrings
from codeparrot.generation.stopping import first_block as first_block
from codeparrot.generation.threads import intra_op_threads

# The names above imported "as" something were this module's before the engine was split
# by job; they stay importable from here (the sampling tests use the private ones).


@dataclass
class _Run:
    """One call of :meth:`Engine.stream` under way."""

    seed: int
    generator: Any  # torch.Generator
    started: float
    cands: list[Candidate]
    stops: StopStrings
    ends: frozenset[int]  # token ids that end a candidate
    prompt_tokens: int
    truncated: bool
    step: Any  # the decoder's steps (decoder.LeanSteps | decoder.HFSteps)
    prompt_seconds: float = 0.0  # the prefill's


def _on(part: str, name: str, doc: str) -> property:
    """An attribute of the engine that is its ``part``'s (read and written there)."""
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, value: setattr(getattr(self, part), name, value),
        doc=doc,
    )


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
        infills: bool | None = None,
        own_checkpoint: bool = False,
        fim: FimSettings | None = None,
        **decoding: Any,
    ) -> None:
        """Wrap a loaded model; :meth:`load` is the usual way in.

        ``infills``: whether the model learnt fill-in-the-middle (None: it did if its
        tokenizer has the sentinels). A model that did not is never sent a suffix
        (:attr:`fim` is None) even when its tokenizer has the sentinels.
        ``own_checkpoint``: trained here (FIM order ``auto`` is then SPM, see
        :func:`codeparrot.fim.resolve_order`). ``fim``: how prompts with a suffix are laid
        out (:class:`~codeparrot.generation.config.FimSettings`; None: the defaults),
        resolved here once (:attr:`fim_layout`); a ``fim_tokens`` override the tokenizer
        lacks raises :class:`ConfigError` naming it.

        ``decoding``: the :class:`~codeparrot.generation.decoder.Decoder`'s options
        (``bf16_prefill``, ``prompt_cache_entries``, ``reuse_prompt_starts``, ``lean_gpt2``,
        ``decode_threads``, ``quantize``, ``int8_rows_cache``, ``kept_speeds``,
        ``cuda_graphs``).
        """
        self.model = model
        self.tokenizer = tokenizer
        self.path = path
        context = int(
            getattr(model.config, "n_positions", None)
            or getattr(model.config, "max_position_embeddings", 1024)
        )
        eos = tokenizer.eos_token_id
        self.eos_token_id: int | None = int(eos) if eos is not None else None
        self.vocab_size = len(tokenizer)  # ids the tokenizer can decode (<= the model's)
        self.prompts = PromptBuilder(
            tokenizer,
            context,
            self.eos_token_id,
            infills=infills,
            own_checkpoint=own_checkpoint,
            path=path,
            fim=fim,
        )
        # ids that end a completion: every end id of generation_config.json, and every
        # special token (a special token's text is never a completion's)
        self.end_ids: frozenset[int] = end_ids_of(model, self.eos_token_id)
        self.special_ids: frozenset[int] = special_ids(tokenizer) | self.end_ids
        self.detok = Detokenizer(tokenizer)
        self.healer = Healer(self.prompts, self.detok, self.special_ids, self.vocab_size)
        self.decoder = Decoder(model, vocab_size=self.vocab_size, path=path, **decoding)
        self.device = self.decoder.device
        # milliseconds a prompt token takes, where measured (the editor profile does at
        # load: generation.threads.kept_or_timed_prompt); None: not measured
        self.prompt_ms_per_token: float | None = None
        # the editor profile's LiveTuning where the first calls choose the steps' threads
        # (call its observe from the thread that runs the calls), else None
        self.tuning: Any = None

    # the prompt side's and the decoder's settings, as the engine's
    context_length = _on("prompts", "context_length", "tokens of the model's context")
    fim = _on("prompts", "fim", "the FIM template the model learnt, or None")
    sentinels = _on("prompts", "sentinels", "the FIM template of the tokenizer, or None")
    bos_ids = _on("prompts", "bos_ids", "ids the tokenizer puts before a text")
    own_checkpoint = _on("prompts", "own_checkpoint", "trained here")
    fim_layout = _on("prompts", "fim_layout", "the FIM settings resolved at load (FimLayout)")
    decode_threads = _on("decoder", "decode_threads", "intra-op threads of one-token steps")
    prompt_threads = _on("decoder", "prompt_threads", "intra-op threads of prompts")
    prompt_cache = _on("decoder", "prompt_cache", "recent prompts' keys/values")
    reuse_prompt_starts = _on(
        "decoder", "reuse_prompt_starts", "prefill only the rest after a kept prompt's start"
    )
    quantize = _on("decoder", "quantize", '"int8" or "none"')
    bf16_prefill = _on("decoder", "bf16_prefill", "long prompts in bf16 matrix products")
    kept_speeds = _on("decoder", "kept_speeds", "probe answers kept from earlier starts")
    steps_compiled = _on("decoder", "steps_compiled", "set once a compile has finished")
    compile_error = _on("decoder", "compile_error", "the exception of a failed compile")

    can_compile_steps = _on("decoder", "can_compile_steps", "does compile_steps apply?")
    # Decoder.compile_steps(background=True) and Decoder.compile_steps_if_possible()
    compile_steps = _on("decoder", "compile_steps", "compile the one-token step")
    compile_steps_if_possible = _on("decoder", "compile_steps_if_possible", "the same, or why not")

    # -- loading ---------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | None = None,
        dtype: str = "auto",
        quantize: str | None = None,
        lean_load: bool | None = None,
        profile: str = "batch",
        threads: int = 0,
        compile: bool = False,
        fim: FimSettings | None = None,
        cuda_graphs: bool = False,
    ) -> Engine:
        """Load a checkpoint directory (ours, or any local Hugging Face causal LM), prepared
        for ``profile``: ``"batch"``, ``"editor"`` or ``"server"``, its prompts with a
        suffix laid out as ``fim`` says (resolved here, once); see
        :func:`codeparrot.generation.loading.load` for every option."""
        from codeparrot.generation import loading

        return loading.load(
            cls,
            path,
            device=device,
            dtype=dtype,
            quantize=quantize,
            lean_load=lean_load,
            profile=profile,
            threads=threads,
            compile=compile,
            fim=fim,
            cuda_graphs=cuda_graphs,
        )

    # -- prompts ---------------------------------------------------------------------
    def encode_prompt(
        self, prompt: str, max_new_tokens: int, **kwargs: Any
    ) -> tuple[list[int], bool]:
        """See :meth:`codeparrot.generation.prompt.PromptBuilder.encode_prompt`."""
        return self.prompts.encode_prompt(prompt, max_new_tokens, **kwargs)

    def count_tokens(self, text: str) -> int:
        return self.prompts.count_tokens(text)

    def encode_infill(
        self, prefix: str, suffix: str, max_new_tokens: int
    ) -> tuple[list[int], bool]:
        """See :meth:`codeparrot.generation.prompt.PromptBuilder.encode_infill`."""
        return self.prompts.encode_infill(prefix, suffix, max_new_tokens)

    def infill_template(self) -> Any:
        """See :meth:`codeparrot.generation.prompt.PromptBuilder.infill_template`."""
        return self.prompts.infill_template()

    def use_fim(self, settings: FimSettings) -> None:
        """Lay out prompts with a suffix by ``settings`` from now on (an editor changed
        them), resolved here once; see
        :meth:`codeparrot.generation.prompt.PromptBuilder.use_fim`."""
        self.prompts.use_fim(settings)

    # -- generation ------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
        *,
        suffix: str | None = None,
        reuse_prompt_start: bool | None = None,
    ) -> list[Completion]:
        """Sample ``config.n`` completions of ``prompt``; blocks until all are finished.

        With ``suffix`` (fill in the middle), ``prompt`` is the text before the gap and
        each completion the middle; see :meth:`stream`.
        """
        out: list[Completion | None] = [None] * (config or GenerationConfig()).n
        events = self.stream(
            prompt, config, cancel, suffix=suffix, reuse_prompt_start=reuse_prompt_start
        )
        for event in events:
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
        reuse_prompt_start: bool | None = None,
    ) -> Iterator[StreamEvent]:
        """Yield text as it is produced; each candidate stops on its own.

        Setting ``cancel`` ends every unfinished candidate within one token
        (finish reason ``"cancelled"``). Stop strings are never streamed: text that
        could still become a stop string is held back until it cannot.

        ``suffix`` (fill in the middle; needs a checkpoint with the sentinels, see
        :attr:`fim`): ``prompt`` is the prefix, and the model writes the middle in
        the engine's FIM order (:attr:`fim_layout`) until end-of-text or a sentinel (finish reason ``"eos"``).

        ``reuse_prompt_start``: whether this call may prefill only the rest of a prompt
        that starts as a kept one (None: the engine's :attr:`reuse_prompt_starts`). A
        prompt sent again whole is reused either way; a start reused can change greedy
        text in rare ties (see :class:`~codeparrot.generation.decoder.Decoder`).
        """
        config = config or GenerationConfig()
        reuse = reuse_prompt_start
        if suffix is not None:
            ids, truncated, healed = self.prompts.infill_prompt(
                prompt, suffix, config, self.healer.heal
            )
            return self._stream(ids, truncated, config, cancel, healed, reuse)
        if not isinstance(prompt, str) or not prompt:
            raise ConfigError("the prompt is empty")
        ids, truncated = self.prompts.encode_prompt(prompt, config.max_new_tokens)
        return self._stream_healed(ids, truncated, config, cancel, reuse)

    def stream_ids(
        self,
        ids: list[int],
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
        *,
        reuse_prompt_start: bool | None = None,
    ) -> Iterator[StreamEvent]:
        """:meth:`stream` for a prompt given as token ids, taken as they are: no healing,
        no BOS added. Each id must be one the tokenizer can write (``0 <= id <
        vocab_size``); over its budget (context minus ``config.max_new_tokens``) the
        prompt keeps its end. Raises :class:`ConfigError` naming what is wrong."""
        config = config or GenerationConfig()
        ids, truncated = self.prompts.fit_ids(ids, config.max_new_tokens, self.vocab_size)
        return self._stream(ids, truncated, config, cancel, None, reuse_prompt_start)

    def _stream_healed(
        self,
        ids: list[int],
        truncated: bool,
        config: GenerationConfig,
        cancel: threading.Event | None,
        reuse: bool | None = None,
    ) -> Iterator[StreamEvent]:
        healed = self.healer.heal(ids) if config.heal else None
        if healed is not None:
            ids = ids[:-1]
        # Checks done: the generator below starts work only when iterated.
        return self._stream(ids, truncated, config, cancel, healed, reuse)

    def _stream(
        self,
        ids: list[int],
        truncated: bool,
        config: GenerationConfig,
        cancel: threading.Event | None,
        healed: Healed | None = None,
        reuse: bool | None = None,
    ) -> Iterator[StreamEvent]:
        """prefill -> loop(sample, detokenize, check stops, drop finished rows)."""
        run = self._start(ids, truncated, config, healed, reuse)
        try:
            yield from self._loop(run, config, cancel, healed)
        finally:  # a static step's cache goes back to the engine, however the call ended
            close = getattr(run.step, "close", None)
            if close is not None:
                close()

    def _loop(
        self, run: _Run, config: GenerationConfig, cancel: Any, healed: Healed | None
    ) -> Iterator[StreamEvent]:
        """The call's work: the prompt, then a token per candidate per step."""
        import torch

        with intra_op_threads(self.decoder.prompt_threads), torch.inference_mode():
            # inference_mode only around the tensor work, never across a yield
            logits = self.healer.prefill_mask(run.step.prefill(), healed)
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
            with torch.inference_mode(), intra_op_threads(self.decoder.decode_threads):
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
            with torch.inference_mode(), intra_op_threads(self.decoder.decode_threads):
                if len(keep_rows) < len(next_ids):
                    next_ids = run.step.keep(keep_rows, next_ids)
                logits = run.step.decode(next_ids)
                logits = self.healer.mask(logits, [run.cands[i] for i in active])
        for i in active:
            yield self._finish(run, i, reason)

    def _start(
        self,
        ids: list[int],
        truncated: bool,
        config: GenerationConfig,
        healed: Healed | None,
        reuse: bool | None = None,
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
                Candidate(self.detok.new_stream(), heal_len=skip, skip=skip)
                for _ in range(config.n)
            ],
            stops=StopStrings(tuple(config.stop)),
            ends=self.end_ids_for(config),
            prompt_tokens=len(ids) + (healed is not None),
            truncated=truncated,
            step=self.decoder.steps(ids, config.n, config.max_new_tokens, reuse),
        )

    def _advance(self, run: _Run, i: int, tok: int) -> tuple[StreamEvent | None, bool]:
        """Give candidate ``i`` its next token: (event to yield or None, finished?)."""
        c = run.cands[i]
        if tok in run.ends:
            return self._finish(run, i, "eos"), True
        self.healer.advance(c, tok)
        c.ids.append(tok)
        before = len(c.text)
        self.detok.append(c, tok)
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
            self.detok.flush(c, run.stops)
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

    def end_ids_for(self, config: GenerationConfig) -> frozenset[int]:
        """Tokens that end a candidate: every end id (generation_config.json's, the
        tokenizer's end-of-text), every special token and every token of the FIM template
        (none of them is ever text). ``stop_at_eos=False`` (benchmarks of a fixed length)
        keeps going through the end ids alone."""
        ends = set(self.special_ids)
        for fim in (self.sentinels, self.infill_template()):
            if fim is not None:
                ends |= fim.ids
        if not config.stop_at_eos:
            ends -= self.end_ids
        return frozenset(ends)
