"""Fill in the middle: the sentinel tokens and the two layouts, shared by training and inference.

The sentinels are named as StarCoder names them, so editor plugins' templates fit. The layouts
are the ones bigcode's Megatron-LM trains (Bavarian et al. 2022, "Efficient Training of
Language Models to Fill in the Middle"):

- PSM: ``<fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle``
- SPM: ``<fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle``

SPM here is the variant in which the prefix runs straight into the middle, so a prompt that
ends in the middle of a word continues it as in plain left-to-right text. A training example
ends with the end-of-text token after the middle; at inference the model writes the middle
and stops at end-of-text or at any sentinel.

Standard library only: the configs and the CLI import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FIM_PREFIX = "<fim_prefix>"
FIM_MIDDLE = "<fim_middle>"
FIM_SUFFIX = "<fim_suffix>"
FIM_PAD = "<fim_pad>"
SENTINELS: tuple[str, ...] = (FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD)

PSM = "psm"
SPM = "spm"
ORDERS: tuple[str, ...] = (PSM, SPM)


@dataclass(frozen=True)
class FimTokens:
    """The ids of the sentinels in one tokenizer."""

    prefix: int
    middle: int
    suffix: int
    pad: int

    @property
    def ids(self) -> frozenset[int]:
        return frozenset((self.prefix, self.middle, self.suffix, self.pad))

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> FimTokens | None:
        """The sentinels' ids if all four are single special tokens of ``tokenizer``, else None.

        ``tokenizer`` is a transformers tokenizer (``convert_tokens_to_ids``) or a
        ``tokenizers.Tokenizer`` (``token_to_id``). A tokenizer without them keeps working
        left to right only.
        """
        lookup = getattr(tokenizer, "token_to_id", None)
        ids = []
        for name in (FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD):
            if lookup is not None:
                found = lookup(name)
            else:
                found = tokenizer.convert_tokens_to_ids(name)
                if found == getattr(tokenizer, "unk_token_id", None):
                    found = None
            if found is None:
                return None
            ids.append(int(found))
        if len(set(ids)) != len(ids):
            return None
        return cls(*ids)


def layout(
    prefix: Sequence[int],
    suffix: Sequence[int],
    middle: Sequence[int],
    tokens: FimTokens,
    order: str = PSM,
) -> list[int]:
    """Token ids of one FIM example (``middle`` empty for an inference prompt).

    The pieces are tokenized apart, so no token spans a boundary; the caller appends the
    end-of-text token after a training example's middle.
    """
    if order == PSM:
        return [
            tokens.prefix, *prefix, tokens.suffix, *suffix, tokens.middle, *middle,
        ]  # fmt: skip
    if order == SPM:
        return [
            tokens.prefix, tokens.suffix, *suffix, tokens.middle, *prefix, *middle,
        ]  # fmt: skip
    raise ValueError(f"FIM order must be one of {', '.join(ORDERS)}, got {order!r}")


# -- inference templates, one per model family -------------------------------------------------

AUTO = "auto"  # the order a template documents (SPM for our own SPM-trained checkpoints)
ORDER_CHOICES: tuple[str, ...] = (AUTO, *ORDERS)


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
    a text's first word (CodeLlama's ``encode_infilling``).
    """

    name: str
    prefix: str
    suffix: str
    middle: str
    stops: tuple[str, ...] = ()
    order: str = PSM
    bos: bool = False
    bare_suffix: bool = False

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


# Detection tries these in turn. Sources: the bigcode Megatron-LM FIM layouts and the
# StarCoder / SantaCoder model cards; Qwen2.5-Coder's and DeepSeek-Coder's READMEs; the
# CodeLlama paper and Meta's reference ``infilling_prompt_tokens`` (PSM ``<s><PRE> pre <SUF>suf
# <MID>``, SPM ``<s><PRE><SUF>suf <MID> pre``); editor registries (Tabby, Continue, llm-ls)
# agree on these strings.
# Qwen2.5-Coder's end-of-middle and repository tokens, and CodeGemma's file separator.
QWEN_STOPS = (
    "<|fim_pad|>", "<|endoftext|>", "<|file_sep|>", "<|repo_name|>", "<|im_start|>",
    "<|im_end|>", "<|file_separator|>",
)  # fmt: skip
TEMPLATES: tuple[FimTemplate, ...] = (
    # StarCoder, StarCoder2, tiny_starcoder_py and the checkpoints trained here
    FimTemplate(
        "starcoder",
        FIM_PREFIX,
        FIM_SUFFIX,
        FIM_MIDDLE,
        stops=(FIM_PAD, "<file_sep>", "<|endoftext|>"),
    ),
    FimTemplate("santacoder", "<fim-prefix>", "<fim-suffix>", "<fim-middle>", stops=("<fim-pad>",)),
    # Qwen2.5-Coder and CodeGemma
    FimTemplate(
        "qwen",
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        stops=QWEN_STOPS,
    ),
    FimTemplate(
        "codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", stops=("▁<EOT>",), bos=True, bare_suffix=True
    ),
    FimTemplate(
        "deepseek",
        "<｜fim▁begin｜>",
        "<｜fim▁hole｜>",
        "<｜fim▁end｜>",
        stops=("<|EOT|>",),
        bos=True,
    ),
)
TEMPLATE_NAMES: tuple[str, ...] = tuple(t.name for t in TEMPLATES)


