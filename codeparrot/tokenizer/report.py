"""How good is a tokenizer on held-out Python: the measures of CodeParrot's tokenizer study.

Definitions (also stored in the report under ``definitions``):

- *characters per token*: characters of the held-out text / tokens.
- *words*: maximal runs of word characters (``\\w+``: identifiers, keywords, numbers).
- *subword fertility*: tokens per word, counting every token that overlaps the word
  (a leading space merged into the token does not make it a different token).
- *proportion of continued words*: words split over two or more tokens.
- *byte-fallback rate*: tokens that are a single raw byte of a non-ASCII character, i.e.
  characters the vocabulary has no merge for.
- *GPT-2 token ratio*: GPT-2's token count on the same texts / ours (2.0 = half the tokens).
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from codeparrot.errors import CheckpointError, DataError
from codeparrot.io import provenance, read_json
from codeparrot.tokenizer.config import TokenizerReportConfig
from codeparrot.tokenizer.corpus import HeldOut, heldout_texts
from codeparrot.tokenizer.train import METADATA_FILE

ENCODE_BATCH_FILES = 256
WORD = re.compile(r"\w+")
INDENTS = {
    "4 spaces": " " * 4,
    "8 spaces": " " * 8,
    "12 spaces": " " * 12,
    "16 spaces": " " * 16,
    "1 tab": "\t",
    "2 tabs": "\t\t",
}
DEFINITIONS = {
    "chars_per_token": "characters of held-out text per token",
    "subword_fertility": "tokens overlapping a word (\\w+ run) per word",
    "continued_word_proportion": "words split over two or more tokens / words",
    "byte_fallback_rate": "tokens that are one raw byte of a non-ASCII character / tokens",
    "gpt2.ratio": "GPT-2 tokens / our tokens on the same texts (2.0: half the tokens)",
    "indentation": "tokens holding part of an indented line's indentation (1: the run is "
    "never split, though it may share its token with the line break before it; GPT-2's "
    "pre-tokenizer gives the last space to the word and splits the last tab off, so 2)",
}


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte to the printable character that stands for it."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def token_bytes(token: str) -> bytes | None:
    """The bytes a byte-level token stands for (``None`` for a special token)."""
    decode = unicode_to_bytes()
    try:
        return bytes(decode[c] for c in token)
    except KeyError:
        return None


def _show(raw: bytes) -> str:
    return repr(raw.decode("utf-8", errors="backslashreplace"))


def load_tokenizer(path: Path) -> Any:
    """``AutoTokenizer.from_pretrained(path)``, with a clear error when it is not one."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such tokenizer directory")
    try:
        # a tokenizer directory never runs its own code (nor asks on stdin whether to)
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a tokenizer directory ({e})") from e
    if not getattr(tokenizer, "is_fast", False):
        raise CheckpointError(f"{path}: needs a fast (tokenizers-backed) tokenizer")
    return tokenizer


def _default_heldout(tokenizer_dir: Path) -> list[Path]:
    meta_path = tokenizer_dir / METADATA_FILE
    corpus = None
    if meta_path.is_file():
        corpus = (read_json(meta_path).get("corpus") or {}).get("data")
    if not corpus:
        raise DataError(
            f"{tokenizer_dir}: no held-out PATH given and {METADATA_FILE} names no corpus; "
            "give held-out .py files, directories or shards"
        )
    if not (Path(corpus) / "valid").is_dir():
        raise DataError(
            f"{corpus}: the tokenizer's corpus has no valid/ split; give held-out PATHs"
        )
    return [Path(corpus)]


def _count_tokens(backend: Any, texts: list[str], desc: str, progress: bool) -> list[Any]:
    from tqdm.auto import tqdm

    encodings = []
    starts = range(0, len(texts), ENCODE_BATCH_FILES)
    for start in tqdm(starts, desc=desc, unit="batch", disable=not progress):
        chunk = texts[start : start + ENCODE_BATCH_FILES]
        encodings.extend(backend.encode_batch(chunk, add_special_tokens=False))
    return encodings


