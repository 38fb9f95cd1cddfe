"""``codeparrot export --gguf DIR``: a checkpoint as GGUF files for llama.cpp, Ollama, LM
Studio and Tabby, written through the ``gguf`` package (``pip install gguf``).

What is written, per ``--types`` (``f32``, ``f16``, ``q8_0``): ``model-TYPE.gguf`` with the
architecture's hyperparameters, the weights under llama.cpp's tensor names (matrices in the
type asked, norms and biases in f32, a tied output head left to llama.cpp's fallback to the
embedding), and the byte-level BPE vocabulary with its merges; then an Ollama
``Modelfile`` whose template lays out fill in the middle as the checkpoint was trained.

What is refused, before anything is written:

- an architecture GGUF cannot express here (only GPT-2 and Qwen3 blocks, the presets'), or
  a GPT-2 variant llama.cpp's ``gpt2`` graph does not compute (another activation, scaled
  or upcast attention);
- a tokenizer whose pre-tokenizer llama.cpp does not know. llama.cpp splits text before BPE
  with a fixed list of named rules, so a GGUF of a tokenizer trained with another split
  would tokenize text differently from the checkpoint, silently. The quickstart's tokenizer
  uses GPT-2's split (``tokenizer train --pre-tokenizer gpt2``) and exports as ``gpt-2``;
  the code-aware split (``tokenizer train``'s default for large vocabularies) is refused,
  with what a ``gpt2``-split tokenizer costs in tokens (RESULTS.md, Tokenizer).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.errors import CheckpointError
from codeparrot.options import CHECKPOINT

GGUF_TYPES = ("f32", "f16", "q8_0")
# GPT-2's pre-tokenizer as tokenizer.json writes it: byte-level with its built-in regex.
GPT2_PRE_TOKENIZER = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
# GPT2Config settings llama.cpp's gpt2 graph does not compute (it is GELU-tanh, unscaled).
GPT2_UNSUPPORTED = {
    "activation_function": ("gelu_new",),
    "scale_attn_by_inverse_layer_idx": (False, None),
    "reorder_and_upcast_attn": (False, None),
    "add_cross_attention": (False, None),
}


class ExportError(CheckpointError):
    """The checkpoint cannot be written as GGUF without changing what it computes."""


@dataclass(frozen=True)
class ExportConfig(Config):
    """Write a checkpoint as GGUF files (llama.cpp, Ollama) and an Ollama Modelfile."""

    checkpoint: Path = CHECKPOINT.field()
    gguf: Path = option(help="folder to write model-TYPE.gguf and Modelfile into")
    types: tuple[str, ...] = option(
        ("f16", "q8_0"), "GGUF weight types to write", choices=GGUF_TYPES, flag="--types"
    )
    force: bool = option(False, "overwrite files that exist")


@dataclass
class ExportResult:
    files: list[Path] = field(default_factory=list)
    modelfile: Path | None = None
    architecture: str = ""
    pre_tokenizer: str = ""
    tensors: int = 0


def export_gguf(
    config: ExportConfig, progress: Callable[[str], None] | None = None
) -> ExportResult:
    """Check everything, then write each type to a temporary name and rename it."""
    from codeparrot.models.checkpoint import check_checkpoint_files, resolve_checkpoint

    say = progress or (lambda _line: None)
    path = resolve_checkpoint(config.checkpoint)
    model_config = check_checkpoint_files(path)
    arch = gguf_architecture(model_config)
    vocab = read_vocabulary(path, int(model_config["vocab_size"]))
    weights = weight_files(path)
    targets = [config.gguf / f"model-{t}.gguf" for t in config.types]
    taken = [str(t) for t in [*targets, config.gguf / "Modelfile"] if t.exists()]
    if taken and not config.force:
        raise ExportError(f"--gguf {config.gguf}: {', '.join(taken)} exist (--force overwrites)")
    config.gguf.mkdir(parents=True, exist_ok=True)
    result = ExportResult(architecture=arch, pre_tokenizer=vocab["pre"])
    for kind, target in zip(config.types, targets, strict=True):
        say(f"writing {target} ({arch}, {kind})")
        result.tensors = write_gguf(target, arch, model_config, vocab, weights, kind)
        result.files.append(target)
    modelfile = config.gguf / "Modelfile"
    _write_text(modelfile, modelfile_text(targets[-1].name, path, vocab, model_config))
    result.modelfile = modelfile
    return result


def gguf_architecture(model_config: dict[str, Any]) -> str:
    """``gpt2`` or ``qwen3``, or an ExportError naming what GGUF cannot express here."""
    model_type = model_config.get("model_type")
    if model_type == "gpt2":
        for key, allowed in GPT2_UNSUPPORTED.items():
            if model_config.get(key) not in allowed:
                raise ExportError(
                    f"export --gguf: GPT-2 with {key}={model_config.get(key)!r} is not what "
                    "llama.cpp's gpt2 graph computes"
                )
        return "gpt2"
    if model_type == "qwen3":
        rope = model_config.get("rope_scaling") or model_config.get("rope_parameters") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise ExportError(f"export --gguf: Qwen3 with rope scaling {kind!r} is not written")
        return "qwen3"
    raise ExportError(
        f"export --gguf: architecture {model_type!r} is not one this exporter writes "
        "(gpt2 and qwen3: the presets' blocks)"
    )


def pre_tokenizer_name(tokenizer_json: dict[str, Any]) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenizer, or an ExportError."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    if tokenizer_json.get("normalizer") is None and all(
        pre.get(k) == v for k, v in GPT2_PRE_TOKENIZER.items()
    ):
        return "gpt-2"
    kind = pre.get("type", "none")
    raise ExportError(
        f"export --gguf: the tokenizer's pre-tokenizer ({kind}, not GPT-2's byte-level "
        "regex) is not one llama.cpp knows, so a GGUF would split text differently from this "
        "checkpoint. Train the tokenizer with `codeparrot tokenizer train --pre-tokenizer "
        "gpt2` (the quickstart's; at 8,192 tokens GPT-2's tokenizer needs 1.56x its tokens "
        "against 1.73x for the code-aware split) and the model on it."
    )


def read_vocabulary(path: Path, vocab_size: int) -> dict[str, Any]:
    """Tokens by id (padded to the model's rows), their GGUF types, merges, special ids."""
    file = path / "tokenizer.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExportError(f"export --gguf: {file} unreadable ({e})") from e
    model = data.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ExportError(f"export --gguf: {file} is not a byte-level BPE tokenizer")
    pre = pre_tokenizer_name(data)
    tokens: dict[int, str] = {int(i): t for t, i in model["vocab"].items()}
    types = dict.fromkeys(tokens, 1)  # gguf.TokenType.NORMAL
    special: dict[str, int] = {}
    for added in data.get("added_tokens") or []:
        tokens[int(added["id"])] = added["content"]
        types[int(added["id"])] = 3 if added.get("special") else 4  # CONTROL / USER_DEFINED
        special[added["content"]] = int(added["id"])
    if max(tokens) >= vocab_size:
        raise ExportError(f"export --gguf: token id {max(tokens)} >= vocab_size {vocab_size}")
    listed = [tokens.get(i, f"[PAD{i}]") for i in range(vocab_size)]
    kinds = [types.get(i, 5) for i in range(vocab_size)]  # 5: UNUSED rows of the padding
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return {"tokens": listed, "types": kinds, "merges": merges, "special": special, "pre": pre}


def weight_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ExportError(f"export --gguf: {path} has no safetensors weights")
    return files


def iter_tensors(
    arch: str, weights: list[Path], model_config: dict[str, Any]
) -> Iterator[tuple[str, Any]]:
    """(GGUF name, float32 numpy array) of every weight, in llama.cpp's layout."""
    import gguf
    import torch
    from safetensors import safe_open

    n_layer = int(model_config.get("n_layer") or model_config["num_hidden_layers"])
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()), n_layer)
    tied = model_config.get("tie_word_embeddings", True)
    for file in weights:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key == "lm_head.weight" and tied:
                    continue  # llama.cpp reuses token_embd when output.weight is absent
                if key.endswith((".attn.bias", ".attn.masked_bias")):
                    continue  # GPT-2's causal-mask buffers of older checkpoints
                name = names.get_name(key, try_suffixes=(".weight", ".bias"))
                if name is None:
                    raise ExportError(f"export --gguf: no GGUF name for tensor {key!r} ({arch})")
                data = f.get_tensor(key).to(torch.float32)
                if arch == "gpt2" and key.endswith(
                    (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                     ".mlp.c_proj.weight")
                ):  # fmt: skip
                    data = data.t()  # GPT-2's Conv1D keeps (in, out); GGUF wants (out, in)
                yield name, data.contiguous().numpy()


