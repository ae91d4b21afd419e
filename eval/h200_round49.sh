#!/usr/bin/env bash
# One H200, at most ~300 s. What round 48's time limits cut: KDA's numerics and RWKV6's B = 512 row and numerics, with
# staggered phases (--stagger, the cache's default); and a same-process A/B of staggered against aligned phases where
# round 47 did not look: B = 8 and 32 at M = 4 and 8 (where the policy decodes with DeltaLog), and M = 16 at B = 128
# (round 48's staggered M = 16 times were 2-3 % above earlier aligned runs). Order {}, stagger, {} per point.
# Ran on 2026-12-01, before commit 35c2ef0 made aligned phases the cache's default (stagger_merges=False); the kernel
# benchmark's --stagger is unchanged.
#   OUT=/path bash eval/h200_round49.sh     # results: $OUT/round49.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round49; rm -rf $R; mkdir -p $R/full $R/ab
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 60 python3 eval/bench_gdn_decode.py --operator kda --out $R/full/kda --skip-main --stagger --no-compile \
    --numerics-batches 64 128 256 --numerics-ms 4 8 > $R/full/kda.log 2>&1; stamp "kda numerics rc=$?"
timeout 70 python3 eval/bench_gdn_decode.py --operator rwkv6 --out $R/full/rwkv6 --batches 512 --ms 2 4 8 16 \
    --stagger --layouts VK --no-compile --numerics-batches 64 128 256 --numerics-ms 4 8 > $R/full/rwkv6.log 2>&1
stamp "rwkv6 rc=$?"
tar -czf "$OUT/round49.tar.gz" -C $R .
for op in gdn kda rwkv6; do
  timeout 45 python3 eval/bench_gdn_decode.py --operator $op --tune --skip-main --no-numerics --no-compile \
      --tune-batches 8 32 --tune-ms 4 8 --tune-only '{}' '{"_stagger": true}' '{}' --out $R/ab/$op \
      > $R/ab/$op.log 2>&1; stamp "ab $op rc=$?"
  timeout 30 python3 eval/bench_gdn_decode.py --operator $op --tune --skip-main --no-numerics --no-compile \
      --tune-batches 128 --tune-ms 16 --tune-only '{}' '{"_stagger": true}' '{}' --out $R/ab/${op}_m16 \
      > $R/ab/${op}_m16.log 2>&1; stamp "ab $op M=16 rc=$?"
  tar -czf "$OUT/round49.tar.gz" -C $R .
done
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/round49/ab/*/bench_*_decode.json")):
    for t in json.load(open(f)).get("tune", []):
        print(f.split("/")[-2], t["B"], t["M"], t["options"], t.get("amortized_us"), t.get("error", ""))
PY
grep -E "ours|fla " $R/full/*.log | head -30
