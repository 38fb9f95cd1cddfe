"""Model families: one record each, and every table of families derived from them.

A family is what a checkpoint is recognised as: its ``model_type`` (``config.json``) and,
where two families share one architecture, tokens of its tokenizer (CodeLlama and
DeepSeek-Coder are both ``llama``; their infilling tokens tell them apart). A record says
how the code treats that family:

- ``model_class``: the causal LM class transformers builds for the ``model_type``;
- ``decoder`` and ``layout``: the lean decoder that computes it on a CPU (its dotted name,
  imported by :mod:`codeparrot.generation.lean`) and how its weights are named and shaped
  (read by :mod:`codeparrot.models.lean_load`); None for the transformers forward only;
- ``fim`` and ``fim_order``: how it is prompted to fill in the middle (sentinels, stops,
  BOS) and the order ``--fim-order auto`` picks;
- ``lora_targets``: the modules ``finetune --peft lora`` adapts by default;
- ``always_shipped``: every transformers release the project allows has the class, so a
  checkpoint of it is accepted without importing transformers;
- ``test_model``: the tiny model of ``tests/families.py`` built from this record (None:
  untested), and ``gpu_checked``: run on a GPU by ``bench/gpu_check.py``.

Adding a family is one record below (plus a decoder class for the CPU fast path); the
tables of the other modules are computed here, and ``tests/core/test_families.py`` fails
when one of them lacks a family. Standard library only: the configs and the CLI import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PSM = "psm"
SPM = "spm"
ORDERS: tuple[str, ...] = (PSM, SPM)


@dataclass(frozen=True)
class FimTemplate:
    """How one model family is prompted to fill in the middle.

    The three sentinels are token names as the family's tokenizer spells them (CodeLlama's
    carry the SentencePiece space, ``▁<PRE>``); a template applies to a tokenizer that has
    all three as single tokens. ``stops`` are further tokens that end a middle where the
    tokenizer has them (the end-of-middle token, file separators); every special token ends
    one anyway. ``bos``: the family's documented prompt starts with its BOS token (the
    engine adds it where the tokenizer's own post-processor does). ``bare_suffix``: the
    suffix is encoded without the SentencePiece dummy space that the tokenizer puts before
    a text's first word (CodeLlama's ``encode_infilling``). ``end``: the end-of-middle
    token the family's model learnt after a middle (a fine-tune writes it there); without
    one a middle ends with end-of-text.
    """

    name: str
    prefix: str
    suffix: str
    middle: str
    stops: tuple[str, ...] = ()
    order: str = PSM
    bos: bool = False
    bare_suffix: bool = False
    end: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every token this template names: the sentinels, then the stops."""
        return (self.prefix, self.suffix, self.middle, *self.stops)

    def text(self, prefix: str, suffix: str, order: str = PSM, bos: str = "") -> str:
        """The documented prompt as text (the sentinels written by name), for reading and tests."""
        if order == PSM:
            return f"{bos}{self.prefix}{prefix}{self.suffix}{suffix}{self.middle}"
        if order == SPM:
            return f"{bos}{self.prefix}{self.suffix}{suffix}{self.middle}{prefix}"
        raise ValueError(f"FIM order must be one of {', '.join(ORDERS)}, got {order!r}")


# Sources: the bigcode Megatron-LM FIM layouts and the StarCoder / SantaCoder model cards;
# Qwen2.5-Coder's and DeepSeek-Coder's READMEs; the CodeLlama paper and Meta's reference
# ``infilling_prompt_tokens`` (PSM ``<s><PRE> pre <SUF>suf <MID>``, SPM ``<s><PRE><SUF>suf
# <MID> pre``); editor registries (Tabby, Continue, llm-ls) agree on these strings.
STARCODER_FIM = FimTemplate(
    "starcoder",
    "<fim_prefix>",
    "<fim_suffix>",
    "<fim_middle>",
    stops=("<fim_pad>", "<file_sep>", "<|endoftext|>"),
)
SANTACODER_FIM = FimTemplate(
    "santacoder", "<fim-prefix>", "<fim-suffix>", "<fim-middle>", stops=("<fim-pad>",)
)
# Qwen2.5-Coder's end-of-middle and repository tokens, and CodeGemma's file separator.
QWEN_STOPS = (
    "<|fim_pad|>", "<|endoftext|>", "<|file_sep|>", "<|repo_name|>", "<|im_start|>",
    "<|im_end|>", "<|file_separator|>",
)  # fmt: skip
QWEN_FIM = FimTemplate(
    "qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", stops=QWEN_STOPS
)
CODELLAMA_FIM = FimTemplate(
    "codellama",
    "▁<PRE>",
    "▁<SUF>",
    "▁<MID>",
    stops=("▁<EOT>",),
    bos=True,
    bare_suffix=True,
    end="▁<EOT>",  # Meta's infilling_prompt_tokens
)
DEEPSEEK_FIM = FimTemplate(
    "deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", stops=("<|EOT|>",), bos=True
)


