#!/usr/bin/env bash
# One H200, at most ~560 s. The stop from 22:17 of 2026-12-04 on the GPU (no device was lent in that stop): stores of a
# recurrent state are checked before anything changes (update_recurrent_state / FLA's cache.update: floating dtype,
# shape, rows, device against the conv window) and lock the cache only inside a model's forward; `scale` must be None
# or a real number; the references and launchers share check_one_device; state_idx must be an int. Runs, side by side:
#   the GPU guard check with its new case refused_store_from_user_code (a state on the CPU and an int32 state handed to
#   a CUDA cache by user code: refused, nothing changed, not locked, the next turn as the default cache's);
#   eval/gpu_op_check.py; eval/gpu_compile_check.py; eval/gpu_edge_check.py; gpu_generate_check.py on Qwen3.5 /
#   Kimi-Linear heads (fp32, captured graphs too); FLA's model classes (gpu_generate_check_fla.py).
# Wheels (carry .whl; as round 74): transformers 5.25.0, kernels 0.19.1, huggingface_hub 2.4.0, httpx2 / httpcore2
# 2.16.2, truststore 0.10.5, tomlkit 0.15.3, fla-core / flash-linear-attention 0.6.0. From the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   OUT=/path bash eval/h200_round79.sh     # results: $OUT/round79.tar.gz
ROUND=79 exec bash "$(dirname "$0")/h200_round76.sh"  # the same runs, results as round79
