"""Tiny random models of the code-model families people run, each in its Hub layout.

Each test model is built from its family's record (:mod:`codeparrot.families`: the model
type, the BOS and end-of-text tokens, the FIM template) plus what only a test needs: the
Hub model it copies and the tokenizer's full list of special tokens. Each builder writes
what ``save_pretrained`` writes for that family (config.json from transformers' own config
class, model.safetensors, generation_config.json, tokenizer.json and tokenizer_config.json),
with a tokenizer trained here on a few stdlib files that carries the family's real special
tokens, spelled as on the Hub, and its real post-processing (BOS for the Llama family).
Nothing is downloaded; a model builds in a second or two.

    from families import FAMILIES, build_family
    path = build_family("codellama", tmp_path / "codellama")
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.families import BY_NAME
from codeparrot.families import Family as Record

STARCODER_EXTRA = (
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
    "<empty_output>", "<commit_before>", "<commit_msg>", "<commit_after>", "<reponame>",
)  # fmt: skip
STARCODER_FIM = ("<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>")
STARCODER2_EXTRA = (
    "<repo_name>", "<file_sep>", "<issue_start>", "<issue_comment>", "<issue_closed>",
    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
    "<jupyter_script>", "<empty_output>", "<code_to_intermediate>", "<intermediate_to_code>",
    "<pr>", "<pr_status>", "<pr_is_merged>", "<pr_base>", "<pr_file>", "<pr_base_code>",
    "<pr_diff>", "<pr_diff_hunk>", "<pr_comment>", "<pr_event_id>", "<pr_review>",
    "<pr_review_state>", "<pr_review_comment>", "<pr_in_reply_to_review_id>",
    "<pr_in_reply_to_comment_id>", "<pr_diff_hunk_comment_line>", "<NAME>", "<EMAIL>",
    "<KEY>", "<PASSWORD>",
)  # fmt: skip
QWEN_SPECIAL = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
    "<|file_sep|>",
)  # fmt: skip
CODELLAMA_FIM = ("▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>")
CODEGEMMA_FIM = ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|file_separator|>")
DEEPSEEK_BOS = "<｜begin▁of▁sentence｜>"
DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"
# DeepSeek-Coder's tokenizer.json marks its FIM tokens as not special (so a decode with
# skip_special_tokens=True keeps them: they reached an editor as text that way).
DEEPSEEK_FIM = ("<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>")


@dataclass(frozen=True)
class Family:
    """The test model of one family: its record's facts, and its Hub layout."""

    name: str
    family: str  # its record's name in codeparrot.families
    hub_id: str  # the model this one copies the layout of
    tokenizer: str  # "byte-level" or "byte-fallback" (SentencePiece-style, Llama)
    special: tuple[str, ...]  # special tokens, in id order after the vocabulary's own
    not_special: tuple[str, ...] = ()  # added tokens the Hub marks "special": false
    generation_eos: tuple[str, ...] = ()  # generation_config.json's eos_token_id list
    has_fim: bool = True  # its tokenizer has the family's FIM sentinels (where it has some)
    config: dict[str, Any] = field(default_factory=dict)
    # the tokenizer class the Hub's tokenizer_config.json names (None: transformers' own
    # name for the saved tokenizer)
    hub_class: str | None = None
    # the BOS comes from tokenizer_config.json's add_bos_token, not from tokenizer.json's
    # post-processor: DeepSeek-Coder's layout
    bos_from_config: bool = False

    @property
    def record(self) -> Record:
        return BY_NAME[self.family]

    @property
    def model_type(self) -> str:
        return self.record.model_type

    @property
    def bos(self) -> str | None:
        """The BOS the post-processor puts first (None: none)."""
        return self.record.bos

    @property
    def eos(self) -> str:
        return self.record.eos

    @property
    def template(self) -> str | None:
        """The codeparrot.fim template its tokenizer's sentinels pick (None: no FIM)."""
        fim = self.record.fim
        return fim.name if fim is not None and self.has_fim else None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        # the Hub's CodeParrot predates FIM: its tokenizer has no sentinels
        Family("codeparrot-small", "codeparrot", "codeparrot/codeparrot-small", "byte-level",
               ("<|endoftext|>",), has_fim=False),
        Family("tiny_starcoder_py", "starcoder", "bigcode/tiny_starcoder_py", "byte-level",
               ("<|endoftext|>", *STARCODER_FIM, *STARCODER_EXTRA),
               config={"multi_query": True}),
        Family("santacoder", "santacoder", "bigcode/gpt_bigcode-santacoder", "byte-level",
               ("<|endoftext|>", "<fim-prefix>", "<fim-middle>", "<fim-suffix>", "<fim-pad>"),
               config={"multi_query": True}),
        Family("starcoder2", "starcoder2", "bigcode/starcoder2-3b", "byte-level",
               ("<|endoftext|>", *STARCODER_FIM, *STARCODER2_EXTRA)),
        Family("qwen2.5-coder", "qwen2.5-coder", "Qwen/Qwen2.5-Coder-0.5B", "byte-level",
               QWEN_SPECIAL, generation_eos=("<|endoftext|>", "<|im_end|>")),
        # what `codeparrot train --preset tiny-qwen` writes (the tokenizer trained here)
        Family("codeparrot-qwen3", "codeparrot-qwen3", "", "byte-level",
               ("<|endoftext|>", *STARCODER_FIM), config={"tie_word_embeddings": True}),
        Family("codellama", "codellama", "codellama/CodeLlama-7b-hf", "byte-fallback",
               ("<unk>", "<s>", "</s>", *CODELLAMA_FIM), hub_class="CodeLlamaTokenizer"),
        Family("deepseek-coder", "deepseek-coder", "deepseek-ai/deepseek-coder-1.3b-base",
               "byte-level", (DEEPSEEK_BOS, DEEPSEEK_EOS, "<|EOT|>"), not_special=DEEPSEEK_FIM,
               hub_class="LlamaTokenizerFast", bos_from_config=True),
        Family("qwen3", "qwen3", "Qwen/Qwen3-0.6B-Base", "byte-level", QWEN_SPECIAL,
               config={"tie_word_embeddings": True}),
        Family("llama", "llama", "meta-llama/Llama-2-7b-hf", "byte-fallback",
               ("<unk>", "<s>", "</s>")),
        Family("mistral", "mistral", "mistralai/Mistral-7B-v0.1", "byte-fallback",
               ("<unk>", "<s>", "</s>")),
        Family("mixtral", "mixtral", "mistralai/Mixtral-8x7B-v0.1", "byte-fallback",
               ("<unk>", "<s>", "</s>")),
        Family("codegemma", "codegemma", "google/codegemma-2b", "byte-fallback",
               ("<pad>", "<eos>", "<bos>", "<unk>", *CODEGEMMA_FIM)),
        Family("gemma2", "gemma2", "google/gemma-2-2b", "byte-fallback",
               ("<pad>", "<eos>", "<bos>", "<unk>")),
        Family("phi3", "phi3", "microsoft/Phi-3-mini-4k-instruct", "byte-fallback",
               ("<unk>", "<s>", "</s>", "<|endoftext|>", "<|assistant|>", "<|end|>",
                "<|user|>")),
        Family("gpt_neox", "gpt_neox", "EleutherAI/pythia-160m", "byte-level",
               ("<|endoftext|>", "<|padding|>")),
        Family("codegen", "codegen", "Salesforce/codegen-350M-mono", "byte-level",
               ("<|endoftext|>",)),
        Family("phi-1", "phi", "microsoft/phi-1", "byte-level", ("<|endoftext|>",)),
    )
}  # fmt: skip
FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)


