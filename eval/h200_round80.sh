#!/usr/bin/env bash
# One H200, at most ~400 s. Merge intervals that are not powers of two, at the target batch of the kernel issues
# (B = 128) and at B = 512: the log tiles are padded to the next power of two (BC), so M = 6–7 (C = 5–6) keep the M = 8
# tiles with fewer live slots, M = 5 (C = 4) fills the M = 4 tiles, merges are amortised over fewer steps, and GDN's M = 9 (C = 8) fills the M = 8 tile
# exactly with one merge per 9 steps. Cycle-timed like every table (eval/bench_gdn_decode.py --tune --tune-only '{}',
# V-first, aligned phases), two passes of opposite M order in one process each; then the main run at M = 8 for FLA's
# fused_recurrent kernels in the same call (the ratios). Wheels: .whl (FLA), as eval/h200_round76.sh.
#   OUT=/path bash eval/h200_round80.sh     # results: $OUT/round80.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round80; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
sweep() {  # operator, pass, M values...
  local op=$1 pass=$2; shift 2
  local left=$(( 330 - $(date +%s) + T0 ))
  [ $left -lt 20 ] && { stamp "$op pass $pass skipped"; return; }
  timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator $op --out $R/${op}_$pass --tune --skip-main \
      --tune-batches 128 512 --tune-ms "$@" --tune-only '{}' --no-compile --no-numerics > $R/${op}_$pass.log 2>&1
  stamp "$op pass $pass rc=$?"
  python3 - $R/${op}_$pass/bench_${op}_decode.json "$op$pass" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]:8s} B={r['B']:4d} M={r['M']:2d} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
sweep rwkv6 1 5 6 7 8; sweep kda 1 5 6 7 8; sweep gdn 1 8 9 10 12
sweep gdn 2 12 10 9 8; sweep kda 2 8 7 6 5; sweep rwkv6 2 8 7 6 5
for op in rwkv6 kda gdn; do
  left=$(( 390 - $(date +%s) + T0 ))
  [ $left -lt 20 ] && { stamp "$op FLA skipped"; continue; }
  timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator $op --out $R/${op}_fla --batches 128 512 \
      --ms 8 --layouts VK --no-compile --no-numerics > $R/${op}_fla.log 2>&1
  stamp "$op main run (FLA, ours at M = 8) rc=$?"; grep -E '^\s+[0-9]+ ' $R/${op}_fla.log | head -8
done
stamp done
tar -czf "$OUT/round80.tar.gz" -C $R .
