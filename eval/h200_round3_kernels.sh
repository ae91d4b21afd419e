#!/usr/bin/env bash
# Round 3 on one H200 (issues 4 and 5), <= 540 s in all; everything under $OUT/kernels3/ (one log per process).
#
#   OUT=/path/to/out bash eval/h200_round3_kernels.sh     # needs torch + triton, transformers 5.24, flash-linear-attention
#                                                         # 0.6.0 and this checkout importable (PYTHONPATH)
# Stages, in order of value (timeouts; expected wall times, estimated from the 2026-11-29 logs, not measured):
#   1. RWKV6 decode benchmark: B in {1, 8, 32, 64, 128, 256, 512}, M in {2, 4, 8, 16}, our V-first base (M = 1 in both
#      layouts) against FLA's fused_recurrent_rwkv6 ([K, V] only); numerics rollouts at B = 64, 128, 256 for M = 4, 8.
#      timeout 200 s; expected ~120 s (the earlier runs reached B = 512 about 100 s in with 11 variants per B and were
#      stopped there by their 75 / 120 s limits; now 7 variants per B).
#   2+3. generate checks, correctness only (no timings), six processes side by side so that the Triton compilations
#      of FLA's autotuned kernels (~100 configs per dtype for a chunked KDA prefill) run in parallel:
#        FLA GatedDeltaNet and KDA models (gpu_generate_check_fla.py), B = 32, fp32 and bf16 (one process each);
#        transformers' Kimi-Linear (gpu_generate_check.py): fp32 B = 4 (the policy's dense path: FLA's
#        fused_recurrent_kda under 16 MiB of state) and bf16 B = 4 and 32 (token share, top-2 margin where tokens part).
#      timeout 200 s each (all at once); expected ~100-150 s (mostly Triton compilation, not measured).
#   4. launch-option sweeps (block_v in {8, 16, 32} x num_warps in {1, 2, 4}, plus the defaults) of the RWKV6 and KDA
#      kernels at B = 128, 256 and M = 4, 8, with the time left (half each; skipped under 45 s); results are written
#      after every (B, M), so a sweep stopped by its limit keeps what it measured. expected ~65 s each.
# Every python runs with -u; the benchmark prints a line before each measurement and dumps the Python stacks after
# 45 s without progress (and on SIGTERM), the generate checks print a line before each generate call and dump the
# stacks on SIGTERM: a stall or a stop by `timeout` shows where it was.
#
# CPU rehearsal of the whole script (tiny shapes, Triton interpreter; numbers meaningless): stage 3 needs a python
# without FLA (transformers would bind its KDA layers to FLA's kernels, which fail under the interpreter):
#   CPU_SMOKE=1 PY=/tmp/wt5-fla/bin/python PY_TF=/work/main/.venv/bin/python PYTHONPATH=$PWD \
#       OUT=/tmp/k3/rehearsal bash eval/h200_round3_kernels.sh
# The same stages one by one:
#   python eval/bench_gdn_decode.py --cpu-smoke --operator rwkv6 --batches 1 2 --ms 2 4 --layouts VK --no-compile \
#       --numerics-batches 1 --numerics-ms 2 4 --rollout-steps 4 --watchdog-s 45 --out /tmp/k3/rwkv6
#   python eval/gpu_generate_check_fla.py --cpu-smoke --families kda --dtypes float32 bfloat16 --runs 2 --new-tokens 3
#   python eval/gpu_generate_check.py --cpu-smoke --families kimi_linear --dtypes bfloat16 --runs 2 3 --new-tokens 3
#   python eval/bench_gdn_decode.py --cpu-smoke --operator kda --tune --skip-main --no-numerics --no-compile \
#       --watchdog-s 45 --out /tmp/k3/tune_kda
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
R=$OUT/kernels3
PY=${PY:-python3}
PY_TF=${PY_TF:-$PY}
CPU_SMOKE=${CPU_SMOKE:-0}
mkdir -p "$R"/{rwkv6,generate,tune_rwkv6,tune_kda}
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
step() { echo "== $(date +%T) +$(elapsed)s $*"; }

if [ "$CPU_SMOKE" = 1 ]; then
  BUDGET=${BUDGET:-3000}; T1=${T1:-900}; T2=${T2:-1500}
  BENCH_ARGS="--cpu-smoke --batches 1 2 --ms 2 4 --numerics-batches 1 --numerics-ms 2 4 --rollout-steps 4"
  TUNE_ARGS="--cpu-smoke"
  GEN="--cpu-smoke --new-tokens 3"; FLA_RUNS="2"; KIMI_FP32_RUNS="2"; KIMI_BF16_RUNS="2 3"
