#!/usr/bin/env bash
# Issue 6 on one H200 in one call of at most 540 s: lm-eval parity at batch 64 in bf16 on the committed GDN and KDA
# checkpoints, the RWKV6 checkpoint trained here and its parity, and the GDN/KDA checkpoints trained here.
# Everything goes to $OUT/issue6/ (log, versions, checkpoints, parity/<run>/parity.{json,md}).
#
#   OUT=/path/to/out bash eval/h200_issue6.sh           # the four tracks below, side by side (about 520 s at most)
#   OUT=/path/to/out bash eval/h200_issue6.sh parity    # track P and Q only (parity on eval/checkpoints)
#   OUT=/path/to/out bash eval/h200_issue6.sh train     # track T and the training of track R
#
# Four tracks run at the same time (PARALLEL=0: one after the other, in this order); every step has its own timeout,
# and the timeouts of each track add up to at most 480 s (plus 30 s for the environment report), so the script ends
# within ~520 s whatever happens:
#   P  parity on the committed gdn + kda checkpoints, DeltaLogCache's defaults (on a GPU, layers this small decode
#      densely through FLA's kernel, M = 1)                                                  timeout 470 s
#   Q  parity gdn with M = 8, then kda with M = 4 (the DeltaLog log and its Triton kernels)  240 s + 240 s
#   R  train rwkv6 (--time-budget 60), then its parity (DeltaLogCache default M = 8)         300 s + 180 s
#      (RWKV6 trains on FLA's PyTorch references, train_tiny.py --rwkv6-kernels torch: about 1 s per step on the H200,
#      so 60 s leave it above the perplexity bound; eval/h200_x2_round6.sh gives it 200 s. Through FLA's kernels its
#      first step, mostly Triton compilation, did not end within 180 s on 2026-11-30)
#   T  train gdn, then kda (--time-budget 60 each; transformers' PyTorch recurrences: train_tiny.py --fla auto)
#                                                                                            170 s + 170 s
# Every parity run rewrites parity.json / parity.md after each finished task ("complete": false until the end), so a
# run stopped by its timeout still leaves its finished tasks. The tracks are small models (a few MB): on one H200 they
# contend for the host's Python and kernel launches, not for GPU memory.
#
# Needs: a CUDA torch with triton, transformers 5.24, flash-linear-attention 0.6.0, this checkout importable as
# hf_deltalog (PYTHONPATH), and the packages of eval/h200_issue6_wheels.txt (pip install --no-deps).
# Knobs for a CPU rehearsal of the script itself (not of the GPU numbers):
#   TRAIN_ARGS="--smoke --device cpu" PARITY_ARGS="--device cpu --dtype float32 --batch-size 2 --limit 2"
#   MODELS="gdn kda" (leave rwkv6 out of the CPU rehearsal: minutes per step under the Triton interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the output folder}
RES="$OUT/issue6"
stage=${1:-all}
TRAIN_ARGS=${TRAIN_ARGS:---time-budget 60}
PARITY_ARGS=${PARITY_ARGS:---device cuda --dtype bfloat16 --batch-size 64}
MODELS=${MODELS:-gdn kda rwkv6}
PARALLEL=${PARALLEL:-1}
PY=${PY:-python3}             # the interpreter (python3 on the H200 machine)
CK=eval/checkpoints          # the committed checkpoints (gdn, kda)
NEW="$RES/checkpoints"       # the ones trained here
mkdir -p "$RES/logs"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 \
  HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
exec > >(tee -a "$RES/h200_issue6.log") 2>&1
T0=$(date +%s)
step() { echo "== $(date +%T) +$(( $(date +%s) - T0 ))s $*"; }
has() { [[ " $MODELS " == *" $1 "* ]]; }

# run NAME TIMEOUT COMMAND...: one step, its output in logs/NAME.log (progress bars included), a line in the main log
run() {
  local name=$1 limit=$2; shift 2
  step "start $name (timeout ${limit}s)"
  timeout -k 10 "$limit" "$@" >"$RES/logs/$name.log" 2>&1
  local rc=$?
  step "end $name: rc $rc$( [ $rc = 124 ] || [ $rc = 137 ] && echo ' (TIMED OUT)')"
  echo "$name $rc" >>"$RES/status.txt"
  return $rc
}
parity() {  # parity NAME TIMEOUT [arguments]
  local name=$1 limit=$2; shift 2
  # shellcheck disable=SC2086
  run "parity_$name" "$limit" "$PY" -u eval/lm_eval_parity.py $PARITY_ARGS --quiet --out "$RES/parity/$name" "$@"
  [ -f "$RES/parity/$name/parity.md" ] && { echo "--- parity $name:"; cat "$RES/parity/$name/parity.md"; }
}
train() {  # train MODEL TIMEOUT
  # shellcheck disable=SC2086
  run "train_$1" "$2" "$PY" -u eval/train_tiny.py train --model "$1" $TRAIN_ARGS --out "$NEW/$1-shakespeare" --force &&
    tail -3 "$RES/logs/train_$1.log"
}

step "environment ($stage; PARALLEL=$PARALLEL; MODELS=$MODELS)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$RES/gpu.csv"
timeout 30 "$PY" - <<'PY' 2>&1 | tee "$RES/versions.txt"
import importlib, platform
print("python", platform.python_version())
for name in ("torch", "triton", "transformers", "fla", "lm_eval", "datasets", "hf_deltalog"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"), m.__file__)
    except Exception as e:  # report, do not stop: a missing package fails its step below with its own message
        print(name, "NOT IMPORTABLE:", e)
PY

track_P() {
  local cks=()
  has gdn && cks+=("$CK/gdn-shakespeare")
  has kda && cks+=("$CK/kda-shakespeare")
  [ ${#cks[@]} -gt 0 ] && parity gdn_kda_default_m 470 --pretrained "${cks[@]}"
}
track_Q() {
  has gdn && parity gdn_m8 240 --pretrained "$CK/gdn-shakespeare" --merge-interval 8
  has kda && parity kda_m4 240 --pretrained "$CK/kda-shakespeare" --merge-interval 4
}
track_R() {
  has rwkv6 || return 0
  train rwkv6 300
  [ "$stage" = train ] && return 0
  if [ -f "$NEW/rwkv6-shakespeare/model.safetensors" ]; then
    parity rwkv6_default_m 180 --pretrained "$NEW/rwkv6-shakespeare"
  else
    step "parity rwkv6 skipped: no trained RWKV6 checkpoint (see logs/train_rwkv6.log)"
  fi
}
track_T() {
  has gdn && train gdn 170
  has kda && train kda 170
}

case "$stage" in
  all) tracks="P R Q T" ;;
  parity) tracks="P Q" ;;
  train) tracks="R T" ;;
  *) echo "unknown stage $stage (all, parity, train)"; exit 2 ;;
esac
pids=()
for t in $tracks; do
  if [ "$PARALLEL" = 1 ]; then track_$t & pids+=($!); else track_$t; fi
done
for p in "${pids[@]}"; do wait "$p"; done

step "summary (step, exit code; 124/137 = timed out)"
cat "$RES/status.txt" 2>/dev/null
failed=$(awk '$2 != 0' "$RES/status.txt" 2>/dev/null | wc -l)
step "done: $failed step(s) failed; results in $RES"
[ "$failed" = 0 ]
