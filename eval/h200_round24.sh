#!/usr/bin/env bash
# One H200, at most ~560 s. KDA and RWKV6 merges: the prepare kernel now writes the merge's decayed keys
# exp(l' - L_i) * k_i (once per head) into the stale decay slots, and the decode kernel's merge loop reads one
# [K] vector per entry instead of exponentiating an exponent vector and re-reading the key in each of the head's
# value-tile programs. Same-GPU A/B against the tree before the change (.ab/r24base = commit of round 23), one
# process per version, two passes of opposite order, B = 128 / 512, M = 4 / 8, V-first (FLA in the same runs).
#   OUT=/path bash eval/h200_round24.sh     # results: $OUT/round24.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round24; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
ab() {  # operator, version (cur | r24base), pass
  local op=$1 ver=$2 pass=$3 root=$PWD
  [ $ver = r24base ] && root=$PWD/.ab/r24base
  local left=$(( 550 - $(date +%s) + T0 ))
  [ $left -lt 40 ] && { stamp "$op $ver pass $pass skipped"; return; }
  stamp "$op $ver pass $pass"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $left python3 -W ignore eval/bench_gdn_decode.py --operator $op \
      --out $R/${op}_${ver}_p$pass --batches 128 512 --ms 4 8 --layouts VK --no-compile --no-numerics \
      > $R/${op}_${ver}_p$pass.log 2>&1)
  stamp "$op $ver pass $pass rc=$?"
  grep -E "^ +(128|512) +(deltalog|fla_)" $R/${op}_${ver}_p$pass.log | head -12
}
for op in kda rwkv6; do ab $op r24base 1; ab $op cur 1; done
for op in rwkv6 kda; do ab $op cur 2; ab $op r24base 2; done
stamp done
tar -czf "$OUT/round24.tar.gz" -C $R .