else
  BUDGET=${BUDGET:-540}; T1=${T1:-200}; T2=${T2:-200}
  BENCH_ARGS="--batches 1 8 32 64 128 256 512 --ms 2 4 8 16 --numerics-batches 64 128 256 --numerics-ms 4 8"
  TUNE_ARGS="--tune-batches 128 256 --tune-ms 4 8"
  GEN=""; FLA_RUNS="32"; KIMI_FP32_RUNS="4"; KIMI_BF16_RUNS="4 32"
fi

step "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$R/gpu.csv" 2>&1
cat "$R/gpu.csv"

step "stage 1: RWKV6 benchmark (timeout ${T1}s)"
# shellcheck disable=SC2086
timeout -k 10 "$T1" "$PY" -u eval/bench_gdn_decode.py --operator rwkv6 --out "$R/rwkv6" $BENCH_ARGS --layouts VK \
    --no-compile --watchdog-s 45 > "$R/rwkv6/bench.log" 2>&1
echo "rwkv6 rc=$? after +$(elapsed)s"
grep -E "\] B=[0-9]+: [a-z]" "$R/rwkv6/bench.log" | grep -v " \.\.\.$"
sed -n '/== policy/,/^$/p' "$R/rwkv6/bench.log"
grep -E "ours/FLA|fla +M" "$R/rwkv6/bench.log"
grep -B2 -A12 "Timeout (\|Current thread\|Traceback" "$R/rwkv6/bench.log" | head -40

step "stages 2+3: generate checks, 6 processes in parallel (timeout ${T2}s each)"
declare -A PIDS
launch() {  # launch NAME PYTHON SCRIPT ARGS...: one check in the background, its own log and Triton cache
  local name=$1 py=$2; shift 2
  OMP_NUM_THREADS=2 TRITON_CACHE_DIR="${TMPDIR:-/tmp}/kernels3_triton/$name" \
    timeout -k 10 "$T2" "$py" -u "$@" --out "$R/generate/$name.json" > "$R/generate/$name.log" 2>&1 &
  PIDS[$name]=$!
}
# shellcheck disable=SC2086
{
  launch fla_gdn_fp32 "$PY" eval/gpu_generate_check_fla.py --families gated_deltanet --dtypes float32 --runs $FLA_RUNS $GEN
  launch fla_gdn_bf16 "$PY" eval/gpu_generate_check_fla.py --families gated_deltanet --dtypes bfloat16 --runs $FLA_RUNS $GEN
  launch fla_kda_fp32 "$PY" eval/gpu_generate_check_fla.py --families kda --dtypes float32 --runs $FLA_RUNS $GEN
  launch fla_kda_bf16 "$PY" eval/gpu_generate_check_fla.py --families kda --dtypes bfloat16 --runs $FLA_RUNS $GEN
  launch kimi_fp32 "$PY_TF" eval/gpu_generate_check.py --families kimi_linear --dtypes float32 --runs $KIMI_FP32_RUNS $GEN
  launch kimi_bf16 "$PY_TF" eval/gpu_generate_check.py --families kimi_linear --dtypes bfloat16 --runs $KIMI_BF16_RUNS $GEN
}
for name in fla_gdn_fp32 fla_gdn_bf16 fla_kda_fp32 fla_kda_bf16 kimi_fp32 kimi_bf16; do
  wait "${PIDS[$name]}"
  echo "-- $name rc=$? at +$(elapsed)s"
  grep -E "^\{|max \|dlogit\||Error|Timeout|Current thread" "$R/generate/$name.log" | tail -8
done

left=$(( BUDGET - $(elapsed) - 10 ))
step "stage 4: launch-option sweeps of RWKV6 and KDA (${left}s left)"
for op in rwkv6 kda; do
  left=$(( BUDGET - $(elapsed) - 10 ))
  [ "$op" = rwkv6 ] && share=$(( left / 2 )) || share=$left
  if [ "$share" -lt 45 ]; then echo "tune $op skipped: ${share}s left"; continue; fi
  # shellcheck disable=SC2086
  timeout -k 10 "$share" "$PY" -u eval/bench_gdn_decode.py --operator "$op" --out "$R/tune_$op" --tune --skip-main \
      $TUNE_ARGS --no-numerics --no-compile --watchdog-s 45 > "$R/tune_$op/bench.log" 2>&1
  echo "tune $op rc=$? (limit ${share}s) at +$(elapsed)s"
  grep "tune B=.*: best" "$R/tune_$op/bench.log"
done
step "done"
