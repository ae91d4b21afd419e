#!/usr/bin/env bash
# One H200, at most ~400 s. Issue 3's "batch × heads beyond 65,535 launches correctly", never run before (the
# benchmarks stop at B = 512): eval/gpu_large_grid_check.py for GDN, KDA and RWKV6 at B = 2,048 (B·HV = 65,536) and
# B = 4,100 (2.15e9 fp32 state elements, past 2**31), both base layouts, against the references on five rows; then
# the edge check (its case() now draws from a generator on any device).
#   OUT=/path bash eval/h200_round71.sh     # results: $OUT/round71.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round71; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/gpu.csv 2>&1
git log -1 --format='%H %s' > $R/commit.txt 2>&1 || true
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" > $R/versions.txt 2>&1
timeout 300 python3 eval/gpu_large_grid_check.py > $R/large_grid.log 2>&1; echo "large grid rc=$?"
timeout 90 python3 eval/gpu_edge_check.py > $R/edge.log 2>&1; echo "edge rc=$?"
cat $R/large_grid.log | cut -c1-400; cat $R/edge.log | cut -c1-300; cat $R/versions.txt
tar -czf "$OUT/round71.tar.gz" -C $R .