@dataclass(frozen=True)
class WeightLayout:
    """How a family's weights are named and shaped, as transformers saves them: what the
    lean load (:mod:`codeparrot.models.lean_load`) reads without transformers' classes.

    ``stack``: ``"transformer"`` (GPT-2's names: ``transformer.h``, ``wte``, ``wpe``,
    ``ln_f``) or ``"model"`` (Llama's: ``model.layers``, ``embed_tokens``, ``norm``, rotary
    positions). ``conv1d``: matrices kept as GPT-2's ``Conv1D``, (in, out), rather than
    ``nn.Linear``'s (out, in). ``biases`` (``"model"`` stacks): which projections carry a
    bias: ``"qkv"``, ``"none"``, ``"use_bias"`` (all of them where the config's
    ``use_bias`` says so) or ``"config"`` (``attention_bias`` and ``mlp_bias``).
    ``layer_norm``: LayerNorm with a bias and a plain MLP (``c_fc``, ``c_proj``) instead of
    RMSNorm and SwiGLU. ``qk_norm``: RMS-normed queries and keys.
    """

    stack: str
    conv1d: bool = False
    biases: str = "config"
    layer_norm: bool = False
    qk_norm: bool = False

    @property
    def prefix(self) -> str:
        """The first part of every weight's name but the output head's."""
        return self.stack + "."


GPT2_LAYOUT = WeightLayout("transformer", conv1d=True)
BIGCODE_LAYOUT = WeightLayout("transformer")
LLAMA_LAYOUT = WeightLayout("model")
QWEN2_LAYOUT = WeightLayout("model", biases="qkv")
MISTRAL_LAYOUT = WeightLayout("model", biases="none")
STARCODER2_LAYOUT = WeightLayout("model", biases="use_bias", layer_norm=True)
QWEN3_LAYOUT = WeightLayout("model", qk_norm=True)

GPT2_DECODER = "codeparrot.generation.gpt2.GPT2Decoder"
BIGCODE_DECODER = "codeparrot.generation.bigcode.GPTBigCodeDecoder"
LLAMA_DECODER = "codeparrot.generation.llama.LlamaDecoder"
QWEN3_DECODER = "codeparrot.generation.qwen3.Qwen3Decoder"

# the projections LoRA adapts by default: attention everywhere (what the LoRA paper and
# peft's own defaults do), the output projection too where it is a separate module
LLAMA_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Family:
    """One model family: how a checkpoint is recognised as it and how the code treats it
    (the module's docstring says what each field drives)."""

    name: str
    title: str  # the models a user knows it by
    model_type: str
    model_class: str
    markers: tuple[str, ...] = ()  # tokens that pick it among families of its model_type
    decoder: str | None = None
    layout: WeightLayout | None = None
    fim: FimTemplate | None = None
    fim_order: str = PSM
    bos: str | None = None  # the token its tokenizer puts before a text (None: none)
    eos: str = "<|endoftext|>"
    lora_targets: tuple[str, ...] = ()
    learned_positions: bool = False  # a (positions, width) table, counted in its size
    always_shipped: bool = False
    test_model: str | None = None
    gpu_checked: bool = False

    def __post_init__(self) -> None:
        if (self.decoder is None) != (self.layout is None):
            raise ValueError(f"family {self.name}: a lean decoder needs its weight layout")
        if self.fim_order not in ORDERS:
            raise ValueError(f"family {self.name}: FIM order {self.fim_order!r}")


