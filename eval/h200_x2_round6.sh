#!/usr/bin/env bash
# x2 H200 run of 2026-11-30 (second call of the day), at most ~560 s of wall time. What round 5 left unfinished:
#   GPU 0 (timed runs only): Kimi-Linear-48B-A3B graph-mode TPOT at B = 16 (128 timed decode steps), then, on both
#              GPUs, the two-GPU device_map check of the KDA checkpoint (round 5 checked GDN: 100 % identical);
#   GPU 1:     the RWKV6 checkpoint trained on the H200 with 200 s of training (round 5's 60 s left it at 0.64 of the
#              unigram perplexity; bound 0.5), beside lm-eval parity of the committed RWKV6 checkpoint
#              (eval/checkpoints/rwkv6-shakespeare) at batch 64: bf16 with DeltaLogCache's defaults, then bf16 with
#              M = 8 forced; fp32 with M = 8 beside them (the CPU's fp32 run takes minutes per document under the
#              Triton interpreter).
# Results: $OUT/round6.tar.gz (logs, JSON, CSV; checkpoint weights left out) and $OUT/ckpt_rwkv6.tgz.
#   OUT=/path bash eval/h200_x2_round6.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round6; rm -rf $R; mkdir -p $R/{multi_gpu,tpot_kimi_b16,train,parity}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 \
  TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
(
  stamp "kimi B=16"
  CUDA_VISIBLE_DEVICES=0 timeout 250 python3 eval/tpot.py --out $R/tpot_kimi_b16 --models kimi_linear_48b_a3b \
      --batch-sizes 16 --modes graph --repeats 4 --new-tokens 32 --record-margins > $R/tpot_kimi_b16/tpot.log 2>&1
  stamp "kimi B=16 rc=$?"; grep -E "TPOT|run " $R/tpot_kimi_b16/tpot.log
  timeout 210 python3 eval/multi_gpu_check.py --checkpoints kda --dtypes float32 --new-tokens 32 \
      --out $R/multi_gpu/multi_gpu_check_kda.json > $R/multi_gpu/check_kda.log 2>&1
  stamp "multi_gpu kda rc=$?"; grep -v "Loading weights" $R/multi_gpu/check_kda.log | tail -8
) > $R/gpu0.log 2>&1 &
a=$!
(
  stamp "train rwkv6"
  CUDA_VISIBLE_DEVICES=1 timeout 280 python3 -u eval/train_tiny.py train --model rwkv6 --time-budget 200 --warmup 20 \
      --eval-every 20 --out $R/train/rwkv6-shakespeare > $R/train/train_rwkv6.log 2>&1
  stamp "train rwkv6 rc=$?"; tail -3 $R/train/train_rwkv6.log
) > $R/gpu1_train.log 2>&1 &
b=$!
(
  for run in "default_m" "m8 --merge-interval 8"; do
    set -- $run
    name=$1; shift
    stamp "parity rwkv6 $name"
    CUDA_VISIBLE_DEVICES=1 timeout 255 python3 -u eval/lm_eval_parity.py --device cuda --dtype bfloat16 --batch-size 64 \
        --quiet --pretrained eval/checkpoints/rwkv6-shakespeare "$@" --out $R/parity/rwkv6_$name \
        > $R/parity/rwkv6_$name.log 2>&1
    stamp "parity rwkv6 $name rc=$?"; cat $R/parity/rwkv6_$name/parity.md 2>/dev/null
  done
) > $R/gpu1_parity.log 2>&1 &
c=$!
(
  stamp "parity rwkv6 fp32 m8"
  CUDA_VISIBLE_DEVICES=1 timeout 300 python3 -u eval/lm_eval_parity.py --device cuda --dtype float32 --batch-size 64 \
      --quiet --pretrained eval/checkpoints/rwkv6-shakespeare --merge-interval 8 --out $R/parity/rwkv6_fp32_m8 \
      > $R/parity/rwkv6_fp32_m8.log 2>&1
  stamp "parity rwkv6 fp32 m8 rc=$?"; cat $R/parity/rwkv6_fp32_m8/parity.md 2>/dev/null
) > $R/gpu1_parity_fp32.log 2>&1 &
d=$!
wait $a; wait $b; wait $c; wait $d
tar -czf "$OUT/round6.tar.gz" -C $R --exclude='train/*/model.safetensors' .
[ -d $R/train/rwkv6-shakespeare ] && tar -czf "$OUT/ckpt_rwkv6.tgz" -C $R/train rwkv6-shakespeare
cat $R/gpu0.log $R/gpu1_train.log $R/gpu1_parity.log $R/gpu1_parity_fp32.log
