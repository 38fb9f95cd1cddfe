"""The quickstart's training plan: the model, batch and steps for the device it runs on.

On a CPU the plan is the recipe (tiny-qwen, batch 16, context 256), and a machine that
would finish the recipe's 1,000 steps before its minutes are up trains more steps: the
run's ``--max-steps`` becomes a ceiling (:func:`codeparrot.training.plan.fill_ceiling`)
and the loop's planner lays the schedule over what the budget holds.

On a CUDA device the recipe's 5M-parameter model would leave the device idle. The plan
there is a model of real size at a context of :data:`GPU_SEQ_LENGTH`:

- the batch that fills the device's memory (:func:`batch_for_memory`, a conservative
  count of weights, optimizer state, activations and logits);
- the preset chosen by the measured step time: the compute the budget holds at the
  measured pace gives the compute-optimal size (Hoffmann et al. 2022: about 20 tokens a
  parameter, C = 6ND), and of :data:`GPU_PRESETS` the plan takes the larger one only when
  that size is at least the geometric mean of the two;
- steps from the budget (the loop's planner times the compiled steps and lays the
  schedule over what the minutes hold, up to a few epochs of the corpus).

Everything that needs a device is passed in (:class:`Device`, ``measure``), so the
choice is tested on a CPU with a faked device. Standard library at module level.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.models.presets import ModelPreset, get_preset
from codeparrot.options import MAX_STEPS
from codeparrot.training.config import QUICKSTART_RECIPE
from codeparrot.training.plan import MAX_FILL_EPOCHS, fill_ceiling

RECIPE_STEPS: int = MAX_STEPS.default  # the quickstart recipe's steps (its 4.1M tokens)
RECIPE_TOKENS_PER_STEP = (
    QUICKSTART_RECIPE.batch_size * get_preset(QUICKSTART_RECIPE.preset).n_positions
)
GPU_SEQ_LENGTH = 1024
GPU_PRESETS = ("mini-qwen", "small-qwen")  # smaller first
TOKENS_PER_PARAMETER = 20.0  # compute-optimal (Chinchilla)
# Share of the device's memory the plan may fill: the rest for the allocator's
# fragmentation, torch.compile's workspaces, cuBLAS and the evaluation batches.
MEMORY_SHARE = 0.6
MAX_GPU_BATCH = 128  # sequences a step: 131k tokens, past which more steps serve better
MIN_GPU_BATCH = 4
GPU_MIN_TRAINING_MINUTES = 1.0  # a GPU compiles and times its steps in well under a minute
MEASURED_STEPS = 3  # timed eager steps of a preset, after one untimed


@dataclass(frozen=True)
class Device:
    """What the plan reads of the device: its kind, name and memory."""

    kind: str  # "cuda", "mps" or "cpu"
    name: str
    memory_bytes: int | None = None  # None: unknown (a CPU's is not planned against)

    def describe(self) -> str:
        if self.memory_bytes:
            return f"{self.name} ({self.memory_bytes / 2**30:.0f} GiB)"
        return self.name


def detect_device() -> Device:
    """The device training will use: the first CUDA device, else the CPU."""
    import torch

    from codeparrot.training.flops import device_name

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Device("cuda", props.name, int(props.total_memory))
    return Device("cpu", device_name("cpu"))  # the CPU's model name, as training logs it


@dataclass(frozen=True)
class Measurement:
    """One preset's step, measured on the device."""

    preset: str
    batch_size: int  # the batch the step ran at (halved from the planned one on OOM)
    step_s: float
    parameters: int
    flops_per_token: float

    @property
    def tokens_per_s(self) -> float:
        return self.batch_size * GPU_SEQ_LENGTH / self.step_s

    def optimal_parameters(self, seconds: float) -> float:
        """The compute-optimal model size for ``seconds`` at this step's FLOP/s."""
        compute = self.tokens_per_s * self.flops_per_token * seconds
        return math.sqrt(compute / (6 * TOKENS_PER_PARAMETER))


Measure = Callable[[str, int], Measurement]  # (preset, batch) -> measurement


