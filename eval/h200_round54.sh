#!/usr/bin/env bash
# One H200, at most ~230 s. The landed code after the default became aligned (35c2ef0, abc0072), fp32 greedy generate
# against each model's own cache: Qwen3.5 architecture at real GDN head sizes, B = 64, the default (aligned, the
# policy's M = 8); FLA's RWKV6ForCausalLM at B = 256 with --stagger-merges (round 51's RWKV6 run fell under the old
# threshold, so RWKV6 had not decoded staggered on the GPU in a model).
#   OUT=/path bash eval/h200_round54.sh     # results: $OUT/round54.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round54; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=6
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
( timeout 210 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 --dtypes float32 \
    --out $R/gdn_fp32.json > $R/gdn_fp32.log 2>&1; echo "gdn rc=$?" ) &
( timeout 210 python3 eval/gpu_generate_check_fla.py --families rwkv6 --runs 256 --dtypes float32 --stagger-merges \
    --out $R/fla_rwkv6_staggered.json > $R/fla_rwkv6_staggered.log 2>&1; echo "fla rc=$?" ) &
wait
for f in gdn_fp32 fla_rwkv6_staggered; do echo "--- $f"; grep -E "^\{|max \|dlogit\||Error" $R/$f.log | cut -c1-400; done
tar -czf "$OUT/round54.tar.gz" -C $R .
