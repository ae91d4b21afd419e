#!/usr/bin/env bash
# One H200, at most ~540 s. KDA and RWKV6 prepare kernels walking the log one [K] slot at a time ("loop": newest
# slot first, each slot's key and log-decay loaded one slot ahead, coefficients kept in a [C] register vector and
# stored once) instead of holding [C, K] key and decay tiles ("tile", the current kernels: 96 registers at C = 7, a
# cross-lane reverse scan; sm_90 compile with the local Triton: loop 64 (KDA) / 58 (RWKV6) registers at C = 7, 808 /
# 856 static instructions against 896 / 1,168). The variant is chosen by HF_DELTALOG_PREPARE (experiment switch).
# (1) the edge check and fp64 rollouts of the loop variant on the GPU; (2) each kernel's device time, both
# variants; (3) cycle-timed A/B, one process per variant, two passes of opposite order, B = 128 / 512, M = 4 / 8.
#   OUT=/path bash eval/h200_round36.sh     # results: $OUT/round36.tar.gz
# (The HF_DELTALOG_PREPARE switch and the RWKV6 loop kernel existed only in the working tree of that call; after it
# the KDA prepare kernel became the loop one and RWKV6 kept the tile one: eval/results/h200/NOTES.md, rounds 36-37.)
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round36; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
HF_DELTALOG_PREPARE=loop timeout 90 python3 -W ignore eval/gpu_edge_check.py > $R/edge_loop.jsonl 2> $R/edge_loop.err
stamp "edge check (loop) rc=$?"
cat $R/edge_loop.jsonl; tail -3 $R/edge_loop.err
for v in tile loop; do
  HF_DELTALOG_PREPARE=$v timeout 60 python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 4 8 \
      --operators kda rwkv6 --cycles 4 --out $R/kernel_times_$v.json > $R/kernel_times_$v.log 2>&1
  stamp "kernel times $v rc=$?"; cut -c1-150 $R/kernel_times_$v.log | tail -8
done
ab() {  # variant, pass, operator
  local left=$(( 470 - $(date +%s) + T0 ))
  [ $left -lt 30 ] && { stamp "$3 $1 pass $2 skipped"; return; }
  HF_DELTALOG_PREPARE=$1 timeout $left python3 -W ignore eval/bench_gdn_decode.py \
      --operator $3 --out $R/$3_$1$2 --tune --skip-main --tune-batches 128 512 --tune-ms 4 8 --tune-only '{}' \
      --no-compile --no-numerics > $R/$3_$1$2.log 2>&1
  stamp "$3 $1 pass $2 rc=$?"
  python3 - $R/$3_$1$2/bench_$3_decode.json "$3 $1$2" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]:10s} B={r['B']:4d} M={r['M']} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
for op in rwkv6 kda; do ab tile 1 $op; ab loop 1 $op; ab loop 2 $op; ab tile 2 $op; done
for op in rwkv6 kda; do
  left=$(( 540 - $(date +%s) + T0 ))
  [ $left -lt 30 ] && { stamp "numerics $op skipped"; continue; }
  HF_DELTALOG_PREPARE=loop timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator $op \
      --out $R/${op}_loop_numerics --skip-main --numerics-batches 128 --numerics-ms 4 8 --no-compile \
      > $R/${op}_loop_numerics.log 2>&1
  stamp "numerics $op (loop) rc=$?"; grep -i "numerics\|ratio\|rel" $R/${op}_loop_numerics.log | tail -6
done
stamp done
tar -czf "$OUT/round36.tar.gz" -C $R .
