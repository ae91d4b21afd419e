#!/usr/bin/env bash
# x2 H200 run of 2026-11-30 (later), at most ~540 s of wall time. Round 16 found that loading all log slots without
# waiting for L ("eager") costs the appends, and that the decode kernel compiled under maxnreg = 64 was faster at
# GDN M = 8. This run separates the register cap from the other changes, all on top of commit 250ee82
# ("r16base"; .ab/r16base):
#   "reg"    = the three decode kernels compiled under maxnreg = 64 (.ab/reg),
#   "pfreg2" = "reg" plus the merge loop's loads running one entry ahead (.ab/pfreg2),
#   "regev"  = "reg" plus eviction_policy="evict_first" on the GDN decode kernel's base-tile loads (.ab/regev).
# First the decode kernels' registers and spills as the device's Triton compiles them (eval/kernel_resources.py).
# GPU 0: GDN (M = 8, 16), two passes of opposite order. GPU 1: KDA and RWKV6 (M = 4, 8), first passes of
# r16base / reg / pfreg2, then second passes of reg / r16base.
#   OUT=/path bash eval/h200_round17.sh     # results: $OUT/round17.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round17; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
for v in r16base reg; do
  for op in gdn kda rwkv6; do
    cap=0; [ $v = reg ] && cap=64
    MAXNREG=$cap PYTHONPATH=/tmp/site:$PWD/.ab/$v timeout 60 python3 -W ignore eval/kernel_resources.py --operator $op \
        --configs 0,8,VK,1 3,8,VK,1 7,8,VK,1 15,8,VK,1 2>&1 | sed "s/^/$v maxnreg=$cap /"
  done
done > $R/resources.txt 2>&1
cat $R/resources.txt
ab() {  # operator, version, pass, M values...
  local op=$1 ver=$2 pass=$3; shift 3
  local root=$PWD/.ab/$ver left=$(( 530 - $(date +%s) + T0 ))
  [ $left -lt 40 ] && { stamp "$op $ver pass $pass skipped"; return; }
  stamp "$op $ver pass $pass"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $left python3 eval/bench_gdn_decode.py --operator $op \
      --out $R/${op}_${ver}_p$pass --batches 128 512 --ms "$@" --layouts VK --no-compile --no-numerics \
      > $R/${op}_${ver}_p$pass.log 2>&1)
  stamp "$op $ver pass $pass rc=$?"; grep -E "^\[.*B=.*fla_vfirst VK [0-9]" $R/${op}_${ver}_p$pass.log
}
(
  export CUDA_VISIBLE_DEVICES=0
  for v in r16base reg pfreg2 regev; do ab gdn $v 1 8 16; done
  for v in regev pfreg2 reg r16base; do ab gdn $v 2 8 16; done
) > $R/gpu0.log 2>&1 &
a=$!
(
  export CUDA_VISIBLE_DEVICES=1
  for op in kda rwkv6; do for v in r16base reg pfreg2; do ab $op $v 1 4 8; done; done
  for op in kda rwkv6; do for v in reg r16base; do ab $op $v 2 4 8; done; done
) > $R/gpu1.log 2>&1 &
b=$!
wait $a $b
cat $R/gpu0.log $R/gpu1.log
tar -czf "$OUT/round17.tar.gz" -C $R .
