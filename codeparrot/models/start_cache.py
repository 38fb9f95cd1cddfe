"""What the lean load takes from transformers, kept from one start to the next.

Of a language server's start on a 164M model (2 cores), about 0.9 s is importing
transformers, for four facts: the configuration with transformers' defaults filled in,
the tokenizer as transformers builds it from the checkpoint's files (transformers 5
rebuilds many from their vocabulary, so ``tokenizer.json`` alone is not it), the sizes
a family's configuration leaves out, and the rotary frequencies of a scaled rope. The
first load of a checkpoint takes them from transformers and keeps them here, in a JSON
file (never a pickle); the next loads read that file and never import transformers.

A kept tokenizer (:class:`KeptTokenizer`) is transformers' own backend
(``tokenizers.Tokenizer``, serialized as transformers built it), called as transformers
calls it. It is only kept where that holds exactly:

- the tokenizer's class computes encoding, decoding and token lookups with transformers'
  base methods (CodeLlama's, which lays out infilling prompts itself, is not kept);
- the decode's clean-up of spaces does not apply;
- on probe texts (code, special tokens, non-ASCII, spaces) and sampled ids, the kept one
  encodes and decodes exactly as transformers' one does, and finds the same BOS, special
  ids, end-of-text token and fill-in-the-middle template.

Anything else the kept objects are asked for (a method transformers' tokenizer has and
the kept one does not) loads transformers' object then and answers with it.

A file belongs to one checkpoint directory, named by the paths, sizes, modification
times and inodes of its files other than weights, and to the installs of transformers
and tokenizers (their ``__init__.py`` files' stats): editing a tokenizer file, or
upgrading either package, makes a new one. The
newest :data:`MAX_FILES` files are kept. ``CODEPARROT_START_CACHE`` names the folder
(default ``$XDG_CACHE_HOME/codeparrot/start``, else ``~/.cache/codeparrot/start``);
``CODEPARROT_START_CACHE=0`` turns it off. A file that cannot be read is removed and
the load goes through transformers; a folder that cannot be written is logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
from pathlib import Path
from typing import Any

from codeparrot import kept_files

logger = logging.getLogger(__name__)

ENV = "CODEPARROT_START_CACHE"
FORMAT = 1  # of the kept file: a new format makes new files
MAX_FILES = 16
# files that are not read for the configuration or the tokenizer (their stats stay out of
# a file's identity, so that the int8 rows and weights can be touched without a new one)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")
# transformers' tokenizer methods the kept tokenizer computes itself: a class that
# overrides one of them (CodeLlama's _encode_plus) is not kept
COMPUTED = (
    "__call__", "_encode_plus", "encode", "decode", "_decode", "convert_tokens_to_ids",
    "_convert_token_to_id_with_added_voc", "__len__", "all_special_ids", "all_special_tokens", "added_tokens_decoder",
)  # fmt: skip
NAMED_TOKENS = ("bos", "eos", "unk", "pad")
PROBE_TEXTS = (
    "",
    "a",
    " a",
    "\n",
    "  \n\t\n",
    "def add(a, b):\n    return a + b  # sum\n",
    'class Point:\n    """A point."""\n\n    def __init__(self, x: int) -> None:\n        self.x = x\n',
    "    for i in range(10):\n        print(f'{i:>4}', end='')\r\n",
    "naïve café ½ 日本語 😀 \u00a0 \u200b",
    "x = '<|endoftext|>' + \"</s>\"\n",
)
PROBE_IDS = 256  # random ids decoded alone and together by the probes


def cache_folder() -> Path | None:
    """Where the files are kept (``None``: the cache is off)."""
    return kept_files.cache_folder(ENV, "start")


class StartCache:
    """The kept file of one checkpoint directory: :meth:`load` it, :meth:`store` one."""

    def __init__(self, file: Path, identity: str, path: Path) -> None:
        self.file = file
        self.identity = identity  # what the directory's files are, as recorded in the file
        self.path = path

    @classmethod
    def for_checkpoint(cls, path: Path) -> StartCache | None:
        """The cache of the checkpoint directory ``path``; ``None`` when the cache is off
        or the directory cannot be looked at."""
        folder = cache_folder()
        if folder is None:
            return None
        try:
            files = sorted(f for f in path.iterdir() if f.is_file())
            stats = [
                (f.name, *kept_files.file_stats(f))
                for f in files
                if not f.name.endswith(WEIGHT_SUFFIXES)
            ]
            identity = json.dumps(
                {
                    "format": FORMAT,
                    "path": str(path.resolve()),
                    "files": stats,
                    "packages": [_installed("transformers"), _installed("tokenizers")],
                }
            )
        except (OSError, ValueError, ImportError) as e:
            logger.debug("start cache: %s cannot be looked at (%s)", path, e)
            return None
        name = hashlib.blake2b(identity.encode(), digest_size=16).hexdigest()
        return cls(folder / f"{name}.json", identity, path)

    def load(self) -> Kept | None:
        """What an earlier load kept, or ``None`` (a file that cannot be used is removed)."""
        if not self.file.is_file():
            return None
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            if data.get("identity") != self.identity:
                raise ValueError("written for other files")
            kept = Kept(data, self.path)
        except Exception as e:  # a broken or foreign file: the load goes through transformers
            logger.warning(
                "start cache %s cannot be used (%s): loading through transformers", self.file, e
            )
            self.file.unlink(missing_ok=True)
            return None
        try:
            os.utime(self.file)  # recently used: kept when older files are removed
        except OSError:
            pass
        return kept

    def store(self, record: dict[str, Any]) -> None:
        """Keep ``record`` (written to a temporary file, then renamed) and remove all but
        the newest :data:`MAX_FILES` files; a failure is logged, never raised."""
        data = {"identity": self.identity, **record}
        try:
            kept_files.write_then_rename(self.file, lambda tmp: _write_json(tmp, data), MAX_FILES)
        except OSError as e:
            logger.warning("start cache %s cannot be written (%s)", self.file, e)


def _write_json(path: str, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out)


class Kept:
    """A kept file's facts: :attr:`family_defaults`, :meth:`config`, :meth:`tokenizer`,
    :attr:`rope`."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.path = path
        self.family_defaults: dict[str, int] = dict(data["family_defaults"])
        self._config = data["config"]
        self._tokenizer = data["tokenizer"]
        rope = data.get("rope")
        self.rope: tuple[list[float], float] | None = (
            None if rope is None else (list(rope[0]), float(rope[1]))
        )
        if not isinstance(self._config["values"], dict) or "backend" not in self._tokenizer:
            raise ValueError("not a kept load")

    def config(self) -> KeptConfig:
        return KeptConfig(self._config["values"], self._config["names"], self.path)

    def tokenizer(self) -> KeptTokenizer:
        return KeptTokenizer(self._tokenizer, self.path)


