"""What only a GPU can check, in one script: run it on a machine with CUDA devices.

Each check runs as a user would run it (the CLI, ``accelerate launch``, the language
server through its benchmark client), on a corpus of this Python's standard library and
a tokenizer trained on it in the first minute:

- ``train``: ``codeparrot train --compile`` with the quickstart's recipe (tiny-qwen, Muon,
  WSD) at ``--mixed-precision auto``: must choose bf16 on a device that supports it, and
  report steady tokens/s and the true MFU (the run's model FLOP/s over an 8192^3 bf16
  product measured at start, the datasheet's peak beside it).
- ``ddp``: ``accelerate launch --multi_gpu`` on every visible GPU (one process on one GPU)
  with Muon: every process steps; the run saves one checkpoint.
- ``fsdp``: ``accelerate launch --use_fsdp --fsdp_version 2`` on every visible GPU with
  AdamW (Muon orthogonalises whole matrices, so the run refuses it under FSDP): stopped at
  step 20 by ``--max-tokens``, resumed with ``--resume`` to step 40, and the export loaded
  with ``AutoModelForCausalLM``, its embedding and output weights tied. ``fsdp1`` (not run
  unless named in ``--only``): the same under Accelerate's default, FSDP1.
- ``engine``: the generation engine on CUDA (``dtype auto``: bf16, SDPA attention),
  ``bench/cuda_steps.py`` on the trained checkpoint (at most 200 s): ms per token of a
  64-token greedy completion with and without the captured step (``cuda_graphs``), and
  n = 20 samples x 128 tokens of a HumanEval prompt against transformers' ``generate``
  with its static cache, with HumanEval's stop strings and at a fixed length.
- ``lsp``: ``bench/lsp.py`` on the trained checkpoint: the language server's latency with
  the model on the GPU.
- ``plan``: ``codeparrot quickstart --total-minutes 4`` (no code execution): its GPU plan
  must pick a model of at least 30M parameters, end within its 4 minutes and print MFU.
- ``quickstart`` (only with ``--quickstart``: some 15 minutes, and pip must reach a package
  index): ``make quickstart TORCH=cuda``.

Expected output on one H100 (the figures are what to compare, not targets)::

    gpu_check: 1 CUDA device(s): NVIDIA H100 80GB HBM3 (bf16: yes), torch 2.x
    materials: corpus of N stdlib files, tokenizer of 8,192 tokens (about 1 min)
    train       ok    precision: bf16 autocast on cuda (auto: the device supports bf16); ... tokens/s
    ddp         ok    1 process(es), step 40, ... tokens/s
    fsdp        ok    step 20, resumed to 40, export loads with tied weights
    engine      ok    dtype torch.bfloat16, attention sdpa
                      (a) ms/token, greedy 64 tokens: eager ..., captured ... (...x; ...)
                      (b) n=20 x 128, stop strings: eager .../s (...x ...), ...
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
CHECKS = ("train", "ddp", "fsdp", "engine", "lsp", "plan", "fsdp1", "quickstart")
DEFAULT_CHECKS = CHECKS[:6]  # fsdp1 and quickstart only where named
# the checks that read the stdlib corpus and tokenizer (about a minute to build)
NEEDS_MATERIALS = {"train", "ddp", "fsdp", "fsdp1"}
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
    except subprocess.TimeoutExpired as e:  # what it printed before is kept (bytes, always)
        said = b"".join(part for part in (e.stdout, e.stderr) if isinstance(part, bytes))
        lines = said.decode("utf-8", "replace").strip().splitlines()[-6:]
        return False, "\n".join([*lines, f"timed out after {timeout:.0f} s"])
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, "\n".join(lines[-6:])


def check_train(workdir: Path, corpus: Path, tokenizer: Path, gpus: int) -> tuple[bool, str]:
    command = [sys.executable, "-m", "codeparrot", "train", "--data", str(corpus),
               "--tokenizer", str(tokenizer), "--output", str(workdir / "train"),
               "--compile", "--mixed-precision", "auto", *TRAIN_ARGS]  # fmt: skip
    ok, tail = run_command(command, 900)
    chose_bf16 = "bf16 autocast on cuda" in tail + _read(workdir / "train")
    return ok and chose_bf16 and "MFU" in tail, tail  # the end-of-run line: the true MFU


def _read(run: Path) -> str:
    meta = run / "codeparrot_checkpoint.json"
    return json.dumps(json.loads(meta.read_text()).get("precision")) if meta.exists() else ""


def check_launch(workdir: Path, corpus: Path, tokenizer: Path, gpus: int, fsdp: int = 0
                 ) -> tuple[bool, str]:  # fmt: skip
    """DDP (``fsdp`` 0), else FSDP of that version (2: what the docs ask for and the suite
    checks on a CPU; 1: Accelerate's default)."""
    name = f"fsdp{fsdp}" if fsdp else "ddp"
    launch = ["accelerate", "launch", "--num_processes", str(gpus), "--mixed_precision", "bf16"]
    launch += ["--use_fsdp", "--fsdp_version", str(fsdp)] if fsdp else (
        ["--multi_gpu"] if gpus > 1 else [])  # fmt: skip
    command = [*launch, "-m", "codeparrot.training", "--data", str(corpus),
               "--tokenizer", str(tokenizer), "--output", str(workdir / name), *TRAIN_ARGS]  # fmt: skip
    if fsdp:
        return check_fsdp_resume(command, workdir / name, gpus)
    ok, tail = run_command(command, 900)
    return ok and (workdir / name / "checkpoints").is_dir(), tail


def check_fsdp_resume(command: list[str], run: Path, gpus: int) -> tuple[bool, str]:
    """Half the steps, ``--resume`` to the end, the export loaded with tied weights."""
    adamw = [("adamw" if arg == "muon" else arg) for arg in command]
    half = 20 * 16 * gpus * 256  # 20 steps of batch 16 x 256 tokens on every process
    ok, tail = run_command([*adamw, "--max-tokens", str(half)], 900)
    if not ok:
        return False, tail
    ok, tail = run_command([*adamw, "--resume"], 900)
    if not ok:
        return False, tail
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run)
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    step = json.loads((run / "codeparrot_checkpoint.json").read_text())["step"]
    return step == 40 and tied, f"{tail}\nresumed to step {step}, export tied: {tied}"