def _word_counts(text: str, offsets: list[tuple[int, int]]) -> tuple[int, int, int]:
    """(words, tokens overlapping them, words split over 2+ tokens) for one text."""
    import numpy as np

    spans = np.array([m.span() for m in WORD.finditer(text)], dtype=np.int64).reshape(-1, 2)
    if len(spans) == 0 or not offsets:
        return len(spans), 0, 0
    tok = np.asarray(offsets, dtype=np.int64)
    # Token offsets are ordered, so the tokens overlapping [s, e) are those starting
    # before e minus those ending at or before s.
    per_word = np.searchsorted(tok[:, 0], spans[:, 1], side="left") - np.searchsorted(
        tok[:, 1], spans[:, 0], side="right"
    )
    return len(spans), int(per_word.sum()), int((per_word > 1).sum())


def _single_token_words(backend: Any, words: Iterable[str]) -> dict[str, list[str]]:
    single, split = [], []
    for word in words:
        bare = len(backend.encode(word, add_special_tokens=False).ids) == 1
        spaced = len(backend.encode(" " + word, add_special_tokens=False).ids) == 1
        (single if bare or spaced else split).append(word)
    return {"single_token": single, "split": split}


def python_builtins() -> list[str]:
    """Public builtin functions and types (exceptions and warnings left out)."""
    names = []
    for name in dir(builtins):
        obj = getattr(builtins, name)
        if name.startswith("_") or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        names.append(name)
    return names


def _indentation(backend: Any) -> dict[str, int]:
    out = {}
    for name, indent in INDENTS.items():
        text = f"if x:\n{indent}return x\n"
        enc = backend.encode(text, add_special_tokens=False)
        start = text.index("\n") + 1
        end = start + len(indent)
        out[name] = sum(1 for (s, e) in enc.offsets if s < end and e > start)
    return out


def _vocab_tables(backend: Any, top: int) -> dict[str, Any]:
    import numpy as np

    vocab = backend.get_vocab(with_added_tokens=False)
    special = {t.content for t in backend.get_added_tokens_decoder().values()}
    size = max(vocab.values()) + 1 if vocab else 0
    fallback = np.zeros(max(size, backend.get_vocab_size()), dtype=bool)
    entries = []
    for token, idx in vocab.items():
        if token in special:
            continue
        raw = token_bytes(token)
        if raw is None:
            continue
        if len(raw) == 1 and raw[0] >= 0x80:
            fallback[idx] = True
        entries.append((idx, raw))
    longest = sorted(entries, key=lambda e: (-len(e[1]), e[0]))[:top]
    last = sorted(entries, key=lambda e: -e[0])[:top]
    return {
        "fallback": fallback,
        "longest_tokens": [{"id": i, "token": _show(raw), "bytes": len(raw)} for i, raw in longest],
        "last_learned_tokens": [{"id": i, "token": _show(raw)} for i, raw in last],
    }


def tokenizer_report(
    config: TokenizerReportConfig | str | Path,
    paths: Iterable[str | Path] = (),
    **options: Any,
) -> dict[str, Any]:
    """Measure a tokenizer on held-out files; a JSON-serialisable dict.

    ``config`` is a :class:`TokenizerReportConfig` or a tokenizer directory (then
    ``paths`` and ``options`` fill the config). ``report["gpt2"]["ratio"]`` is how many
    times more tokens GPT-2's tokenizer needs on the same texts (``None`` with a
    ``note`` when GPT-2's vocabulary is not installed).
    """
    import numpy as np

    if not isinstance(config, TokenizerReportConfig):
        config = TokenizerReportConfig(
            tokenizer=Path(config), paths=tuple(Path(p) for p in paths), **options
        )
    tokenizer_dir = Path(config.tokenizer)
    tokenizer = load_tokenizer(tokenizer_dir)
    backend = tokenizer.backend_tokenizer

    sources = list(config.paths) or _default_heldout(tokenizer_dir)
    held: HeldOut = heldout_texts(sources, config.max_files)
    if not held.texts:
        where = ", ".join(map(str, sources))
        raise DataError(f"no held-out text found in {where}")

    encodings = _count_tokens(backend, held.texts, "encoding held-out files", config.progress)
    tables = _vocab_tables(backend, config.top)
    fallback = tables.pop("fallback")
    n_tokens = n_words = word_tokens = continued = n_fallback = 0
    for text, enc in zip(held.texts, encodings, strict=True):
        ids = np.asarray(enc.ids, dtype=np.int64)
        n_tokens += len(ids)
        n_fallback += int(fallback[ids].sum()) if len(ids) else 0
        words, tokens_in_words, split = _word_counts(text, enc.offsets)
        n_words += words
        word_tokens += tokens_in_words
        continued += split
    n_chars = sum(len(t) for t in held.texts)
    n_bytes = sum(len(t.encode("utf-8")) for t in held.texts)

    report: dict[str, Any] = {
        "tokenizer": str(tokenizer_dir),
        "vocab_size": len(tokenizer),
        "heldout": {
            "sources": held.sources,
            "files": len(held.texts),
            "chars": n_chars,
            "bytes": n_bytes,
            "skipped": held.skipped,
        },
        "tokens": n_tokens,
        "chars_per_token": n_chars / n_tokens if n_tokens else None,
        "bytes_per_token": n_bytes / n_tokens if n_tokens else None,
        "words": n_words,
        "subword_fertility": word_tokens / n_words if n_words else None,
        "continued_word_proportion": continued / n_words if n_words else None,
        "byte_fallback_tokens": n_fallback,
        "byte_fallback_rate": n_fallback / n_tokens if n_tokens else None,
        "keywords": _single_token_words(backend, keyword.kwlist),
        "builtins": _single_token_words(backend, python_builtins()),
        "indentation": _indentation(backend),
        **tables,
        "gpt2": _gpt2_comparison(held.texts, n_tokens, config),
        "definitions": DEFINITIONS,
        "provenance": provenance(config),
    }
    return report


