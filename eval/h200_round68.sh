#!/usr/bin/env bash
# One H200, at most ~560 s. The tree after the 46th-48th reviews of the 2026-12-02 stop from 22:28: the launchers'
# shared-memory check moved into the custom op's body (skipped for fake tensors), and the recurrent-state read
# compares the calling layer's conv1d with the conv window. Checks: the triton_op form under torch.compile
# (eval/gpu_compile_check.py, as in round 18) and the GPU guard check as in rounds 65-67.
#   OUT=/path bash eval/h200_round68.sh     # results: $OUT/round68.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round68; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" > $R/versions.txt 2>&1
timeout 130 python3 eval/gpu_compile_check.py --out $R/compile.json > $R/compile.log 2>&1; echo "compile rc=$?"
tail -6 $R/compile.log | cut -c1-400
timeout 420 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?"
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
cat $R/versions.txt
tar -czf "$OUT/round68.tar.gz" -C $R .
