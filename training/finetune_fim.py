"""Fill-in-the-middle examples for ``codeparrot finetune``, in the base model's own template.

A base model that fills in the middle (a family template :mod:`codeparrot.fim` detects in
its tokenizer, or ``--fim-tokens``) keeps doing so only if fine-tuning shows it FIM
examples laid out as it learnt them: StarCoder's ``<fim_prefix>`` sentinels for
StarCoder, ``<|fim_prefix|>`` for Qwen2.5-Coder, ``▁<PRE>`` and an end-of-middle
``▁<EOT>`` for CodeLlama, DeepSeek-Coder's begin / hole / end tokens. The order is the one
the engine will prompt the fine-tuned model in (:func:`codeparrot.fim.resolve_order` for a
checkpoint written here): SPM for the StarCoder template (our checkpoints train on both
orders and complete best in SPM; bigcode's StarCoder trained on both), PSM for the others.

Each document is transformed whole before packing (Bavarian et al.'s document level):
the families' vocabularies have no common padding token for the loss to skip, which the
context level needs.

Every example starts as the engine's prompts do: with the BOS that the tokenizer's own
post-processor puts first (CodeLlama's ``<s>``, DeepSeek-Coder's begin-of-sentence; none for
StarCoder, Qwen2.5-Coder and the checkpoints trained here), before a FIM example's first
sentinel and before a left-to-right document alike. A template with a bare suffix
(CodeLlama's) gets its suffix encoded without the SentencePiece space, as the engine
prompts it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import ConfigError
from codeparrot.fim import BARE_MARKER, TEMPLATES, leading_special_ids
from codeparrot.options import DEFAULT_FIM_RATE
from codeparrot.training.data import FimTransform, encode_batch

# Templates whose model learnt an end-of-middle token after the middle (the others end it
# with end-of-text, which packing puts after every document): CodeLlama's ``▁<EOT>``
# (each family's record in codeparrot.families), and the END of ``--fim-tokens`` when given.
END_OF_MIDDLE = {t.name: t.end for t in TEMPLATES if t.end is not None}


@dataclass(frozen=True)
class FamilyFimTransform(FimTransform):
    """:class:`~codeparrot.training.data.FimTransform` in a family's template: its
    sentinels, its end-of-middle token after each middle where it has one, its BOS before
    every document (FIM or not) where the tokenizer adds one, and a bare suffix where the
    template asks for one. At rate 0 it only puts BOS first (its sentinels are unused)."""

    end: int | None = None
    template: str = ""  # the family's name (codeparrot.fim.TEMPLATES)
    bos: tuple[int, ...] = ()
    bare_suffix: bool = False

    def _encode(
        self, texts: list[str], plans: list[tuple[str, list[str]] | None]
    ) -> list[list[int]]:
        from codeparrot.fim import layout

        flat: list[str] = []
        for text, plan in zip(texts, plans, strict=True):
            if plan is None:
                flat.append(text)
            else:
                prefix, middle, suffix = plan[1]
                flat += [prefix, middle, BARE_MARKER + suffix if self.bare_suffix else suffix]
        ids = iter(encode_batch(self.tokenizer, flat))
        marker = encode_batch(self.tokenizer, [BARE_MARKER])[0] if self.bare_suffix else []
        out = []
        for plan in plans:
            if plan is None:
                out.append([*self.bos, *next(ids)])
                continue
            prefix, middle, suffix = next(ids), next(ids), next(ids)
            if self.bare_suffix:
                suffix = self._bare(suffix, marker, plan[1][2])
            example = [*self.bos, *layout(prefix, suffix, middle, self.tokens, plan[0])]
            out.append(example if self.end is None else [*example, self.end])
        return out

    def _bare(self, marked: list[int], marker: list[int], text: str) -> list[int]:
        """Ids of ``text`` without the leading space, from its encoding after the marker
        (its plain encoding in the unlikely case that the marker merged with it)."""
        if marked[: len(marker)] == marker:
            return marked[len(marker) :]
        [plain] = encode_batch(self.tokenizer, [text])
        return plain


def base_infills(base: Path, tokenizer: Any, fim_tokens: str = "") -> bool:
    """Does the base model fill in the middle? Its own record when it has one (a model
    trained here), else whether its tokenizer has a family's template (or ``fim_tokens``)."""
    from codeparrot.fim import detect_template
    from codeparrot.models.checkpoint import read_checkpoint_meta, trained_to_infill

    recorded = trained_to_infill(read_checkpoint_meta(base))
    if recorded is not None:
        return recorded
    try:
        return detect_template(tokenizer, fim_tokens) is not None
    except ValueError:
        return False