def _corpus() -> list[str]:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import stdlib_sources

    return stdlib_sources()[:3]


def _byte_level(family: Family, vocab_size: int) -> Any:
    """A byte-level BPE (GPT-2, StarCoder, Qwen2, DeepSeek-Coder), special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(family.special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def _byte_fallback(family: Family, vocab_size: int) -> Any:
    """A SentencePiece-style BPE with byte fallback, as Llama's and CodeLlama's tokenizer.json:
    ``▁`` for spaces with one put before the text, ``<0xNN>`` tokens for any byte outside
    the vocabulary, and a decoder that fuses bytes and strips the leading space."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, limit_alphabet=60, show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    learnt = json.loads(tok.to_str())["model"]
    names = [*family.special, *(f"<0x{b:02X}>" for b in range(256))]
    learnt_order = sorted(learnt["vocab"], key=learnt["vocab"].get)
    names += [t for t in learnt_order if t not in names]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learnt["merges"]]
    model = models.BPE(
        vocab={t: i for i, t in enumerate(names)},
        merges=merges,
        unk_token="<unk>",
        byte_fallback=True,
        fuse_unk=True,
    )
    out = Tokenizer(model)
    out.normalizer = tok.normalizer
    out.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    return out


def build_tokenizer(family: Family, vocab_size: int = 600) -> Any:
    """The family's tokenizer (a transformers fast tokenizer), trained here."""
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast

    if family.tokenizer == "byte-fallback":
        tok = _byte_fallback(family, vocab_size)
    else:
        tok = _byte_level(family, vocab_size)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in family.special])
    if family.not_special:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.not_special])
    if family.bos is not None and not family.bos_from_config:
        bos_id = tok.token_to_id(family.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A",
            pair=f"{family.bos} $A {family.bos} $B",
            special_tokens=[(family.bos, bos_id)],
        )
    named = {family.bos, family.eos, "<unk>"}
    extra = [t for t in family.special if t not in named]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=family.bos or family.eos,
        eos_token=family.eos,
        unk_token="<unk>" if family.tokenizer == "byte-fallback" else family.eos,
        additional_special_tokens=extra,
        model_max_length=256,
    )


