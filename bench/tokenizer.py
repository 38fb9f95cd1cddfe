"""Tokenizer speed and compression: our stage against calling ``tokenizers`` directly.

Builds a corpus directory (docs/artefacts.md schema) from the first ``--files`` Python
files of this virtualenv's site-packages (or uses ``--data DIR``), then measures,
interleaving ours and the baselines so that load from other jobs hits both alike:

(a) training: ``train_tokenizer`` (reads the gzipped JSON shards, trains, wraps and
    saves) against ``tokenizers`` trained directly with the same settings, both on
    texts already in memory and with the same shards read by a plain loop first;
(b) encoding: batched ``encode_batch`` calls (what the report does) against one
    ``encode`` call per file;
(c) compression: GPT-2's token count / ours on held-out stdlib files (``tokenizer_report``).

Both sides use the same pre-tokenizer (``--pre-tokenizer``, default the stage's ``code``).
Prints seconds (minimum over repeats) and ratios; run with

    .venv/bin/python bench/tokenizer.py [--files 2000] [--vocab-size 32768] [--repeats 3]
    .venv/bin/python bench/tokenizer.py --ratio-only --files 8000 [--pre-tokenizer gpt2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from codeparrot.tokenizer import TokenizerConfig, tokenizer_report, train_tokenizer
from codeparrot.tokenizer.corpus import corpus_shards
from codeparrot.tokenizer.pretokenizer import PRE_TOKENIZERS, pre_tokenizer_pattern


def python_files(root: Path, skip_parts: set[str]) -> list[Path]:
    files = (p for p in sorted(root.rglob("*.py")) if not skip_parts & set(p.parts))
    return [p for p in files if 500 <= p.stat().st_size <= 100_000]


def read_texts(paths: list[Path], limit: int) -> list[str]:
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
        if len(texts) >= limit:
            break
    return texts


def write_corpus(root: Path, texts: list[str]) -> Path:
    (root / "train").mkdir(parents=True)
    per_shard = 2000
    for n, start in enumerate(range(0, len(texts), per_shard)):
        with gzip.open(root / "train" / f"shard-{n:05d}.jsonl.gz", "wt", encoding="utf-8") as fh:
            for i, text in enumerate(texts[start : start + per_shard]):
                fh.write(json.dumps({"path": f"{start + i}.py", "content": text}) + "\n")
    (root / "manifest.json").write_text(json.dumps({"provenance": {"created": "bench"}}))
    return root


def direct_training(batches, vocab_size: int, pattern: str | None) -> Tokenizer:
    """The baseline: `tokenizers` called directly with the recipe's settings."""
    tok = Tokenizer(models.BPE())
    if pattern is None:  # GPT-2's pre-tokenizer
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(batches, trainer=trainer)
    return tok


def batches_of(texts: list[str], size: int = 1000):
    for start in range(0, len(texts), size):
        yield texts[start : start + size]


def plain_read(data: Path, limit: int) -> list[str]:
    texts: list[str] = []
    for shard in corpus_shards(data, "train"):
        with gzip.open(shard, "rt", encoding="utf-8") as fh:
            for line in fh:
                texts.append(json.loads(line)["content"])
                if len(texts) >= limit:
                    return texts
    return texts


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def timed_cpu(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads): CPU time is what the
    work costs, and is far less disturbed than wall time by other jobs on the machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000, help="training files")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--heldout", type=int, default=500, help="held-out stdlib files")
    parser.add_argument("--data", type=Path, help="an existing corpus directory to train on")
    parser.add_argument(
        "--train-on",
        choices=("site-packages", "python"),
        default="site-packages",
        help="site-packages: train on other code than the held-out files' (a domain shift); "
        "python: the stdlib files that are not held out, then site-packages (the reference's "
        "setting: held-out files from the distribution the tokenizer was trained on)",
    )
    parser.add_argument("--pre-tokenizer", choices=PRE_TOKENIZERS, default="code")
    parser.add_argument(
        "--ratio-only", action="store_true", help="train once and measure only (c), the GPT-2 ratio"
    )
    return parser.parse_args()


