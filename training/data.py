"""Training data: streamed corpus shards packed into constant-length token sequences.

Two sources feed the loop, both deterministic for a seed and resumable from a small
state (so ``--resume`` continues where the run stopped without replaying the loader):

- :class:`PackedStream` reads ``DATA/<split>/*.jsonl.gz`` line by line, tokenizes
  documents in batches, passes them through a shuffle buffer and packs them into
  ``seq_length`` sequences separated by the EOS token (ConstantLengthDataset semantics,
  except that the tail of one pack carries over to the next instead of being dropped).
  The packed sequences then pass through a second shuffle buffer: a long document
  packs into many consecutive windows, which would otherwise fill whole batches.
  Its state is the read position (epoch, shard, line), both buffers, the shuffle RNG
  and the carried-over tokens.
- :class:`TokenShardStream` reads a memmapped token file written by :func:`pretokenize`
  (uint16 when the vocabulary fits, else uint32) and visits its ``seq_length`` windows
  in a fresh seeded permutation each epoch. Its state is two integers.

Either can turn training data into fill-in-the-middle examples (:class:`FimTransform`):
per document before packing (``document``: in the stream as documents are tokenized, or
once into the pretokenized file) or per document piece of each packed sequence
(``context``). Every draw comes from a generator seeded by the run seed and the
position of what it transforms, so a resumed run draws exactly what the uninterrupted
one did.

:class:`Batches` turns either into the rows of one process: every process draws the
same global batch and keeps its own slice, so 2 processes x batch b see exactly the
sequences 1 process x batch 2b sees.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from codeparrot.errors import ConfigError, DataError
from codeparrot.fim import FIM_MIDDLE, FIM_PAD, FIM_PREFIX, FIM_SUFFIX, PSM, SPM, FimTokens, layout
from codeparrot.io import atomic_open, read_json, write_json
from codeparrot.options import FIM_MODES

TOKENIZE_BATCH = 64  # documents per tokenizer call


class SequenceSource(Protocol):
    """Anything the loop can draw packed sequences from and checkpoint."""

    seq_length: int

    def next_sequence(self) -> np.ndarray: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def shard_files(data_dir: str | Path, split: str) -> list[Path]:
    """The sorted ``*.jsonl.gz`` (or ``*.jsonl``) shards of one split of a corpus."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"--data {data_dir}: no such directory")
    split_dir = data_dir / split
    files = sorted(split_dir.glob("*.jsonl.gz")) + sorted(split_dir.glob("*.jsonl"))
    if not files:
        raise DataError(
            f"--data {data_dir}: no {split}/*.jsonl.gz shards; expected the layout written by "
            "`codeparrot data build` (docs/artefacts.md)"
        )
    return files


def _open_text(path: Path) -> Any:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_documents(
    files: list[Path], shard: int = 0, line: int = 0
) -> Iterator[tuple[int, int, str]]:
    """``(shard, next_line, content)`` from ``files`` starting at (shard, line).

    Skipped lines are not parsed, so restarting mid-shard costs a decompression only.
    """
    for s in range(shard, len(files)):
        path = files[s]
        start = line if s == shard else 0
        try:
            with _open_text(path) as fh:
                for i, raw in enumerate(fh):
                    if i < start:
                        continue
                    try:
                        content = json.loads(raw)["content"]
                    except (json.JSONDecodeError, KeyError, TypeError) as e:
                        raise DataError(
                            f"{path}:{i + 1}: not a JSON record with a 'content' field ({e})"
                        ) from e
                    yield s, i + 1, content
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: cannot be read ({e})") from e


def encode_batch(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text as text (the fast backend when there is one).

    No special tokens are added, and the text of one (a file that mentions
    ``<|endoftext|>`` or ``<fim_prefix>``) is split like any other text: only the data
    pipeline places EOS and the FIM sentinels.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        before = backend.encode_special_tokens
        backend.encode_special_tokens = True
        try:
            return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
        finally:
            backend.encode_special_tokens = before
    return tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]


# -- fill in the middle -----------------------------------------------------------------

FIM_STREAM = 0x46494D  # "FIM": keeps these draws apart from other seeded streams


def split_at_characters(text: str, rng: np.random.Generator) -> tuple[str, str, str]:
    """``(prefix, middle, suffix)`` of ``text`` cut at two uniformly drawn character positions."""
    lo, hi = sorted(int(x) for x in rng.integers(0, len(text) + 1, size=2))
    return text[:lo], text[lo:hi], text[hi:]


