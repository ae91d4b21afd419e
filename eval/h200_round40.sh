#!/usr/bin/env bash
# One H200, at most ~540 s. The decode kernels' merge loops (GDN, KDA, RWKV6) through Triton's loop pipeliner:
# `tl.range(0, C, num_stages=S)` keeps S entries' loads in flight as asynchronous copies into shared memory (cp.async
# in the sm_90 PTX of a local compile) instead of one entry ahead in registers (GDN, RWKV6) or none (KDA). A merge
# step costs 1.2-1.3x a dense step (GDN at B = 128, M = 8: 154 us of decode kernel against FLA's 130), and at one
# program per [8, K] tile each entry's load round trip is serial. The experiment switch HF_DELTALOG_MERGE_STAGES picks
# S (0: the current loops). (1) GPU edge check with S = 3; (2) cycle times, one process per setting, order
# 0, 3, 2, 4, 0, B = 128 / 512, M = 4 / 8.
#   OUT=/path bash eval/h200_round40.sh     # results: $OUT/round40.tar.gz
# (The switch and the pipelined loops existed only in the working tree of that call: slower at every point, not
# committed; eval/results/h200/NOTES.md, round 40.)
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round40; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
HF_DELTALOG_MERGE_STAGES=3 timeout 90 python3 -W ignore eval/gpu_edge_check.py > $R/edge_s3.jsonl 2> $R/edge_s3.err
stamp "edge check (S = 3) rc=$?"; grep -c '"ok": true' $R/edge_s3.jsonl; tail -2 $R/edge_s3.err
run() {  # operator, stages, tag
  local left=$(( 530 - $(date +%s) + T0 ))
  [ $left -lt 25 ] && { stamp "$1 S=$2 skipped"; return; }
  HF_DELTALOG_MERGE_STAGES=$2 timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator $1 \
      --out $R/$1_s$2_$3 --tune --skip-main --tune-batches 128 512 --tune-ms 4 8 --tune-only '{}' \
      --no-compile --no-numerics > $R/$1_s$2_$3.log 2>&1
  stamp "$1 S=$2 ($3) rc=$?"
  python3 - $R/$1_s$2_$3/bench_$1_decode.json "$1 S=$2" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]:10s} B={r['B']:4d} M={r['M']} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
for op in gdn kda rwkv6; do
  run $op 0 a; run $op 3 a; run $op 2 a; run $op 4 a; run $op 0 b
done
stamp done
tar -czf "$OUT/round40.tar.gz" -C $R .
