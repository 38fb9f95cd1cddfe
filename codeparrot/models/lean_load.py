"""Load a checkpoint for the lean decoders without transformers' model classes.

The lean decoders (:mod:`codeparrot.generation.lean`) only *read* a model's parameters
and configuration: ``model.transformer.h[0].attn.c_attn.weight``, ``model.config``,
``model.lm_head.weight``, ``block.mlp.act``. Importing transformers' model classes
(``modeling_utils`` and what it pulls in: torch.distributed, torch._dynamo, sympy, the
weight-conversion machinery) and building the model through ``from_pretrained`` costs
about 2.7 s on 2 cores for a 164M model, more than a language server can spend before
its first suggestion. :func:`load_lean_checkpoint` builds the same parameter tree straight
from the safetensors files instead:

- every check of :mod:`codeparrot.models.checkpoint` runs as for ``load_checkpoint``
  (``config.json``: no ``auto_map``, a model type transformers ships, a causal LM, size
  bounds; the tokenizer: no custom code, an end-of-text token, a vocabulary that fits;
  the weights: every tensor the architecture needs, of the right shape, or the same
  error ``load_checkpoint`` gives);
- ``config`` is transformers' own *configuration* class (cheap to import), so every
  default is transformers';
- tied output heads follow ``tie_word_embeddings``, as transformers ties them;
- the MLP's activation is the torch function that transformers' ``ACT2FN`` computes
  for the few names the decoders use (others load the transformers model);
- rotary inverse frequencies are computed as the model's rotary module does;
- ``generation_config`` holds ``generation_config.json`` (the engine reads its end ids).

The result is an ``nn.Module`` named as transformers' causal LM class of the
``model_type`` (so the lean decoders find theirs) whose ``parameters()``, ``to()`` and ``eval()`` work
as the real model's; it has no forward. :func:`lean_load_problem` says up front when a
checkpoint cannot take this path (an adapter, ``pytorch_model.bin`` weights, an
architecture or variant the decoders do not compute), and the caller then uses
``load_checkpoint``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from codeparrot.errors import CheckpointError
from codeparrot.families import WeightLayout, lean_layouts
from codeparrot.models.adapter import is_adapter
from codeparrot.models.bounds import family_defaults
from codeparrot.models.checkpoint import (
    _checked,
    _read_object,
    check_vocab,
    context_length,
    fit_to_context,
    read_checkpoint_meta,
    read_model_config,
    resolve_checkpoint,
)
from codeparrot.models.lean_variants import variant_problem
from codeparrot.models.start_cache import StartCache, config_record, tokenizer_record

logger = logging.getLogger(__name__)

# the architectures this module lays out (the families with a lean decoder), by
# model_type: the key transformers' AutoModelForCausalLM picks the class by
LAYOUTS: dict[str, tuple[str, WeightLayout]] = lean_layouts()
ARCHITECTURES = {model_type: arch for model_type, (arch, _) in LAYOUTS.items()}
# activations (transformers' ACT2FN names) whose torch computation is written out below
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def lean_load_problem(path: Path, config: dict[str, Any]) -> str:
    """Why ``path`` (a resolved checkpoint directory whose checked ``config.json`` is
    ``config``) must load through transformers' model classes; "" when it need not."""
    if is_adapter(path):
        return "an adapter (loaded onto its base by peft)"
    if config.get("model_type") not in ARCHITECTURES:
        return f"model type {config.get('model_type')!r} has no lean load"
    if not ((path / SINGLE_FILE).is_file() or (path / INDEX_FILE).is_file()):
        return "weights not in safetensors"
    return ""


def _activation_name(config: Any, layout: WeightLayout) -> str:
    """The MLP's activation as transformers' configuration names it."""
    return config.activation_function if layout.stack == "transformer" else config.hidden_act