def split_at_lines(text: str, rng: np.random.Generator) -> tuple[str, str, str]:
    """``(prefix, middle, suffix)`` of ``text`` with a middle that ends at a line end.

    The middle starts on a non-blank line drawn uniformly, at its start (half of the time;
    indentation included) or at a uniformly drawn character inside it (the rest of the line),
    and runs through that line and a geometric number of lines after it (mean 1 more), line
    breaks included: the shape of a line an editor completes and of HumanEval's infilling
    tasks. A text without a non-blank line is cut at characters instead.
    """
    lines = text.splitlines(keepends=True)
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if not filled:
        return split_at_characters(text, rng)
    first = filled[int(rng.integers(len(filled)))]
    last = min(len(lines) - 1, first + int(rng.geometric(0.5)) - 1)
    starts = np.cumsum([0, *(len(line) for line in lines)])
    lo = int(starts[first])
    if rng.random() >= 0.5:
        lo += int(rng.integers(len(lines[first].rstrip())))  # some of its text is left
    hi = int(starts[last + 1])
    return text[:lo], text[lo:hi], text[hi:]


@dataclass(frozen=True)
class FimTransform:
    """Fill-in-the-middle training examples (Bavarian et al. 2022), drawn reproducibly.

    Each document (``document`` mode) or each document piece of a packed sequence
    (``context`` mode) is transformed with probability ``rate``: cut at two character
    positions, its three pieces tokenized apart and laid out with
    :func:`codeparrot.fim.layout`, in SPM order with probability ``spm_rate``, else PSM.
    A share ``line_rate`` of the examples gets a middle that ends at a line end
    (:func:`split_at_lines`) instead of one between two random characters.
    """

    tokenizer: Any
    tokens: FimTokens
    eos: int
    rate: float
    spm_rate: float = 0.5
    mode: str = "context"
    seed: int = 0
    line_rate: float = 0.0

    @classmethod
    def for_tokenizer(
        cls,
        tokenizer: Any,
        rate: float,
        spm_rate: float,
        mode: str,
        seed: int,
        where: str,
        line_rate: float = 0.0,
    ) -> FimTransform | None:
        """The transform, None for ``rate`` 0; an error naming ``where`` without sentinels."""
        if rate <= 0:
            return None
        tokens = FimTokens.from_tokenizer(tokenizer)
        if tokens is None:
            raise ConfigError(
                f"--fim-rate {rate}: the tokenizer {where} has no fill-in-the-middle sentinels "
                f"({FIM_PREFIX} {FIM_MIDDLE} {FIM_SUFFIX} {FIM_PAD} as special tokens); train "
                "one with `codeparrot tokenizer train` or pass --fim-rate 0"
            )
        if mode not in FIM_MODES:
            raise ConfigError(f"--fim-mode must be one of {', '.join(FIM_MODES)}, got {mode!r}")
        return cls(tokenizer, tokens, tokenizer.eos_token_id, rate, spm_rate, mode, seed, line_rate)

    def signature(self) -> dict[str, Any]:
        out = {"rate": self.rate, "spm_rate": self.spm_rate, "mode": self.mode, "seed": self.seed}
        if self.line_rate:  # absent at 0, so the data of runs from before it still match
            out["line_rate"] = self.line_rate
        return out

    def rng(self, *position: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, FIM_STREAM, *position])

    def _draw(self, text: str, rng: np.random.Generator) -> tuple[str, list[str]] | None:
        """``(order, [prefix, middle, suffix])`` for a text to transform, None to keep it."""
        if rng.random() >= self.rate:
            return None
        order = SPM if rng.random() < self.spm_rate else PSM
        # no draw at line_rate 0: the examples of runs from before it stay the same
        lines = self.line_rate > 0 and rng.random() < self.line_rate
        return order, list((split_at_lines if lines else split_at_characters)(text, rng))

    def _encode(
        self, texts: list[str], plans: list[tuple[str, list[str]] | None]
    ) -> list[list[int]]:
        """Token ids of each text, or of its FIM layout where it has a plan (one tokenizer call)."""
        flat: list[str] = []
        for text, plan in zip(texts, plans, strict=True):
            flat.extend([text] if plan is None else plan[1])
        ids = iter(encode_batch(self.tokenizer, flat))
        out = []
        for plan in plans:
            if plan is None:
                out.append(next(ids))
            else:
                prefix, middle, suffix = next(ids), next(ids), next(ids)
                out.append(layout(prefix, suffix, middle, self.tokens, plan[0]))
        return out

    def encode_documents(
        self, texts: list[str], positions: list[tuple[int, ...]]
    ) -> list[list[int]]:
        """Token ids of documents (no EOS), each a FIM example with probability ``rate``.

        ``positions`` name each document in the corpus (its draws depend on nothing else).
        """
        plans = [self._draw(t, self.rng(*p)) for t, p in zip(texts, positions, strict=True)]
        return self._encode(texts, plans)

    def transform_sequence(self, sequence: np.ndarray, *position: int) -> np.ndarray:
        """A packed sequence with its document pieces transformed, cut or padded to its length.

        Pieces are split at EOS (kept), decoded, transformed at the character level and
        re-encoded; ``<fim_pad>`` fills a sequence that came out shorter (the loss skips it).
        """
        rng = self.rng(*position)
        ids = sequence.tolist()
        bounds = [-1, *(i for i, t in enumerate(ids) if t == self.eos), len(ids)]
        pieces = [ids[a + 1 : b] for a, b in pairwise(bounds)]
        texts = [self._decode(piece) for piece in pieces]
        plans = [self._draw(text, rng) if text else None for text in texts]
        chosen = [i for i, plan in enumerate(plans) if plan is not None]
        if not chosen:
            return sequence
        encoded = dict(
            zip(
                chosen,
                self._encode([texts[i] for i in chosen], [plans[i] for i in chosen]),
                strict=True,
            )
        )
        out: list[int] = []
        for i, piece in enumerate(pieces):
            out.extend(encoded.get(i, piece))
            if i < len(pieces) - 1:
                out.append(self.eos)
        n = len(ids)
        out = out[:n] + [self.tokens.pad] * max(0, n - len(out))
        return np.asarray(out, dtype=sequence.dtype)

    def _decode(self, ids: list[int]) -> str:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            return backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False)


