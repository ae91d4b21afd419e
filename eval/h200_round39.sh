#!/usr/bin/env bash
# One H200, at most ~480 s. RWKV6: the prepare kernel walks the log one [K] slot at a time (as KDA's since round 36),
# and a merge row's decayed keys are formed without the step's decay: the decode kernel's merge scales
# exp(l) * base + sum_i (exp(l - L_i) * k_i) v_i^T by exp(w) once per tile, so the prepare kernel no longer forms
# exp(w) per slot (what made round 36's loop variant lose on merges). The workspace gains exp(l) and exp(w) slots
# (written on merge rows only). (1) GPU edge check and fp64 rollouts of the new kernels; (2) kernel device times,
# the prepare kernel also under a 64-register cap (68-74 registers uncapped in a local sm_90 compile at C = 7);
# (3) cycle-timed A/B against the kernels before (.ab/r39base = the package of the commit before, carried), one
# process per version, two passes of opposite order, B = 128 / 512, M = 4 / 8.
#   git archive HEAD hf_deltalog $(git ls-files "eval/*.py") | tar -x -C .ab/r39base && OUT=/path bash eval/h200_round39.sh
# (The changed kernels existed only in the working tree of that call: they measured slower and were not committed;
# eval/results/h200/NOTES.md, round 39.)
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round39; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 90 python3 -W ignore eval/gpu_edge_check.py > $R/edge.jsonl 2> $R/edge.err
stamp "edge check rc=$?"; grep -c '"ok": true' $R/edge.jsonl; tail -2 $R/edge.err
timeout 60 python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 4 8 --operators rwkv6 --cycles 4 \
    --prepare-maxnreg 0 64 --out $R/kernel_times_new.json > $R/kernel_times_new.log 2>&1
stamp "kernel times new rc=$?"; cut -c1-150 $R/kernel_times_new.log | tail -4
ab() {  # version (old|new), pass
  local src=$PWD; [ "$1" = old ] && src=$PWD/.ab/r39base
  local left=$(( 420 - $(date +%s) + T0 ))
  [ $left -lt 30 ] && { stamp "$1 pass $2 skipped"; return; }
  (cd $src && PYTHONPATH=/tmp/site:$src timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator rwkv6 \
      --out $R/rwkv6_$1$2 --tune --skip-main --tune-batches 128 512 --tune-ms 4 8 --tune-only '{}' \
      --no-compile --no-numerics > $R/rwkv6_$1$2.log 2>&1)
  stamp "rwkv6 $1 pass $2 rc=$?"
  python3 - $R/rwkv6_$1$2/bench_rwkv6_decode.json "$1$2" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]:6s} B={r['B']:4d} M={r['M']} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
ab old 1; ab new 1; ab new 2; ab old 2
left=$(( 475 - $(date +%s) + T0 ))
timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator rwkv6 --out $R/rwkv6_numerics --skip-main \
    --numerics-batches 128 --numerics-ms 4 8 --no-compile > $R/rwkv6_numerics.log 2>&1
stamp "numerics rc=$?"; grep -A8 "relative L2" $R/rwkv6_numerics.log | head -10
python3 -c "import hf_deltalog; print('package of new:', hf_deltalog.__file__)"
stamp done
tar -czf "$OUT/round39.tar.gz" -C $R .
