#!/usr/bin/env bash
# One H200, at most ~420 s. The final tree of the 2026-12-02 stop from 07:12 (after the twenty-ninth and thirtieth
# reviews: the FLA state handle's reads, the unbinding marks, one dtype check for both caches): the GPU guard check.
#   OUT=/path bash eval/h200_round62.sh     # results: $OUT/round62.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round62; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" > $R/versions.txt 2>&1
timeout 420 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?"
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; grep -E '"case": "(past_recording_static|compiled_forward|dtype_switch|inference_mode_then_plain|legacy_snapshot)"' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
cat $R/versions.txt
tar -czf "$OUT/round62.tar.gz" -C $R .
