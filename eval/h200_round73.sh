#!/usr/bin/env bash
# Round 73 (2026-12-03): merge intervals up to MAX_MERGE_INTERVAL = 1024 through the three Triton kernels (compile,
# shared memory, agreement with the references) after the KDA and RWKV6 prepare kernels got their slot loops.
# Ran as one device call from the repository root (kernels only: no transformers needed):
set -euo pipefail
export PYTHONPATH=$PWD
python eval/gpu_large_merge_interval_check.py --ops kda rwkv6 gdn --merge-intervals 16 128 258 1024 \
    | tee "${OUT:-eval/results/h200/round73}/large_merge_interval.jsonl"
