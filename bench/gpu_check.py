"""What only a GPU can check, in one script: run it on a machine with CUDA devices.

Each check runs as a user would run it (the CLI, ``accelerate launch``, the language
server through its benchmark client), on a corpus of this Python's standard library and
a tokenizer trained on it in the first minute:

- ``train``: ``codeparrot train --compile`` with the quickstart's recipe (tiny-qwen, Muon,
  WSD) at ``--mixed-precision auto``: must choose bf16 on a device that supports it, and
  report tokens/s and MFU against the bf16 peak.
- ``ddp``: ``accelerate launch --multi_gpu`` on every visible GPU (one process on one GPU)
  with Muon: every process steps; the run saves one checkpoint.
- ``fsdp``: ``accelerate launch --use_fsdp`` on every visible GPU with Muon. Muon
  orthogonalises whole matrices, so a sharded one may fail or train differently: the check
  reports what happens rather than assumes it.
- ``engine``: the generation engine on CUDA (``dtype auto``: bf16, SDPA attention): ms
  per token of a 64-token greedy completion, after one warm-up.
- ``lsp``: ``bench/lsp.py`` on the trained checkpoint: the language server's latency with
  the model on the GPU.
- ``quickstart`` (only with ``--quickstart``: some 15 minutes, and pip must reach a package
  index): ``make quickstart TORCH=cuda``.

Expected output on one H100 (the figures are what to compare, not targets)::

    gpu_check: 1 CUDA device(s): NVIDIA H100 80GB HBM3 (bf16: yes), torch 2.x
    materials: corpus of N stdlib files, tokenizer of 8,192 tokens (about 1 min)
    train       ok    precision: bf16 autocast on cuda (auto: the device supports bf16); ... tokens/s
    ddp         ok    1 process(es), step 40, ... tokens/s
    fsdp        ok | FAILED (the error's last line: Muon under FSDP)
    engine      ok    dtype torch.bfloat16, attention sdpa, ~N ms/token
    lsp         ok    isolated requests: median ... ms
    summary: 5 of 5 checks ok (results in --output, JSON)

Without a CUDA device it exits with status 2 and says so, before any work.

    .venv/bin/python bench/gpu_check.py [--only train,engine] [--quickstart] [--output FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ("train", "ddp", "fsdp", "engine", "lsp", "quickstart")
NO_GPU = (
    "bench/gpu_check.py: no CUDA device here (torch.cuda.is_available() is False); this "
    "script checks what only a GPU can (bf16 training with compile, accelerate launch and "
    "FSDP, the engine and the language server on CUDA): run it on a machine with one"
)
TRAIN_ARGS = (
    "--preset", "tiny-qwen", "--optimizer", "muon", "--schedule", "wsd", "--batch-size", "16",
    "--max-steps", "40", "--warmup-steps", "5", "--eval-every", "0", "--eval-batches", "2",
    "--log-with", "none", "--no-progress", "--pretokenized",
)  # fmt: skip


def cuda_devices() -> list[str]:
    """Names of the visible CUDA devices (empty without any)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def materials(workdir: Path) -> tuple[Path, Path]:
    """A corpus of stdlib files (train and valid shards) and a tokenizer trained on it."""
    from codeparrot.tokenizer import TokenizerConfig, train_tokenizer

    corpus = workdir / "corpus"
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))[:1500]
    docs = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    for split, part in (("train", docs[100:]), ("valid", docs[:100])):
        (corpus / split).mkdir(parents=True, exist_ok=True)
        with gzip.open(corpus / split / "shard-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
            for i, content in enumerate(part):
                fh.write(json.dumps({"repo_name": "stdlib", "path": f"{i}.py",
                                     "content": content}) + "\n")  # fmt: skip
    tokenizer = workdir / "tokenizer"
    train_tokenizer(TokenizerConfig(data=corpus, output=tokenizer, vocab_size=8192, files=1000))
    return corpus, tokenizer


def run_command(command: list[str], timeout: float) -> tuple[bool, str]:
    """(exit status 0, the last lines of its output)."""
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, "\n".join(lines[-6:])


def check_train(workdir: Path, corpus: Path, tokenizer: Path, gpus: int) -> tuple[bool, str]:
    command = [sys.executable, "-m", "codeparrot", "train", "--data", str(corpus),
               "--tokenizer", str(tokenizer), "--output", str(workdir / "train"),
               "--compile", "--mixed-precision", "auto", *TRAIN_ARGS]  # fmt: skip
    ok, tail = run_command(command, 900)
    return ok and "bf16 autocast on cuda" in tail + _read(workdir / "train"), tail


def _read(run: Path) -> str:
    meta = run / "codeparrot_checkpoint.json"
    return json.dumps(json.loads(meta.read_text()).get("precision")) if meta.exists() else ""


def check_launch(workdir: Path, corpus: Path, tokenizer: Path, gpus: int, fsdp: bool
                 ) -> tuple[bool, str]:  # fmt: skip
    name = "fsdp" if fsdp else "ddp"
    launch = ["accelerate", "launch", "--num_processes", str(gpus), "--mixed_precision", "bf16"]
    launch += ["--use_fsdp"] if fsdp else (["--multi_gpu"] if gpus > 1 else [])
    command = [*launch, "-m", "codeparrot.training", "--data", str(corpus),
               "--tokenizer", str(tokenizer), "--output", str(workdir / name), *TRAIN_ARGS]  # fmt: skip
    ok, tail = run_command(command, 900)
    return ok and (workdir / name / "checkpoints").is_dir(), tail


def check_engine(workdir: Path) -> tuple[bool, str]:
    import torch

    from codeparrot.generation import Engine, GenerationConfig

    engine = Engine.load(workdir / "train", device="cuda")
    settings = GenerationConfig(max_new_tokens=64, temperature=0.0, seed=0)
    engine.generate("def fibonacci(n):", settings)  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    engine.generate("import os\n\ndef walk(root):", settings)
    torch.cuda.synchronize()
    model = engine.model
    attention = getattr(model.config, "_attn_implementation", "?")
    dtype = next(model.parameters()).dtype
    per_token = (time.perf_counter() - start) / 64 * 1000
    ok = dtype == torch.bfloat16 and attention == "sdpa"
    return ok, f"dtype {dtype}, attention {attention}, ~{per_token:.1f} ms/token"


def check_lsp(workdir: Path) -> tuple[bool, str]:
    command = [sys.executable, "bench/lsp.py", "--checkpoint", str(workdir / "train"),
               "--requests", "30", "--bursts", "10"]  # fmt: skip
    return run_command(command, 600)


def check_quickstart(workdir: Path) -> tuple[bool, str]:
    return run_command(["make", "quickstart", "TORCH=cuda"], 1800)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default=",".join(CHECKS[:-1]), help="checks to run, comma-separated"
    )
    parser.add_argument(
        "--quickstart", action="store_true", help="also `make quickstart TORCH=cuda`"
    )
    parser.add_argument("--output", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    devices = cuda_devices()
    if not devices:
        print(NO_GPU, file=sys.stderr)
        return 2
    import torch

    bf16 = "yes" if torch.cuda.is_bf16_supported() else "no"
    print(f"gpu_check: {len(devices)} CUDA device(s): {', '.join(sorted(set(devices)))} "
          f"(bf16: {bf16}), torch {torch.__version__}", flush=True)  # fmt: skip
    selected = [c for c in args.only.split(",") if c] + (["quickstart"] if args.quickstart else [])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        start = time.perf_counter()
        corpus, tokenizer = materials(workdir)
        print(f"materials: ready in {time.perf_counter() - start:.0f} s", flush=True)
        runs = {
            "train": lambda: check_train(workdir, corpus, tokenizer, len(devices)),
            "ddp": lambda: check_launch(workdir, corpus, tokenizer, len(devices), fsdp=False),
            "fsdp": lambda: check_launch(workdir, corpus, tokenizer, len(devices), fsdp=True),
            "engine": lambda: check_engine(workdir),
            "lsp": lambda: check_lsp(workdir),
            "quickstart": lambda: check_quickstart(workdir),
        }
        for name in selected:
            start = time.perf_counter()
            try:
                ok, detail = runs[name]()
            except Exception as e:  # one failed check must not hide the others' results
                ok, detail = False, f"{type(e).__name__}: {e}"
            seconds = time.perf_counter() - start
            results[name] = {"ok": ok, "seconds": round(seconds, 1), "detail": detail}
            shown = detail.replace("\n", "\n" + " " * 18)
            print(f"{name:11s} {'ok' if ok else 'FAILED':6s} {shown}", flush=True)
    passed = sum(r["ok"] for r in results.values())
    print(f"summary: {passed} of {len(results)} checks ok")
    if args.output:
        args.output.write_text(json.dumps({"devices": devices, "results": results}, indent=2))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