def write_gguf(
    target: Path,
    arch: str,
    model_config: dict[str, Any],
    vocab: dict[str, Any],
    weights: list[Path],
    kind: str,
) -> int:
    """One GGUF file, written to a temporary name and renamed; the number of tensors."""
    import gguf

    tmp = target.with_name(f".{target.name}.tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    _hyperparameters(writer, arch, model_config, kind)
    _tokenizer(writer, vocab, model_config)
    count = 0
    for name, data in iter_tensors(arch, weights, model_config):
        array, raw_dtype = _encode(data, kind)
        writer.add_tensor(name, array, raw_dtype=raw_dtype)
        count += 1
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, target)
    return count


def _encode(data: Any, kind: str) -> tuple[Any, Any]:
    """(array, raw GGML type or None): 1-D tensors stay f32, as llama.cpp's converter does."""
    import gguf
    import numpy as np

    if data.ndim < 2 or kind == "f32":
        return data.astype(np.float32), None
    if kind == "q8_0" and data.shape[-1] % 32 == 0:
        q8 = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(data, q8), q8
    return data.astype(np.float16), None  # f16, or q8_0 of a row that is not whole blocks


def _hyperparameters(writer: Any, arch: str, c: dict[str, Any], kind: str) -> None:
    import gguf

    writer.add_name(c.get("_name_or_path") or "codeparrot")
    writer.add_file_type(
        {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
         "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind]
    )  # fmt: skip
    if arch == "gpt2":
        writer.add_context_length(int(c["n_positions"]))
        writer.add_embedding_length(int(c["n_embd"]))
        writer.add_feed_forward_length(int(c.get("n_inner") or 4 * c["n_embd"]))
        writer.add_block_count(int(c["n_layer"]))
        writer.add_head_count(int(c["n_head"]))
        writer.add_layer_norm_eps(float(c.get("layer_norm_epsilon", 1e-5)))
        return
    head_dim = int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    rope = c.get("rope_parameters") or {}
    writer.add_context_length(int(c["max_position_embeddings"]))
    writer.add_embedding_length(int(c["hidden_size"]))
    writer.add_feed_forward_length(int(c["intermediate_size"]))
    writer.add_block_count(int(c["num_hidden_layers"]))
    writer.add_head_count(int(c["num_attention_heads"]))
    writer.add_head_count_kv(int(c.get("num_key_value_heads") or c["num_attention_heads"]))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(c.get("rope_theta") or rope.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))


