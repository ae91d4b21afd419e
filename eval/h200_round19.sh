#!/usr/bin/env bash
# One H200, at most ~150 s: Nsight Compute on the GDN decode kernel at B = 128, M = 8 (an append step at L = 3 and a
# merge step; eval/profile_gdn_kernel.py), for the kept kernel (the tree of the run: merge prefetch + 64-register
# cap) and for commit 250ee82 (.ab/r16base). Registers per thread, theoretical and achieved occupancy, DRAM and L2
# throughput, duration: does the cap raise the resident programs per SM, as BENCHMARKS.md supposes?
#   OUT=/path bash eval/h200_round19.sh     # results: $OUT/round19/
set -u
OUT=${OUT:-/tmp/out}
R=$OUT/round19; mkdir -p $R
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-not found}"
[ -z "$NCU" ] && exit 1
for ver in kept r16base; do
  root=$PWD; [ $ver = r16base ] && root=$PWD/.ab/r16base
  (cd $root && PYTHONPATH=/tmp/site:$root timeout 60 $NCU --clock-control none --section SpeedOfLight \
      --section Occupancy --section LaunchStats -k regex:_deltalog_gdn_decode \
      python3 $OLDPWD/eval/profile_gdn_kernel.py --batch 128 --merge-interval 8) > $R/ncu_$ver.txt 2>&1
  echo "== $ver rc=$?"
  grep -E "_deltalog_gdn_decode_kernel|DRAM Throughput|Duration|L2 Cache Throughput|Registers Per Thread|Theoretical Occupancy|Achieved Occupancy|Block Limit Registers|Block Limit Warps" $R/ncu_$ver.txt
done
