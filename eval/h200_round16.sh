#!/usr/bin/env bash
# x2 H200 run of 2026-11-30 (later), at most ~560 s of wall time. Same-GPU A/B of four versions of the three decode
# kernels, one process per version (B = 128 and 512, V-first, no compile, no numerics):
#   "r16base" = commit 250ee82 (the kernels of BENCHMARKS.md; .ab/r16base),
#   "eager"   = the decode kernels load all C log slots (the u / v factors and their coefficients) without waiting for
#               the phase L, and zero the stale ones with tl.where, so those loads overlap the base tile's instead of
#               starting one round trip after it (.ab/eager),
#   "pf"      = "eager" plus the merge loop's loads running one entry ahead (.ab/pf),
#   "pfreg"   = "pf" with the decode kernel compiled under maxnreg = 64 (32 one-warp programs per SM) (.ab/pfreg).
# GPU 0: GDN (M = 8, 16) in two passes of opposite order, then RWKV6's second pass. GPU 1: KDA (M = 4, 8) and RWKV6
# (M = 4, 8) first passes, then KDA's second pass.
#   OUT=/path bash eval/h200_round16.sh     # results: $OUT/round16.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round16; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
ab() {  # operator, version, pass, M values...
  local op=$1 ver=$2 pass=$3; shift 3
  local root=$PWD/.ab/$ver left=$(( 555 - $(date +%s) + T0 ))
  [ $left -lt 45 ] && { stamp "$op $ver pass $pass skipped"; return; }
  stamp "$op $ver pass $pass"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $left python3 eval/bench_gdn_decode.py --operator $op \
      --out $R/${op}_${ver}_p$pass --batches 128 512 --ms "$@" --layouts VK --no-compile --no-numerics \
      > $R/${op}_${ver}_p$pass.log 2>&1)
  stamp "$op $ver pass $pass rc=$?"; grep -E "^\[.*B=.*fla_vfirst VK [0-9]" $R/${op}_${ver}_p$pass.log
}
(
  export CUDA_VISIBLE_DEVICES=0
  for v in r16base eager pf pfreg; do ab gdn $v 1 8 16; done
  for v in pfreg pf eager r16base; do ab gdn $v 2 8 16; done
  for v in pfreg pf eager r16base; do ab rwkv6 $v 2 4 8; done
) > $R/gpu0.log 2>&1 &
a=$!
(
  export CUDA_VISIBLE_DEVICES=1
  for v in r16base eager pf pfreg; do ab kda $v 1 4 8; done
  for v in r16base eager pf pfreg; do ab rwkv6 $v 1 4 8; done
  for v in pfreg pf eager r16base; do ab kda $v 2 4 8; done
) > $R/gpu1.log 2>&1 &
b=$!
wait $a $b
cat $R/gpu0.log $R/gpu1.log
tar -czf "$OUT/round16.tar.gz" -C $R .
