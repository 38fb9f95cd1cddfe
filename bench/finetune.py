"""Fine-tuning on a repository the base model never saw: held-out loss and completions.

The baseline is the base checkpoint itself, measured in the same run on the same
held-out files: the script reports the fine-tuned loss as a ratio of it (and the
perplexity ratio), plus greedy completions of prompts cut from held-out files before and
after (the language server and the playground call the same engine).

Base checkpoint: ``runs/quickstart/model`` when it exists; otherwise one is built here
(corpus of the standard library only, an 8k BPE, the ``tiny`` preset trained for
``--base-minutes``), so the target package's code is unseen by tokenizer and model.
Target: an installed package's source (``--package``, default ``click``).

    .venv/bin/python bench/finetune.py [--package click] [--minutes 10] [--base-minutes 8]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sysconfig
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STOPS = ("\ndef ", "\nclass ", "\n    def ", "\n@", "\nif __name__")


def build_base(work: Path, minutes: float, files: int, seed: int) -> Path:
    """stdlib corpus -> 8k tokenizer -> tiny preset trained for ``minutes``."""
    from codeparrot.data import DataConfig, build_corpus
    from codeparrot.tokenizer import TokenizerConfig, train_tokenizer
    from codeparrot.training import TrainConfig, train

    model = work / "base"
    if (model / "config.json").is_file():
        print(f"reusing base checkpoint {model}")
        return model
    stdlib = sysconfig.get_paths()["stdlib"]
    corpus = work / "base_corpus"
    if not (corpus / "manifest.json").is_file():
        build_corpus(
            DataConfig(output=corpus, sources=(stdlib,), max_files=files, seed=seed, force=True)
        )
    tokenizer = work / "base_tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        train_tokenizer(
            TokenizerConfig(
                data=corpus, output=tokenizer, vocab_size=8192, files=files, overwrite=True
            )
        )
    shutil.rmtree(model, ignore_errors=True)
    result = train(
        TrainConfig(
            data=corpus,
            tokenizer=tokenizer,
            output=model,
            preset="tiny",
            optimizer="adamw",  # the settings this bench was measured with
            schedule="cosine",
            pretokenized=False,
            batch_size=16,
            learning_rate=1e-3,  # a short budget: higher peak, short warmup
            warmup_steps=20,
            max_steps=10_000,
            max_minutes=minutes,
            eval_every=0,
            log_with="none",
            seed=seed,
        )
    )
    print(f"base: {result.step} steps, {result.tokens_seen:,} tokens, eval loss {result.eval_loss}")
    return model


def heldout_prompts(corpus: Path, count: int) -> list[tuple[str, str, str]]:
    """(file, prompt, true continuation): code up to a ``def`` line in held-out files."""
    out = []
    for shard in sorted((corpus / "valid").glob("*.jsonl.gz")):
        with gzip.open(shard, "rt", encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                lines = record["content"].splitlines(keepends=True)
                defs = [
                    i
                    for i, text in enumerate(lines)
                    if i > 30 and text.lstrip().startswith("def ") and text.rstrip().endswith(":")
                ]
                if not defs:
                    continue
                i = defs[len(defs) // 2]
                prompt = "".join(lines[: i + 1])
                truth = "".join(lines[i + 1 : i + 5])
                out.append((record["path"], prompt, truth))
                if len(out) == count:
                    return out
    return out


def completions(checkpoint: Path, prompts: list[tuple[str, str, str]]) -> list[str]:
    from codeparrot.generation import Engine, GenerationConfig

    engine = Engine.load(checkpoint)
    config = GenerationConfig(max_new_tokens=48, temperature=0.0, stop=STOPS, seed=0)
    return [engine.generate(prompt, config)[0].text for _path, prompt, _truth in prompts]


def control(args: argparse.Namespace) -> None:
    """Baseline of the gain: the base trained as long again on its own (stdlib) corpus.

    Needs the base checkpoint and the package corpus of a run of this script (the two can
    run side by side: ``--control`` after the base exists). Same schedule, same minutes.
    """
    from codeparrot.models.checkpoint import load_tokenizer
    from codeparrot.training import TrainConfig, train
    from codeparrot.training.finetune import checkpoint_losses, split_tokens

    base, corpus = args.work / "base", args.work / f"finetune_{args.package}" / "corpus"
    while not (corpus / "manifest.json").is_file():
        time.sleep(10)
    tokenizer = load_tokenizer(base)
    seq_length = json.loads((base / "config.json").read_text())["n_positions"]
    tokens = {"valid": split_tokens(corpus, "valid", tokenizer, 200_000)}
    out = args.work / "control"
    shutil.rmtree(out, ignore_errors=True)
    result = train(
        TrainConfig(
            data=args.work / "base_corpus",
            output=out,
            init_from=base,
            optimizer="adamw",
            schedule="cosine",
            pretokenized=False,
            learning_rate=2e-4,
            warmup_steps=20,
            batch_size=8,
            max_steps=args.control_steps,
            max_minutes=args.minutes,
            eval_every=0,
            log_with="none",
            seed=args.seed,
        )
    )
    before = checkpoint_losses(base, tokens, seq_length)["valid"]
    after = checkpoint_losses(out, tokens, seq_length)["valid"]
    print(
        f"control ({result.step} steps on stdlib, {result.stopped_by}): held-out {args.package} "
        f"loss {before:.3f} -> {after:.3f} (ratio {after / before:.3f})"
    )
    (args.work / "control.json").write_text(
        json.dumps({"steps": result.step, "before": before, "after": after}, indent=2)
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default="click", help="installed package to fine-tune on")
    parser.add_argument("--minutes", type=float, default=10.0, help="fine-tuning budget")
    parser.add_argument("--base-minutes", type=float, default=8.0, help="base training budget")
    parser.add_argument("--base-files", type=int, default=2000, help="stdlib files for the base")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_finetune")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--control",
        action="store_true",
        help="instead: train the base as long on its own corpus (run beside a normal run)",
    )
    parser.add_argument("--control-steps", type=int, default=10_000)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.control:
        control(args)
        return

    from codeparrot.training.finetune import FinetuneConfig, finetune

    purelib = Path(sysconfig.get_paths()["purelib"])
    package = purelib / args.package
    if not package.is_dir():
        raise SystemExit(f"{package}: not an installed package directory")
    # Copy the package so the corpus sees one repository named after it.
    repo = args.work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(package, repo / args.package, ignore=shutil.ignore_patterns("__pycache__"))

    quickstart = ROOT / "runs" / "quickstart" / "model"
    started = time.perf_counter()
    if (quickstart / "config.json").is_file():
        base = quickstart
        print(f"base checkpoint: {base} (quickstart)")
    else:
        base = build_base(args.work, args.base_minutes, args.base_files, args.seed)
    base_s = time.perf_counter() - started

    out = args.work / f"finetune_{args.package}"
    config = FinetuneConfig(
        repository=repo,
        checkpoint=base,
        output=out,
        max_minutes=args.minutes,
        valid_fraction=0.2,
        seed=args.seed,
        log_with="none",
        force=True,
    )
    result = finetune(config, log=lambda msg: print(f"finetune: {msg}", flush=True))
    prompts = heldout_prompts(config.corpus_dir, 3)
    before = completions(base, prompts)
    after = completions(result.model, prompts)

    _report(args, base, base_s, result, prompts, before, after)


def _report(args: argparse.Namespace, base: Path, base_s: float, result: Any, prompts: list,
            before: list, after: list) -> None:  # fmt: skip
    """The losses before and after, three held-out completions, and report.json."""
    ratio = result.valid_loss_after / result.valid_loss_before
    ppl_ratio = math.exp(result.valid_loss_after - result.valid_loss_before)
    print()
    print(
        f"package {args.package}: {result.train_files} train files, {result.valid_files} held out"
    )
    print(f"base checkpoint {base} (built in {base_s / 60:.1f} min)")
    print(
        f"fine-tuning: {result.steps} steps ({result.stopped_by}), "
        f"{result.seconds / 60:.1f} min in all, {result.train_tokens:,} train tokens"
    )
    print(
        f"held-out loss: base {result.valid_loss_before:.3f} -> fine-tuned "
        f"{result.valid_loss_after:.3f} nats/token over {result.valid_tokens:,} tokens "
        f"(ratio {ratio:.3f}, perplexity ratio {ppl_ratio:.3f})"
    )
    print(f"train split loss: {result.train_loss_before:.3f} -> {result.train_loss_after:.3f}")
    report = {
        "package": args.package,
        "result": result.to_dict(),
        "loss_ratio": ratio,
        "perplexity_ratio": ppl_ratio,
        "examples": [],
    }
    for (path, prompt, truth), b, a in zip(prompts, before, after, strict=True):
        last = prompt.rstrip("\n").splitlines()[-1]
        print(f"\n--- {path}: after `{last.strip()}`")
        print(f"truth:      {truth[:160]!r}")
        print(f"base:       {b[:160]!r}")
        print(f"fine-tuned: {a[:160]!r}")
        report["examples"].append(
            {"path": path, "line": last, "truth": truth, "base": b, "after": a}
        )
    (args.work / "report.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