def _corpus(args: argparse.Namespace, work: Path) -> tuple[Path, list[str]]:
    """(the training corpus directory, the held-out stdlib texts)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    held_paths = python_files(stdlib, {"site-packages", "test", "tests", "idlelib"})
    held = read_texts(held_paths, args.heldout)
    if args.data:
        return args.data, held
    site = Path(sysconfig.get_paths()["purelib"])
    # setuptools vendors distutils (setuptools/_distutils): near-copies of held-out files
    candidates = python_files(site, {"_distutils"})
    if args.train_on == "python":
        candidates = held_paths + candidates
    held_set = set(held)
    texts = [t for t in read_texts(candidates, args.files + len(held)) if t not in held_set]
    return write_corpus(work / "corpus", texts[: args.files]), held


def _time_training(args: argparse.Namespace, data: Path, texts: list[str], work: Path) -> None:
    """(a) training throughput, ours against the library called directly, interleaved in
    rotating order."""
    # transformers is imported first: its one-off import (seconds) is not training time
    import transformers  # noqa: F401

    pattern = pre_tokenizer_pattern(args.pre_tokenizer)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    config = TokenizerConfig(
        data=data, output=work / "tok", vocab_size=args.vocab_size, files=args.files,
        overwrite=True, progress=False, pre_tokenizer=args.pre_tokenizer,
    )  # fmt: skip
    runs = {
        "direct (in memory)": lambda: direct_training(batches_of(texts), args.vocab_size, pattern),
        "direct (+ plain read)": lambda: direct_training(
            batches_of(plain_read(data, args.files)), args.vocab_size, pattern
        ),
        "ours": lambda: train_tokenizer(config),
    }
    if args.ratio_only:
        runs = {"ours": runs["ours"]}
        args.repeats = 1
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.repeats):
        for name in names[r % 3 :] + names[: r % 3]:
            wall, used = timed_cpu(runs[name])
            times[name].append(wall)
            cpu[name].append(used)
        print(
            f"  repeat {r + 1}: "
            + ", ".join(f"{k} {v[-1]:.2f} s ({cpu[k][-1]:.2f} s CPU)" for k, v in times.items())
        )
    print("training, wall time min / median, CPU time median:")
    for name, values in times.items():
        best, median = min(values), statistics.median(values)
        print(
            f"  {name:<22} {best:7.2f} s / {median:7.2f} s  CPU {statistics.median(cpu[name]):7.2f} s"
            f"  {mb / best:6.2f} MB/s (best)"
        )
    for base in [n for n in ("direct (in memory)", "direct (+ plain read)") if n in runs]:
        ratio_min = min(times["ours"]) / min(times[base])
        ratio_med = statistics.median(times["ours"]) / statistics.median(times[base])
        ratio_cpu = statistics.median(cpu["ours"]) / statistics.median(cpu[base])
        print(
            f"  ours / {base}: wall {ratio_min:.3f}x (min), {ratio_med:.3f}x (median); "
            f"CPU {ratio_cpu:.3f}x (median)"
        )


def _time_encoding(tokenizer_json: Path, held: list[str], repeats: int) -> None:
    """(b) encoding throughput on the held-out stdlib files, batched against one call a file."""
    held_mb = sum(len(t.encode("utf-8")) for t in held) / 1e6
    backend = Tokenizer.from_file(str(tokenizer_json))
    enc_times: dict[str, list[float]] = {"one call per file": [], "batched (ours)": []}
    for _ in range(repeats):
        enc_times["one call per file"].append(timed(lambda: [backend.encode(t) for t in held]))
        enc_times["batched (ours)"].append(
            timed(lambda: [backend.encode_batch(b) for b in batches_of(held, 256)])
        )
    enc_best = {k: min(v) for k, v in enc_times.items() if v}
    if enc_best:
        print(f"encoding {len(held)} held-out stdlib files ({held_mb:.1f} MB):")
        for name, seconds in enc_best.items():
            print(f"  {name:<22} {seconds:7.2f} s  {held_mb / seconds:6.2f} MB/s")
        speedup = enc_best["one call per file"] / enc_best["batched (ours)"]
        print(f"  batched speed-up: {speedup:.2f}x")


def _compression(tokenizer: Path, held: list[str], work: Path) -> None:
    """(c) compression against GPT-2 on the same held-out files."""
    (work / "held").mkdir()
    for i, text in enumerate(held):
        (work / "held" / f"{i:05d}.py").write_text(text, encoding="utf-8")
    report = tokenizer_report(tokenizer, [work / "held"], max_files=len(held), progress=False)
    gpt2 = report["gpt2"]
    print(
        f"held-out stdlib: {report['tokens']:,} tokens, {report['chars_per_token']:.2f} chars/token, "
        f"fertility {report['subword_fertility']:.2f}, continued words "
        f"{100 * report['continued_word_proportion']:.1f}%, byte fallback "
        f"{100 * report['byte_fallback_rate']:.3f}%"
    )
    if gpt2["ratio"] is None:
        print(f"GPT-2 comparison: {gpt2['note']}")
    else:
        print(
            f"GPT-2 tokens / ours: {gpt2['ratio']:.2f}x ({gpt2['tokens']:,} vs {report['tokens']:,})"
        )
    print(f"keywords not single tokens: {report['keywords']['split'] or 'none'}")
    print(f"indentation tokens: {report['indentation']}")


def main() -> None:
    args = _arguments()
    work = Path(tempfile.mkdtemp(prefix="bench-tokenizer-"))
    data, held = _corpus(args, work)
    texts = plain_read(data, args.files)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(
        f"training corpus: {len(texts)} files ({args.train_on}), {mb:.1f} MB; "
        f"vocab {args.vocab_size}; "
        f"pre-tokenizer {args.pre_tokenizer}"
    )
    _time_training(args, data, texts, work)
    _time_encoding(
        work / "tok" / "tokenizer.json", held, 0 if args.ratio_only else max(args.repeats, 3)
    )
    _compression(work / "tok", held, work)


if __name__ == "__main__":
    main()
