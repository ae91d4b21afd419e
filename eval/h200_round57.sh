#!/usr/bin/env bash
# One H200, at most ~300 s. The landed code after the lara_mini review fixes: (1) the GPU guard check (23 cases);
# (2) LaraMini fp32 generate, B = 64, policy M, with past recording on (transformers' GDN layers then hand q, k, v to
# the Triton kernel as strided views, which the kernel refused before this change) and --graph (the eager loop
# against the reference; the captured run must now be refused); (3) the Qwen3.5 architecture, B = 64, fp32, default.
#   OUT=/path bash eval/h200_round57.sh     # results: $OUT/round57.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round57; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
( timeout 280 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?" ) &
( timeout 200 python3 eval/gpu_generate_check.py --families lara_mini --runs 64 --dtypes float32 --past-recording \
    --graph --sliding-window 16 --out $R/lara.json > $R/lara.log 2>&1; echo "lara rc=$?"
  timeout 150 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 --dtypes float32 \
    --out $R/qwen.json > $R/qwen.log 2>&1; echo "qwen rc=$?" ) &
wait
for f in lara qwen; do echo "--- $f"; grep -E "^\{|Error" $R/$f.log | cut -c1-900; done
echo "--- guard"; tail -5 $R/guard.log | cut -c1-300
tar -czf "$OUT/round57.tar.gz" -C $R .
