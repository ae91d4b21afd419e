#!/usr/bin/env bash
# One H200, at most ~400 s. Round 32 found that more prepare warps make the KDA and RWKV6 prepare kernels slower.
# Their one-warp programs take 96 registers at C = 7 (an sm_90 compile; 63-64 at C = 3), so 21 of them fit an SM and
# the 4,096 programs of B = 128 take two waves; under a 64-register cap 32 fit (Triton's `maxnreg`; the compile then
# spills 104-144 bytes per thread) and one wave holds them all. Here: (1) kernel device times with caps 0 / 64 / 56 at
# M = 4 and 8; (2) Nsight Compute on the KDA prepare kernel of an append (M = 8) with and without the cap; (3) the
# cycle-timed A/B (CUDA graphs, one process per setting, order A B A) at B = 128 and 512.
#   OUT=/path bash eval/h200_round33.sh     # results: $OUT/round33.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round33; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
timeout 90 python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 4 8 --operators kda rwkv6 \
    --prepare-maxnreg 0 64 56 --cycles 4 --out $R/kernel_times.json > $R/kernel_times.log 2>&1
stamp "kernel times rc=$?"
cut -c1-150 $R/kernel_times.log
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for cap in 0 64; do
  timeout 70 $NCU --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats -k regex:_deltalog_kda_prepare --launch-skip 9 --launch-count 1 \
      python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 8 --operators kda --prepare-maxnreg $cap \
      --cycles 0 > $R/ncu_kda_prepare_cap$cap.txt 2>&1
  stamp "ncu cap=$cap rc=$?"
  grep -E "Duration|Registers Per Thread|Waves Per SM|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Issued Ipc|DRAM Throughput|Memory Throughput" \
      $R/ncu_kda_prepare_cap$cap.txt | head -20
done
ab() {  # operator, register cap, tag
  timeout $(( 390 - $(date +%s) + T0 )) python3 -W ignore - "$@" > $R/$1_$3.log 2>&1 <<'PY'
import runpy, sys
sys.path.insert(0, "eval")
import step_kernel_times as skt
op, cap, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with skt.prepare_register_cap(op, cap):
    sys.argv = ["bench_gdn_decode.py", "--operator", op, "--out", f"/tmp/round33/{op}_{tag}", "--tune", "--skip-main",
                "--tune-batches", "128", "512", "--tune-ms", "4", "8", "--tune-only", "{}", "--no-compile",
                "--no-numerics"]
    runpy.run_path("eval/bench_gdn_decode.py", run_name="__main__")
PY
  stamp "$1 cap=$2 ($3) rc=$?"
  python3 - $R/$1_$3/bench_$1_decode.json "$1 cap=$2 ($3)" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("tune", []):
    print(f"  {sys.argv[2]} B={r['B']:4d} M={r['M']} {r.get('amortized_us') or float('nan'):7.1f} us"
          f"  appends {r.get('append_mean_us') or float('nan'):6.1f}  merge {r.get('merge_us') or float('nan'):6.1f}")
PY
}
for op in rwkv6 kda; do
  ab $op 0 a1; ab $op 64 b; ab $op 0 a2
done
stamp done
tar -czf "$OUT/round33.tar.gz" -C $R .
