#!/usr/bin/env bash
# Run 2026-12-01 (results: eval/results/h200/round32/; the summary lines below read bench_<op>_decode.json, fixed
# after the run, which looked for bench_gdn_decode.json). One H200, at most ~170 s. The KDA and
# RWKV6 prepare kernels take 8.6-9.0 us per step at M = 4 and 14-15 us at M = 8 (B = 128; GDN's 3.8-4.8;
# eval/step_kernel_times.py, NOTES.md): one warp per program holds their [8, K] key and decay tiles in 96 registers at
# C = 7. Here: their kernel times with 1 / 2 / 4 prepare warps, then the cycle-timed A/B of the same options (one
# process per operator, B = 128, M = 4 and 8).
#   OUT=/path bash eval/h200_round32.sh     # results: $OUT/round32.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round32; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 60 python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 4 8 --operators kda rwkv6 \
    --prepare-warps 0 2 4 --cycles 4 --out $R/kernel_times.json > $R/kernel_times.log 2>&1
cut -c1-150 $R/kernel_times.log
for op in rwkv6 kda; do
  timeout $(( 165 - $(date +%s) + T0 )) python3 -W ignore eval/bench_gdn_decode.py --operator $op --out $R/$op \
      --tune --skip-main --tune-batches 128 --tune-ms 4 8 --tune-only '{}' '{"prepare_warps": 2}' \
      '{"prepare_warps": 4}' --no-compile --no-numerics > $R/$op.log 2>&1
  python3 - $R/$op/bench_${op}_decode.json $op <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"{sys.argv[2]} B={r['B']} M={r['M']} {json.dumps(r['options']):22s} {r.get('amortized_us') or float('nan'):7.1f}"
          f" us  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
done
tar -czf "$OUT/round32.tar.gz" -C $R .
