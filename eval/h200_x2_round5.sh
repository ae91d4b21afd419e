#!/usr/bin/env bash
# x2 H200 run of 2026-11-30 (first call of the day), at most ~570 s of wall time:
#   GPU 0 (timed runs only): Qwen3.5-35B-A3B graph-mode TPOT at B = 256 and 64 over 128 timed decode steps
#              (4 blocks of 32 in one generation), then Kimi-Linear-48B-A3B at B = 16 (the row still missing), then,
#              on both GPUs, the two-GPU device_map check after the launch_device fix (fp32: tokens must be identical);
#   GPU 1:     eval/h200_issue6.sh train: the three tiny checkpoints trained on the H200 (GDN and KDA on
#              transformers' PyTorch recurrences, RWKV6 on FLA's PyTorch references; 60 s of training each after
#              the first step). The two-GPU check overlaps its end: it checks tokens, not time.
# Results: $OUT/round5.tar.gz (logs, JSON, CSV; checkpoint weights left out) and $OUT/ckpt_<model>.tgz.
#   OUT=/path bash eval/h200_x2_round5.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round5; rm -rf $R; mkdir -p $R/{multi_gpu,tpot_qwen_128,tpot_kimi_b16}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
pack() {
  tar -czf "$OUT/round5.tar.gz" -C $R --exclude='issue6/checkpoints/*/model.safetensors' . ;
  for m in gdn kda rwkv6; do
    [ -d $R/issue6/checkpoints/$m-shakespeare ] && tar -czf "$OUT/ckpt_$m.tgz" -C $R/issue6/checkpoints $m-shakespeare
  done; true
}
(
  stamp "qwen B=256,64"
  CUDA_VISIBLE_DEVICES=0 timeout 230 python3 eval/tpot.py --out $R/tpot_qwen_128 --models qwen3_5_35b_a3b \
      --batch-sizes 256 64 --modes graph --repeats 4 --new-tokens 32 --record-margins > $R/tpot_qwen_128/tpot.log 2>&1
  stamp "qwen rc=$?"; grep -E "TPOT|run " $R/tpot_qwen_128/tpot.log
  CUDA_VISIBLE_DEVICES=0 timeout 130 python3 eval/tpot.py --out $R/tpot_kimi_b16 --models kimi_linear_48b_a3b \
      --batch-sizes 16 --modes graph --repeats 4 --new-tokens 32 --record-margins > $R/tpot_kimi_b16/tpot.log 2>&1
  stamp "kimi B=16 rc=$?"; grep -E "TPOT|run " $R/tpot_kimi_b16/tpot.log
  timeout 190 python3 eval/multi_gpu_check.py --dtypes float32 --new-tokens 32 \
      --out $R/multi_gpu/multi_gpu_check.json > $R/multi_gpu/check.log 2>&1
  stamp "multi_gpu rc=$?"; grep -v "Loading weights" $R/multi_gpu/check.log | tail -12
) > $R/gpu0.log 2>&1 &
a=$!
(
  CUDA_VISIBLE_DEVICES=1 OUT=$R bash eval/h200_issue6.sh train > $R/issue6.log 2>&1
  stamp "issue6 train rc=$?"
) > $R/gpu1.log 2>&1 &
b=$!
wait $a; wait $b; pack
cat $R/gpu0.log $R/gpu1.log; grep -E "==|test perplexity|steps in" $R/issue6.log | tail -30
