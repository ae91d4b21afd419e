#!/usr/bin/env bash
# After eval/h200_x2_e2e.sh, on whatever GPU(s) CUDA_VISIBLE_DEVICES shows; results under $R (default $OUT/e2e2):
#   multi  the two-GPU device_map check (needs two GPUs; ~60 s)
#   tpot   one GPU, one model after the other (~450 s):
#          - Qwen3.5-35B-A3B at B = 1 and 64 (after the shared decode-step counter; a rounding control at B = 64: the
#            static baseline against itself with the prompt prefilled in other chunks);
#          - Kimi-Linear-48B-A3B at B = 256 with a longer prompt than the first run could plan (8,192-token prefill
#            chunks, 96 % of the memory) and B = 64 with the same control.
#
#   OUT=/path bash eval/h200_x2_e2e_followup.sh multi
#   CUDA_VISIBLE_DEVICES=1 OUT=/path bash eval/h200_x2_e2e_followup.sh tpot
set -u
OUT=${OUT:-/tmp/out}
R=${R:-$OUT/e2e2}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p $R/{multi_gpu,tpot_qwen,tpot_kimi}
case "${1:-}" in
multi)
  echo "== two-GPU device_map check $(date +%T)"
  timeout 100 python3 eval/multi_gpu_check.py --out $R/multi_gpu/multi_gpu_check.json > $R/multi_gpu/check.log 2>&1
  echo "multi_gpu rc=$?"; grep -v "Loading weights" $R/multi_gpu/check.log | tail -20
  ;;
tpot)
  echo "== TPOT Qwen3.5-35B-A3B $(date +%T)"
  timeout 200 python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b --batch-sizes 1 64 --modes graph \
      --control-batch-sizes 64 --repeats 3 --new-tokens 32 --record-margins --time-budget-s 190 \
      > $R/tpot_qwen/tpot.log 2>&1
  echo "tpot qwen rc=$?"; grep -E "TPOT|run |built|Error|error" $R/tpot_qwen/tpot.log | tail -12
  echo "== TPOT Kimi-Linear-48B-A3B $(date +%T)"
  timeout 250 python3 eval/tpot.py --out $R/tpot_kimi --models kimi_linear_48b_a3b --batch-sizes 256 64 \
      --modes graph --control-batch-sizes 64 --prefill-chunk-tokens 8192 --memory-fraction 0.96 \
      --repeats 3 --new-tokens 32 --record-margins --time-budget-s 240 > $R/tpot_kimi/tpot.log 2>&1
  echo "tpot kimi rc=$?"; grep -E "TPOT|run |built|Error|error" $R/tpot_kimi/tpot.log | tail -12
  ;;
*) echo "usage: $0 multi|tpot" >&2; exit 2 ;;
esac
echo "== done $(date +%T)"
