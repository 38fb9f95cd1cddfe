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