class PackedStream:
    """Documents of a corpus split, shuffled through a buffer and packed with EOS.

    ``shuffle_buffer`` documents are shuffled before packing and ``sequence_buffer``
    packed sequences after it (0: none). ``loop=True`` starts a new epoch when the
    shards are exhausted (training); ``loop=False`` stops (validation, read in order
    with both buffers 0).
    """

    def __init__(
        self,
        files: list[Path],
        tokenizer: Any,
        seq_length: int,
        *,
        shuffle_buffer: int = 1000,
        sequence_buffer: int = 0,
        seed: int = 0,
        loop: bool = True,
        fim: FimTransform | None = None,
    ) -> None:
        self.files = list(files)
        self.fim = fim
        self.packed = 0  # sequences packed so far: the position of context-level FIM draws
        self.tokenizer = tokenizer
        self.eos = tokenizer.eos_token_id
        self.seq_length = seq_length
        self.shuffle_buffer = shuffle_buffer
        self.sequence_buffer = sequence_buffer
        self.loop = loop
        self.epoch = 0
        self.shard = 0
        self.line = 0
        self.buffer: list[list[int]] = []
        self.carry: list[int] = []
        self.sequences: list[np.ndarray] = []  # packed, waiting to be drawn at random
        self.rng = random.Random(seed)
        self._reader: Iterator[tuple[int, int, str]] | None = None
        self._docs_this_epoch = 0

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "shard": self.shard,
            "line": self.line,
            "buffer": [np.asarray(d, dtype=np.int32) for d in self.buffer],
            "carry": np.asarray(self.carry, dtype=np.int32),
            "sequences": np.asarray(self.sequences, dtype=np.int32).reshape(-1, self.seq_length),
            "rng": self.rng.getstate(),
            "docs_this_epoch": self._docs_this_epoch,
            "files": [f.name for f in self.files],
            "packed": self.packed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("files") != [f.name for f in self.files]:
            raise DataError(
                "--resume: the corpus shards changed since the checkpoint "
                f"(saved {state.get('files')}, now {[f.name for f in self.files]})"
            )
        self.epoch, self.shard, self.line = state["epoch"], state["shard"], state["line"]
        self.buffer = [d.tolist() for d in state["buffer"]]
        self.carry = state["carry"].tolist()
        # A checkpoint from before the sequence buffer had none.
        saved = state.get("sequences", np.zeros((0, self.seq_length), dtype=np.int32))
        if saved.shape[1] != self.seq_length:
            raise DataError(
                f"--resume: the checkpoint packed {saved.shape[1]} tokens, now {self.seq_length}"
            )
        self.sequences = [row.astype(np.int64) for row in saved]
        self.rng.setstate(state["rng"])
        self._docs_this_epoch = state["docs_this_epoch"]
        self.packed = state.get("packed", 0)  # a checkpoint from before FIM did not count
        self._reader = None

    # -- reading -----------------------------------------------------------------------
    def _read_texts(self, n: int) -> tuple[list[str], list[tuple[int, int, int]]]:
        """Up to ``n`` non-empty documents and their positions ``(epoch, shard, line)``."""
        texts: list[str] = []
        positions: list[tuple[int, int, int]] = []
        while len(texts) < n:
            if self._reader is None:
                self._reader = read_documents(self.files, self.shard, self.line)
            item = next(self._reader, None)
            if item is None:
                self._reader = None
                if self._docs_this_epoch == 0:
                    raise DataError(
                        f"{self.files[0].parent}: the shards hold no non-empty documents"
                    )
                if not self.loop:
                    break
                self.epoch += 1
                self.shard, self.line, self._docs_this_epoch = 0, 0, 0
                continue
            self.shard, self.line, text = item
            if text:
                self._docs_this_epoch += 1
                texts.append(text)
                positions.append((self.epoch, self.shard, self.line))
        return texts, positions

    def _refill(self) -> None:
        # Documents are tokenized a batch at a time (the fast tokenizer spreads a batch over
        # the cores), so the buffer is topped up only once a whole batch fits. A corpus
        # smaller than the buffer is not read twice into it: refilling stops at an epoch
        # boundary once the buffer holds something.
        want = self.shuffle_buffer or TOKENIZE_BATCH
        batch = min(TOKENIZE_BATCH, want)
        if len(self.buffer) > want - batch:
            return
        epoch = self.epoch
        while len(self.buffer) < want and (self.epoch == epoch or not self.buffer):
            texts, positions = self._read_texts(min(batch, want - len(self.buffer)))
            if not texts:
                return
            if self.fim is not None and self.fim.mode == "document":
                self.buffer.extend(self.fim.encode_documents(texts, positions))
            else:
                self.buffer.extend(encode_batch(self.tokenizer, texts))

    def _next_document(self) -> list[int] | None:
        self._refill()
        if not self.buffer:
            return None
        if self.shuffle_buffer > 0:
            i = self.rng.randrange(len(self.buffer))
            self.buffer[i], self.buffer[-1] = self.buffer[-1], self.buffer[i]
            return self.buffer.pop()
        return self.buffer.pop(0)

    def _pack(self) -> np.ndarray | None:
        while len(self.carry) < self.seq_length:
            doc = self._next_document()
            if doc is None:
                return None
            self.carry.extend(doc)
            self.carry.append(self.eos)
        out = np.asarray(self.carry[: self.seq_length], dtype=np.int64)
        del self.carry[: self.seq_length]
        if self.fim is not None and self.fim.mode == "context":
            out = self.fim.transform_sequence(out, self.packed)
        self.packed += 1
        return out

    def next_sequence(self) -> np.ndarray:
        """The next ``seq_length`` token ids; StopIteration when a finite stream ends."""
        if self.sequence_buffer == 0 and not self.sequences:
            out = self._pack()
            if out is None:
                raise StopIteration
            return out
        while len(self.sequences) < self.sequence_buffer:
            packed = self._pack()
            if packed is None:
                break
            self.sequences.append(packed)
        if not self.sequences:
            raise StopIteration
        i = self.rng.randrange(len(self.sequences))
        self.sequences[i], self.sequences[-1] = self.sequences[-1], self.sequences[i]
        return self.sequences.pop()