@dataclass(frozen=True)
class TrainingPlan:
    """What the quickstart trains: the overrides of its config, and why."""

    device: Device
    preset: str
    batch_size: int
    n_positions: int | None  # None: the preset's
    max_steps: int  # the planner's ceiling (or --max-steps as given)
    recipe_steps: int
    fills: bool  # --max-steps was not given: the budget decides the steps
    seq_length: int
    corpus_tokens: float | None = None
    measured: tuple[Measurement, ...] = ()
    peak_flops: float | None = None  # a large bf16 product's measured FLOP/s (CUDA)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpu(self) -> bool:
        return self.device.kind == "cuda" and bool(self.measured)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_length

    @property
    def recipe_tokens(self) -> int:
        """The tokens of the recipe's steps: at this plan's batch on a CPU, at the
        recipe's own (4.1M) where a GPU plan changed the batch and context."""
        if self.gpu:
            return RECIPE_STEPS * RECIPE_TOKENS_PER_STEP
        return RECIPE_STEPS * self.tokens_per_step

    def epochs(self, steps: int) -> float | None:
        """Passes over the corpus's training split that ``steps`` make (None: unknown)."""
        if not self.corpus_tokens:
            return None
        return steps * self.tokens_per_step / self.corpus_tokens

    def describe(self) -> list[str]:
        """The lines a user reads before training starts."""
        lines = list(self.notes)
        recipe_tokens = self.recipe_tokens
        if self.fills:
            room = f"up to {self.max_steps:,}"
            if self.corpus_tokens:
                room += f" ({MAX_FILL_EPOCHS:g} epochs of the corpus)"
            lines.append(
                f"plan: {self.preset}, batch {self.batch_size} x {self.seq_length} tokens on "
                f"{self.device.describe()}; the recipe is {self.recipe_steps:,} steps "
                f"({recipe_tokens / 1e6:.1f}M tokens); a machine that finishes them early "
                f"trains more, {room}, the schedule laid over what the budget holds"
            )
        else:
            lines.append(
                f"plan: {self.preset}, batch {self.batch_size} x {self.seq_length} tokens, "
                f"at most --max-steps {self.max_steps:,} (given)"
            )
        return lines


def corpus_train_tokens(facts: dict[str, Any]) -> float | None:
    """The training split's tokens, from the corpus and tokenizer steps' facts (bytes of
    the kept files, the train share of files, characters a token); None where unknown."""
    corpus, tokenizer = facts.get("corpus") or {}, facts.get("tokenizer") or {}
    try:
        share = corpus["train_files"] / (corpus["train_files"] + corpus["valid_files"])
        return corpus["output_bytes"] * share / tokenizer["chars_per_token"]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def preset_parameters(preset: str | ModelPreset, vocab_size: int) -> int:
    """A preset's parameters with a ``vocab_size`` vocabulary, counted from its shape
    (tied head once; norms' weights included; GPT-2's position table included)."""
    from codeparrot.models.presets import padded_vocab_size

    shape = get_preset(preset) if isinstance(preset, str) else preset
    d, vocab = shape.n_embd, padded_vocab_size(vocab_size)
    embeddings = vocab * d * (1 if shape.tie_word_embeddings else 2)
    if shape.architecture == "qwen3":
        head_dim = d // shape.n_head
        inner = shape.intermediate_size or 4 * d
        per_layer = 4 * d * d + 3 * d * inner + 2 * d + 2 * head_dim
        return embeddings + shape.n_layer * per_layer + d
    per_layer = 12 * d * d + 13 * d  # attention and MLP weights and biases, two LayerNorms
    return embeddings + shape.n_positions * d + shape.n_layer * per_layer + 2 * d


