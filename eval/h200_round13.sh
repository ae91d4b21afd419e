#!/usr/bin/env bash
# x2 H200 run of 2026-11-30, at most ~570 s of wall time. Round 12 found that evict_first on the base
# loads speeds up appends at B = 128 only where the log fits the L2 (GDN M = 8: 84.6 -> 76.0 µs; M = 16: no gain):
# with the base marked evict-first, the log written at one step can stay in the L2 until the next step of the same
# set, which a model (other layers between two steps of one layer) does not allow. This run repeats the A/B with at
# least 8 rotated sets (--min-sets 8), so that between two steps of one set the other sets' logs pass through the L2:
#   "cur"    = commit fcf6729 (.ab/cur),
#   "mexp"   = this tree (KDA / RWKV6 merges read exponents the prepare kernel wrote into the stale decay slots),
#   "evict2" = "mexp" plus eviction_policy="evict_first" on the decode kernels' base-tile loads (.ab/evict2).
# B = 128 and 512, V-first, no compile, no numerics; one process per version; GDN twice in opposite orders.
#   OUT=/path bash eval/h200_round13.sh     # results: $OUT/round13.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round13; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
ab() {  # operator, version, pass, M values...
  local op=$1 ver=$2 pass=$3; shift 3
  local root=$PWD left=$(( 565 - $(date +%s) + T0 ))
  [ "$ver" != mexp ] && root=$PWD/.ab/$ver
  [ $left -lt 70 ] && { stamp "$op $ver pass $pass skipped (${left}s left)"; return; }
  stamp "$op $ver pass $pass"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout $(( left < 110 ? left : 110 )) python3 eval/bench_gdn_decode.py \
      --operator $op --out $R/${op}_${ver}_p$pass --batches 128 512 --ms "$@" --layouts VK --no-compile --no-numerics \
      --min-sets 8 > $R/${op}_${ver}_p$pass.log 2>&1)
  stamp "$op $ver pass $pass rc=$?"
  grep -E "rotated|^ +(128|512) (deltalog +VK|fla_vfirst|fla_kfirst)" $R/${op}_${ver}_p$pass.log
}
(
  export CUDA_VISIBLE_DEVICES=0
  for v in cur evict2; do ab gdn $v 1 8 16; done
  for v in cur mexp evict2; do ab kda $v 1 4 8; done
  for v in evict2 cur; do ab gdn $v 2 8 16; done
) > $R/gpu0.log 2>&1 &
a=$!
(
  export CUDA_VISIBLE_DEVICES=1
  for v in cur mexp evict2; do ab rwkv6 $v 1 4 8; done
  for v in evict2 mexp cur; do ab kda $v 2 4 8; done
  for v in evict2 mexp cur; do ab rwkv6 $v 2 4 8; done
) > $R/gpu1.log 2>&1 &
b=$!
wait $a $b
cat $R/gpu0.log $R/gpu1.log
tar -czf "$OUT/round13.tar.gz" -C $R .
