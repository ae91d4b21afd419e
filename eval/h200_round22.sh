#!/usr/bin/env bash
# One H200, at most ~450 s. The GDN decode kernel with several value tiles per program ("_tpp", experimental:
# `_deltalog_gdn_decode_chunk_kernel`): each program does TPP [BV, 128] tiles of one value head in sequence, each
# tile's base load issued one tile ahead, the key-side loads once per program. Same-process A/B against the default
# kernel, two passes of opposite order, B = 128 / 512, M = 8 / 16, V-first, CUDA-graph cycles.
#   OUT=/path bash eval/h200_round22.sh     # results: $OUT/round22.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round22; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
SETS=('{}' '{"_tpp": 2, "block_v": 4, "_tpp_maxnreg": 64}' '{"_tpp": 4, "block_v": 4}'
      '{"_tpp": 4, "block_v": 4, "_tpp_maxnreg": 64}' '{"_tpp": 2, "block_v": 8}' '{"_tpp": 4, "block_v": 8}'
      '{"merge": {"_tpp": 2, "block_v": 8}}')
REV=(); for ((i=${#SETS[@]}-1; i>=0; i--)); do REV+=("${SETS[$i]}"); done
ab() {  # pass, option sets (JSON)...
  local pass=$1; shift
  local left=$(( 440 - $(date +%s) + T0 ))
  stamp "pass $pass"
  timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator gdn --out $R/p$pass --tune --skip-main \
      --tune-batches 128 512 --tune-ms 8 16 --tune-only "$@" --no-compile --no-numerics > $R/p$pass.log 2>&1
  stamp "pass $pass rc=$?"
  python3 - $R/p$pass/bench_gdn_decode.json <<'PY'
import json, sys
for r in sorted(json.load(open(sys.argv[1])).get("tune", []), key=lambda r: (r["B"], r["M"], r.get("amortized_us") or 1e9)):
    print(f"  B={r['B']:4d} M={r['M']:2d} {json.dumps(r['options']):52s} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  append {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}"
          f"  {r.get('error', '')}")
PY
}
ab 1 "${SETS[@]}"
ab 2 "${REV[@]}"
stamp done
tar -czf "$OUT/round22.tar.gz" -C $R .