def load_lean_checkpoint(
    path: str | Path, *, revision: str | None = None
) -> tuple[Any, Any, dict[str, Any]] | None:
    """(model, tokenizer, meta) as ``load_checkpoint`` gives them, but with the model a
    parameter tree for the lean decoder; None (before the tokenizer or any weight is
    read) where the checkpoint needs transformers' model classes."""
    path = resolve_checkpoint(path, revision)
    cache = StartCache.for_checkpoint(path)
    kept = None if cache is None else cache.load()  # transformers' facts of an earlier load
    defaults = None if kept is None else kept.family_defaults
    # config checks first: a bad directory fails here. A kept tokenizer skips
    # load_tokenizer's checks: it was kept only after they passed on these same files.
    raw = read_model_config(path, defaults=defaults)
    if lean_load_problem(path, raw):
        return None
    config, tokenizer = (None, None) if kept is None else (kept.config(), kept.tokenizer())
    if config is None:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    arch, layout = LAYOUTS[raw["model_type"]]
    model = _root(arch, config)
    if variant_problem(arch, config) or _activation_name(config, layout) not in ACTIVATIONS:
        return None  # a variant the decoder does not compute, or an activation not below
    _, tokenizer = _checked(path, tokenizer, None, defaults=defaults)
    meta = read_checkpoint_meta(path)
    tensors = _read_weights(path, config, layout)
    rope = _fill(model, tensors, config, layout, None if kept is None else kept.rope)
    model.weight_files = _weight_files(path)
    model.generation_config = _generation_config(path)
    check_vocab(tokenizer, config.vocab_size, where=f"checkpoint {path}")
    fit_to_context(tokenizer, context_length(raw))
    if cache is not None and kept is None:
        _keep(cache, raw, config, tokenizer, rope)
    return model, tokenizer, meta


def _keep(cache: StartCache, raw: dict[str, Any], config: Any, tokenizer: Any, rope: Any) -> None:
    """Keep what this load took from transformers for the next one (where the kept
    tokenizer computes exactly what transformers' does; else one log line says why)."""
    record, why_not = tokenizer_record(tokenizer, cache.path)
    if record is None:
        logger.info(
            "%s: its tokenizer is loaded through transformers at each start (%s)",
            cache.path,
            why_not,
        )
        return
    kept_rope = None
    if rope is not None:
        inv_freq, scaling = rope
        values = inv_freq.tolist()
        if not torch.equal(torch.tensor(values, dtype=torch.float32), inv_freq):
            return  # frequencies a list of floats cannot keep exactly (not float32)
        kept_rope = [values, float(scaling)]
    cache.store(
        {
            "family_defaults": family_defaults(raw.get("model_type")),
            "config": config_record(config),
            "tokenizer": record,
            "rope": kept_rope,
        }
    )


def _root(arch: str, config: Any) -> Any:
    """An empty model named ``arch`` (the name the decoders dispatch on)."""
    cls = type(arch, (LeanModel,), {"__module__": __name__})
    model = cls()
    model.config = config
    return model


class LeanModel(torch.nn.Module):
    """Parameters (and buffers) of a causal LM laid out as transformers names them,
    without transformers' forward: only the lean decoder computes it."""

    config: Any
    generation_config: Any
    weight_files: list[Path]  # the safetensors files the weights were read from

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise CheckpointError(
            f"{type(self).__name__} was loaded for the lean decoder only and has no "
            "transformers forward; load it with Engine.load(..., lean_load=False)"
        )

    @property
    def dtype(self) -> Any:
        return next(self.parameters()).dtype


def _expected(layout: WeightLayout, cfg: Any) -> dict[str, tuple[int, ...]]:
    """Every weight the architecture reads, and its shape (as transformers builds it)."""
    if layout.stack == "transformer":
        return _expected_gpt2(layout, cfg)
    return _expected_llama(layout, cfg)


