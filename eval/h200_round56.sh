#!/usr/bin/env bash
# One H200, at most ~240 s. LaraMini's static sliding-window layers under a captured CUDA graph: fp32 greedy decoding
# at LaraMini's GDN head sizes (Hk = 8, HV = 16, K = V = 128), B = 64, the policy's M, with a 128-token window that
# holds the 32-token prompt and the 64 new tokens (at the time hf_deltalog.graph refused only windows that can fill):
# model.generate with the default cache, with DeltaLogCache, and graph_generate on a static DeltaLogCache, eagerly
# and captured. Control: the same for the Qwen3.5 architecture (GDN, full attention only, dense MLP).
# Ran on 2026-12-02 before GraphDecoder refused static sliding-window layers (this round found why it must: NOTES.md);
# with today's code the LaraMini captured run is recorded as refused.
#   OUT=/path bash eval/h200_round56.sh     # results: $OUT/round56.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round56; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
for fam in lara_mini qwen3_5; do
  timeout 110 python3 eval/gpu_generate_check.py --families $fam --runs 64 --dtypes float32 --graph \
      --sliding-window 128 --out $R/${fam}_graph_fp32.json > $R/${fam}_graph_fp32.log 2>&1
  echo "$fam rc=$?"; grep -E "^\{|Error" $R/${fam}_graph_fp32.log | cut -c1-800
done
tar -czf "$OUT/round56.tar.gz" -C $R .
