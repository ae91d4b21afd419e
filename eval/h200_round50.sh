#!/usr/bin/env bash
# One H200, at most ~330 s. Eager-mode TPOT (model.generate, default cache against DeltaLogCache(model)) on the
# Qwen3.5-35B-A3B architecture (random bf16 weights, 1,024-token prompt), B = 1 and 64, 16 new tokens, 3 generate
# calls per cache: the first eager times since the per-forward guard (2026-12-01), which adds host work to every
# dynamic-mode forward, and at B = 64 with the staggered merges the default now picks there (128 MiB per layer, M = 8).
# The earlier eager figures: B = 1 120.58 -> 81.30 ms (one call), B = 64 0.967x (BENCHMARKS.md).
# Ran on 2026-12-01, before commit 35c2ef0 made aligned phases the default (stagger_merges=False).
#   OUT=/path bash eval/h200_round50.sh     # results: $OUT/round50.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round50; rm -rf $R; mkdir -p $R/tpot_eager
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 320 python3 eval/tpot.py --out $R/tpot_eager --models qwen3_5_35b_a3b --batch-sizes 1 64 --modes eager \
    --eager-new-tokens 16 --eager-repeats 3 --profile-steps 0 > $R/tpot_eager/tpot.log 2>&1
echo "tpot rc=$?"; grep -E "TPOT|run |built|wrote" $R/tpot_eager/tpot.log | cut -c1-220
tar -czf "$OUT/round50.tar.gz" -C $R .