def _expected_gpt2(layout: WeightLayout, cfg: Any) -> dict[str, tuple[int, ...]]:
    C, inner = cfg.n_embd, cfg.n_inner or 4 * cfg.n_embd
    if layout.conv1d:  # GPT-2's Conv1D: (in, out)
        qkv, lin = 3 * C, lambda i, o: (i, o)
    else:  # nn.Linear: (out, in); multi-query: one key/value head
        qkv = C + 2 * (C // cfg.n_head if cfg.multi_query else C)
        lin = lambda i, o: (o, i)  # noqa: E731
    shapes = {"transformer.wte.weight": (cfg.vocab_size, C)}
    shapes["transformer.wpe.weight"] = (cfg.n_positions, C)
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        for norm in ("ln_1", "ln_2"):
            shapes[p + norm + ".weight"] = shapes[p + norm + ".bias"] = (C,)
        shapes[p + "attn.c_attn.weight"], shapes[p + "attn.c_attn.bias"] = lin(C, qkv), (qkv,)
        shapes[p + "attn.c_proj.weight"], shapes[p + "attn.c_proj.bias"] = (C, C), (C,)
        shapes[p + "mlp.c_fc.weight"], shapes[p + "mlp.c_fc.bias"] = lin(C, inner), (inner,)
        shapes[p + "mlp.c_proj.weight"], shapes[p + "mlp.c_proj.bias"] = lin(inner, C), (C,)
    shapes["transformer.ln_f.weight"] = shapes["transformer.ln_f.bias"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, C)
    return shapes


def _llama_biases(layout: WeightLayout, cfg: Any) -> tuple[set[str], bool]:
    """(projections with a bias, whether the MLP's have one) as each family builds them."""
    if layout.biases == "qkv":  # Qwen2
        return {"q", "k", "v"}, False
    if layout.biases == "none":  # Mistral
        return set(), False
    if layout.biases == "use_bias":  # Starcoder2
        return ({"q", "k", "v", "o"}, True) if cfg.use_bias else (set(), False)
    attn = {"q", "k", "v", "o"} if getattr(cfg, "attention_bias", False) else set()
    return attn, bool(getattr(cfg, "mlp_bias", False))


def _expected_llama(layout: WeightLayout, cfg: Any) -> dict[str, tuple[int, ...]]:
    C, nh, nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    hd, inner = _head_dim(cfg), cfg.intermediate_size
    attn_bias, mlp_bias = _llama_biases(layout, cfg)
    layer_norm = layout.layer_norm  # LayerNorm with a bias, a plain MLP
    outs = {"q": nh * hd, "k": nkv * hd, "v": nkv * hd}
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, C)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for name in ("input_layernorm", "post_attention_layernorm"):
            shapes[p + name + ".weight"] = (C,)
            if layer_norm:
                shapes[p + name + ".bias"] = (C,)
        for k in "qkvo":
            out, inp = (C, nh * hd) if k == "o" else (outs[k], C)
            shapes[p + f"self_attn.{k}_proj.weight"] = (out, inp)
            if k in attn_bias:
                shapes[p + f"self_attn.{k}_proj.bias"] = (out,)
        if layout.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = shapes[p + "self_attn.k_norm.weight"] = (hd,)
        mlp = (
            {"c_fc": (inner, C), "c_proj": (C, inner)}
            if layer_norm
            else {"gate_proj": (inner, C), "up_proj": (inner, C), "down_proj": (C, inner)}
        )
        for name, shape in mlp.items():
            shapes[p + f"mlp.{name}.weight"] = shape
            if mlp_bias:
                shapes[p + f"mlp.{name}.bias"] = (shape[0],)
    shapes["model.norm.weight"] = (C,)
    if layer_norm:
        shapes["model.norm.bias"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, C)
    return shapes


def _head_dim(cfg: Any) -> int:
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def _weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint: the single file, or the index's shards."""
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    index = _read_object(path / INDEX_FILE, "checkpoint")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"checkpoint {path}: {INDEX_FILE} has no weight_map")
    return [path / name for name in sorted(set(weight_map.values()))]


def _read_weights(path: Path, cfg: Any, layout: WeightLayout) -> dict[str, Any]:
    """The tensors the architecture needs, by name, memory-mapped from the safetensors
    files; the same error as ``load_checkpoint`` for a file that cannot be read or a
    tensor that is missing or of the wrong shape."""
    from safetensors import safe_open

    expected = _expected(layout, cfg)
    prefix = layout.prefix
    tensors: dict[str, Any] = {}
    wrong: list[str] = []
    try:
        for file in _weight_files(path):
            with safe_open(str(file), framework="pt", device="cpu") as f:
                keys = list(f.keys())
                # a base model's file (no "transformer." / "model." prefix) fits as well
                bare = not any(k.startswith(prefix) for k in keys)
                for key in keys:
                    name = prefix + key if bare and not key.startswith("lm_head.") else key
                    if name not in expected:
                        continue  # transformers ignores unexpected weights too
                    if tuple(f.get_slice(key).get_shape()) != expected[name]:
                        wrong.append(name)
                        continue
                    tensors[name] = f.get_tensor(key)
    except CheckpointError:
        raise
    except Exception as e:  # safetensors raises its own types for a truncated file
        raise CheckpointError(
            f"checkpoint {path}: weights cannot be loaded, not a loadable causal LM ({e})"
        ) from e
    missing = sorted(set(expected) - set(tensors) - set(wrong)) + sorted(wrong)
    if missing:
        shown = ", ".join(missing[:3])
        raise CheckpointError(
            f"checkpoint {path}: its weights do not fit a {cfg.model_type} causal "
            f"LM ({len(missing)} missing or of the wrong shape, e.g. {shown})"
        )
    return tensors


