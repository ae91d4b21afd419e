#!/usr/bin/env bash
# One H200, at most ~300 s. Where the GDN prepare kernel's 5.7 us go (B = 128, M = 8): Nsight Compute's full set on
# the prepare kernel of an append step and of a merge step (warp-state stalls, instruction counts, memory), for
# 1, 2 and 4 prepare warps; then a same-process A/B of prepare_warps 1 / 2 / 4 (B = 128 / 512, M = 8 / 16,
# two passes of opposite order).
#   OUT=/path bash eval/h200_round23.sh     # results: $OUT/round23.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round23; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for pw in 1 4; do
  timeout 90 $NCU --clock-control none --set full -k regex:_deltalog_gdn_prepare python3 eval/profile_gdn_kernel.py \
      --batch 128 --merge-interval 8 --prepare-warps $pw > $R/ncu_prepare_w$pw.txt 2>&1
  stamp "ncu prepare warps=$pw rc=$?"
  grep -E "_deltalog_gdn_prepare|Duration|Registers Per Thread|Achieved Occupancy|Executed Ipc Active|Warp Cycles Per Issued|Stall|Instructions" \
      $R/ncu_prepare_w$pw.txt | head -40
done
SETS=('{}' '{"prepare_warps": 2}' '{"prepare_warps": 4}')
ab() {
  local pass=$1; shift
  stamp "pass $pass"
  timeout $(( 290 - $(date +%s) + T0 )) python3 -W ignore eval/bench_gdn_decode.py --operator gdn --out $R/p$pass \
      --tune --skip-main --tune-batches 128 512 --tune-ms 8 16 --tune-only "$@" --no-compile --no-numerics \
      > $R/p$pass.log 2>&1
  stamp "pass $pass rc=$?"
  python3 - $R/p$pass/bench_gdn_decode.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  B={r['B']:4d} M={r['M']:2d} {json.dumps(r['options']):28s} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  append {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
ab 1 "${SETS[@]}"
ab 2 '{"prepare_warps": 4}' '{"prepare_warps": 2}' '{}'
stamp done
tar -czf "$OUT/round23.tar.gz" -C $R .
