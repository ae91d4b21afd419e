#!/usr/bin/env bash
# One H200, at most ~200 s: KDA at M = 16 (not timed by round 24's A/B; round 25's full table had M = 16 slower
# than round 14's), the tree before the decayed-key merge (.ab/r24base) against this tree, one process per version,
# two passes of opposite order, B = 128 / 512, V-first, our kernel only (tune mode, default options).
#   OUT=/path bash eval/h200_round26.sh     # results: $OUT/round26.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round26; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
ab() {  # version, pass
  local ver=$1 pass=$2 root=$PWD
  [ $ver = r24base ] && root=$PWD/.ab/r24base
  stamp "kda $ver pass $pass"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout 60 python3 -W ignore eval/bench_gdn_decode.py --operator kda \
      --out $R/kda_${ver}_p$pass --tune --skip-main --tune-batches 128 512 --tune-ms 4 16 --tune-only '{}' \
      --no-compile --no-numerics > $R/kda_${ver}_p$pass.log 2>&1)
  stamp "kda $ver pass $pass rc=$?"
  python3 - $R/kda_${ver}_p$pass/bench_kda_decode.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  B={r['B']:4d} M={r['M']:2d} {r.get('amortized_us') or float('nan'):7.1f} us  append "
          f"{r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
ab r24base 1; ab cur 1; ab cur 2; ab r24base 2
stamp done
tar -czf "$OUT/round26.tar.gz" -C $R .