def _fill(
    model: Any, tensors: dict[str, Any], cfg: Any, layout: WeightLayout, kept_rope: Any = None
) -> tuple[Any, float] | None:
    """Lay ``tensors`` out under ``model`` by their dotted names (numbers index lists),
    tie the head, and add what the decoders read besides weights: the rotary frequencies
    (``kept_rope``'s where an earlier load kept them), which it returns."""
    for name, tensor in tensors.items():
        *parents, leaf = name.split(".")
        node = model
        for part in parents:
            node = _child(node, part)
        setattr(node, leaf, torch.nn.Parameter(tensor, requires_grad=False))
    for module in model.modules():  # a matrix without a bias has bias None, as nn.Linear
        if "weight" in module._parameters and "bias" not in module._parameters:
            module.register_parameter("bias", None)
    gpt2_like = layout.stack == "transformer"
    embed = "transformer.wte" if gpt2_like else "model.embed_tokens"
    if cfg.tie_word_embeddings:
        head = _child(model, "lm_head")
        head.weight = model.get_submodule(embed).weight
    act = _activation(_activation_name(cfg, layout))
    blocks = model.transformer.h if gpt2_like else model.model.layers
    for block in blocks:
        block.mlp.act = act  # GPT-2, GPTBigCode and Starcoder2 name it so
        block.mlp.act_fn = act  # the Llama family
    if gpt2_like:  # learned positions, no rotary ones
        return None
    rotary = _child(model.model, "rotary_emb")
    if kept_rope is not None:
        inv_freq, scaling = torch.tensor(kept_rope[0], dtype=torch.float32), kept_rope[1]
    else:
        inv_freq, scaling = _rope(cfg)
    rotary.attention_scaling = scaling
    rotary.register_buffer("inv_freq", inv_freq, persistent=False)
    return inv_freq, scaling


def _child(node: Any, part: str) -> Any:
    """``node``'s sub-module ``part`` (a list where the name is a number), made if new."""
    if part.isdigit():  # node is a ModuleList
        i = int(part)
        while len(node) <= i:
            node.append(torch.nn.Module())
        return node[i]
    child = getattr(node, part, None)
    if child is None:
        child = torch.nn.ModuleList() if part in ("h", "layers") else torch.nn.Module()
        setattr(node, part, child)
    return child


def _activation(name: str) -> Any:
    """The torch computation of transformers' ``ACT2FN[name]`` for the covered names."""
    import torch.nn.functional as F

    if name == "gelu":
        return F.gelu
    if name == "gelu_pytorch_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu_new":  # NewGELUActivation's formula (GPT-2's original)
        c = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))
    if name == "relu":
        return F.relu
    if name in ("silu", "swish"):
        return F.silu
    raise CheckpointError(f"activation {name!r} has no lean load")  # checked before


def _rope(cfg: Any) -> tuple[Any, float]:
    """(inverse frequencies, attention scaling) as the model's rotary module makes them."""
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](cfg)
        return inv_freq, float(scaling)
    base = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    dim = _head_dim(cfg)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    return inv_freq, 1.0


def _generation_config(path: Path) -> SimpleNamespace:
    """``generation_config.json``'s settings as attributes (``eos_token_id`` may be a
    list); without the file, none (the engine then reads the model config's end id)."""
    file = path / "generation_config.json"
    data = _read_object(file, "checkpoint")
    fields = {k: v for k, v in data.items() if k.isidentifier()}
    return SimpleNamespace(**{"eos_token_id": None, **fields})