# -- pretokenized token shards ----------------------------------------------------------


def token_dtype(vocab_size: int) -> Any:
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def _source_signature(files: list[Path], tokenizer: Any) -> dict[str, Any]:
    return {
        "files": [[f.name, f.stat().st_size, int(f.stat().st_mtime)] for f in files],
        "vocab_size": len(tokenizer),
        "eos": tokenizer.eos_token_id,
        "tokenizer": getattr(tokenizer, "name_or_path", ""),
    }


def pretokenize(
    files: list[Path],
    tokenizer: Any,
    out_file: Path,
    *,
    progress: bool = False,
    fim: FimTransform | None = None,
) -> dict[str, Any]:
    """Tokenize ``files`` once into ``out_file`` (raw ids, EOS after each document).

    With a document-level ``fim`` each document is a FIM example with its probability
    (drawn from its index among the non-empty documents). A sidecar ``out_file.json``
    records dtype, token count and what it was built from; an up-to-date file is reused.
    """
    meta_file = out_file.with_suffix(".json")
    signature = _source_signature(files, tokenizer)
    if fim is not None:
        signature["fim"] = fim.signature()
    if out_file.exists() and meta_file.exists():
        meta = read_json(meta_file)
        if meta.get("source") == signature:
            return meta
    dtype = token_dtype(len(tokenizer))
    eos = tokenizer.eos_token_id
    n_tokens = 0
    texts: list[str] = []

    from tqdm.auto import tqdm

    bar = tqdm(desc=f"pretokenize {out_file.stem}", unit="doc", disable=not progress)
    with atomic_open(out_file, "wb") as fh:

        def flush() -> int:
            if fim is not None:
                first = n_docs - len(texts)
                ids = fim.encode_documents(texts, [(first + i,) for i in range(len(texts))])
            else:
                ids = encode_batch(tokenizer, texts)
            flat = np.fromiter(
                (t for doc in ids for t in (*doc, eos)),
                dtype=dtype,
                count=sum(len(d) + 1 for d in ids),
            )
            fh.write(flat.tobytes())
            bar.update(len(texts))
            texts.clear()
            return len(flat)

        n_docs = 0
        for _s, _l, text in read_documents(files):
            if text:
                texts.append(text)
                n_docs += 1
            if len(texts) >= 256:
                n_tokens += flush()
        if texts:
            n_tokens += flush()
    bar.close()
    meta = {"dtype": np.dtype(dtype).name, "tokens": n_tokens, "source": signature}
    write_json(meta_file, meta)
    return meta


