#!/usr/bin/env bash
# One H200, at most ~560 s. Round 20: the single-launch GDN step was 1.4-1.7x SLOWER than the two launches, and
# Nsight Compute showed its append at 50 % of DRAM peak. Suspect: the row counter's acq_rel atomic (a GPU-scope
# fence at the end of every program, which waits for the program's stores). This run times the single launch with
#   sync=1: a relaxed atomic whose operand depends on the program's read of L (no fence);
#   sync=2: no count at all (a fixed program writes length; races with the row's readers: timing only),
# each with coef=0 (key-log tile) and coef=1 (one key row at a time), against the two-launch default in the same
# process; two passes of opposite order; then Nsight Compute (B = 128, M = 8) on the single-launch variants.
#   OUT=/path bash eval/h200_round21.sh     # results: $OUT/round21.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round21; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
ab() {  # coef (0/1), sync (1/2), pass, option sets (JSON)...
  local loop=$1 sync=$2 pass=$3; shift 3
  local tag=coef${loop}_sync$sync left=$(( 380 - $(date +%s) + T0 ))
  [ $left -lt 40 ] && { stamp "$tag pass $pass skipped"; return; }
  stamp "$tag pass $pass: $*"
  HF_DELTALOG_COEF_LOOP=$loop HF_DELTALOG_ROW_SYNC=$sync timeout $left python3 -W ignore eval/bench_gdn_decode.py \
      --operator gdn --out $R/${tag}_p$pass --tune --skip-main --tune-batches 128 512 --tune-ms 8 16 \
      --tune-only "$@" --no-compile --no-numerics > $R/${tag}_p$pass.log 2>&1
  stamp "$tag pass $pass rc=$?"
  python3 - $R/${tag}_p$pass/bench_gdn_decode.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  B={r['B']:4d} M={r['M']:2d} {json.dumps(r['options']):28s} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  append {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}"
          f"  {r.get('error', '')}")
PY
}
ab 1 1 1 '{}' '{"single_launch": true}'
ab 0 1 1 '{"single_launch": true}'
ab 1 2 1 '{"single_launch": true}'
ab 1 2 2 '{"single_launch": true}'
ab 0 1 2 '{"single_launch": true}'
ab 1 1 2 '{"single_launch": true}' '{}'
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for v in 1_1 1_2 0_1; do
  left=$(( 540 - $(date +%s) + T0 )); [ $left -lt 30 ] && { stamp "ncu $v skipped"; continue; }
  HF_DELTALOG_COEF_LOOP=${v%_*} HF_DELTALOG_ROW_SYNC=${v#*_} timeout $left $NCU --clock-control none \
      --section SpeedOfLight --section Occupancy --section LaunchStats -k regex:_deltalog_gdn_ \
      python3 eval/profile_gdn_kernel.py --batch 128 --merge-interval 8 --single-launch > $R/ncu_coef${v}.txt 2>&1
  stamp "ncu coef_sync $v rc=$?"
  grep -E "_deltalog_gdn_|DRAM Throughput|Duration|Registers Per Thread|Achieved Occupancy" $R/ncu_coef${v}.txt
done
stamp done
tar -czf "$OUT/round21.tar.gz" -C $R .
