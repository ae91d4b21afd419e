#!/usr/bin/env bash
# One H200, at most ~260 s. GPU smoke after the Python changes made after round 42 (argument checks of the
# launchers, run by every eager decode step; the refusal rules of the cache; the references' dtype checks):
# eval/gpu_guard_check.py (all families, compiled kernels) and the real-size generate check of the Qwen3.5
# architecture at B = 64 (the policy's M = 8) beside it.
#   OUT=/path bash eval/h200_round44.sh     # results: $OUT/round44.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round44; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
( timeout 240 python3 eval/gpu_guard_check.py --out $R/guards.json > $R/guards.log 2>&1; stamp "guards rc=$?" ) &
( timeout 240 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 --dtypes float32 \
    --out $R/gdn_fp32.json > $R/gdn_fp32.log 2>&1; stamp "gdn rc=$?" ) &
wait
grep -E '^\{|cases passed' $R/guards.log | cut -c1-300
tail -3 $R/gdn_fp32.log | cut -c1-300
stamp done
tar -czf "$OUT/round44.tar.gz" -C $R .