def _installed(package: str) -> list[Any]:
    """Which install of ``package`` this is, without importing it (0.2 ms, where asking
    importlib.metadata for its version takes ~20): its ``__init__.py``'s path and stats,
    which an upgrade or a reinstall replaces."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ImportError(f"{package} is not installed")
    return [spec.origin, *kept_files.file_stats(Path(spec.origin))]


def _json_value(value: Any) -> bool:
    """Does ``value`` come back from JSON as it went in (same value, same types)?"""
    try:
        return _same(json.loads(json.dumps(value)), value)
    except (TypeError, ValueError):
        return False


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


class _Delegating:
    """Names the real object has but this one does not keep load the real one (once)."""

    _kept_names: frozenset[str]
    _kept_path: Path
    _kept_real: Any
    _kept_lock: threading.Lock

    def _real(self) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:  # only for names not found the normal way
        if name.startswith("_kept") or name not in self._kept_names:
            raise AttributeError(name)
        with self._kept_lock:
            if self._kept_real is None:
                logger.info("%s: loading transformers' object for %r", self._kept_path, name)
                self._kept_real = self._real()
        return getattr(self._kept_real, name)


class KeptConfig(_Delegating):
    """A checkpoint's configuration as transformers resolved it (its attributes)."""

    def __init__(self, values: dict[str, Any], names: list[str], path: Path) -> None:
        self.__dict__.update(values)
        self._kept_values = dict(values)
        self._kept_names = frozenset(names)
        self._kept_path = path
        self._kept_real = None
        self._kept_lock = threading.Lock()

    def to_dict(self) -> dict[str, Any]:
        return dict(self._kept_values)

    def _real(self) -> Any:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self._kept_path, trust_remote_code=False)


