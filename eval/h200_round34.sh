#!/usr/bin/env bash
# One H200, at most ~370 s. The kernels' edge-input fixes of 2026-12-01 (a NaN gate stays NaN through the log-decay
# floor; the length is clamped before its int32 cast and reaches the decode kernel as int32 bits): (1) the edge
# check on the GPU (eval/gpu_edge_check.py, kernels against the references on the device); (2) a same-process-kind A/B
# of the cycle times against the kernels before the fixes, exported to ab_old/ (an untracked copy of commit
# 785a119's package, put there before the call), order old / new / old / new, B = 128 and 512, M = 4 and 8.
#   git archive 785a119 hf_deltalog | tar -x -C ab_old && OUT=/path bash eval/h200_round34.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round34; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
timeout 120 python3 -W ignore eval/gpu_edge_check.py > $R/edge.jsonl 2> $R/edge.err
stamp "edge check rc=$?"
cat $R/edge.jsonl; tail -3 $R/edge.err
ab() {  # version (old|new), pass, operator
  local src=$PWD; [ "$1" = old ] && src=$PWD/ab_old
  PYTHONPATH=$src:$PYTHONPATH timeout $(( 360 - $(date +%s) + T0 )) python3 -W ignore eval/bench_gdn_decode.py \
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
for op in gdn kda rwkv6; do
  ab old 1 $op; ab new 1 $op; ab old 2 $op; ab new 2 $op
done
python3 -c "import hf_deltalog, sys; print('package used for new:', hf_deltalog.__file__)"
stamp done
tar -czf "$OUT/round34.tar.gz" -C $R .
