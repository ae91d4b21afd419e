#!/usr/bin/env bash
# One H200 (or GPU 0 of an x2 machine), 2026-11-30, at most ~300 s: same-GPU A/B of the KDA and RWKV6 prepare kernels
# after round 8 showed their appends at M = 8 slower than in the timings of 2026-11-29 (KDA 89.1 -> 101.1 µs,
# RWKV6 84.1 -> 89.7 µs at B = 128) while GDN's same-GPU A/B found no cost of the decay-precision fix:
#   "prefix" = commit b9493e6 (before the decay-precision fix: exp(l - Lambda_i) over a [C, K] tile),
#   "cumsum" = commit 757bbed (the fix as first written: a reverse tl.cumsum over the shifted [C, K] decay tile),
#   "loop"   = the working tree of the run: the same sums as an unrolled newest-first loop over the C key rows, no
#              scan. It measured within 1 % of "cumsum" and was not kept, so today this tree is "cumsum" and the
#              script re-times that version twice (results/h200/round11/ holds the run as made).
# One process per version, back to back: B = 128 and 512, M = 4 and 8, V-first, no numerics.
#   OUT=/path bash eval/h200_round11.sh     # results: $OUT/round11.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round11; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
for op in kda rwkv6; do
  for ver in loop cumsum prefix; do
    root=$PWD; [ "$ver" != loop ] && root=$PWD/.ab/$ver
    stamp "$op $ver"
    (cd $root && PYTHONPATH=/tmp/site:$root timeout 60 python3 eval/bench_gdn_decode.py --operator $op \
        --out $R/${op}_$ver --batches 128 512 --ms 4 8 --layouts VK --no-compile --no-numerics > $R/${op}_$ver.log 2>&1)
    stamp "$op $ver rc=$?"; grep -E "^\[.*B=.*fla" $R/${op}_$ver.log
  done
done
tar -czf "$OUT/round11.tar.gz" -C $R .