FAMILIES: tuple[Family, ...] = (
    Family(
        "codeparrot", "GPT-2: CodeParrot and the checkpoints trained here", "gpt2",
        "GPT2LMHeadModel", decoder=GPT2_DECODER, layout=GPT2_LAYOUT,
        # trained here on both orders, best in SPM; the Hub's CodeParrot has no sentinels
        fim=STARCODER_FIM, fim_order=SPM, lora_targets=("c_attn", "c_proj"),
        learned_positions=True, always_shipped=True, test_model="codeparrot-small",
    ),
    Family(
        "starcoder", "StarCoder, StarCoderBase, tiny_starcoder_py", "gpt_bigcode",
        "GPTBigCodeForCausalLM", decoder=BIGCODE_DECODER,
        layout=BIGCODE_LAYOUT, fim=STARCODER_FIM, lora_targets=("c_attn",),
        learned_positions=True, always_shipped=True, test_model="tiny_starcoder_py",
    ),
    Family(
        "santacoder", "SantaCoder (transformers-native form)", "gpt_bigcode",
        "GPTBigCodeForCausalLM", markers=("<fim-prefix>",), decoder=BIGCODE_DECODER,
        layout=BIGCODE_LAYOUT, fim=SANTACODER_FIM, lora_targets=("c_attn",),
        learned_positions=True, always_shipped=True, test_model="santacoder",
    ),
    Family(
        "starcoder2", "StarCoder2", "starcoder2", "Starcoder2ForCausalLM",
        decoder=LLAMA_DECODER, layout=STARCODER2_LAYOUT, fim=STARCODER_FIM,
        lora_targets=LLAMA_ATTENTION, always_shipped=True, test_model="starcoder2",
    ),
    Family(
        "qwen2.5-coder", "Qwen2.5-Coder, Qwen2", "qwen2", "Qwen2ForCausalLM",
        decoder=LLAMA_DECODER, layout=QWEN2_LAYOUT, fim=QWEN_FIM,
        lora_targets=LLAMA_ATTENTION, always_shipped=True, test_model="qwen2.5-coder",
    ),
    Family(
        "codeparrot-qwen3", "Qwen3 checkpoints trained here", "qwen3", "Qwen3ForCausalLM",
        markers=("<fim_prefix>",), decoder=QWEN3_DECODER, layout=QWEN3_LAYOUT,
        fim=STARCODER_FIM, fim_order=SPM, lora_targets=LLAMA_ATTENTION,
        always_shipped=True, test_model="codeparrot-qwen3", gpu_checked=True,
    ),
    Family(
        "qwen3", "Qwen3", "qwen3", "Qwen3ForCausalLM", decoder=QWEN3_DECODER,
        layout=QWEN3_LAYOUT, fim=QWEN_FIM, lora_targets=LLAMA_ATTENTION, always_shipped=True,
        test_model="qwen3",
    ),
    Family(
        "codellama", "CodeLlama", "llama", "LlamaForCausalLM", markers=("▁<PRE>",),
        decoder=LLAMA_DECODER, layout=LLAMA_LAYOUT, fim=CODELLAMA_FIM, bos="<s>", eos="</s>",
        lora_targets=LLAMA_ATTENTION, always_shipped=True, test_model="codellama",
    ),
    Family(
        "deepseek-coder", "DeepSeek-Coder", "llama", "LlamaForCausalLM",
        markers=("<｜fim▁begin｜>",), decoder=LLAMA_DECODER, layout=LLAMA_LAYOUT,
        fim=DEEPSEEK_FIM, bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>",
        lora_targets=LLAMA_ATTENTION, always_shipped=True, test_model="deepseek-coder",
    ),
    Family(
        "llama", "Llama", "llama", "LlamaForCausalLM", decoder=LLAMA_DECODER,
        layout=LLAMA_LAYOUT, bos="<s>", eos="</s>", lora_targets=LLAMA_ATTENTION,
        always_shipped=True, test_model="llama",
    ),
    Family(
        "mistral", "Mistral", "mistral", "MistralForCausalLM", decoder=LLAMA_DECODER,
        layout=MISTRAL_LAYOUT, bos="<s>", eos="</s>", lora_targets=LLAMA_ATTENTION,
        always_shipped=True, test_model="mistral",
    ),
    Family("mixtral", "Mixtral", "mixtral", "MixtralForCausalLM", bos="<s>", eos="</s>",
           lora_targets=LLAMA_ATTENTION, test_model="mixtral"),
    Family("codegemma", "Gemma, CodeGemma", "gemma", "GemmaForCausalLM", fim=QWEN_FIM,
           bos="<bos>", eos="<eos>", lora_targets=LLAMA_ATTENTION, test_model="codegemma"),
    Family("gemma2", "Gemma 2", "gemma2", "Gemma2ForCausalLM", bos="<bos>", eos="<eos>",
           lora_targets=LLAMA_ATTENTION, test_model="gemma2"),
    Family("phi", "Phi-1, Phi-1.5, Phi-2", "phi", "PhiForCausalLM",
           lora_targets=("q_proj", "k_proj", "v_proj", "dense"), test_model="phi-1"),
    Family("phi3", "Phi-3", "phi3", "Phi3ForCausalLM", lora_targets=("qkv_proj", "o_proj"),
           test_model="phi3"),
    Family("codegen", "CodeGen", "codegen", "CodeGenForCausalLM",
           lora_targets=("qkv_proj", "out_proj"), test_model="codegen"),
    Family("gpt_neox", "GPT-NeoX, Pythia", "gpt_neox", "GPTNeoXForCausalLM",
           lora_targets=("query_key_value", "dense"), test_model="gpt_neox"),
)  # fmt: skip
BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}


