#!/usr/bin/env bash
# One H200, at most ~330 s. After the 57th review's fixes (past recording pads a prompt shorter than the conv window;
# a crop into a short history pads its window; the 58th review's: a recording static cache masks its empty slots, a
# second crop into a short history): the GPU guard check as in rounds 65-70; beside it, FLA's models with a 65-token
# prompt (FLA's layers prefill more than 64 tokens in chunk mode, whose kernels fail under the CPU's Triton
# interpreter at any length), GatedDeltaNet, KDA and RWKV6, fp32, B = 8, M = 4, 12 new tokens.
#   OUT=/path bash eval/h200_round72.sh     # results: $OUT/round72.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round72; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=6
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" > $R/versions.txt 2>&1
( timeout 320 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?" > $R/guard.rc ) &
( timeout 320 python3 eval/gpu_generate_check_fla.py --families gated_deltanet kda rwkv6 --dtypes float32 --runs 8:4 \
      --new-tokens 12 --prompt-length 65 --out $R/fla_prompt65.json > $R/fla_prompt65.log 2>&1
  echo "fla rc=$?" > $R/fla.rc ) &
wait
cat $R/guard.rc $R/fla.rc
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
echo "--- fla"; grep -E "^\{|max \|dlogit\|" $R/fla_prompt65.log | cut -c1-500; tail -3 $R/fla_prompt65.log | cut -c1-300
cat $R/versions.txt
tar -czf "$OUT/round72.tar.gz" -C $R .
