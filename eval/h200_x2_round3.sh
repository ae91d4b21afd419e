#!/usr/bin/env bash
# Two H200s (nvidia-h200-x2), about 560 s: the two-GPU device_map check, then side by side
#   GPU 0: eval/h200_round3_kernels.sh (RWKV6 benchmark + numerics, FLA-model and Kimi-Linear generate checks, sweeps)
#   GPU 1: eval/h200_x2_e2e_followup.sh tpot (TPOT follow-up of both full-size architectures)
# Everything is packed into $OUT/round3.tar.gz (the device returns at most 8 files).
#
#   OUT=/path bash eval/h200_x2_round3.sh
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round3; rm -rf $R; mkdir -p $R
pack() { tar -czf "$OUT/round3.tar.gz" -C $R . ; }
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers, fla; print(torch.__version__, triton.__version__, transformers.__version__, fla.__version__)" > $R/versions.txt 2>&1
cat $R/gpu.csv $R/versions.txt
R=$R/e2e2 bash eval/h200_x2_e2e_followup.sh multi; pack
CUDA_VISIBLE_DEVICES=0 BUDGET=${BUDGET:-470} OUT=$R bash eval/h200_round3_kernels.sh > $R/kernels3.log 2>&1 &
k=$!
CUDA_VISIBLE_DEVICES=1 R=$R/e2e2 bash eval/h200_x2_e2e_followup.sh tpot > $R/e2e2.log 2>&1 &
e=$!
wait $k; echo "kernels3 rc=$?"; wait $e; echo "e2e2 rc=$?"
pack
echo "---- kernels3"; tail -60 $R/kernels3.log
echo "---- e2e2"; cat $R/e2e2.log
