#!/usr/bin/env bash
# One H200, at most ~420 s. eval/gdn_grouped_probe.py: a GDN decode step in one launch of one program per (row, value
# head) that walks the head's value tiles (coefficients formed once per program, no prepare kernel, no workspace),
# checked against the reference on the GPU, then CUDA-graph-timed whole cycles against the package's two-launch
# kernel in one process (B = 128 / 512, M = 8 / 16, two passes in opposite orders). No wheels needed.
#   OUT=/path bash eval/h200_round78.sh     # results: $OUT/round78/
set -u
OUT=${OUT:-/tmp/out}
R=$OUT/round78; mkdir -p $R
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" > $R/versions.txt 2>&1
timeout 400 python3 eval/gdn_grouped_probe.py --check --bench --out $R > $R/probe.log 2>&1; echo "probe rc=$?"
grep -v '"shape"' $R/probe.log | cut -c1-300 | tail -60
grep '"ok": false' $R/probe.log | head
cat $R/versions.txt $R/gpu.csv
