#!/usr/bin/env bash
# One H200, at most ~560 s. The landed tree of the 2026-12-04 stop from 16:42 on the GPU: the cache-level changes of that
# stop (a layer counts as changed once its conv window is handed out or stored or its recurrence runs; the aliasing check
# skips meta tensors) under the Triton backend and captured graphs. The same runs as round 74 (eval/h200_round74.sh):
# the GPU guard check; gpu_generate_check.py on Qwen3.5 / Kimi-Linear heads; FLA's model classes; assisted generation
# with our Triton kernels.
# Wheels (carry .whl; the machine runs Python 3.12, so kernels is its cp312 wheel): transformers 5.25.0, kernels 0.19.1,
# huggingface_hub 2.4.0, httpx2 / httpcore2 2.16.2, truststore 0.10.5, tomlkit 0.15.3, fla-core / flash-linear-attention
# 0.6.0 (the machine's hub is 1.33, below 5.25's requirement). From the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   OUT=/path bash eval/h200_round75.sh     # results: $OUT/round75.tar.gz (round 74's script, with ROUND=75)
set -u
ROUND=75 exec bash "$(dirname "$0")/h200_round74.sh"