def batch_for_memory(preset: str, vocab_size: int, memory_bytes: int, seq: int) -> int:
    """The largest power-of-two batch of ``seq`` tokens whose training step fits
    :data:`MEMORY_SHARE` of ``memory_bytes`` (at most :data:`MAX_GPU_BATCH`)."""
    shape = get_preset(preset)
    params = preset_parameters(preset, vocab_size)
    # fp32 weights, gradients and two AdamW moments (Muon keeps one: a margin)
    state = 16 * params
    inner = shape.intermediate_size or 4 * shape.n_embd
    # bf16 activations kept for the backward pass a token and layer (Korthikanti et al.
    # 2022, with SDPA's flash attention: no T x T scores), the MLP's width apart; and the
    # logits: bf16, their fp32 upcast and its gradient
    per_token = shape.n_layer * (34 * shape.n_embd + 10 * inner) + 10 * vocab_size
    room = MEMORY_SHARE * memory_bytes - state
    fits = int(room // (per_token * seq)) if room > 0 else 0
    if fits < MIN_GPU_BATCH:
        raise ConfigError(
            f"{preset} at a context of {seq} does not fit {memory_bytes / 2**30:.1f} GiB with "
            f"a batch of {MIN_GPU_BATCH}; pass --no-gpu-plan to train the CPU recipe"
        )
    return min(MAX_GPU_BATCH, 2 ** int(math.log2(fits)))


def choose_preset(measurements: list[Measurement], seconds: float) -> Measurement:
    """Of ``measurements`` (smaller preset first), the larger only where the budget's
    compute at its measured pace calls for at least the geometric mean of the two sizes."""
    chosen = measurements[0]
    for larger in measurements[1:]:
        middle = math.sqrt(chosen.parameters * larger.parameters)
        if larger.optimal_parameters(seconds) < middle:
            break
        chosen = larger
    return chosen


def cpu_plan(
    device: Device, *, preset: str, batch_size: int, n_positions: int | None,
    given_steps: int | None, corpus_tokens: float | None,
) -> TrainingPlan:  # fmt: skip
    """The recipe, its steps filling the budget where ``given_steps`` is None."""
    seq = n_positions or get_preset(preset).n_positions
    ceiling = fill_ceiling(
        recipe_steps=RECIPE_STEPS, given_steps=given_steps,
        tokens_per_step=batch_size * seq, corpus_tokens=corpus_tokens,
    )  # fmt: skip
    return TrainingPlan(
        device=device, preset=preset, batch_size=batch_size, n_positions=n_positions,
        max_steps=ceiling, recipe_steps=RECIPE_STEPS, fills=given_steps is None,
        seq_length=seq, corpus_tokens=corpus_tokens,
    )  # fmt: skip


def gpu_plan(
    device: Device,
    *,
    minutes: float,
    vocab_size: int,
    given_steps: int | None,
    corpus_tokens: float | None,
    measure: Measure,
    peak_flops: float | None = None,
) -> TrainingPlan:
    """The plan of a CUDA device with ``minutes`` of training: each of
    :data:`GPU_PRESETS` measured at the batch its memory holds, the preset by
    :func:`choose_preset`, steps from the budget."""
    if not device.memory_bytes:
        raise ConfigError(f"the device {device.name}: its memory is unknown, cannot plan a batch")
    measured = []
    for preset in GPU_PRESETS:
        batch = batch_for_memory(preset, vocab_size, device.memory_bytes, GPU_SEQ_LENGTH)
        measured.append(measure(preset, batch))
    chosen = choose_preset(measured, minutes * 60)
    steps = fill_ceiling(
        recipe_steps=RECIPE_STEPS, given_steps=given_steps,
        tokens_per_step=chosen.batch_size * GPU_SEQ_LENGTH, corpus_tokens=corpus_tokens,
    )  # fmt: skip
    estimate = math.floor(minutes * 60 / chosen.step_s)
    notes = [
        f"GPU plan on {device.describe()}: "
        + "; ".join(
            f"{m.preset} ({m.parameters / 1e6:.0f}M) batch {m.batch_size}: {m.step_s:.3f} s a "
            f"step, {m.tokens_per_s:,.0f} tokens/s uncompiled"
            for m in measured
        ),
        f"            {minutes:.1f} minutes at that pace: ~{estimate:,} steps, "
        f"{estimate * chosen.tokens_per_s * chosen.step_s / 1e6:,.0f}M tokens; compute-optimal "
        f"size {chosen.optimal_parameters(minutes * 60) / 1e6:.0f}M: {chosen.preset}",
    ]
    plan = TrainingPlan(
        device=device, preset=chosen.preset, batch_size=chosen.batch_size,
        n_positions=GPU_SEQ_LENGTH, max_steps=steps, recipe_steps=RECIPE_STEPS,
        fills=given_steps is None, seq_length=GPU_SEQ_LENGTH, corpus_tokens=corpus_tokens,
        measured=tuple(measured), peak_flops=peak_flops,
    )  # fmt: skip
    epochs = plan.epochs(min(estimate, steps))
    if epochs is not None:
        notes.append(
            f"            that is ~{epochs:.1f} epochs of this corpus (the default one is "
            "this Python installation's own code, small for a GPU); for more data, build "
            "the real one (`codeparrot data build hub:codeparrot/codeparrot-clean --output "
            "corpus`) and train on it with `codeparrot train --data corpus` "
            "(docs/training.md, On a GPU)"
        )
    return _with_notes(plan, notes)


def steady_tokens_per_s(metrics: Any) -> float | None:
    """The median tokens/s of a run's ``metrics.jsonl`` records after the first (which
    holds the compilation); None where there are fewer than two."""
    import json
    import statistics
    from pathlib import Path

    path = Path(metrics)
    if not path.is_file():
        return None
    rates = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("tokens_per_s"):
            rates.append(float(record["tokens_per_s"]))
    return statistics.median(rates[1:]) if len(rates) > 1 else None


def cuda_measure(tokenizer_dir: Any, mixed_precision: str = "bf16") -> Measure:
    """A :data:`Measure` that times :data:`MEASURED_STEPS` eager AdamW steps of a preset
    on random tokens on the first CUDA device; an out-of-memory halves the batch (down to
    :data:`MIN_GPU_BATCH`, then a :class:`ConfigError` naming the batch)."""

    def measure(preset: str, batch: int) -> Measurement:
        import torch

        while True:
            try:
                return _time_steps(tokenizer_dir, preset, batch, mixed_precision)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                if batch // 2 < MIN_GPU_BATCH:
                    raise ConfigError(
                        f"{preset}: a batch of {batch} x {GPU_SEQ_LENGTH} tokens does not fit "
                        "the device's free memory; pass --no-gpu-plan"
                    ) from None
                batch //= 2

    return measure


def _time_steps(tokenizer_dir: Any, preset: str, batch: int, mixed_precision: str) -> Measurement:
    import time

    import torch

    from codeparrot.models.checkpoint import load_tokenizer
    from codeparrot.models.presets import build_model, count_parameters, flops_per_token

    tokenizer = load_tokenizer(tokenizer_dir)
    model = build_model(preset, tokenizer, n_positions=GPU_SEQ_LENGTH).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, len(tokenizer), (batch, GPU_SEQ_LENGTH), device="cuda")
    dtype = torch.bfloat16 if mixed_precision != "no" else torch.float32
    try:
        for step in range(MEASURED_STEPS + 1):
            if step == 1:
                torch.cuda.synchronize()
                started = time.perf_counter()
            with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step_s = (time.perf_counter() - started) / MEASURED_STEPS
        params = count_parameters(model, exclude_position_embeddings=True)
        per_token = flops_per_token(model.config, params, GPU_SEQ_LENGTH)
    finally:
        del model, optimizer
        torch.cuda.empty_cache()
    return Measurement(preset, batch, step_s, params, per_token)


def cuda_peak_flops(size: int = 8192, repeats: int = 10) -> float:
    """FLOP/s of a ``size``-cubed bf16 product on the first CUDA device: a product large
    enough to fill it (a 1,024-cubed one does not), the MFU's denominator."""
    import time

    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        a @ b
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def _with_notes(plan: TrainingPlan, notes: list[str]) -> TrainingPlan:
    import dataclasses

    return dataclasses.replace(plan, notes=tuple(notes))


__all__ = [
    "GPU_PRESETS",
    "GPU_SEQ_LENGTH",
    "RECIPE_STEPS",
    "Device",
    "Measurement",
    "TrainingPlan",
    "batch_for_memory",
    "choose_preset",
    "corpus_train_tokens",
    "cpu_plan",
    "cuda_measure",
    "cuda_peak_flops",
    "detect_device",
    "gpu_plan",
    "preset_parameters",
    "steady_tokens_per_s",
]
