"""Model presets: GPT-2 shapes sized for a laptop, for CodeParrot-small and for CodeParrot,
and Qwen3-style shapes (rotary positions, RMSNorm, SwiGLU, QK-norm) of the same sizes.

A preset fixes the transformer's shape; the vocabulary comes from the tokenizer and is
padded to a multiple of 64 (matmuls on padded shapes run faster, and the extra rows are
never produced by the tokenizer). Models are built with transformers' own config classes
(``GPT2Config``, ``Qwen3Config``) and ``AutoModelForCausalLM.from_config``, so every
checkpoint is a plain Hugging Face model that loads without custom code.

This module imports only the standard library at module level; torch and transformers
are imported inside the functions that build models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.errors import ConfigError
from codeparrot.options import MAX_N_POSITIONS as MAX_N_POSITIONS  # re-exported
from codeparrot.options import N_POSITIONS, PRESET

VOCAB_MULTIPLE = 64
# the model types a preset builds from scratch (the families codeparrot and
# codeparrot-qwen3 of codeparrot.families)
PRESET_MODEL_TYPES = ("gpt2", "qwen3")


@dataclass(frozen=True)
class ModelPreset:
    """The shape of a model (vocabulary excluded)."""

    name: str
    n_layer: int
    n_head: int
    n_embd: int
    n_positions: int  # context length the model is built for
    dropout: float  # residual, embedding and attention dropout
    description: str
    learning_rate: float  # peak of the pretraining schedule (with AdamW)
    architecture: str = "gpt2"  # one of PRESET_MODEL_TYPES
    intermediate_size: int | None = None  # SwiGLU width (qwen3); GPT-2's MLP is 4x
    tie_word_embeddings: bool = True  # the output head shares the input embedding
    muon_learning_rate: float | None = None  # the peak with Muon, where measured apart

    def peak_learning_rate(self, optimizer: str) -> float:
        """The pretraining peak for ``optimizer`` (``adamw`` or ``muon``)."""
        if optimizer == "muon" and self.muon_learning_rate is not None:
            return self.muon_learning_rate
        return self.learning_rate


def _qwen(
    name: str,
    n_layer: int,
    n_head: int,
    n_embd: int,
    n_positions: int,
    intermediate_size: int,
    learning_rate: float,
    description: str,
    *,
    tied: bool = True,
    muon_learning_rate: float | None = None,
) -> ModelPreset:
    """A Qwen3-architecture preset (no dropout)."""
    return ModelPreset(
        name, n_layer, n_head, n_embd, n_positions, 0.0, description, learning_rate,
        architecture="qwen3", intermediate_size=intermediate_size, tie_word_embeddings=tied,
        muon_learning_rate=muon_learning_rate,
    )  # fmt: skip


PRESETS: dict[str, ModelPreset] = {
    # ~5M parameters with an 8k vocabulary: trains usefully on 2 CPU cores in minutes.
    # No dropout: a short pretraining run sees every token about once. The reference's
    # learning rates are far too low for it: RESULTS.md (Model quality) compares 5e-4
    # and 2e-3. With Muon + WSD, 3e-3 ends 0.6-0.9% lower than 2e-3 after 1,000 steps
    # (bench/recipe.py, with and without FIM; RESULTS.md, Recipe ablations).
    "tiny": ModelPreset(
        "tiny",
        4,
        4,
        256,
        256,
        0.0,
        "4 layers, 256 wide, context 256",
        2e-3,
        muon_learning_rate=3e-3,
    ),
    # The `gpt2` shape: codeparrot-small (~111M with a 32k vocabulary).
    "small": ModelPreset(
        "small", 12, 12, 768, 1024, 0.1, "the gpt2 shape (codeparrot-small)", 5e-4
    ),
    # The `gpt2-xl` shape: codeparrot (~1.5B with a 32k vocabulary).
    "large": ModelPreset("large", 48, 25, 1600, 1024, 0.1, "the gpt2-xl shape (codeparrot)", 2e-4),
    # Qwen3 blocks at tiny's width, depth and context. SwiGLU has three matrices, so its
    # width is 704 (2.75x, a multiple of 64) where GPT-2's two-matrix MLP is 4x: per block
    # 803k parameters against GPT-2's 789k, and no position table (rotary positions), so
    # the whole model is within 1% of tiny. The quickstart's preset: with Muon at 3e-3 its
    # held-out loss after 1,000 steps is 20% below tiny's (RESULTS.md, Recipe ablations).
    "tiny-qwen": _qwen(
        "tiny-qwen",
        4,
        4,
        256,
        256,
        704,
        2e-3,
        "tiny's shape in Qwen3 blocks (RoPE, RMSNorm, SwiGLU, QK-norm), tied head",
        muon_learning_rate=3e-3,
    ),
    "tiny-qwen-untied": _qwen(
        "tiny-qwen-untied",
        4,
        4,
        256,
        256,
        704,
        2e-3,
        "tiny-qwen with an untied output head",
        tied=False,
    ),
    # ~36M with an 8k vocabulary: the quickstart's model on a GPU that a budget of minutes
    # trains to a few tokens a parameter (quickstart/plan.py). 2.75x SwiGLU as tiny-qwen;
    # head width 64. Peak learning rates between tiny's and small's, not tuned.
    "mini-qwen": _qwen(
        "mini-qwen",
        10,
        8,
        512,
        1024,
        1408,
        1e-3,
        "10 layers, 512 wide, context 1024, Qwen3 blocks, tied head",
        muon_learning_rate=2e-3,
    ),
    # The gpt2 shape in Qwen3 blocks: SwiGLU width 2048 (2.67x) matches GPT-2's MLP.
    "small-qwen": _qwen(
        "small-qwen", 12, 12, 768, 1024, 2048, 5e-4, "the gpt2 shape in Qwen3 blocks, tied head"
    ),
}


def get_preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(PRESETS)
        raise ConfigError(f"--preset: unknown preset {name!r} (known: {known})") from None


def padded_vocab_size(n_tokens: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """The smallest multiple of ``multiple`` that holds ``n_tokens`` token ids."""
    if n_tokens < 1:
        raise ValueError(f"a vocabulary needs at least one token, got {n_tokens}")
    return -(-n_tokens // multiple) * multiple


def build_model_config(
    preset: str | ModelPreset,
    tokenizer: Any,
    *,
    n_positions: int | None = None,
    attn_implementation: str = "sdpa",
) -> Any:
    """The model config of ``preset`` (``GPT2Config`` or ``Qwen3Config``) with the
    tokenizer's vocabulary (padded) and EOS id."""
    shape = get_preset(preset) if isinstance(preset, str) else preset
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("--tokenizer: the tokenizer has no end-of-text (eos) token")
    if shape.architecture == "qwen3":
        config = _qwen3_config(shape, padded_vocab_size(len(tokenizer)), eos, n_positions)
        config._attn_implementation = attn_implementation
        return config
    if shape.architecture != "gpt2":
        raise ConfigError(
            f"preset {shape.name}: unknown architecture {shape.architecture!r} "
            f"(known: {', '.join(PRESET_MODEL_TYPES)})"
        )
    from transformers import GPT2Config

    config = GPT2Config(
        vocab_size=padded_vocab_size(len(tokenizer)),
        n_positions=n_positions or shape.n_positions,
        n_embd=shape.n_embd,
        n_layer=shape.n_layer,
        n_head=shape.n_head,
        resid_pdrop=shape.dropout,
        embd_pdrop=shape.dropout,
        attn_pdrop=shape.dropout,
        bos_token_id=eos,
        eos_token_id=eos,
        use_cache=True,
    )
    config._attn_implementation = attn_implementation
    return config


