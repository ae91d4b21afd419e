#!/usr/bin/env bash
# x2 H200 run of 2026-11-30 (TPOT re-time after the decay-precision fix and the GDN prepare kernel's hoisted loads),
# at most ~560 s of wall time; graph mode, 128 timed decode steps (4 blocks of 32 in one generation) per run:
#   GPU 0: Qwen3.5-35B-A3B at B = 256 and 64 (the targets), then the trained GDN checkpoint (tokens);
#   GPU 1: Kimi-Linear-48B-A3B at B = 256 (576-token prompt, as before: the MLA cache of a 1,024-token prompt does not
#          fit beside the weights), then the trained KDA checkpoint (tokens; its run ran out of time before).
# Results: $OUT/round9.tar.gz.   OUT=/path bash eval/h200_round9.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round9; rm -rf $R; mkdir -p $R/{tpot_qwen,tpot_kimi_b256,tpot_trained_gdn,tpot_trained_kda}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
left() { echo $(( ${1} - $(date +%s) + T0 )); }
(
  export CUDA_VISIBLE_DEVICES=0
  stamp "qwen B=256,64"
  timeout 380 python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b --batch-sizes 256 64 --modes graph \
      --repeats 4 --new-tokens 32 --record-margins > $R/tpot_qwen/tpot.log 2>&1
  stamp "qwen rc=$?"; grep -E "TPOT|run " $R/tpot_qwen/tpot.log
  timeout $(left 545) python3 eval/tpot.py --out $R/tpot_trained_gdn \
      --models gdn_shakespeare=eval/checkpoints/gdn-shakespeare --batch-sizes 256 16 1 --modes graph --new-tokens 64 \
      --prompt-len 256 --repeats 1 --merge-interval 8 --profile-steps 0 > $R/tpot_trained_gdn/tpot.log 2>&1
  stamp "trained gdn rc=$?"; grep -E "TPOT|run " $R/tpot_trained_gdn/tpot.log
) > $R/gpu0.log 2>&1 &
a=$!
(
  export CUDA_VISIBLE_DEVICES=1
  stamp "kimi B=256"
  timeout 260 python3 eval/tpot.py --out $R/tpot_kimi_b256 --models kimi_linear_48b_a3b --batch-sizes 256 \
      --modes graph --prefill-chunk-tokens 8192 --memory-fraction 0.96 --repeats 4 --new-tokens 32 --record-margins \
      > $R/tpot_kimi_b256/tpot.log 2>&1
  stamp "kimi rc=$?"; grep -E "TPOT|run " $R/tpot_kimi_b256/tpot.log
  timeout $(left 545) python3 eval/tpot.py --out $R/tpot_trained_kda \
      --models kda_shakespeare=eval/checkpoints/kda-shakespeare --batch-sizes 256 16 1 --modes graph --new-tokens 64 \
      --prompt-len 256 --repeats 1 --merge-interval 4 --profile-steps 0 > $R/tpot_trained_kda/tpot.log 2>&1
  stamp "trained kda rc=$?"; grep -E "TPOT|run " $R/tpot_trained_kda/tpot.log
) > $R/gpu1.log 2>&1 &
b=$!
wait $a; wait $b
tar -czf "$OUT/round9.tar.gz" -C $R .
cat $R/gpu0.log $R/gpu1.log
