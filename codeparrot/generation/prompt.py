"""The prompt side of the engine: text to token ids fitted to the model's context.

A plain prompt keeps its end; a fill-in-the-middle prompt is laid out in its family's
template (:mod:`codeparrot.fim`), the template and the order (``--fim-tokens``,
``--fim-order auto``) resolved once per engine and setting, not per call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, ConfigError
from codeparrot.fim import (
    BARE_MARKER,
    PSM,
    FimPrompter,
    detect_template,
    leading_special_ids,
    resolve_order,
)
from codeparrot.generation.config import GenerationConfig
from codeparrot.options import FIM_SUFFIX_SHARE

# A prompt longer than its budget loses a multiple of this many tokens at the start, so
# that the prompts of a growing document keep the same first token (and their cached
# keys/values) until it has grown by this much.
TRUNCATION_STRIDE = 64

# (text of the prompt's last token, ids a first new token may be): see healing.Healer
Healed = tuple[str, list[int]]


def ends_in_word(text: str) -> bool:
    """Does ``text`` end inside an identifier or a number (a letter, digit or underscore)?"""
    return bool(text) and (text[-1].isalnum() or text[-1] == "_")


class PromptBuilder:
    """Token ids of plain and fill-in-the-middle prompts for one tokenizer and context.

    ``infills``: whether the model learnt fill-in-the-middle (None: it did if its tokenizer
    has the sentinels); ``own_checkpoint``: trained here (order ``auto`` is then SPM, see
    :func:`codeparrot.fim.resolve_order`).
    """

    def __init__(
        self,
        tokenizer: Any,
        context_length: int,
        eos_token_id: int | None,
        *,
        infills: bool | None = None,
        own_checkpoint: bool = False,
        path: Path | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.eos_token_id = eos_token_id
        self.path = path
        self.own_checkpoint = own_checkpoint
        # the family's fill-in-the-middle template found in the tokenizer (its tokens are
        # never text, they end a completion), and the same where the model learnt to use
        # it, else None: a suffix needs it (or an explicit --fim-tokens)
        self.sentinels: FimPrompter | None = detect_template(tokenizer)
        self.fim: FimPrompter | None = self.sentinels if infills is not False else None
        # ids a prompt starts with where the tokenizer's own post-processor adds them (BOS)
        self.bos_ids: list[int] = list(leading_special_ids(tokenizer))
        # --fim-tokens and --fim-order resolved once per value (see infill_template)
        self._templates: dict[str, FimPrompter | None] = {"": self.fim}
        self._orders: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    # -- plain prompts -----------------------------------------------------------------
    def encode_prompt(
        self, prompt: str, max_new_tokens: int, *, stride: int = TRUNCATION_STRIDE
    ) -> tuple[list[int], bool]:
        """Token ids of ``prompt`` fitted to the context: keeps the end. Returns (ids, truncated).

        A prompt over its budget (context minus ``max_new_tokens``) loses a multiple of
        ``stride`` tokens at its start: up to ``stride - 1`` tokens less than would fit,
        so that consecutive prompts of a document being typed share their start.
        """
        if max_new_tokens >= self.context_length:
            raise ConfigError(
                f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        ids = self.tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"]
        bos = self.bos_ids
        if not ids and not bos:
            ids = [self.eos_token_id if self.eos_token_id is not None else 0]
        budget = self.context_length - max_new_tokens - len(bos)
        if len(ids) <= budget:
            return [*bos, *ids], False
        cut = len(ids) - budget
        if stride > 1 and budget > stride:
            cut = -(-cut // stride) * stride
        return [*bos, *ids[cut:]], True

    def fit_ids(
        self, ids: list[int], max_new_tokens: int, vocab_size: int
    ) -> tuple[list[int], bool]:
        """A prompt given as token ids, checked (each ``0 <= id < vocab_size``) and fitted to
        the context: keeps its end. Returns (ids, truncated)."""
        if not isinstance(ids, (list, tuple)) or not ids:
            raise ConfigError("the prompt's token ids are empty (or not a list)")
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
        bad += [i for i in ids if isinstance(i, int) and not 0 <= i < vocab_size]
        if bad:
            raise ConfigError(
                f"the prompt's token ids must be integers in [0, {vocab_size}), got {bad[0]!r}"
            )
        budget = self.context_length - max_new_tokens
        if budget < 1:
            raise ConfigError(
                f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        return [int(i) for i in ids[-budget:]], len(ids) > budget

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def encode_text(self, text: str, *, bare: bool = False) -> list[int]:
        """Ids of ``text`` with special-token text (sentinels, end-of-text) split as text.

        ``bare``: without the SentencePiece space a tokenizer may put before the first word
        (encoded after a marker character whose ids are then dropped, as CodeLlama's
        reference ``encode_infilling`` does).
        """
        if not text:
            return []
        if bare:
            marker = self.encode_text(BARE_MARKER)
            ids = self.encode_text(BARE_MARKER + text)
            if ids[: len(marker)] == marker:
                return ids[len(marker) :]
            return ids
        out = self.tokenizer(
            text, add_special_tokens=False, split_special_tokens=True, verbose=False
        )
        return list(out["input_ids"])

    # -- fill in the middle ------------------------------------------------------------
    def infill_template(self, fim_tokens: str = "") -> FimPrompter | None:
        """The template a suffix is laid out with: the ``fim_tokens`` override
        (``--fim-tokens``) if given, else :attr:`fim`; None when there is none. Each
        override is parsed once."""
        with self._lock:
            if fim_tokens in self._templates:
                return self._templates[fim_tokens]
        try:
            found = detect_template(self.tokenizer, fim_tokens)
        except ValueError as e:
            raise ConfigError(f"checkpoint {self.path or 'in memory'}: {e}") from None
        with self._lock:
            self._templates[fim_tokens] = found
        return found

    def fim_order(self, order: str, fim_tokens: str = "") -> str:
        """The order a FIM prompt is laid out in: ``order``, or for ``"auto"`` the template's
        (resolved once per order and template)."""
        key = (order, fim_tokens)
        with self._lock:
            found = self._orders.get(key)
        if found is None:
            template = self.require_fim(fim_tokens).template
            found = resolve_order(order, template, self.own_checkpoint)
            with self._lock:
                self._orders[key] = found
        return found

    def require_fim(self, fim_tokens: str = "") -> FimPrompter:
        fim = self.infill_template(fim_tokens)
        if fim is None:
            why = (
                "its tokenizer has no fill-in-the-middle sentinels of a known family "
                "(StarCoder's <fim_prefix>, SantaCoder's <fim-prefix>, Qwen2.5-Coder's "
                "<|fim_prefix|>, CodeLlama's ▁<PRE>, DeepSeek-Coder's <｜fim▁begin｜>); name "
                "them with --fim-tokens PREFIX,SUFFIX,MIDDLE[,END] (the editor setting "
                "fim_tokens)"
                if self.sentinels is None
                else "it was trained without fill-in-the-middle examples (fim_rate 0), "
                "though its tokenizer has the sentinels"
            )
            raise CheckpointError(
                f"checkpoint {self.path or 'in memory'}: {why}, so it cannot complete with a "
                "suffix; complete the prefix alone or use a checkpoint trained with FIM"
            )
        return fim

    def encode_infill(
        self,
        prefix: str,
        suffix: str,
        max_new_tokens: int,
        order: str = PSM,
        suffix_share: float = FIM_SUFFIX_SHARE.default,
        fim_tokens: str = "",
    ) -> tuple[list[int], bool]:
        """Token ids of a fill-in-the-middle prompt fitted to the context; (ids, truncated).

        Prefix and suffix are encoded apart, with sentinel text inside them encoded as
        text. Over the budget (context minus ``max_new_tokens`` and the three sentinels),
        the prefix loses whole lines at its start and the suffix at its end; the suffix
        keeps at most ``suffix_share`` of the budget unless the prefix leaves more (the
        language server's split, ``--fim-suffix-share``). ``order`` may be ``"auto"`` (the
        template's own), ``fim_tokens`` an override template (``--fim-tokens``).
        """
        fim = self.require_fim(fim_tokens)
        prefix_ids, suffix_ids, truncated = self.fit_infill(
            prefix, suffix, max_new_tokens, suffix_share, fim
        )
        order = self.fim_order(order, fim_tokens)
        return self.infill_ids(fim, prefix_ids, suffix_ids, order), truncated

    def infill_ids(
        self, fim: FimPrompter, prefix_ids: list[int], suffix_ids: list[int], order: str
    ) -> list[int]:
        """BOS (where the tokenizer adds it), then the template's layout in ``order``
        (a resolved order: ``"psm"`` or ``"spm"``)."""
        return [*self.bos_ids, *fim.layout(prefix_ids, suffix_ids, order)]

    def infill_prompt(
        self,
        prefix: str,
        suffix: str,
        config: GenerationConfig,
        heal: Callable[[list[int]], Healed | None],
    ) -> tuple[list[int], bool, Healed | None]:
        """(ids, truncated, healed) of a FIM prompt; ``heal`` backs up a prefix's last token.

        Healing backs up the prefix's last token only where the prefix runs into the
        middle: always in SPM (as left to right), and in PSM only when the prefix ends
        inside a word (there the model would otherwise continue a token it never saw cut);
        the sentinels and the suffix are never touched.
        """
        fim = self.require_fim(config.fim_tokens)
        order = self.fim_order(config.fim_order, config.fim_tokens)
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ConfigError("the prefix and the suffix must be text")
        if not prefix and not suffix:
            raise ConfigError("the prompt is empty (no prefix and no suffix)")
        prefix_ids, suffix_ids, truncated = self.fit_infill(
            prefix, suffix, config.max_new_tokens, config.fim_suffix_share, fim
        )
        healed = heal(prefix_ids) if config.heal else None
        if healed is not None and order == PSM and not ends_in_word(healed[0]):
            healed = None
        if healed is not None:
            prefix_ids = prefix_ids[:-1]
        return self.infill_ids(fim, prefix_ids, suffix_ids, order), truncated, healed

    def fit_infill(
        self, prefix: str, suffix: str, max_new_tokens: int, suffix_share: float, fim: FimPrompter
    ) -> tuple[list[int], list[int], bool]:
        """(prefix ids, suffix ids, truncated) within the context's budget."""
        # three sentinels and the BOS the tokenizer adds
        budget = self.context_length - max_new_tokens - 3 - len(self.bos_ids)
        if budget < 1:
            raise ConfigError(
                f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        bare = fim.template.bare_suffix
        prefix_ids, suffix_ids = self.encode_text(prefix), self.encode_text(suffix, bare=bare)
        if len(prefix_ids) + len(suffix_ids) <= budget:
            return prefix_ids, suffix_ids, False
        suffix_cap = int(budget * suffix_share)
        prefix_room = min(len(prefix_ids), budget - min(len(suffix_ids), suffix_cap))
        suffix_room = budget - prefix_room
        if len(prefix_ids) > prefix_room:
            prefix_ids = self.last_lines(prefix, prefix_room)
        if len(suffix_ids) > suffix_room:
            suffix_ids = self.first_lines(suffix, suffix_room, bare=bare)
        return prefix_ids, suffix_ids, True

    def last_lines(self, text: str, room: int) -> list[int]:
        """Ids of the most whole lines at the end of ``text`` within ``room`` tokens."""
        starts = [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]
        lo, hi = 0, len(starts)  # find the first start whose tail fits (tails shrink)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self.encode_text(text[starts[mid] :])) <= room:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(starts):
            return self.encode_text(text[starts[lo] :])
        return self.encode_text(text)[-room:] if room > 0 else []  # one line over the room

    def first_lines(self, text: str, room: int, *, bare: bool = False) -> list[int]:
        """Ids of the most whole lines at the start of ``text`` within ``room`` tokens."""
        ends = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        lo, hi = 0, len(ends)  # count of line ends whose head fits (heads grow)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(self.encode_text(text[: ends[mid - 1]], bare=bare)) <= room:
                lo = mid
            else:
                hi = mid - 1
        if lo > 0:
            return self.encode_text(text[: ends[lo - 1]], bare=bare)
        return self.encode_text(text, bare=bare)[:room]  # the first line alone is over the room


def special_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of every special token of ``tokenizer`` (named ones and added ones marked special)."""
    ids = {int(i) for i in tokenizer.all_special_ids}
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids |= {int(i) for i, token in added.items() if getattr(token, "special", False)}
    return frozenset(ids)


def end_ids_of(model: Any, eos: int | None) -> frozenset[int]:
    """End-of-text ids: the tokenizer's, and every one of the model's generation config
    (``eos_token_id`` of generation_config.json may be a list) and config."""
    ids = {eos} if eos is not None else set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        values = value if isinstance(value, (list, tuple)) else [value]
        ids |= {int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)}
    return frozenset(ids)
