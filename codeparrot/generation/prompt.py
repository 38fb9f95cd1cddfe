"""The prompt side of the engine: text to token ids fitted to the model's context.

A plain prompt keeps its end; a fill-in-the-middle prompt is laid out in its family's
template (:mod:`codeparrot.fim`). The FIM settings (:class:`FimSettings`: ``--fim-tokens``,
``--fim-order auto``, ``--fim-suffix-share``) are the engine's, given at load and resolved
there once into a :class:`FimLayout`, not per call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    text_only_encoder,
    unsplit_control_texts,
)
from codeparrot.generation.config import FimSettings, GenerationConfig

# A prompt longer than its budget loses a multiple of this many tokens at the start, so
# that the prompts of a growing document keep the same first token (and their cached
# keys/values) until it has grown by this much.
TRUNCATION_STRIDE = 64

# (text of the prompt's last token, ids a first new token may be): see healing.Healer
Healed = tuple[str, list[int]]


class FimSettingsError(ConfigError):
    """FIM settings the checkpoint's tokenizer cannot use (``--fim-tokens`` naming tokens
    it lacks): refused at load whatever the weights, so no fallback retries the load."""


@dataclass(frozen=True)
class FimLayout:
    """The FIM settings resolved against one tokenizer (at load, once).

    ``prompter``: the template a prompt with a suffix is laid out in (the ``fim_tokens``
    override, else the family's template the model learnt; None: no template, a suffix is
    refused); ``order``: ``"psm"`` or ``"spm"`` (``auto`` resolved; None without a template).
    """

    settings: FimSettings
    prompter: FimPrompter | None
    order: str | None

    @property
    def suffix_share(self) -> float:
        """The most of a full prompt budget the suffix keeps (``--fim-suffix-share``)."""
        return self.settings.fim_suffix_share


def ends_in_word(text: str) -> bool:
    """Does ``text`` end inside an identifier or a number (a letter, digit or underscore)?"""
    return bool(text) and (text[-1].isalnum() or text[-1] == "_")


class PromptBuilder:
    """Token ids of plain and fill-in-the-middle prompts for one tokenizer and context.

    ``infills``: whether the model learnt fill-in-the-middle (None: it did if its tokenizer
    has the sentinels); ``own_checkpoint``: trained here (order ``auto`` is then SPM, see
    :func:`codeparrot.fim.resolve_order`); ``fim``: the FIM settings, resolved here, once
    (:attr:`fim_layout`).
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
        fim: FimSettings | None = None,
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
        # control tokens whose text the tokenizer would not split (encode_text), and the
        # encoder that does, built at the first text that holds one
        self.unsplit_controls: frozenset[str] = unsplit_control_texts(tokenizer)
        self._text_only: Any = None
        # the FIM settings (--fim-tokens, --fim-order auto) resolved here once, not per call
        self.fim_layout: FimLayout = self.resolve_fim(fim or FimSettings())

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
        """Ids of ``text`` with special-token text (sentinels, end-of-text) split as text, and
        the text of a family's control tokens the tokenizer does not mark special too.

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
        if any(control in text for control in self.unsplit_controls):
            if self._text_only is None:
                self._text_only = text_only_encoder(self.tokenizer)
            return list(self._text_only.encode(text, add_special_tokens=False).ids)
        out = self.tokenizer(
            text, add_special_tokens=False, split_special_tokens=True, verbose=False
        )
        return list(out["input_ids"])

    # -- fill in the middle ------------------------------------------------------------
    def resolve_fim(self, settings: FimSettings) -> FimLayout:
        """``settings`` resolved against this tokenizer: the template (the ``fim_tokens``
        override, else :attr:`fim`) and the order (``auto``: the template's). A
        ``fim_tokens`` override the tokenizer lacks raises :class:`FimSettingsError` (a
        :class:`ConfigError`) naming it."""
        prompter = self.fim
        if settings.fim_tokens:
            try:
                prompter = detect_template(self.tokenizer, settings.fim_tokens)
            except ValueError as e:
                raise FimSettingsError(f"checkpoint {self.path or 'in memory'}: {e}") from None
        order = None
        if prompter is not None:
            order = resolve_order(settings.fim_order, prompter.template, self.own_checkpoint)
        return FimLayout(settings, prompter, order)

    def use_fim(self, settings: FimSettings) -> None:
        """Lay out FIM prompts by ``settings`` from now on (resolved here, once); raises
        :class:`ConfigError` and keeps the current layout when they do not resolve."""
        self.fim_layout = self.resolve_fim(settings)

    def infill_template(self) -> FimPrompter | None:
        """The template a suffix is laid out with: the ``fim_tokens`` override
        (``--fim-tokens``) if given, else :attr:`fim`; None when there is none."""
        return self.fim_layout.prompter

    def require_fim(self, layout: FimLayout | None = None) -> tuple[FimPrompter, str]:
        """(template, resolved order) of ``layout`` (default: the current one), or a
        :class:`CheckpointError` saying why this model cannot fill in the middle."""
        layout = layout or self.fim_layout
        if layout.prompter is not None and layout.order is not None:
            return layout.prompter, layout.order
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

    def encode_infill(
        self, prefix: str, suffix: str, max_new_tokens: int
    ) -> tuple[list[int], bool]:
        """Token ids of a fill-in-the-middle prompt fitted to the context; (ids, truncated).

        Laid out as :attr:`fim_layout` says (template, order, suffix share: the settings
        given at load). Prefix and suffix are encoded apart, with sentinel text inside them
        encoded as text. Over the budget (context minus ``max_new_tokens`` and the three
        sentinels), the prefix loses whole lines at its start and the suffix at its end;
        the suffix keeps at most ``fim_suffix_share`` of the budget unless the prefix leaves
        more (the language server's split, ``--fim-suffix-share``).
        """
        layout = self.fim_layout
        fim, order = self.require_fim(layout)
        prefix_ids, suffix_ids, truncated = self.fit_infill(
            prefix, suffix, max_new_tokens, layout.suffix_share, fim
        )
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
        layout = self.fim_layout
        fim, order = self.require_fim(layout)
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ConfigError("the prefix and the suffix must be text")
        if not prefix and not suffix:
            raise ConfigError("the prompt is empty (no prefix and no suffix)")
        prefix_ids, suffix_ids, truncated = self.fit_infill(
            prefix, suffix, config.max_new_tokens, layout.suffix_share, fim
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
