"""Peak memory of loading hostile checkpoints and resume states, against honest ones.

Each case runs in a fresh process and reports its peak RSS (``VmHWM``) and outcome:

- ``qwen3``: a tiny Qwen3 checkpoint loaded by the engine (the baseline), and the same
  with ``max_position_embeddings`` 2**31 (before the bounds: a 17 GB allocation);
- ``bin``: a tiny GPT-2 whose weights are ``pytorch_model.bin`` (torch.save), and the
  same with its first record replaced by ``--bomb-gib`` GiB of zeros, deflated;
- ``resume``: ``train --resume`` of a finished tiny run, and the same with that bomb in
  ``optimizer.bin`` (before the bounds: 3.1 MB reached 3.4 GiB).

Target: every hostile case fails with a clear error under 1 GiB.

    .venv/bin/python bench/hostile_memory.py [--bomb-gib 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

STDLIB = ("textwrap.py", "heapq.py", "bisect.py", "fnmatch.py")


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [(root / name).read_text(encoding="utf-8") for name in STDLIB]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    fast.save_pretrained(out)


def build_models(root: Path) -> dict[str, Path]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, Qwen3Config

    build_tokenizer(root / "tok")
    tokenizer = AutoTokenizer.from_pretrained(root / "tok")
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    configs = {
        "gpt2": GPT2Config(vocab_size=vocab, n_positions=256, n_embd=64, n_layer=2, n_head=2,
                           eos_token_id=eos, bos_token_id=eos),
        "qwen3": Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                             head_dim=16, max_position_embeddings=256, eos_token_id=eos),
    }  # fmt: skip
    out = {}
    for name, config in configs.items():
        torch.manual_seed(0)
        out[name] = root / name
        AutoModelForCausalLM.from_config(config).save_pretrained(out[name])
        tokenizer.save_pretrained(out[name])
    return out


def deflate_bomb(file: Path, gib: float) -> None:
    """Replace the first tensor record of a torch.save file by ``gib`` GiB of deflated zeros."""
    with zipfile.ZipFile(file) as zin:
        records = [(i.filename, zin.read(i.filename)) for i in zin.infolist()]
    chunk = bytes(2**24)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as zout:
        for name, data in records:
            if not name.endswith("/data/0"):
                zout.writestr(name, data)
                continue
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            with zout.open(info, "w", force_zip64=True) as fh:
                for _ in range(int(gib * 2**30) // len(chunk)):
                    fh.write(chunk)


def prepare(root: Path, bomb_gib: float) -> dict[str, Path]:
    import torch
    from transformers import AutoModelForCausalLM

    models = build_models(root)
    huge = Path(shutil.copytree(models["qwen3"], root / "qwen3-huge"))
    config = json.loads((huge / "config.json").read_text())
    config["max_position_embeddings"] = 2**31
    (huge / "config.json").write_text(json.dumps(config))
    binary = Path(shutil.copytree(models["gpt2"], root / "bin"))
    (binary / "model.safetensors").unlink()
    model = AutoModelForCausalLM.from_pretrained(models["gpt2"])
    torch.save(model.state_dict(), binary / "pytorch_model.bin")
    bomb = Path(shutil.copytree(binary, root / "bin-bomb"))
    deflate_bomb(bomb / "pytorch_model.bin", bomb_gib)
    run = finished_run(root, models["gpt2"])
    bombed_run = Path(shutil.copytree(run, root / "run-bomb"))
    optimizer = next((bombed_run / "checkpoints").glob("step-*")) / "state" / "optimizer.bin"
    deflate_bomb(optimizer, bomb_gib)
    return {
        "qwen3": models["qwen3"], "qwen3-huge": huge, "bin": binary, "bin-bomb": bomb,
        "run": run, "run-bomb": bombed_run, "corpus": root / "corpus", "gpt2": models["gpt2"],
        "optimizer-bomb": optimizer,
    }  # fmt: skip


def train_config(paths: dict[str, Path], run: Path, resume: bool):
    from codeparrot.training import TrainConfig

    return TrainConfig(
        data=paths["corpus"], tokenizer=paths["gpt2"], init_from=paths["gpt2"], output=run,
        seq_length=32, batch_size=2, warmup_steps=1, eval_batches=1, shuffle_buffer=8,
        max_steps=4, eval_every=0, mixed_precision="no", log_with="none", peak_tflops=1.0,
        progress=False, max_tokens=2 * 2 * 32, resume=resume,
    )  # fmt: skip


def finished_run(root: Path, checkpoint: Path) -> Path:
    from codeparrot.training import train

    docs = [f"def g{i}(n):\n    return [k * {i} for k in range(n)]\n" for i in range(40)]
    for split, part in (("train", docs[:32]), ("valid", docs[32:])):
        (root / "corpus" / split).mkdir(parents=True)
        with gzip.open(root / "corpus" / split / "shard-00000.jsonl.gz", "wt") as fh:
            fh.writelines(json.dumps({"content": d}) + "\n" for d in part)
    paths = {"corpus": root / "corpus", "gpt2": checkpoint}
    train(train_config(paths, root / "run", resume=False))
    return root / "run"


def run_case(case: str, paths: dict[str, Path]) -> str:
    """The outcome of one case, in this process."""
    from codeparrot.errors import CodeparrotError

    try:
        if case.startswith("resume"):
            from codeparrot.training import train

            run = paths["run-bomb" if case.endswith("bomb") else "run"]
            result = train(train_config(paths, run, resume=True))
            return f"resumed at step {result.step}"
        from codeparrot.generation import Engine

        Engine.load(paths[case], device="cpu", quantize="none")
        return "loaded"
    except CodeparrotError as e:
        return f"refused: {str(e)[:160]}"
    except Exception as e:  # what the bounds exist to prevent
        return f"CRASH {type(e).__name__}: {str(e)[:160]}"


def peak_mib() -> float:
    """This process's peak RSS: VmHWM, which (unlike ``ru_maxrss``) does not carry over
    the parent's peak through fork and exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


CASES = ("qwen3", "qwen3-huge", "bin", "bin-bomb", "resume", "resume-bomb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bomb-gib", type=float, default=3.0)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        paths = {k: Path(v) for k, v in json.loads(args.paths).items()}
        outcome = run_case(args.case, paths)
        print(json.dumps({"case": args.case, "peak_mib": round(peak_mib()), "outcome": outcome}))
        return
    with tempfile.TemporaryDirectory() as tmp:
        paths = prepare(Path(tmp), args.bomb_gib)
        sizes = {
            "bin-bomb": (paths["bin-bomb"] / "pytorch_model.bin").stat().st_size,
            "resume-bomb": paths["optimizer-bomb"].stat().st_size,
        }
        print(f"bomb files: {json.dumps(sizes)} bytes, each expanding by {args.bomb_gib} GiB")
        encoded = json.dumps({k: str(v) for k, v in paths.items()})
        for case in CASES:
            cmd = [sys.executable, __file__, "--case", case, "--paths", encoded]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = done.stdout.strip().splitlines()
            print(lines[-1] if lines else f"{case}: rc {done.returncode} {done.stderr[-300:]}")


if __name__ == "__main__":
    main()
