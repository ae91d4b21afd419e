#!/usr/bin/env bash
# x2 H200 run of 2026-11-30, at most ~200 s of wall time: does the GDN gain of evict-first base loads at M = 8 under
# 8 rotated sets (round 13: 90.3 -> 87.4 µs at B = 128, one pass) repeat, and does it hold at B = 64? GDN only,
# B = 64 and 128, M = 8, --min-sets 8; "cur" (.ab/cur, commit fcf6729: the GDN kernel is unchanged since) and
# "evict2" (.ab/evict2) on both GPUs in opposite orders.
#   OUT=/path bash eval/h200_round15.sh     # results: $OUT/round15.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round15; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
ab() {  # gpu, version
  local gpu=$1 ver=$2 root=$PWD/.ab/$2 left=$(( 190 - $(date +%s) + T0 ))
  [ $left -lt 40 ] && { stamp "gpu$gpu $ver skipped"; return; }
  stamp "gpu$gpu $ver"
  (cd $root && CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=/tmp/site:$root timeout $left python3 eval/bench_gdn_decode.py \
      --operator gdn --out $R/gdn_${ver}_gpu$gpu --batches 64 128 --ms 8 --layouts VK --no-compile --no-numerics \
      --min-sets 8 > $R/gdn_${ver}_gpu$gpu.log 2>&1)
  stamp "gpu$gpu $ver rc=$?"; grep -E "B=(64|128): fla_vfirst VK [0-9]" $R/gdn_${ver}_gpu$gpu.log
}
( ab 0 cur; ab 0 evict2 ) > $R/gpu0.log 2>&1 &
a=$!
( ab 1 evict2; ab 1 cur ) > $R/gpu1.log 2>&1 &
b=$!
wait $a $b
cat $R/gpu0.log $R/gpu1.log
tar -czf "$OUT/round15.tar.gz" -C $R .