ENGINE_SECONDS = 200  # bench/cuda_steps.py on the quickstart's model: transformers' compile most


def check_engine(workdir: Path, output: Path | None) -> tuple[bool, str]:
    """``bench/cuda_steps.py`` on the trained checkpoint: ms/token with and without the
    captured step, and n=20 x 128 samples/s against transformers' static-cache generate
    (its JSON kept as ``cuda_steps.json`` beside ``output``, where given)."""
    out = workdir / "engine.json" if output is None else output.with_name("cuda_steps.json")
    command = [sys.executable, "bench/cuda_steps.py", "--checkpoint", str(workdir / "train"),
               "--json", str(out)]  # fmt: skip
    out.unlink(missing_ok=True)  # an earlier run's figures are not this one's
    ok, tail = run_command(command, ENGINE_SECONDS)
    if not out.is_file():
        return False, tail
    result = json.loads(out.read_text())  # after (a) alone where (b) did not end
    ok = ok and result["dtype"] == "torch.bfloat16" and result["attention"] == "sdpa"
    from cuda_steps import report  # this folder is first on sys.path when run as a script

    lines = [f"dtype {result['dtype']}, attention {result['attention']}", *report(result)]
    if "sampling" not in result:
        lines.append(tail)
    return ok, "\n".join(lines)


def check_lsp(workdir: Path) -> tuple[bool, str]:
    command = [sys.executable, "bench/lsp.py", "--checkpoint", str(workdir / "train"),
               "--requests", "30", "--bursts", "10"]  # fmt: skip
    return run_command(command, 600)


PLAN_MINUTES = 4.0


def check_plan(workdir: Path) -> tuple[bool, str]:
    output = workdir / "plan"
    command = [sys.executable, "-m", "codeparrot", "quickstart", "--output", str(output),
               "--total-minutes", str(PLAN_MINUTES), "--max-files", "2000"]  # fmt: skip
    ok, tail = run_command(command, PLAN_MINUTES * 60 + 180)
    state_file = output / "quickstart.json"
    if not state_file.is_file():
        return False, tail
    state = json.loads(state_file.read_text())
    facts = state["steps"].get("train", {}).get("facts", {})
    parameters, minutes = facts.get("parameters") or 0, state.get("minutes") or 0
    ok = ok and parameters >= 30e6 and minutes <= PLAN_MINUTES and facts.get("mfu") is not None
    detail = (
        f"{facts.get('preset')} {parameters / 1e6:.1f}M, batch {facts.get('batch_size')}, "
        f"{facts.get('step')} steps, {minutes:.2f} of {PLAN_MINUTES:g} minutes, "
        f"{facts.get('steady_tokens_per_s') or 0:,.0f} tokens/s, MFU {facts.get('mfu')}"
    )
    return ok, detail + "\n" + tail


def check_quickstart(workdir: Path) -> tuple[bool, str]:
    return run_command(["make", "quickstart", "TORCH=cuda"], 1800)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default=",".join(DEFAULT_CHECKS), help="checks to run, comma-separated"
    )
    parser.add_argument(
        "--quickstart", action="store_true", help="also `make quickstart TORCH=cuda`"
    )
    parser.add_argument("--output", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    unknown = [c for c in args.only.split(",") if c and c not in CHECKS]
    if unknown:
        parser.error(f"--only: no check named {', '.join(unknown)} (known: {', '.join(CHECKS)})")
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
        corpus = tokenizer = workdir  # the quickstart's plan builds its own
        if NEEDS_MATERIALS.intersection(selected):  # the engine and lsp read train's model
            start = time.perf_counter()
            corpus, tokenizer = materials(workdir)
            print(f"materials: ready in {time.perf_counter() - start:.0f} s", flush=True)
        runs = {
            "train": lambda: check_train(workdir, corpus, tokenizer, len(devices)),
            "ddp": lambda: check_launch(workdir, corpus, tokenizer, len(devices)),
            "fsdp": lambda: check_launch(workdir, corpus, tokenizer, len(devices), fsdp=2),
            "fsdp1": lambda: check_launch(workdir, corpus, tokenizer, len(devices), fsdp=1),
            "engine": lambda: check_engine(workdir, args.output),
            "lsp": lambda: check_lsp(workdir),
            "plan": lambda: check_plan(workdir),
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
