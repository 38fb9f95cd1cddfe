"""Loading an engine: the checkpoint, its device and dtype, int8 steps, and the profile's
preparation (threads, prompt timing, compiled steps).

A profile is what the engine is loaded for:

- ``"batch"`` (the harness, benchmarks, ``codeparrot complete``): the steps on one thread
  on a CPU, prompts on torch's setting, nothing measured at load.
- ``"editor"`` (the language server): int8 steps where they apply (``quantize="auto"``),
  and an int8 request that does not apply falls back to the model's own weights; on a
  CPU, prompts on one thread or every core, whichever reads a prompt faster (measured, or
  read from an earlier start here; :func:`~codeparrot.generation.threads.choose_prompt_threads`),
  and that figure sizes the suffix window; the steps' threads are fixed by
  ``threads``, measured before compiling, or else chosen by the first calls
  (:attr:`Engine.tuning`, a :class:`~codeparrot.generation.threads.LiveTuning`).
- ``"server"`` (``serve`` and the playground: calls from many threads): as the editor,
  except that the steps' threads are measured at load
  (:func:`~codeparrot.generation.threads.tune_decode_threads`), and a prompt's start is
  not reused (below).

Every profile keeps recent prompts' keys/values, and a prompt that comes again whole is
not prefilled again. Only the editor's also prefills just the rest of a prompt that starts
as a kept one (typing grows the prompt at its end); elsewhere a prompt's logits never
depend on what ran before, so that the same request gets the same text whatever the
order (``serve`` and ``eval generate`` agree, greedy; see
:class:`~codeparrot.generation.decoder.Decoder`'s ``reuse_prompt_starts``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.generation.config import DTYPES, LOAD_QUANTIZE
from codeparrot.hub import ModelRef

logger = logging.getLogger(__name__)

PROFILES = ("batch", "editor", "server")
# quantize=None at load: each profile's own (latency matters more than a logit's last digit
# in an editor or a server)
PROFILE_QUANTIZE = {"batch": "none", "editor": "auto", "server": "auto"}


def load(
    cls: Any,
    path: str | Path | ModelRef,
    *,
    device: str | None = None,
    dtype: str = "auto",
    quantize: str | None = None,
    lean_load: bool | None = None,
    profile: str = "batch",
    threads: int = 0,
    compile: bool = False,
    fim: Any = None,
    cuda_graphs: bool = False,
) -> Any:
    """:meth:`Engine.load <codeparrot.generation.engine.Engine.load>`: ``cls`` (the Engine
    class) of the checkpoint at ``path``, prepared for ``profile``.

    ``path``: a :class:`~codeparrot.hub.ModelRef` (or a directory, or ``ORG/NAME[@REV]``,
    parsed into one), resolved here once: everything below reads the local directory.

    ``quantize="int8"``: one-token steps read int8 copies of the weights (CPU, models
    of the lean decoder); ``"auto"`` does so where that applies; None: the profile's
    own (``"none"`` for a batch, ``"auto"`` for an editor or a server, where latency
    matters more than the last digit of a logit).

    ``dtype``: ``"auto"`` is bfloat16 on a GPU; on a CPU it keeps float32 weights (one
    token at a time, bf16 kernels are slower there) and prefills long prompts with
    bf16 matrix products when the CPU has them natively and fast
    (:func:`codeparrot.precision.cpu_has_fast_bf16`), which halves their cost.

    ``lean_load``: on a CPU, a checkpoint of the lean decoder's families (not an
    adapter, safetensors weights, a variant the decoder computes) is read straight into
    a parameter tree for the decoder (:mod:`codeparrot.models.lean_load`); the model
    then has no transformers forward. ``False`` (or the environment's
    ``CODEPARROT_LEAN_LOAD=0``) always loads transformers' model class.

    ``threads`` (editor and server): intra-op threads of prompts and steps (0: every
    core, the steps' count measured). ``compile``: compile the one-token step in the
    background (``Engine.compile_steps``).

    ``fim``: the :class:`~codeparrot.generation.config.FimSettings` of the server or run
    (None: the defaults), resolved against the checkpoint here, once: its template (a
    ``fim_tokens`` override the tokenizer lacks is refused, naming it) and its order
    (``auto``: the family's own).

    ``cuda_graphs`` (a CUDA device): one-token steps of static shape, captured once as a
    CUDA graph and replayed (:mod:`codeparrot.generation.static_step`); a model or device
    they do not apply to is refused, naming why.
    """
    quantize = PROFILE_QUANTIZE.get(profile, "none") if quantize is None else quantize
    check_load_options(dtype, quantize, profile)
    if profile != "batch":
        import torch

        from codeparrot.generation.threads import cpu_cores

        torch.set_num_threads(threads or cpu_cores())

    ref = ModelRef.parse(path)
    local = ref.resolve().path  # the one resolution of this load (a Hub id: its snapshot)

    def load_as(quantize: str) -> Any:
        model, tokenizer, options = engine_options(local, device, dtype, quantize, lean_load)
        if cuda_graphs:
            on = next(model.parameters()).device.type
            if on != "cuda":
                raise ConfigError(f"cuda_graphs needs a CUDA device; the model is on {on}")
            options["cuda_graphs"] = True
        options["path"] = Path(ref.name)  # the model as the user named it, for messages
        return cls(model, tokenizer, reuse_prompt_starts=profile == "editor", fim=fim, **options)

    engine = load_with_fallback(load_as, quantize, profile)
    prepare(engine, profile, threads, compile)
    return engine


def check_load_options(dtype: str, quantize: str, profile: str) -> None:
    if profile not in PROFILES:
        raise ConfigError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if quantize not in LOAD_QUANTIZE:
        raise ConfigError(f"quantize must be one of {', '.join(LOAD_QUANTIZE)}, got {quantize!r}")


def engine_options(path: Path, device: str | None, dtype: str, quantize: str, lean_load: Any):
    """(model, tokenizer, keyword arguments of Engine): the checkpoint read and placed, its
    dtype chosen, int8 decided (``"auto"``: where it applies), the caches of a CPU found."""
    import torch

    from codeparrot.models.checkpoint import trained_to_infill
    from codeparrot.precision import cpu_has_fast_bf16

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    # every check (config, no custom code, weights complete, EOS, vocabulary, context)
    model, tokenizer, meta = load_model(path, device, lean_load)
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
        missing = int8_missing(model, on_cpu)
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
    options = dict(
        path=path,
        bf16_prefill=bf16_prefill,
        decode_threads=1 if on_cpu else None,
        quantize=quantize,
        infills=trained_to_infill(meta),
        own_checkpoint=bool(meta),
        int8_rows_cache=rows_cache,
        kept_speeds=kept_speeds,
    )
    return model, tokenizer, options


def load_model(path: Path, device: str, lean_load: bool | None) -> tuple[Any, Any, Any]:
    """(model, tokenizer, meta): the lean parameter tree where it applies (a CPU, the
    lean decoder's families, see :meth:`Engine.load`), else transformers' model class."""
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


def int8_missing(model: Any, on_cpu: bool) -> str:
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


def load_with_fallback(load: Any, quantize: str, profile: str) -> Any:
    """``load(quantize)``; in the editor and server profiles an int8 request that does not
    apply (an architecture without the lean decoder) loads the model's own weights instead:
    an unsupported architecture must not leave every suggestion empty. FIM settings the
    tokenizer cannot use fail either way: they are raised at once."""
    from codeparrot.generation.prompt import FimSettingsError

    try:
        return load(quantize)
    except ConfigError as e:
        if quantize != "int8" or profile == "batch" or isinstance(e, FimSettingsError):
            raise
        logger.warning("--quantize int8 does not apply (%s): decoding with its own weights", e)
        return load("none")


def prepare(engine: Any, profile: str, threads: int, compile: bool) -> None:
    """The profile's preparation of a loaded engine (see the module's text)."""
    from codeparrot.generation.threads import (
        LiveTuning,
        choose_prompt_threads,
        kept_or_timed_prompt,
        tune_decode_threads,
    )

    engine.tuning = None
    if profile == "batch":
        if compile:
            engine.compile_steps_if_possible()
        return
    path = engine.path
    lean = getattr(getattr(engine, "decoder", None), "lean", None)
    if lean is not None:  # before the first request, not during it
        lean.prepare_steps()
    if engine.device.type == "cpu":
        if threads:
            engine.decode_threads = engine.prompt_threads = threads
        elif profile == "server" or (compile and engine.can_compile_steps):
            # compiled steps keep the thread count they are built with: choose it first
            logger.info("%s: %s", path, tune_decode_threads(engine.decoder).describe())
        else:  # the first calls choose the steps' threads
            engine.tuning = LiveTuning(engine)
        if not threads:
            # prompts on one thread or every core, whichever reads faster here; the editor
            # also sizes the suffix window read again at each keystroke by that figure
            # (completion.suffix_tokens), measured once (or by an earlier start here), so
            # that the window stays the same from the first suggestion
            choice = choose_prompt_threads(engine.decoder)
            logger.info("%s: %s", path, choice.describe())
            if profile == "editor":
                engine.prompt_ms_per_token = choice.ms
        elif profile == "editor":
            engine.prompt_ms_per_token, _ = kept_or_timed_prompt(engine.decoder, threads)
    if compile and engine.compile_steps_if_possible():  # in the background
        logger.info("compiling the decoding step of %s in the background", path)
