#!/usr/bin/env bash
# One H200, at most ~420 s. The final tree of the 2026-12-03 stop (the 53rd-55th reviews: the per-forward
# refusal names a repeated step call and cut or reordered layers; a module wrapping the model builds the cache;
# eval CLIs check up front): the GPU guard check as in rounds 65-69.
#   OUT=/path bash eval/h200_round70.sh     # results: $OUT/round70.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round70; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" > $R/versions.txt 2>&1
timeout 420 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?"
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; grep -E '"case": "(inference_mode_turns|new_only_turns|threads)"' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
cat $R/versions.txt
tar -czf "$OUT/round70.tar.gz" -C $R .
