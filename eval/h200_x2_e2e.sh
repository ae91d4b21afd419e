#!/usr/bin/env bash
# Two H200s of one host (device kind nvidia-h200-x2): the two-GPU device_map check, then end-to-end TPOT of the two
# full-size architectures side by side, one GPU each (Qwen3.5-35B-A3B on GPU 0, Kimi-Linear-48B-A3B on GPU 1).
# Everything lands in $OUT/x2_e2e.tar.gz (the device returns at most 8 files). About 570 s in all.
#
#   OUT=/path bash eval/h200_x2_e2e.sh
set -u
OUT=${OUT:-/tmp/out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/x2e2e; rm -rf $R; mkdir -p $R/{multi_gpu,tpot_qwen,tpot_kimi}
pack() { tar -czf "$OUT/x2_e2e.tar.gz" -C $R . ; }
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers, fla; print(torch.__version__, triton.__version__, transformers.__version__, fla.__version__)" > $R/versions.txt 2>&1
cat $R/gpu.csv $R/versions.txt

echo "== two-GPU device_map check $(date +%T)"
timeout 100 python3 eval/multi_gpu_check.py --out $R/multi_gpu/multi_gpu_check.json > $R/multi_gpu/check.log 2>&1
echo "multi_gpu rc=$?"; grep -v "Loading weights" $R/multi_gpu/check.log | tail -16; pack

echo "== TPOT, both GPUs in parallel $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 440 python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b \
    --batch-sizes 256 64 128 16 1 --modes graph eager --eager-batch-sizes 1 --eager-new-tokens 16 \
    --repeats 3 --new-tokens 32 --record-margins --time-budget-s 420 > $R/tpot_qwen/tpot.log 2>&1 &
qwen=$!
CUDA_VISIBLE_DEVICES=1 timeout 440 python3 eval/tpot.py --out $R/tpot_kimi --models kimi_linear_48b_a3b \
    --batch-sizes 256 64 128 1 --modes graph \
    --repeats 3 --new-tokens 32 --record-margins --time-budget-s 420 > $R/tpot_kimi/tpot.log 2>&1 &
kimi=$!
wait $qwen; echo "tpot qwen rc=$?"; wait $kimi; echo "tpot kimi rc=$?"
echo "-- qwen"; grep -E "TPOT|run |built|Error|error" $R/tpot_qwen/tpot.log | tail -30
echo "-- kimi"; grep -E "TPOT|run |built|Error|error" $R/tpot_kimi/tpot.log | tail -30
pack
echo "== done $(date +%T)"
