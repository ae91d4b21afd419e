#!/usr/bin/env bash
# One H200, ~3 min: the append step against a kernel that only streams the base. First the base-read probe
# (eval/stream_read_probe.py, the append's grid of [8, K] one-warp programs, no log, CUDA-graph timed) at B = 128 and
# 512, then the current GDN kernel's cycle at M = 8 (per-phase append / merge times) at the same batches.
#   OUT=/path bash eval/h200_round30.sh     # results: $OUT/round30.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round30; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
for b in 128 512; do
  timeout 60 python3 -W ignore eval/stream_read_probe.py --batch $b --direct-only --out $R/probe_b$b.json \
      > $R/probe_b$b.log 2>&1
  cat $R/probe_b$b.log
done
timeout 200 python3 -W ignore eval/bench_gdn_decode.py --operator gdn --out $R/gdn --tune --skip-main \
    --tune-batches 128 512 --tune-ms 8 --tune-only '{}' --no-compile --no-numerics > $R/gdn.log 2>&1
python3 - $R/gdn/bench_gdn_decode.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"GDN B={r['B']:4d} M={r['M']:2d} {r.get('amortized_us') or float('nan'):7.1f} us per token, appends (mean) "
          f"{r.get('append_mean_us') or float('nan'):6.1f}, merge {r.get('merge_us') or float('nan'):6.1f}")
PY
tar -czf "$OUT/round30.tar.gz" -C $R .
