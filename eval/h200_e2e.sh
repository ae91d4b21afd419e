#!/usr/bin/env bash
# H200: end-to-end TPOT of the Qwen3.5-35B-A3B architecture (graph and eager) and the FLA-model generate check;
# results packed into $OUT/e2e.tar.gz (the device returns at most 8 files).
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/e2e; rm -rf $R; mkdir -p $R/{tpot,fla}
pack() { tar -czf "$OUT/e2e.tar.gz" -C $R . ; }
echo "== TPOT $(date +%T)"
timeout 420 python3 -u eval/tpot.py --out $R/tpot --models qwen3_5_35b_a3b --batch-sizes 256 64 1 --repeats 1 \
    --new-tokens 64 --eager-batch-sizes 64 --eager-new-tokens 16 --time-budget-s 390 > $R/tpot/tpot.log 2>&1
echo "tpot rc=$?"; tail -40 $R/tpot/tpot.log; pack
echo "== FLA models generate check $(date +%T)"
timeout 110 python3 -u eval/gpu_generate_check_fla.py --batch 32 --new-tokens 32 --out $R/fla/gpu_generate_check_fla.json \
    > $R/fla/check.log 2>&1
echo "fla rc=$?"; tail -25 $R/fla/check.log; pack