def token_id(tokenizer: Any, name: str) -> int | None:
    """The id of token ``name`` in ``tokenizer`` (a transformers or ``tokenizers`` one), or None."""
    lookup = getattr(tokenizer, "token_to_id", None)
    if lookup is not None:
        found = lookup(name)
    else:
        found = tokenizer.convert_tokens_to_ids(name)
        if found == getattr(tokenizer, "unk_token_id", None) and name != getattr(
            tokenizer, "unk_token", None
        ):
            found = None
    return None if found is None else int(found)


def parse_fim_tokens(spec: str) -> FimTemplate | None:
    """An override template from ``"PREFIX,SUFFIX,MIDDLE[,END]"`` (``""``: none).

    The strings are token names of the model's tokenizer (``--fim-tokens``, as llm-ls's
    ``fim`` setting); END, when given, also ends a middle. Raises ValueError naming what is
    wrong.
    """
    if not spec:
        return None
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) not in (3, 4) or not all(parts):
        raise ValueError(
            f"--fim-tokens {spec!r}: expected PREFIX,SUFFIX,MIDDLE or PREFIX,SUFFIX,MIDDLE,END "
            "(the tokenizer's own token names, comma-separated), e.g. "
            "'<|fim_prefix|>,<|fim_suffix|>,<|fim_middle|>'"
        )
    return FimTemplate("custom", parts[0], parts[1], parts[2], stops=tuple(parts[3:]))


@dataclass(frozen=True)
class FimPrompter:
    """A template resolved against one tokenizer: the ids its prompts and stops use."""

    template: FimTemplate
    prefix: int
    suffix: int
    middle: int
    stops: frozenset[int]

    @property
    def ids(self) -> frozenset[int]:
        """Every id of the template in this tokenizer (none of them is ever text)."""
        return frozenset((self.prefix, self.suffix, self.middle)) | self.stops

    @classmethod
    def resolve(cls, template: FimTemplate, tokenizer: Any) -> FimPrompter | None:
        """The template's ids in ``tokenizer``; None unless its three sentinels are tokens."""
        sentinels = [
            token_id(tokenizer, n) for n in (template.prefix, template.suffix, template.middle)
        ]
        if any(i is None for i in sentinels) or len(set(sentinels)) != 3:
            return None
        stops = {token_id(tokenizer, n) for n in template.stops}
        prefix, suffix, middle = (int(i) for i in sentinels if i is not None)
        return cls(template, prefix, suffix, middle, frozenset(i for i in stops if i is not None))

    def layout(self, prefix: Sequence[int], suffix: Sequence[int], order: str = PSM) -> list[int]:
        """Ids of an inference prompt (without BOS) in ``order``."""
        if order == PSM:
            return [self.prefix, *prefix, self.suffix, *suffix, self.middle]
        if order == SPM:
            return [self.prefix, self.suffix, *suffix, self.middle, *prefix]
        raise ValueError(f"FIM order must be one of {', '.join(ORDERS)}, got {order!r}")


def detect_template(tokenizer: Any, override: str = "") -> FimPrompter | None:
    """The FIM template of ``tokenizer``: the ``override`` spec if given, else the first
    family of :data:`TEMPLATES` whose sentinels it has; None if it has none.

    A given override whose tokens the tokenizer lacks raises ValueError naming them.
    """
    custom = parse_fim_tokens(override)
    if custom is not None:
        missing = [n for n in custom.names if token_id(tokenizer, n) is None]
        found = FimPrompter.resolve(custom, tokenizer)
        if missing or found is None:
            raise ValueError(
                f"--fim-tokens {override!r}: the tokenizer has no single token "
                f"{', '.join(repr(n) for n in missing) or 'for each of the three'}"
            )
        return found
    for template in TEMPLATES:
        found = FimPrompter.resolve(template, tokenizer)
        if found is not None:
            return found
    return None


def resolve_order(order: str, template: FimTemplate, own_checkpoint: bool = False) -> str:
    """``order`` itself, or for ``"auto"`` the template's (SPM for our own checkpoints, which
    train on both orders and complete best in SPM)."""
    if order in ORDERS:
        return order
    if order != AUTO:
        raise ValueError(f"FIM order must be one of {', '.join(ORDER_CHOICES)}, got {order!r}")
    return SPM if own_checkpoint and template.name == "starcoder" else template.order


# Put before a text to encode it without the SentencePiece space before its first word (its
# ids are dropped after): CodeLlama's reference infilling code uses this character. The
# engine's prompts and the fine-tune's examples both use it, so that they agree.
BARE_MARKER = "\u263a"


def leading_special_ids(tokenizer: Any) -> tuple[int, ...]:
    """The special ids the tokenizer's own post-processor puts before a text (BOS), if any:
    what every prompt starts with, and so every training example."""
    try:
        full = list(tokenizer("a", verbose=False)["input_ids"])
        bare = list(tokenizer("a", add_special_tokens=False, verbose=False)["input_ids"])
    except Exception:  # a tokenizer that cannot encode "a" adds nothing we could see
        return ()
    special = set(tokenizer.all_special_ids)
    for k in range(len(full) - len(bare) + 1):
        if full[k : k + len(bare)] == bare:
            head = full[:k]
            return tuple(head) if all(i in special for i in head) else ()
    return ()