def fim_rate(asked: float | None, infills: bool) -> float:
    """``--fim-rate``, or by default the quickstart's rate for a base that infills, else 0."""
    if asked is not None:
        return asked
    return DEFAULT_FIM_RATE if infills else 0.0


def family_transform(
    tokenizer: Any, rate: float, fim_tokens: str, seed: int, where: str
) -> FamilyFimTransform | None:
    """The transform for ``rate`` in the tokenizer's template; at rate 0 one that only puts
    the tokenizer's BOS first, or None where it adds none (the documents stay as they are).

    A tokenizer without a template (and no ``fim_tokens``) at a rate above 0 is a
    :class:`ConfigError` naming ``where`` and the two ways out."""
    from codeparrot.fim import AUTO, SPM, FimTokens, detect_template, resolve_order, token_id

    bos = leading_special_ids(tokenizer)
    eos = tokenizer.eos_token_id
    if rate <= 0:
        if not bos:
            return None
        unused = FimTokens(eos, eos, eos, eos)  # no document is laid out at rate 0
        return FamilyFimTransform(tokenizer, unused, eos, 0.0, 0.0, "document", seed, bos=bos)
    try:
        prompter = detect_template(tokenizer, fim_tokens)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if prompter is None:
        raise ConfigError(
            f"--fim-rate {rate:g}: the base model {where} has no fill-in-the-middle tokens of "
            "a known family (StarCoder, SantaCoder, Qwen2.5-Coder, CodeGemma, CodeLlama, "
            "DeepSeek-Coder); name its PREFIX,SUFFIX,MIDDLE[,END] tokens with --fim-tokens, "
            "or pass --fim-rate 0"
        )
    template = prompter.template
    end_name = END_OF_MIDDLE.get(template.name)
    if template.name == "custom" and template.stops:
        end_name = template.stops[0]
    end = None if end_name is None else token_id(tokenizer, end_name)
    # documents are transformed whole, so nothing is ever padded: the pad id is unused
    tokens = FimTokens(prompter.prefix, prompter.middle, prompter.suffix, pad=eos)
    # the order the engine prompts a checkpoint written here in
    spm = 1.0 if resolve_order(AUTO, template, own_checkpoint=True) == SPM else 0.0
    return FamilyFimTransform(
        tokenizer, tokens, eos, rate, spm, "document", seed, end=end, template=template.name,
        bos=bos, bare_suffix=template.bare_suffix,
    )  # fmt: skip


def fim_documents(corpus: Path, split: str, transform: FimTransform) -> Iterator[list[int]]:
    """Token ids of each document of a corpus split, a FIM example with the transform's
    probability (its draw depends on the document's place in the split alone)."""
    from codeparrot.training.data import read_documents, shard_files

    batch: list[str] = []
    first = 0
    for _shard, _line, text in read_documents(shard_files(corpus, split)):
        batch.append(text)
        if len(batch) == 64:
            yield from transform.encode_documents(batch, [(first + i,) for i in range(64)])
            first += 64
            batch = []
    if batch:
        positions = [(first + i,) for i in range(len(batch))]
        yield from transform.encode_documents(batch, positions)


__all__ = [
    "END_OF_MIDDLE",
    "FamilyFimTransform",
    "base_infills",
    "family_transform",
    "fim_documents",
    "fim_rate",
]
