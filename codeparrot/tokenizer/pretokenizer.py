"""Where a byte-level BPE may not merge: the pre-tokenizers the tokenizer stage can train with.

BPE merges only inside pre-tokens, so the pre-tokenizer decides which tokens can exist.
GPT-2's splits at every change between letters, digits and punctuation, so a Python line
costs a token per ``_`` and per ``.``, and a tab indentation always splits (its last tab
goes to the word). The ``code`` pre-tokenizer keeps Python's units together instead:

- a line break, any blank lines after it and the next line's indentation (spaces or tabs)
  are one unit, attached to the last name, number or punctuation run of the line before;
- a name is an identifier with its underscores and digits, dotted names included
  (``os.path.join``); a number is a whole numeric literal (``0x1F``, ``1_000``, ``1e5``);
- a name or a number takes the punctuation run just before it, with at most one space
  before that run (``.append``, `` (self``, `` **kwargs``, ``[0``, a docstring's opening
  quotes with its first word), or one space; never the space after an operator (`` =`` and
  `` x`` stay apart in ``y = x``);
- other punctuation runs take at most one leading space;
- the indentation at the start of a text is one unit, and other runs of spaces leave their
  last space to the next unit (as GPT-2's do).

Measured with ``bench/tokenizer.py --ratio-only --files 8000`` (RESULTS.md, 32,768 vocab):
on 500 held-out stdlib files GPT-2 needs 1.74x our tokens with GPT-2's pre-tokenizer and
2.04x with this one (1.99x before numbers were kept whole and took a prefix, and before a
name took a whole punctuation run). A prompt that stops inside such a unit (after a line
break, before the indentation; after an opening bracket) ends in a token the model saw less
often in training.

Importing this module is cheap: only the patterns are defined at module level.
"""

from __future__ import annotations

from typing import Any

# An identifier: letters, digits and underscores, not starting with a digit.
_IDENT = r"[\p{L}_][\p{L}\p{N}_]*"
# A numeric literal: a digit, then digits, letters and underscores (0x1F, 1_000, 1e5, 3j).
_NUMBER = r"\p{N}[\p{L}\p{N}_]*"
# Punctuation: anything but whitespace, letters, digits and the underscore.
_PUNCT = r"[^\s\p{L}\p{N}_]"
# What a name or a number may start with: a punctuation run after at most one space, or one
# space; not a tab, so that a tab indentation is never split.
_PREFIX = rf"(?: ?{_PUNCT}+| )?"
# A line break with the blank lines after it and the next line's indentation.
_LINE_BREAK = r"\s*\n[ \t]*"

CODE_PATTERN = "|".join(
    [
        # a name, a number or a punctuation run, each with the line break that follows it
        rf"{_PREFIX}{_IDENT}(?:\.{_IDENT})*(?:{_LINE_BREAK})?",
        rf"{_PREFIX}{_NUMBER}(?:{_LINE_BREAK})?",
        rf" ?{_PUNCT}+(?:{_LINE_BREAK})?",
        # a line break after nothing else (a blank first line, or after other whitespace)
        _LINE_BREAK,
        # indentation at the start of the text (or of the text after a special token)
        r"^[ \t]+",
        # other whitespace: a run that leaves its last space to the next name, or all of it
        r"[ \t]+(?= \S)",
        r"\s+",
    ]
)

# GPT-2's own pre-tokenizer: the ByteLevel pre-tokenizer with its built-in regex.
PRE_TOKENIZERS = ("code", "gpt2")


def pre_tokenizer_pattern(name: str) -> str | None:
    """The split regex of a pre-tokenizer (``None`` for GPT-2's built-in one)."""
    if name not in PRE_TOKENIZERS:
        raise ValueError(f"unknown pre-tokenizer {name!r} (choose from {PRE_TOKENIZERS})")
    return CODE_PATTERN if name == "code" else None


def build_pre_tokenizer(name: str) -> Any:
    """A ``tokenizers`` pre-tokenizer: the split, then the byte-level mapping."""
    from tokenizers import Regex, pre_tokenizers

    pattern = pre_tokenizer_pattern(name)
    if pattern is None:
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    return pre_tokenizers.Sequence(
        [
            # "isolated" keeps every character: unmatched text becomes its own pre-token.
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