class TokenShardStream:
    """``seq_length`` windows of a memmapped token file, in a seeded order per epoch."""

    def __init__(
        self,
        token_file: Path,
        seq_length: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        loop: bool = True,
        fim: FimTransform | None = None,
    ) -> None:
        meta = read_json(token_file.with_suffix(".json"))
        self.fim = fim  # context-level: each window drawn from (epoch, window)
        self.tokens = np.memmap(token_file, dtype=np.dtype(meta["dtype"]), mode="r")
        self.seq_length = seq_length
        self.n_windows = len(self.tokens) // seq_length
        if self.n_windows == 0:
            raise DataError(
                f"{token_file}: {len(self.tokens)} tokens, fewer than one sequence of {seq_length}"
            )
        self.seed = seed
        self.shuffle = shuffle
        self.loop = loop
        self.epoch = 0
        self.index = 0
        self._order: np.ndarray | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "n_windows": self.n_windows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("n_windows") != self.n_windows:
            raise DataError("--resume: the pretokenized data changed since the checkpoint")
        self.epoch, self.index, self._order = state["epoch"], state["index"], None

    def _window_order(self) -> np.ndarray:
        if self._order is None:
            if self.shuffle:
                self._order = np.random.default_rng([self.seed, self.epoch]).permutation(
                    self.n_windows
                )
            else:
                self._order = np.arange(self.n_windows)
        return self._order

    def next_sequence(self) -> np.ndarray:
        if self.index >= self.n_windows:
            if not self.loop:
                raise StopIteration
            self.epoch, self.index, self._order = self.epoch + 1, 0, None
        w = int(self._window_order()[self.index])
        self.index += 1
        start = w * self.seq_length
        out = np.asarray(self.tokens[start : start + self.seq_length], dtype=np.int64)
        if self.fim is not None:
            out = self.fim.transform_sequence(out, self.epoch, w)
        return out


@dataclass
class Batches:
    """This process's rows of each global batch drawn from a sequence source."""

    source: SequenceSource
    batch_size: int  # per process
    rank: int = 0
    world_size: int = 1

    def next_batch(self) -> np.ndarray:
        """``(batch_size, seq_length)`` ids; StopIteration when a finite source has no full batch."""
        rows = [self.source.next_sequence() for _ in range(self.batch_size * self.world_size)]
        mine = rows[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        return np.stack(mine)

    def __iter__(self) -> Iterator[np.ndarray]:
        while True:
            try:
                yield self.next_batch()
            except StopIteration:
                return

    def state_dict(self) -> dict[str, Any]:
        return self.source.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.source.load_state_dict(state)
