#!/usr/bin/env bash
# One H200, at most ~420 s. eval/gpu_guard_check.py alone (round 41's run of it timed out at 240 s while FLA's chunked
# kernels autotuned and compiled beside four other jobs; its static case ran under transformers' automatic compile,
# where a hook cannot stop a step). Autotuners keep their first config (the script's default on a GPU).
#   OUT=/path bash eval/h200_round42.sh     # results: $OUT/round42.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round42; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
timeout 400 python3 eval/gpu_guard_check.py --out $R/guards.json > $R/guards.log 2>&1; stamp "guards rc=$?"
grep -E '^\{|cases passed|^\[' $R/guards.log | cut -c1-400
tar -czf "$OUT/round42.tar.gz" -C $R .
