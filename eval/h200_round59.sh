#!/usr/bin/env bash
# One H200, at most ~330 s. The landed code after the twenty-second and twenty-third reviews' fixes (graph_generate
# refuses generation_config options it does not apply and accepts those that cannot act; the room check counts a
# BOS-only prompt; use_cache=False with inputs_embeds is served): (1) the GPU guard check (30 cases); (2) the Qwen3.5
# architecture, B = 64, fp32, with --graph (graph_generate eager and captured on a static DeltaLogCache, against the
# default cache's generate).
#   OUT=/path bash eval/h200_round59.sh     # results: $OUT/round59.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round59; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
( timeout 300 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?" ) &
( timeout 300 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 --dtypes float32 --graph \
    --out $R/qwen.json > $R/qwen.log 2>&1; echo "qwen rc=$?" ) &
wait
echo "--- qwen"; grep -E "^\{|Error" $R/qwen.log | cut -c1-1200
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-400; tail -2 $R/guard.log | cut -c1-300
tar -czf "$OUT/round59.tar.gz" -C $R .
