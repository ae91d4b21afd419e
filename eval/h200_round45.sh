#!/usr/bin/env bash
# One H200, at most ~470 s. TPOT re-time with the current kernels (round 9, 2026-11-30, predates the KDA slot-loop
# prepare kernel of round 36 and the edge fixes of round 34): graph mode, 128 timed decode steps (4 blocks of 32 in
# one generation), the same commands as round 9 run one after the other on one GPU:
#   Qwen3.5-35B-A3B at B = 256 and 64; Kimi-Linear-48B-A3B at B = 256 (576-token prompt).
#   OUT=/path bash eval/h200_round45.sh     # results: $OUT/round45.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round45; rm -rf $R; mkdir -p $R/{tpot_qwen,tpot_kimi_b256}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
left() { echo $(( ${1} - $(date +%s) + T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 250 python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b --batch-sizes 256 64 --modes graph \
    --repeats 4 --new-tokens 32 --record-margins > $R/tpot_qwen/tpot.log 2>&1
stamp "qwen rc=$?"; grep -E "TPOT|run " $R/tpot_qwen/tpot.log | cut -c1-220
tar -czf "$OUT/round45.tar.gz" -C $R .  # again at the end: what finished comes back if the call is cut
timeout $(left 460) python3 eval/tpot.py --out $R/tpot_kimi_b256 --models kimi_linear_48b_a3b --batch-sizes 256 \
    --modes graph --prefill-chunk-tokens 8192 --memory-fraction 0.96 --repeats 4 --new-tokens 32 --record-margins \
    > $R/tpot_kimi_b256/tpot.log 2>&1
stamp "kimi rc=$?"; grep -E "TPOT|run " $R/tpot_kimi_b256/tpot.log | cut -c1-220
tar -czf "$OUT/round45.tar.gz" -C $R .