def family(name: str) -> Family:
    """The family called ``name``; KeyError naming the known ones otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no model family {name!r} (known: {', '.join(BY_NAME)})") from None


def recognise(model_type: str | None, has_token: Callable[[str], bool]) -> Family | None:
    """The family a checkpoint of ``model_type`` is, its tokenizer having the tokens for
    which ``has_token`` is true: the first of that model type whose markers it has all
    of, else the one with no markers; None for a model type no family has."""
    candidates = [f for f in FAMILIES if f.model_type == model_type]
    for f in candidates:
        if f.markers and all(has_token(t) for t in f.markers):
            return f
    return next((f for f in candidates if not f.markers), None)


# -- the tables other modules read ---------------------------------------------------------


def fim_templates() -> tuple[FimTemplate, ...]:
    """Every family's FIM template, once each, in the order detection tries them (the
    families' order: where a tokenizer has two templates' sentinels, the first wins)."""
    seen: dict[str, FimTemplate] = {}
    for f in FAMILIES:
        if f.fim is not None:
            seen.setdefault(f.fim.name, f.fim)
    return tuple(seen.values())


def spm_trained_templates() -> frozenset[str]:
    """Templates of the families trained here on both orders, which complete best in SPM
    (what ``--fim-order auto`` picks for a checkpoint written here)."""
    return frozenset(f.fim.name for f in FAMILIES if f.fim is not None and f.fim_order == SPM)


def lean_decoders() -> dict[str, str]:
    """transformers' class name -> the dotted name of the lean decoder that computes it."""
    return {f.model_class: f.decoder for f in FAMILIES if f.decoder is not None}


def lean_layouts() -> dict[str, tuple[str, WeightLayout]]:
    """``model_type`` -> (transformers' class name, weight layout) for the lean load."""
    return {f.model_type: (f.model_class, f.layout) for f in FAMILIES if f.layout is not None}


def layout_of_class(model_class: str) -> WeightLayout | None:
    """The weight layout of the lean decoder's families of that class, None if none."""
    return next((f.layout for f in FAMILIES if f.model_class == model_class and f.layout), None)


def lora_targets() -> dict[str, tuple[str, ...]]:
    """``model_type`` -> the modules LoRA adapts by default."""
    return {f.model_type: f.lora_targets for f in FAMILIES if f.lora_targets}


def conv1d_model_types() -> frozenset[str]:
    """Model types whose projections are ``Conv1D`` (weights kept input-major)."""
    return frozenset(f.model_type for f in FAMILIES if f.layout is not None and f.layout.conv1d)


def always_shipped() -> frozenset[str]:
    """Model types every transformers release the project allows ships."""
    return frozenset(f.model_type for f in FAMILIES if f.always_shipped)


def learned_positions() -> frozenset[str]:
    """Model types with a learned (positions, width) table."""
    return frozenset(f.model_type for f in FAMILIES if f.learned_positions)


def lean_covered() -> str:
    """The model types the lean decoders cover, as a sentence's list."""
    kinds = list(dict.fromkeys(f.model_type for f in FAMILIES if f.decoder is not None))
    return ", ".join(kinds[:-1]) + " and " + kinds[-1]


# -- the README's capability table -----------------------------------------------------------

TABLE_BEGIN = "<!-- families:begin -->"
TABLE_END = "<!-- families:end -->"


def capability_table() -> str:
    """The README's table of families (between :data:`TABLE_BEGIN` and :data:`TABLE_END`):
    each family's CPU fast path, infilling template, whether LoRA knows its target modules,
    and whether a test model covers it and a GPU run checked it."""
    rows = [
        "| Models | CPU fast path | Fill in the middle | LoRA | Tested |",
        "|---|---|---|---|---|",
    ]
    for f in FAMILIES:
        fast = "yes" if f.decoder is not None else "no"
        fim = f"{f.fim.name} ({f.fim_order.upper()})" if f.fim is not None else "no"
        lora = "yes" if f.lora_targets else "name the modules"
        tested = "tiny model" if f.test_model is not None else "untested"
        if f.gpu_checked:
            tested += ", GPU"
        rows.append(f"| {f.title} | {fast} | {fim} | {lora} | {tested} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m codeparrot.families: the table to paste
    print(capability_table())
