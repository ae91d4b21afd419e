#!/usr/bin/env bash
# One H200, at most ~560 s: the GDN step in ONE launch (`single_launch`: every decode program forms its head's replay
# coefficients itself; no prepare kernel; the row's length and log-decays written by the row's last program) against
# the two-launch default and the two-launch path with programmatic dependent launch, all in one process per
# coefficient variant, two passes of opposite order (B = 128 / 512, M = 8 / 16, V-first, CUDA-graph cycles):
#   coef=tile: the [C, K] key-log tile is loaded at once (HF_DELTALOG_COEF_LOOP=0);
#   coef=loop: one key row at a time (HF_DELTALOG_COEF_LOOP=1; fewer registers next to the base tile).
# Then registers as the device's Triton compiles them, and Nsight Compute on one append (L = 3) and one merge step
# at B = 128, M = 8 for the two-launch kernels and both single-launch variants.
#   OUT=/path bash eval/h200_round20.sh     # results: $OUT/round20/
set -u
OUT=${OUT:-/tmp/out}
R=$OUT/round20; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" > $R/versions.txt 2>&1
ab() {  # coef variant (0 tile / 1 loop), pass, option sets (JSON)...
  local loop=$1 pass=$2; shift 2
  local tag=coef$loop left=$(( 400 - $(date +%s) + T0 ))
  [ $left -lt 40 ] && { stamp "$tag pass $pass skipped"; return; }
  stamp "$tag pass $pass: $*"
  HF_DELTALOG_COEF_LOOP=$loop timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator gdn \
      --out $R/${tag}_p$pass --tune --skip-main --tune-batches 128 512 --tune-ms 8 16 --tune-only "$@" \
      --no-compile --no-numerics > $R/${tag}_p$pass.log 2>&1
  stamp "$tag pass $pass rc=$?"
  python3 - $R/${tag}_p$pass/bench_gdn_decode.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  B={r['B']:4d} M={r['M']:2d} {json.dumps(r['options']):28s} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  append {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}"
          f"  {r.get('error', '')}")
PY
}
ab 0 1 '{}' '{"_pdl": true}' '{"single_launch": true}'
ab 1 1 '{"single_launch": true}'
ab 1 2 '{"single_launch": true}'
ab 0 2 '{"single_launch": true}' '{"_pdl": true}' '{}'
for loop in 0 1; do for cap in 0 64; do
  COEF_LOOP=$loop MAXNREG=$cap timeout 60 python3 -W ignore eval/kernel_resources.py --configs 7,8,VK,1 15,8,VK,1 \
      2>&1 | grep -E "decode|step" | sed "s/^/coef_loop=$loop maxnreg=$cap /"
done; done > $R/resources.txt 2>&1
cat $R/resources.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for v in two single_coef0 single_coef1; do
  left=$(( 550 - $(date +%s) + T0 )); [ $left -lt 30 ] && { stamp "ncu $v skipped"; continue; }
  flag=--no-single-launch; loop=0
  case $v in single_coef0) flag=--single-launch;; single_coef1) flag=--single-launch; loop=1;; esac
  HF_DELTALOG_COEF_LOOP=$loop timeout $left $NCU --clock-control none --section SpeedOfLight --section Occupancy \
      --section LaunchStats -k regex:_deltalog_gdn_ python3 eval/profile_gdn_kernel.py --batch 128 \
      --merge-interval 8 $flag > $R/ncu_$v.txt 2>&1
  stamp "ncu $v rc=$?"
  grep -E "_deltalog_gdn_|DRAM Throughput|Duration|Registers Per Thread|Achieved Occupancy" $R/ncu_$v.txt
done
stamp done
