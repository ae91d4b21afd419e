#!/usr/bin/env bash
# One H200, at most ~150 s. eval/gpu_guard_check.py once more, after the fifteenth review's FLA-cache changes (a layer
# read again while its last step never stored a state is refused; cu_seqlens read by version; the configuration
# check's conv and attention settings), which came after round 44.
#   OUT=/path bash eval/h200_round46.sh     # results: $OUT/round46.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round46; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
timeout 140 python3 eval/gpu_guard_check.py --out $R/guards.json > $R/guards.log 2>&1; echo "guards rc=$?"
grep -E 'cases passed' $R/guards.log; grep -E '"ok": false' $R/guards.log | cut -c1-300
tar -czf "$OUT/round46.tar.gz" -C $R .
