#!/usr/bin/env bash
# One H200, at most ~420 s. The landed code after the twenty-fifth to twenty-eighth reviews' fixes (static caches under
# past recording, compiled forwards, fp32 references under autocast, the backend planned from the model's dtype; the
# FLA cache's legacy snapshot, inference-mode turns, handle reads): the GPU guard check, with the new FLA cases
# inference_mode_then_plain and legacy_snapshot.
#   OUT=/path bash eval/h200_round61.sh     # results: $OUT/round61.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round61; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" > $R/versions.txt 2>&1
timeout 420 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?"
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; grep -E '"case": "(past_recording_static|compiled_forward|dtype_switch|inference_mode_then_plain|legacy_snapshot)"' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
cat $R/versions.txt
tar -czf "$OUT/round61.tar.gz" -C $R .
