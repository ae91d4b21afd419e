#!/usr/bin/env bash
# One H200, at most ~480 s. RWKV6 prepare kernel variants (experiment switches HF_DELTALOG_RWKV6_PREPARE and
# HF_DELTALOG_RWKV6_PREPARE_CAP, in the working tree of this call): "tile" (the current kernel: [C, K] key and decay
# tiles, a reverse scan), "loop" (one [K] slot at a time, newest first, as KDA's kernel; a merge row forms exp(w) again
# per slot), "loopw" (the same with exp(w) formed once per program), each with and without a 64-register cap on the
# prepare launch ("cap": one wave of one-warp programs at B = 128). Round 36 measured loop at 1.6 % faster than tile at
# B = 128, M = 8 but 0.6 % slower at B = 512 (its merges); loopw took 70 registers (two waves) and measured as tile.
# (1) prepare/decode device times at B = 128; (2) cycle-timed A/B, one process per variant, two passes of opposite
# order, B = 64 / 128 / 256 / 512, M = 4 / 8; (3) FLA's fused_recurrent_rwkv6 at the same B, for the ratios.
#   OUT=/path bash eval/h200_round43.sh     # results: $OUT/round43.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round43; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
run() {  # name -> sets the two switches
  case $1 in
    tile) echo "HF_DELTALOG_RWKV6_PREPARE=tile HF_DELTALOG_RWKV6_PREPARE_CAP=0";;
    loop) echo "HF_DELTALOG_RWKV6_PREPARE=loop HF_DELTALOG_RWKV6_PREPARE_CAP=0";;
    loopw) echo "HF_DELTALOG_RWKV6_PREPARE=loopw HF_DELTALOG_RWKV6_PREPARE_CAP=0";;
    loopcap) echo "HF_DELTALOG_RWKV6_PREPARE=loop HF_DELTALOG_RWKV6_PREPARE_CAP=1";;
    loopwcap) echo "HF_DELTALOG_RWKV6_PREPARE=loopw HF_DELTALOG_RWKV6_PREPARE_CAP=1";;
  esac
}
for v in tile loopw loopwcap loopcap; do
  env $(run $v) timeout 40 python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 8 \
      --operators rwkv6 --cycles 4 --out $R/kernel_times_$v.json > $R/kernel_times_$v.log 2>&1
  stamp "kernel times $v rc=$?"; cut -c1-150 $R/kernel_times_$v.log | tail -3
done
ab() {  # variant, pass
  local left=$(( 400 - $(date +%s) + T0 ))
  [ $left -lt 25 ] && { stamp "$1 pass $2 skipped"; return; }
  env $(run $1) timeout $left python3 -W ignore eval/bench_gdn_decode.py \
      --operator rwkv6 --out $R/rwkv6_$1$2 --tune --skip-main --tune-batches 64 128 256 512 --tune-ms 4 8 \
      --tune-only '{}' --no-compile --no-numerics > $R/rwkv6_$1$2.log 2>&1
  stamp "$1 pass $2 rc=$?"
  python3 - $R/rwkv6_$1$2/bench_rwkv6_decode.json "$1$2" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]:10s} B={r['B']:4d} M={r['M']} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
for v in tile loop loopw loopwcap loopcap; do ab $v 1; done
for v in loopcap loopwcap loopw loop tile; do ab $v 2; done
left=$(( 470 - $(date +%s) + T0 ))
if [ $left -ge 30 ]; then
  timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator rwkv6 --out $R/rwkv6_fla --batches 64 128 256 512 \
      --ms 8 --layouts VK --no-compile --no-numerics > $R/rwkv6_fla.log 2>&1
  stamp "main run (FLA, tile) rc=$?"; grep -E '^\s+[0-9]+ ' $R/rwkv6_fla.log | head -20
fi
stamp done
tar -czf "$OUT/round43.tar.gz" -C $R .
