#!/usr/bin/env bash
# Issue 6 on one H200: train the three tiny checkpoints, then lm-eval parity at batch 64 in bf16; all output in $OUT.
#
#   OUT=/path/to/out bash eval/h200_issue6.sh            # both stages (estimated 8-9 minutes, not yet timed)
#   OUT=/path/to/out bash eval/h200_issue6.sh train      # stage 1 only (75 s of training per model + setup)
#   OUT=/path/to/out bash eval/h200_issue6.sh parity DIR # stage 2 only, on DIR/{gdn,kda,rwkv6}-shakespeare
#                                                        # (default DIR: eval/checkpoints, the committed ones)
# Stage 1 writes $OUT/checkpoints/{gdn,kda,rwkv6}-shakespeare (copy them to eval/checkpoints/ to commit them).
# Stage 2, the two local tasks in full (500 documents each) on each checkpoint, twice per checkpoint:
#   - with DeltaLogCache's defaults: on a GPU, layers this small decode densely through FLA's kernel (M = 1);
#   - with the DeltaLog log in use: M = 8 (GDN) and M = 4 (KDA), the Triton DeltaLog kernels;
#   - RWKV6 only when DeltaLogCache accepts FLA's RWKV6 model (it is reported as skipped otherwise).
#
# Needs: a CUDA torch with triton, transformers 5.24, flash-linear-attention 0.6.0, this checkout importable as
# hf_deltalog, and the packages of eval/h200_issue6_wheels.txt (lm_eval and what its import needs; pip install --no-deps).
# Knobs for a CPU rehearsal of the script itself (not of the GPU numbers):
#   TRAIN_ARGS="--smoke --device cpu" PARITY_ARGS="--device cpu --dtype float32 --batch-size 2 --limit 2"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the output folder}
stage=${1:-all}
ckdir=${2:-}
TRAIN_ARGS=${TRAIN_ARGS:---time-budget 75}
PARITY_ARGS=${PARITY_ARGS:---device cuda --dtype bfloat16 --batch-size 64}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
exec > >(tee -a "$OUT/h200_issue6.log") 2>&1
status=0
step() { echo "== $(date +%T) $*"; }

step "environment ($stage)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/gpu.csv"
python - <<'PY' | tee "$OUT/versions.txt"
import importlib
for name in ("torch", "triton", "transformers", "fla", "lm_eval", "hf_deltalog"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"), m.__file__)
    except Exception as e:  # report, do not stop: a missing package fails its stage below with its own message
        print(name, "NOT IMPORTABLE:", e)
PY

if [ "$stage" = all ] || [ "$stage" = train ]; then
  for model in gdn kda rwkv6; do
    step "train $model"
    # shellcheck disable=SC2086
    timeout 200 python eval/train_tiny.py train --model "$model" $TRAIN_ARGS --out "$OUT/checkpoints/$model-shakespeare" \
      || { echo "train $model FAILED"; status=1; }
  done
  ckdir=${ckdir:-$OUT/checkpoints}
fi

if [ "$stage" = all ] || [ "$stage" = parity ]; then
  ckdir=${ckdir:-eval/checkpoints}
  parity() {  # parity NAME [arguments]
    local name=$1; shift
    step "parity $name"
    # shellcheck disable=SC2086
    timeout 240 python eval/lm_eval_parity.py $PARITY_ARGS --quiet --out "$OUT/parity/$name" "$@" \
      && cat "$OUT/parity/$name/parity.md" || { echo "parity $name FAILED"; status=1; }
  }
  parity gdn_kda_default_m --pretrained "$ckdir/gdn-shakespeare" "$ckdir/kda-shakespeare"
  parity gdn_m8 --pretrained "$ckdir/gdn-shakespeare" --merge-interval 8
  parity kda_m4 --pretrained "$ckdir/kda-shakespeare" --merge-interval 4
  if python -c "
import sys, transformers, fla.models
from hf_deltalog import DeltaLogCache
DeltaLogCache(transformers.AutoConfig.from_pretrained(sys.argv[1]))" "$ckdir/rwkv6-shakespeare" >"$OUT/rwkv6_cache_check.txt" 2>&1; then
    parity rwkv6_default_m --pretrained "$ckdir/rwkv6-shakespeare"
  else
    step "parity rwkv6 skipped: DeltaLogCache does not accept the RWKV6 checkpoint yet (rwkv6_cache_check.txt)"
  fi
fi
step "done (status $status)"
exit $status
