#!/usr/bin/env bash
# Next x2 H200 run (written 2026-11-30, not run yet), about 560 s:
#   GPU 0:     merge-step launch sweep of the three kernels (the merge runs at 1.3-1.4x its floor): the defaults
#              against wider merge tiles, B = 128 and 512, M = 8 (GDN, RWKV6) / 4 (KDA) (<= 300 s); then, on both
#              GPUs, the two-GPU device_map check after the launch_device fix (tokens must be identical in fp32);
#   GPU 1:     Kimi-Linear-48B-A3B TPOT at B = 16, then eval/h200_issue6.sh train (GDN/KDA on transformers'
#              PyTorch recurrences, RWKV6 with 300 s).
# Results: $OUT/round5.tar.gz and $OUT/ckpt_<model>.tgz.
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round5; rm -rf $R; mkdir -p $R/{multi_gpu,merge_gdn,merge_kda,merge_rwkv6,tpot_kimi}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
pack() {
  tar -czf "$OUT/round5.tar.gz" -C $R --exclude='issue6/checkpoints/*/model.safetensors' . ;
  for m in gdn kda rwkv6; do
    [ -d $R/issue6/checkpoints/$m-shakespeare ] && tar -czf "$OUT/ckpt_$m.tgz" -C $R/issue6/checkpoints $m-shakespeare
  done; true
}
MERGE=('{}' '{"merge": {"block_v": 16, "num_warps": 2}}' '{"merge": {"block_v": 32, "num_warps": 4}}'
       '{"merge": {"block_v": 16, "num_warps": 4}}')
(
  for op in gdn:8 kda:4 rwkv6:8; do
    CUDA_VISIBLE_DEVICES=0 timeout 100 python3 eval/bench_gdn_decode.py --operator ${op%:*} --tune --skip-main \
        --no-numerics --no-compile --tune-batches 128 512 --tune-ms ${op#*:} --tune-only "${MERGE[@]}" \
        --out $R/merge_${op%:*} > $R/merge_${op%:*}/bench.log 2>&1
    echo "merge ${op%:*} rc=$?"; grep "tune B=" $R/merge_${op%:*}/bench.log | grep best
  done
  # Both GPUs, after the timed sweep (GPU 1 is training by then: correctness only on both sides).
  timeout 230 python3 eval/multi_gpu_check.py --dtypes float32 --out $R/multi_gpu/multi_gpu_check.json \
      > $R/multi_gpu/check.log 2>&1
  echo "multi_gpu rc=$?"; grep -v "Loading weights" $R/multi_gpu/check.log | tail -10
) > $R/merge.log 2>&1 &
m=$!
(
  CUDA_VISIBLE_DEVICES=1 timeout 200 python3 eval/tpot.py --out $R/tpot_kimi --models kimi_linear_48b_a3b \
      --batch-sizes 16 --modes graph --repeats 3 --new-tokens 32 --record-margins > $R/tpot_kimi/tpot.log 2>&1
  echo "tpot kimi B=16 rc=$?"; grep -E "TPOT|run " $R/tpot_kimi/tpot.log
  CUDA_VISIBLE_DEVICES=1 OUT=$R bash eval/h200_issue6.sh train > $R/issue6.log 2>&1
  echo "issue6 train rc=$?"
) > $R/gpu1.log 2>&1 &
g=$!
wait $m; wait $g; pack
cat $R/merge.log $R/gpu1.log; tail -20 $R/issue6.log
