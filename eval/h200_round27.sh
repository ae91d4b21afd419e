#!/usr/bin/env bash
# One H200, at most ~120 s: the KDA decode kernel under the 64-register cap (as GDN's and RWKV6's; no spills in an
# sm_90 compile at C = 3, 7, 15 since its merge reads the decayed keys) against the tree without it (.ab/kdanocap =
# the commit before), one process per version, two passes of opposite order, B = 128 / 512, M = 4 / 8, V-first,
# our kernel only (tune mode, default options).
#   OUT=/path bash eval/h200_round27.sh     # results: $OUT/round27.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round27; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
ab() {  # version, pass
  local ver=$1 pass=$2 root=$PWD
  [ $ver = kdanocap ] && root=$PWD/.ab/kdanocap
  stamp "kda $ver pass $pass"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout 60 python3 -W ignore eval/bench_gdn_decode.py --operator kda \
      --out $R/kda_${ver}_p$pass --tune --skip-main --tune-batches 128 512 --tune-ms 4 8 --tune-only '{}' \
      --no-compile --no-numerics > $R/kda_${ver}_p$pass.log 2>&1)
  stamp "kda $ver pass $pass rc=$?"
  python3 - $R/kda_${ver}_p$pass/bench_kda_decode.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  B={r['B']:4d} M={r['M']:2d} {r.get('amortized_us') or float('nan'):7.1f} us  append "
          f"{r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
ab kdanocap 1; ab cur 1; ab cur 2; ab kdanocap 2
stamp done
tar -czf "$OUT/round27.tar.gz" -C $R .