def _qwen3_config(shape: ModelPreset, vocab_size: int, eos: int, n_positions: int | None) -> Any:
    """Qwen3 blocks: rotary positions, RMSNorm, SwiGLU, RMS-normed queries and keys, no
    biases; every head has its own keys and values (no grouping at these widths)."""
    from transformers import Qwen3Config

    if shape.n_embd % shape.n_head:
        raise ConfigError(f"preset {shape.name}: width {shape.n_embd} is not a multiple of "
                          f"{shape.n_head} heads")  # fmt: skip
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=shape.n_embd,
        intermediate_size=shape.intermediate_size or 4 * shape.n_embd,
        num_hidden_layers=shape.n_layer,
        num_attention_heads=shape.n_head,
        num_key_value_heads=shape.n_head,
        head_dim=shape.n_embd // shape.n_head,
        max_position_embeddings=n_positions or shape.n_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_dropout=shape.dropout,
        tie_word_embeddings=shape.tie_word_embeddings,
        bos_token_id=eos,
        eos_token_id=eos,
        use_cache=True,
    )


@dataclass(frozen=True)
class ModelShape:
    """What the training loop, the FLOP count and the engine read of a model config,
    whatever its architecture's attribute names."""

    n_layer: int
    n_head: int
    head_dim: int
    width: int
    context: int


