#!/usr/bin/env bash
# One H200, 2026-11-30 (third call of the day; no x2 machine was available), at most ~400 s of wall time:
#   1. Qwen3.5-35B-A3B graph-mode TPOT at B = 64 over 128 timed decode steps (round 5's run of it ran out of time),
#      alone on the GPU;
#   2. then side by side: the trained KDA checkpoint through the same graph loop (M = 4 forced, as the GDN one was run
#      with M = 8; tokens matter here, its timings share the GPU), and lm-eval parity of the committed RWKV6
#      checkpoint in fp32 with M = 8 forced on the first 50 documents of each task (its first batch is mostly FLA's
#      Triton compilation on this machine's Triton 3.6).
# Results: $OUT/round7.tar.gz.   OUT=/path bash eval/h200_round7.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round7; rm -rf $R; mkdir -p $R/{tpot_qwen_b64,tpot_trained_kda,parity}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
stamp "qwen B=64"
timeout 170 python3 eval/tpot.py --out $R/tpot_qwen_b64 --models qwen3_5_35b_a3b \
    --batch-sizes 64 --modes graph --repeats 4 --new-tokens 32 --record-margins > $R/tpot_qwen_b64/tpot.log 2>&1
stamp "qwen B=64 rc=$?"; grep -E "TPOT|run " $R/tpot_qwen_b64/tpot.log
(
  timeout 100 python3 eval/tpot.py --out $R/tpot_trained_kda \
      --models kda_shakespeare=eval/checkpoints/kda-shakespeare --batch-sizes 256 16 1 --modes graph --new-tokens 64 \
      --prompt-len 256 --repeats 1 --merge-interval 4 --profile-steps 0 > $R/tpot_trained_kda/tpot.log 2>&1
  stamp "trained kda rc=$?"; grep -E "TPOT|run " $R/tpot_trained_kda/tpot.log
) > $R/kda.log 2>&1 &
a=$!
stamp "parity rwkv6 fp32 m8"
timeout 220 python3 -u eval/lm_eval_parity.py --device cuda --batch-size 64 --limit 50 --quiet --dtype float32 \
    --merge-interval 8 --pretrained eval/checkpoints/rwkv6-shakespeare --out $R/parity/rwkv6_fp32_m8 \
    > $R/parity/rwkv6_fp32_m8.log 2>&1
stamp "parity rwkv6 fp32 m8 rc=$?"; cat $R/parity/rwkv6_fp32_m8/parity.md 2>/dev/null
wait $a; cat $R/kda.log
tar -czf "$OUT/round7.tar.gz" -C $R .