def _model_config(family: Family, vocab: int, bos: int, eos: int) -> Any:
    import transformers as tf

    small = {"vocab_size": vocab, "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": eos}
    llama_like = {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
    }  # fmt: skip
    gpt_like = {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256}
    make: dict[str, Callable[[], Any]] = {
        "gpt2": lambda: tf.GPT2Config(**gpt_like, **small),
        "gpt_bigcode": lambda: tf.GPTBigCodeConfig(**gpt_like, **small, **family.config),
        "qwen3": lambda: tf.Qwen3Config(**llama_like, head_dim=8, **small, **family.config),
        "mistral": lambda: tf.MistralConfig(**llama_like, sliding_window=None, **small),
        "codegen": lambda: tf.CodeGenConfig(**gpt_like, n_ctx=256, rotary_dim=4, **small),
        "starcoder2": lambda: tf.Starcoder2Config(**llama_like, **small),
        "qwen2": lambda: tf.Qwen2Config(**llama_like, **small),
        "llama": lambda: tf.LlamaConfig(**llama_like, **small),
        "phi": lambda: tf.PhiConfig(**llama_like, **small),
        "phi3": lambda: tf.Phi3Config(**llama_like, **small),
        "mixtral": lambda: tf.MixtralConfig(**llama_like, num_local_experts=4, **small),
        "gemma": lambda: tf.GemmaConfig(**llama_like, head_dim=8, **small),
        "gemma2": lambda: tf.Gemma2Config(**llama_like, head_dim=8, **small),
        "gpt_neox": lambda: tf.GPTNeoXConfig(**llama_like, **small),
    }
    return make[family.model_type]()


def build_family(name: str, out: Path, *, seed: int = 0) -> Path:
    """Write family ``name``'s tiny random model into ``out`` (created); returns ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    family = FAMILIES[name]
    tokenizer = build_tokenizer(family)
    eos = tokenizer.convert_tokens_to_ids(family.eos)
    bos = tokenizer.convert_tokens_to_ids(family.bos or family.eos)
    torch.manual_seed(seed)
    config = _model_config(family, len(tokenizer), bos, eos)
    model = AutoModelForCausalLM.from_config(config)
    ends = [tokenizer.convert_tokens_to_ids(t) for t in family.generation_eos] or eos
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=ends)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if family.hub_class is not None:
        config_file = out / "tokenizer_config.json"
        written = json.loads(config_file.read_text(encoding="utf-8"))
        written["tokenizer_class"] = family.hub_class
        if family.bos_from_config:
            written.update(add_bos_token=True, add_eos_token=False)
        config_file.write_text(json.dumps(written, ensure_ascii=False), encoding="utf-8")
    return out


def sharp_random_model(config: Any, seed: int = 0) -> Any:
    """A random transformers model of ``config`` in eval mode, its matrices scaled 4x so
    that its logits are far from uniform (a greedy token then depends on every layer)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return model


def bias_head(model: Any, logits: dict[int, float]) -> None:
    """Give a loaded model's output head a bias (``id -> value``), so that it writes those
    tokens whatever the input: a test's way of making a model sample a special token."""
    import torch

    head = model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.zero_()
        for i, value in logits.items():
            biased.bias[i] = value
    model.set_output_embeddings(biased)


class ScriptedHead:
    """Make a loaded model (the transformers forward) write ``script`` token by token:
    each call of its output head after :meth:`reset` gives the next id all the mass.
    Past the script's end the last id is repeated."""

    def __init__(self, model: Any, script: list[int]) -> None:
        self.script = list(script)
        self.calls = 0
        head = model.get_output_embeddings()
        self.handle = head.register_forward_hook(self._hook)

    def reset(self, script: list[int] | None = None) -> None:
        self.calls = 0
        if script is not None:
            self.script = list(script)

    def _hook(self, module: Any, args: Any, output: Any) -> Any:
        tok = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        forced = output.new_full(output.shape, -1e4)
        forced[..., tok] = 1e4
        return forced
