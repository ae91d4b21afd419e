#!/usr/bin/env bash
# One H200, at most ~560 s. transformers 5.25.0 on the GPU for the first time (CPU-only until now): 5.25 wraps its
# GDN / KDA recurrences in the `kernels` package's function modules and calls FLA's kernels for CUDA inputs, so the
# CUDA binding path of hf_deltalog.patches differs from the CPU one. Runs, side by side on the one GPU:
#   the GPU guard check (all families, as rounds 65-72); gpu_generate_check.py on Qwen3.5 / Kimi-Linear heads (fp32
#   and bf16, the policy's M and M = 8, captured graphs too; then with past recording); FLA's model classes
#   (gpu_generate_check_fla.py); and assisted generation (prompt lookup) with our Triton kernels and with the
#   backend policy (assisted_generation_check.py --device cuda).
# Wheels (carry .whl): transformers 5.25.0, kernels 0.19.1, huggingface_hub 2.4.0, httpx2 / httpcore2 2.16.2,
# truststore 0.10.5, tomlkit 0.15.3, fla-core / flash-linear-attention 0.6.0 (the machine's hub is 1.33, below 5.25's
# requirement). From the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   OUT=/path bash eval/h200_round74.sh     # results: $OUT/round74.tar.gz (ROUND=75: round75, as eval/h200_round75.sh runs it)
set -u
OUT=${OUT:-/tmp/out}
N=${ROUND:-74}; R=/tmp/round$N; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
python3 -c "import torch, triton, transformers, kernels, huggingface_hub, fla; print(torch.__version__, triton.__version__, transformers.__version__, kernels.__version__, huggingface_hub.__version__, fla.__version__)" > $R/versions.txt 2>&1
( timeout 540 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?" > $R/guard.rc ) &
( timeout 270 python3 eval/gpu_generate_check.py --families qwen3_5 kimi_linear --runs 8 64:8 --dtypes float32 bfloat16 \
      --new-tokens 32 --graph --out $R/generate.json > $R/generate.log 2>&1; echo "generate rc=$?" > $R/generate.rc
  timeout 250 python3 eval/gpu_generate_check.py --families qwen3_5 kimi_linear --runs 8:4 --dtypes float32 \
      --new-tokens 32 --past-recording --out $R/generate_recording.json > $R/generate_recording.log 2>&1
  echo "recording rc=$?" >> $R/generate.rc ) &
( timeout 270 python3 eval/gpu_generate_check_fla.py --families gated_deltanet kda rwkv6 --dtypes float32 --runs 8:4 \
      --new-tokens 12 --out $R/fla.json > $R/fla.log 2>&1; echo "fla rc=$?" > $R/fla.rc
  timeout 260 python3 eval/assisted_generation_check.py --device cuda --backend triton --merge-interval 4 \
      --out $R/assisted_triton_M4.json > $R/assisted_triton.log 2>&1; echo "assisted triton rc=$?" >> $R/fla.rc ) &
wait
cat $R/*.rc
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
for f in generate generate_recording fla; do echo "--- $f"; grep -E "^\{|Error" $R/$f.log | cut -c1-420; tail -2 $R/$f.log | cut -c1-300; done
echo "--- assisted"; grep -E "identical|DIFFERS|Error" $R/assisted_triton.log | cut -c1-300 | tail -32
cat $R/versions.txt
tar -czf "$OUT/round$N.tar.gz" -C $R .