def _tokenizer(writer: Any, vocab: dict[str, Any], c: dict[str, Any]) -> None:
    import gguf

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab["pre"])
    writer.add_token_list(vocab["tokens"])
    writer.add_token_types(vocab["types"])
    writer.add_token_merges(vocab["merges"])
    eos = c.get("eos_token_id")
    if isinstance(eos, int):
        writer.add_eos_token_id(eos)
        writer.add_bos_token_id(
            c.get("bos_token_id") if isinstance(c.get("bos_token_id"), int) else eos
        )
    writer.add_add_bos_token(False)  # the checkpoint's prompts start without one
    keys = gguf.Keys.Tokenizer
    for text, key in (("<fim_prefix>", keys.FIM_PRE_ID), ("<fim_suffix>", keys.FIM_SUF_ID),
                      ("<fim_middle>", keys.FIM_MID_ID), ("<fim_pad>", keys.FIM_PAD_ID)):  # fmt: skip
        if text in vocab["special"]:
            writer.add_uint32(key, vocab["special"][text])


def modelfile_text(gguf_name: str, path: Path, vocab: dict[str, Any], c: dict[str, Any]) -> str:
    """An Ollama Modelfile: the weights, the context, end-of-text as the stop, and fill in
    the middle in the order the checkpoint completes best (SPM for ours)."""
    from codeparrot.models.checkpoint import read_checkpoint_meta, trained_to_infill

    special = vocab["special"]
    eos = next((t for t, i in special.items() if i == c.get("eos_token_id")), "<|endoftext|>")
    n_ctx = int(c.get("n_positions") or c.get("max_position_embeddings"))
    sentinels = all(t in special for t in ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"))
    infills = sentinels and trained_to_infill(read_checkpoint_meta(path)) is not False
    if infills:  # SPM: the prefix runs straight into the middle
        fim = "<fim_prefix><fim_suffix>{{ .Suffix }}<fim_middle>{{ .Prompt }}"
        template = f"{{{{- if .Suffix }}}}{fim}{{{{- else }}}}{{{{ .Prompt }}}}{{{{- end }}}}"
    else:
        template = "{{ .Prompt }}"
    stops = [eos] + (["<fim_prefix>", "<fim_suffix>", "<fim_middle>"] if sentinels else [])
    lines = [
        f"# Written by codeparrot export --gguf from {path.name}",
        f"FROM ./{gguf_name}",
        f'TEMPLATE """{template}"""',
        f"PARAMETER num_ctx {n_ctx}",
        *[f'PARAMETER stop "{s}"' for s in stops],
    ]
    return "\n".join(lines) + "\n"


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
