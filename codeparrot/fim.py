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

Each family's template (sentinels, stops, BOS) is in its record in :mod:`codeparrot.families`.
Standard library only: the configs and the CLI import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codeparrot.families import ORDERS as ORDERS
from codeparrot.families import PSM as PSM
from codeparrot.families import SPM as SPM
from codeparrot.families import FimTemplate as FimTemplate
from codeparrot.families import fim_templates, spm_trained_templates

FIM_PREFIX = "<fim_prefix>"
FIM_MIDDLE = "<fim_middle>"
FIM_SUFFIX = "<fim_suffix>"
FIM_PAD = "<fim_pad>"
SENTINELS: tuple[str, ...] = (FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD)


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


# every family's template (codeparrot.families), in the order detection tries them
TEMPLATES: tuple[FimTemplate, ...] = fim_templates()
TEMPLATE_NAMES: tuple[str, ...] = tuple(t.name for t in TEMPLATES)
SPM_TRAINED = spm_trained_templates()  # the families trained here: SPM under "auto"


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
    return SPM if own_checkpoint and template.name in SPM_TRAINED else template.order


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


def unsplit_control_texts(tokenizer: Any) -> frozenset[str]:
    """The names of :data:`TEMPLATES`' tokens (sentinels, stops) that ``tokenizer`` holds as
    added tokens not marked special, as DeepSeek-Coder's FIM sentinels are: text that
    spells one encodes to the control token itself even where special tokens' text is
    split as text, so untrusted text holding it could place a sentinel of its own."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return frozenset()
    names = {name for template in TEMPLATES for name in template.names}
    added = backend.get_added_tokens_decoder().values()
    return frozenset(t.content for t in added if not t.special and t.content in names)


def text_only_encoder(tokenizer: Any) -> Any:
    """A copy of ``tokenizer``'s backend that encodes every added token's text as text
    (each marked special, special tokens' text split): for text that holds
    :func:`unsplit_control_texts`. The tokenizer itself is left as it is."""
    from tokenizers import AddedToken, Tokenizer

    backend = tokenizer.backend_tokenizer
    copy = Tokenizer.from_str(backend.to_str())
    copy.add_special_tokens([
        AddedToken(t.content, single_word=t.single_word, lstrip=t.lstrip, rstrip=t.rstrip,
                   normalized=t.normalized, special=True)
        for t in backend.get_added_tokens_decoder().values()
    ])  # fmt: skip
    copy.encode_special_tokens = True
    return copy
