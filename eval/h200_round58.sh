#!/usr/bin/env bash
# One H200, at most ~300 s. The generate checks after the twenty-first review (a positional generation_config read
# through generate's own signature, a generate stopped between decode steps refused until reset(), the static room
# check following generate's length rules, the checks bound on import): (1) the GPU guard check, now with the
# stopped_between_steps and positional_generation_config cases; (2) the Qwen3.5 and Kimi-Linear architectures, B = 64,
# fp32, the default cache against DeltaLogCache (the path every generate call now takes through the wrapper).
#   OUT=/path bash eval/h200_round58.sh     # results: $OUT/round58.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round58; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
( timeout 280 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?" ) &
( timeout 150 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 --dtypes float32 \
    --out $R/qwen.json > $R/qwen.log 2>&1; echo "qwen rc=$?"
  timeout 120 python3 eval/gpu_generate_check.py --families kimi_linear --runs 64 --dtypes float32 \
    --out $R/kimi.json > $R/kimi.log 2>&1; echo "kimi rc=$?" ) &
wait
for f in qwen kimi; do echo "--- $f"; grep -E "^\{|Error" $R/$f.log | cut -c1-900; done
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-400; tail -3 $R/guard.log | cut -c1-300
tar -czf "$OUT/round58.tar.gz" -C $R .
