#!/usr/bin/env bash
# Two H200s (nvidia-h200-x2), about 560 s:
#   GPU 0: eval/h200_issue6.sh (lm-eval parity in bf16 at batch 64, checkpoints trained on the H200);
#   GPU 1: the two-GPU device_map check (its layer 0 and embedding on GPU 0, correctness only), then the
#          Kimi-Linear-48B-A3B TPOT pair at B = 256 with a 576-token prompt (the run of round 3 ran out of time).
# Results: $OUT/round4.tar.gz; the trained checkpoints as $OUT/ckpt_<model>.tgz (each under the 16 MiB file limit).
#
#   OUT=/path bash eval/h200_x2_round4.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round4; rm -rf $R; mkdir -p $R/e2e3/{multi_gpu,tpot_kimi}
T0=$(date +%s); export T0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
pack() {
  tar -czf "$OUT/round4.tar.gz" -C $R --exclude='issue6/checkpoints/*/model.safetensors' . ;
  for m in gdn kda rwkv6; do
    [ -d $R/issue6/checkpoints/$m-shakespeare ] && tar -czf "$OUT/ckpt_$m.tgz" -C $R/issue6/checkpoints $m-shakespeare
  done; true
}
CUDA_VISIBLE_DEVICES=0 OUT=$R bash eval/h200_issue6.sh > $R/issue6.log 2>&1 &
i6=$!
(
  echo "== two-GPU device_map check $(date +%T)"
  timeout 230 python3 eval/multi_gpu_check.py --dtypes float32 --out $R/e2e3/multi_gpu/multi_gpu_check.json \
      > $R/e2e3/multi_gpu/check.log 2>&1
  echo "multi_gpu rc=$?"; grep -v "Loading weights" $R/e2e3/multi_gpu/check.log | tail -12
  echo "== TPOT Kimi-Linear-48B-A3B B=256 $(date +%T)"
  CUDA_VISIBLE_DEVICES=1 timeout $(( 540 - $(date +%s) + T0 )) python3 eval/tpot.py --out $R/e2e3/tpot_kimi \
      --models kimi_linear_48b_a3b --batch-sizes 256 --modes graph --prefill-chunk-tokens 8192 \
      --memory-fraction 0.96 --repeats 3 --new-tokens 32 --record-margins > $R/e2e3/tpot_kimi/tpot.log 2>&1
  echo "tpot kimi rc=$?"; grep -E "TPOT|run |built|Error|error" $R/e2e3/tpot_kimi/tpot.log | tail -6
) > $R/e2e3.log 2>&1 &
e=$!
wait $i6; echo "issue6 rc=$?"; wait $e; echo "e2e3 rc=$?"
pack
echo "---- issue6"; grep -v "Loading weights\|it/s\]" $R/issue6.log | tail -45
echo "---- e2e3"; cat $R/e2e3.log