def config_record(config: Any) -> dict[str, Any]:
    """What :class:`KeptConfig` needs of transformers' configuration ``config``: every
    value of ``to_dict`` and of its aliases (GPT-2's ``hidden_size``) that JSON keeps."""
    names = set(config.to_dict()) | set(getattr(type(config), "attribute_map", {}) or {})
    names |= {"model_type"}
    values = {}
    for name in sorted(names):
        if name.startswith("_kept") or not name.isidentifier():
            continue
        try:
            value = getattr(config, name)
        except AttributeError:
            continue
        if _json_value(value):
            values[name] = value
    return {"values": values, "names": sorted(dir(config))}


class KeptTokenizer(_Delegating):
    """transformers' tokenizer of a checkpoint, as kept: its backend, its named tokens, and
    the calls the engine makes (``tok(text, add_special_tokens=..., split_special_tokens=...)``,
    ``decode``, ``convert_tokens_to_ids``), computed as transformers computes them."""

    def __init__(self, record: dict[str, Any], path: Path) -> None:
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(record["backend"])
        # what transformers sets before every encoding that neither truncates nor pads
        if backend.truncation is not None:
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        self.backend_tokenizer = backend
        self.__dict__.update(record["attributes"])
        self._kept_length = int(record["length"])
        self._kept_added = {int(i): (str(c), bool(s)) for i, c, s in record["added"]}
        self._kept_inputs = tuple(record["model_input_names"])
        self._kept_names = frozenset(record["names"])
        self._kept_path = path
        self._kept_real = None
        self._kept_lock = threading.Lock()
        self._kept_encode_lock = threading.Lock()

    def _real(self) -> Any:
        from codeparrot.models.checkpoint import load_tokenizer

        real = load_tokenizer(self._kept_path)
        real.model_max_length = self.model_max_length
        return real

    def __len__(self) -> int:
        return self._kept_length

    @property
    def added_tokens_decoder(self) -> dict[int, Any]:
        from types import SimpleNamespace

        return {i: SimpleNamespace(content=c, special=s) for i, (c, s) in self._kept_added.items()}

    def __call__(
        self,
        text: Any,
        add_special_tokens: bool = True,
        split_special_tokens: bool | None = None,
        verbose: bool = True,
        **kwargs: Any,
    ) -> dict[str, list[int]]:
        if kwargs or not isinstance(text, str):  # a call the engine never makes
            real = self.__getattr__("__call__")
            return real(text, add_special_tokens=add_special_tokens, **kwargs)
        ids = self.encode(text, add_special_tokens, split_special_tokens)
        out = {"input_ids": ids}
        if "token_type_ids" in self._kept_inputs:
            out["token_type_ids"] = [0] * len(ids)
        if "attention_mask" in self._kept_inputs:
            out["attention_mask"] = [1] * len(ids)
        return out

    def encode(
        self, text: str, add_special_tokens: bool = True, split_special_tokens: bool | None = None
    ) -> list[int]:
        split = self.split_special_tokens if split_special_tokens is None else split_special_tokens
        backend = self.backend_tokenizer
        with self._kept_encode_lock:  # the switch is the backend's: one caller at a time
            if backend.encode_special_tokens != split:
                backend.encode_special_tokens = split
            return list(backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str:
        if kwargs or clean_up_tokenization_spaces:
            real = self.__getattr__("decode")
            return real(token_ids, skip_special_tokens, clean_up_tokenization_spaces, **kwargs)
        ids = [int(token_ids)] if isinstance(token_ids, int) else [int(i) for i in token_ids]
        return self.backend_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> Any:
        if isinstance(tokens, str):
            found = self.backend_tokenizer.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]


def own_methods(tokenizer: Any) -> list[str]:
    """Which of :data:`COMPUTED` ``tokenizer``'s class computes otherwise than transformers'
    base tokenizer (e.g. CodeLlama's ``_encode_plus``)."""
    from transformers import PreTrainedTokenizerFast as Base

    kind = type(tokenizer)
    return [m for m in COMPUTED if getattr(kind, m, None) is not getattr(Base, m, None)]


def cleans_up_spaces(tokenizer: Any) -> bool:
    """Does transformers' ``decode`` of ``tokenizer`` clean up spaces after the backend's
    (it skips that for a BPE unless forced)?"""
    if not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return False
    bpe = type(tokenizer.backend_tokenizer.model).__name__ == "BPE"
    force = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
    return not bpe or bool(getattr(tokenizer, force, False))


