#!/usr/bin/env bash
# One H200, at most ~560 s. (1) eval/gpu_guard_check.py with the manual-loop cases added on 2026-12-01 (23 cases; the
# per-forward guard had run on the CPU only). (2) Staggered row phases against aligned ones, all three operators:
# bench_gdn_decode.py's launch-option sweep with the option sets {} (all rows append together, merge together),
# {"_stagger": true} (row r starts at log length r mod M: 1/M of the rows merge at each step) and {} again (order
# check), B = 64 / 128 / 512, M = 4 / 8, V-first base, one process per operator.
#   OUT=/path bash eval/h200_round47.sh     # results: $OUT/round47.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round47; rm -rf $R; mkdir -p $R/stagger
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 200 python3 eval/gpu_guard_check.py --out $R/guards.json > $R/guards.log 2>&1; stamp "guards rc=$?"
grep -E 'cases passed' $R/guards.log; grep -E '"ok": false' $R/guards.log | cut -c1-300
tar -czf "$OUT/round47.tar.gz" -C $R .
for op in gdn kda rwkv6; do
  timeout 110 python3 eval/bench_gdn_decode.py --operator $op --tune --skip-main --no-numerics --no-compile \
      --tune-batches 64 128 512 --tune-ms 4 8 --tune-only '{}' '{"_stagger": true}' '{}' \
      --out $R/stagger/$op > $R/stagger/$op.log 2>&1
  stamp "stagger $op rc=$?"; grep -E "^tune B=" $R/stagger/$op.log | cut -c1-200
  tar -czf "$OUT/round47.tar.gz" -C $R .
done
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/round47/stagger/*/bench_gdn_decode.json")):
    for t in json.load(open(f)).get("tune", []):
        print(f.split("/")[-2], t["B"], t["M"], t["options"], t.get("amortized_us"), t.get("append_mean_us"),
              t.get("merge_us"), t.get("error", ""))
PY