def _gpt2_comparison(texts: list[str], ours: int, config: TokenizerReportConfig) -> dict[str, Any]:
    from codeparrot.tokenizer.gpt2_reference import GPT2ReferenceUnavailable, load_gpt2_tokenizer

    if not config.compare_gpt2:
        return {"tokens": None, "ratio": None, "note": "skipped (--no-compare-gpt2)"}
    try:
        gpt2 = load_gpt2_tokenizer()
    except GPT2ReferenceUnavailable as e:
        return {"tokens": None, "ratio": None, "note": f"skipped: {e}"}
    encodings = _count_tokens(gpt2, texts, "encoding with GPT-2", config.progress)
    theirs = sum(len(e.ids) for e in encodings)
    return {
        "tokens": theirs,
        "ratio": theirs / ours if ours else None,
        "note": f"GPT-2 needs {theirs / ours:.2f}x the tokens" if ours else "no tokens",
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as a plain-text table for the terminal."""

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.2f}%"

    def num(x: float | None, digits: int = 3) -> str:
        return "n/a" if x is None else f"{x:.{digits}f}"

    held = report["heldout"]
    gpt2 = report["gpt2"]
    rows = [
        ("tokenizer", report["tokenizer"]),
        ("vocab size", f"{report['vocab_size']:,}"),
        ("held-out files", f"{held['files']:,} ({held['chars']:,} chars)"),
        ("skipped files", str(len(held["skipped"]))),
        ("tokens", f"{report['tokens']:,}"),
        ("chars / token", num(report["chars_per_token"])),
        ("subword fertility", num(report["subword_fertility"])),
        ("continued words", pct(report["continued_word_proportion"])),
        ("byte-fallback rate", pct(report["byte_fallback_rate"])),
        (
            "GPT-2 tokens / ours",
            gpt2["note"] if gpt2["ratio"] is None else f"{gpt2['ratio']:.2f}x ({gpt2['tokens']:,})",
        ),
    ]
    for group in ("keywords", "builtins"):
        single, split = report[group]["single_token"], report[group]["split"]
        rows.append((f"{group} single-token", f"{len(single)}/{len(single) + len(split)}"))
        rows.append((f"{group} split", " ".join(split) if split else "(none)"))
    rows.append(
        (
            "indentation tokens",
            ", ".join(f"{k}: {v}" for k, v in report["indentation"].items()),
        )
    )
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    for title, key in (
        ("longest tokens", "longest_tokens"),
        ("last learned", "last_learned_tokens"),
    ):
        lines.append(f"{title}:")
        lines.extend(f"  {t['id']:>7}  {t['token']}" for t in report[key])
    for skipped in held["skipped"][:10]:
        lines.append(f"skipped {skipped['path']}: {skipped['reason']}")
    return "\n".join(lines)
