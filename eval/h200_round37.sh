#!/usr/bin/env bash
# One H200, ~150 s. RWKV6 only: the loop prepare kernel of round 36 with exp(w) formed once per program ("loopw",
# 70 registers at C = 7 in a local sm_90 compile) against "loop" (exp(w) formed per slot on merge rows, 58 registers)
# and "tile"; kernel times, then one cycle-timed pass each, B = 128 / 512, M = 4 / 8.
#   OUT=/path bash eval/h200_round37.sh     # results: $OUT/round37.tar.gz
# (The HF_DELTALOG_PREPARE switch existed only in the working tree of that call; RWKV6 kept its tile prepare kernel.)
set -u
R=/tmp/round37; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
for v in loop loopw; do
  HF_DELTALOG_PREPARE=$v timeout 60 python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 4 8 \
      --operators rwkv6 --cycles 4 --out $R/kernel_times_$v.json > $R/kernel_times_$v.log 2>&1
  echo "kernel times $v rc=$?"; cut -c1-150 $R/kernel_times_$v.log | tail -2
done
for v in loopw tile loop; do
  HF_DELTALOG_PREPARE=$v timeout 100 python3 -W ignore eval/bench_gdn_decode.py \
      --operator rwkv6 --out $R/rwkv6_$v --tune --skip-main --tune-batches 128 512 --tune-ms 4 8 --tune-only '{}' \
      --no-compile --no-numerics > $R/rwkv6_$v.log 2>&1
  python3 - $R/rwkv6_$v/bench_rwkv6_decode.json "rwkv6 $v" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]:10s} B={r['B']:4d} M={r['M']} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
done
tar -czf "$OUT/round37.tar.gz" -C $R .
