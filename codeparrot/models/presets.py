"""Model presets: GPT-2 shapes sized for a laptop, for CodeParrot-small and for CodeParrot.

A preset fixes the transformer's shape; the vocabulary comes from the tokenizer and is
padded to a multiple of 64 (matmuls on padded shapes run faster, and the extra rows are
never produced by the tokenizer). Models are built with ``GPT2Config`` and
``AutoModelForCausalLM.from_config`` so every checkpoint is a plain Hugging Face GPT-2.

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


@dataclass(frozen=True)
class ModelPreset:
    """The shape of a GPT-2 model (vocabulary excluded)."""

    name: str
    n_layer: int
    n_head: int
    n_embd: int
    n_positions: int  # context length the model is built for
    dropout: float  # residual, embedding and attention dropout
    description: str
    learning_rate: float  # peak of the pretraining schedule


PRESETS: dict[str, ModelPreset] = {
    # ~5M parameters with an 8k vocabulary: trains usefully on 2 CPU cores in minutes.
    # No dropout: a short pretraining run sees every token about once. The reference's
    # learning rates are far too low for it: BENCHMARKS.md (Model quality) compares 5e-4
    # and 2e-3.
    "tiny": ModelPreset("tiny", 4, 4, 256, 256, 0.0, "4 layers, 256 wide, context 256", 2e-3),
    # The `gpt2` shape: codeparrot-small (~111M with a 32k vocabulary).
    "small": ModelPreset(
        "small", 12, 12, 768, 1024, 0.1, "the gpt2 shape (codeparrot-small)", 5e-4
    ),
    # The `gpt2-xl` shape: codeparrot (~1.5B with a 32k vocabulary).
    "large": ModelPreset("large", 48, 25, 1600, 1024, 0.1, "the gpt2-xl shape (codeparrot)", 2e-4),
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
    """A ``GPT2Config`` of ``preset`` with the tokenizer's vocabulary (padded) and EOS id."""
    from transformers import GPT2Config

    shape = get_preset(preset) if isinstance(preset, str) else preset
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("--tokenizer: the tokenizer has no end-of-text (eos) token")
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


def build_model(
    preset: str | ModelPreset,
    tokenizer: Any,
    *,
    seed: int = 0,
    n_positions: int | None = None,
    attn_implementation: str = "sdpa",
) -> Any:
    """A freshly initialised GPT-2 of ``preset`` (deterministic for a given ``seed``)."""
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
    head_dim = model_config.n_embd // model_config.n_head
    return 6 * n_params + 12 * model_config.n_layer * model_config.n_head * head_dim * seq_length


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
