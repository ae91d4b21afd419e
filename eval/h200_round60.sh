#!/usr/bin/env bash
# One H200, at most ~330 s. The landed code after the twenty-fifth and twenty-sixth reviews' fixes (a static cache
# under past recording is not compileable; a compiled forward's prefill; reads of a static cache; fp32 references
# under autocast; the backend planned from the model's dtype): the GPU guard check, with its new Qwen3.5 cases
# past_recording_static, compiled_forward (inductor, and generate's own compile) and dtype_switch.
#   OUT=/path bash eval/h200_round60.sh     # results: $OUT/round60.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round60; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" > $R/versions.txt 2>&1
timeout 420 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?"
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; grep -E '"case": "(past_recording_static|compiled_forward|dtype_switch)"' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
cat $R/versions.txt
tar -czf "$OUT/round60.tar.gz" -C $R .