def model_shape(model_config: Any) -> ModelShape:
    """The shape of a loaded model's config (GPT-2's names or the common ones)."""

    def first(*names: str) -> Any:
        for name in names:
            value = getattr(model_config, name, None)
            if value is not None:
                return value
        raise ConfigError(f"model config {type(model_config).__name__} has none of {names}")

    n_head = int(first("n_head", "num_attention_heads"))
    width = int(first("n_embd", "hidden_size"))
    head_dim = getattr(model_config, "head_dim", None) or width // n_head
    return ModelShape(
        n_layer=int(first("n_layer", "num_hidden_layers")),
        n_head=n_head,
        head_dim=int(head_dim),
        width=width,
        context=int(first("n_positions", "max_position_embeddings")),
    )


def model_context(model_config: Any) -> int:
    """The context length (positions) of a loaded model's config."""
    return model_shape(model_config).context


def build_model(
    preset: str | ModelPreset,
    tokenizer: Any,
    *,
    seed: int = 0,
    n_positions: int | None = None,
    attn_implementation: str = "sdpa",
) -> Any:
    """A freshly initialised model of ``preset`` (deterministic for a given ``seed``)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = build_model_config(
        preset, tokenizer, n_positions=n_positions, attn_implementation=attn_implementation
    )
    devices = []  # fork_rng wants an explicit (empty) device list on CPU-only machines
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    return model


def count_parameters(model: Any, *, exclude_position_embeddings: bool = False) -> int:
    """Distinct parameters (tied input/output embeddings count once).

    ``exclude_position_embeddings`` gives the N of the usual 6N FLOPs-per-token estimate.
    """
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    if exclude_position_embeddings:
        wpe = getattr(getattr(model, "transformer", None), "wpe", None)
        if wpe is not None:
            total -= wpe.weight.numel()
    return total


def flops_per_token(model_config: Any, n_params: int, seq_length: int) -> float:
    """Training FLOPs per token: 6N + 12·L·H·Q·T (PaLM appendix B, as in nanoGPT)."""
    shape = model_shape(model_config)
    return 6 * n_params + 12 * shape.n_layer * shape.n_head * shape.head_dim * seq_length


@dataclass(frozen=True)
class InitConfig(Config):
    """Write a freshly initialised checkpoint of a preset with a tokenizer."""

    tokenizer: Path = option(help="tokenizer directory (AutoTokenizer.from_pretrained)")
    output: Path = option(help="checkpoint directory to write (must not exist)")
    preset: str = PRESET.field()
    n_positions: int | None = N_POSITIONS.field()
    seed: int = option(0, "random seed of the initialisation")


@dataclass
class InitResult:
    output: Path
    preset: str
    parameters: int
    vocab_size: int


def init_checkpoint(config: InitConfig) -> InitResult:
    """Build a model of ``config.preset`` and save it with its tokenizer as a checkpoint."""
    from codeparrot.io import provenance
    from codeparrot.models.checkpoint import load_tokenizer, save_checkpoint

    tokenizer = load_tokenizer(config.tokenizer)
    model = build_model(config.preset, tokenizer, seed=config.seed, n_positions=config.n_positions)
    parameters = count_parameters(model)
    meta = {
        "step": 0,
        "tokens_seen": 0,
        "parameters": parameters,
        "preset": config.preset,
        "seed": config.seed,
        "provenance": provenance(config),
    }
    save_checkpoint(model, tokenizer, config.output, meta)
    return InitResult(config.output, config.preset, parameters, model.config.vocab_size)