def decodes_as_backend(tokenizer: Any) -> bool:
    """Is ``tokenizer.decode(ids)`` exactly its backend's ``decode(ids)`` (a kept
    tokenizer, or transformers' base one with no clean-up of spaces)?"""
    if isinstance(tokenizer, KeptTokenizer):
        return True
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        return False
    from transformers import PreTrainedTokenizerFast

    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        return False
    own = set(own_methods(tokenizer)) & {"decode", "_decode"}
    return not own and not cleans_up_spaces(tokenizer)


def tokenizer_record(tokenizer: Any, path: Path) -> tuple[dict[str, Any] | None, str]:
    """(what :class:`KeptTokenizer` needs of transformers' ``tokenizer``, "") where the
    kept one computes exactly what it does; else (None, why not)."""
    from transformers import PreTrainedTokenizerFast

    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        return None, f"a {type(tokenizer).__name__} has no tokenizers backend"
    own = own_methods(tokenizer)
    if own:
        return None, f"{type(tokenizer).__name__} computes {', '.join(own)} itself"
    if cleans_up_spaces(tokenizer):
        return None, "its decode cleans up spaces"
    attributes = {
        "all_special_ids": [int(i) for i in tokenizer.all_special_ids],
        "all_special_tokens": [str(t) for t in tokenizer.all_special_tokens],
        "split_special_tokens": bool(getattr(tokenizer, "split_special_tokens", False)),
        "model_max_length": int(min(tokenizer.model_max_length, 2**62)),
        "name_or_path": str(getattr(tokenizer, "name_or_path", "")),
        "clean_up_tokenization_spaces": False,
    }
    for name in NAMED_TOKENS:
        token = getattr(tokenizer, f"{name}_token", None)
        attributes[f"{name}_token"] = None if token is None else str(token)
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        attributes[f"{name}_token_id"] = None if token_id is None else int(token_id)
    added = [
        [int(i), str(t.content), bool(getattr(t, "special", False))]
        for i, t in sorted(tokenizer.added_tokens_decoder.items())
    ]
    record = {
        "backend": tokenizer.backend_tokenizer.to_str(),
        "attributes": attributes,
        "length": len(tokenizer),
        "added": added,
        "model_input_names": list(getattr(tokenizer, "model_input_names", ["input_ids"])),
        "names": sorted(dir(tokenizer)),
    }
    differs = probe_difference(KeptTokenizer(record, path), tokenizer)
    if differs:
        return None, differs
    return record, ""


def probe_difference(kept: Any, real: Any) -> str:
    """The first probe on which ``kept`` answers otherwise than ``real``; "" for none."""
    from codeparrot.fim import TEMPLATES, detect_template, leading_special_ids

    specials = [str(t) for t in real.all_special_tokens]
    specials += [str(t.content) for t in real.added_tokens_decoder.values()]
    texts = [*PROBE_TEXTS, *(f"x{t}y {t}\n" for t in specials), "".join(specials) + PROBE_TEXTS[5]]
    for text in texts:
        for add in (True, False):
            for split in (False, True):
                a = kept(text, add_special_tokens=add, split_special_tokens=split, verbose=False)
                b = real(text, add_special_tokens=add, split_special_tokens=split, verbose=False)
                if list(a["input_ids"]) != list(b["input_ids"]):
                    return f"encoding {text[:20]!r} differs"
                for skip in (False, True):
                    if kept.decode(b["input_ids"], skip_special_tokens=skip) != real.decode(
                        b["input_ids"], skip_special_tokens=skip
                    ):
                        return f"decoding {text[:20]!r} differs"
    draw = random.Random(0)
    ids = [draw.randrange(len(real)) for _ in range(PROBE_IDS)]
    newline = list(real("\n", add_special_tokens=False)["input_ids"])
    for some in (ids, *([i] for i in ids[:32]), *([i, i] for i in newline)):
        if kept.decode(some) != real.decode(some, skip_special_tokens=False):
            return f"decoding ids {some[:4]} differs"
    names = [*specials, "\u2603 not a token"]
    names += [n for t in TEMPLATES for n in (t.prefix, t.suffix, t.middle, *t.stops)]
    if kept.convert_tokens_to_ids(names) != real.convert_tokens_to_ids(names):
        return "token lookups differ"
    if len(kept) != len(real) or kept.eos_token_id != real.eos_token_id:
        return "the vocabulary or the end-of-text token differs"
    if leading_special_ids(kept) != leading_special_ids(real):
        return "the BOS differs"
    if detect_template(kept) != detect_template(real):
        return "the fill-in-the-middle template differs"
    return ""
