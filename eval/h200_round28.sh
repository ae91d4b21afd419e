#!/usr/bin/env bash
# One H200, at most ~560 s: GPU evidence for the KDA / RWKV6 kernels as they are since 4cc55d2 (merges read the
# decayed keys the prepare kernel forms) and 03222af (unused key-log pointer dropped); every earlier GPU parity and
# generate run of these two operators predates them. Four jobs share the GPU (the models are tiny):
#   1. lm-eval parity, KDA checkpoint, bf16, batch 64, M = 4 forced (our Triton kernel), all 500 documents per task;
#   2. the same for the RWKV6 checkpoint, M = 8 forced;
#   3. KDA checkpoint in fp32, M = 4 forced, all 500 documents per task;
#   4. generate checks: Kimi-Linear architecture (real KDA heads, random weights) fp32 at B = 64 with M = 4 / 8 / 16,
#      then FLA's RWKV6 and KDA model classes, fp32, B = 32 (default M and M = 8).
# Needs the wheels of eval/h200_issue6_wheels.txt in .whl_lmeval/ (installed with --no-deps) besides .whl/.
#   OUT=/path bash eval/h200_round28.sh     # results: $OUT/round28.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round28; rm -rf $R; mkdir -p $R/parity $R/generate
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
git log -1 --format='%H %s' > $R/commit.txt 2>&1 || true
parity() {  # name, timeout, args
  local name=$1 t=$2; shift 2
  stamp "start $name"
  timeout $t python3 -u eval/lm_eval_parity.py --device cuda --batch-size 64 --quiet --out $R/parity/$name "$@" \
      > $R/parity/$name.log 2>&1
  stamp "end $name rc=$?"
}
( parity kda_bf16_m4 520 --dtype bfloat16 --merge-interval 4 --pretrained eval/checkpoints/kda-shakespeare ) > $R/job1.log 2>&1 &
( parity rwkv6_bf16_m8 540 --dtype bfloat16 --merge-interval 8 --pretrained eval/checkpoints/rwkv6-shakespeare ) > $R/job2.log 2>&1 &
( parity kda_fp32_m4 520 --dtype float32 --merge-interval 4 --pretrained eval/checkpoints/kda-shakespeare ) > $R/job3.log 2>&1 &
(
  stamp "generate kimi_linear"
  timeout 240 python3 eval/gpu_generate_check.py --families kimi_linear --runs 64 64:8 64:16 --dtypes float32 \
      --out $R/generate/kimi_fp32.json > $R/generate/kimi_fp32.log 2>&1
  stamp "generate kimi_linear rc=$?"
  timeout $(( 540 - $(date +%s) + T0 )) python3 eval/gpu_generate_check_fla.py --families rwkv6 kda --runs 32 32:8 \
      --dtypes float32 --out $R/generate/fla_fp32.json > $R/generate/fla_fp32.log 2>&1
  stamp "generate fla rc=$?"
) > $R/job4.log 2>&1 &
wait
tar -czf "$OUT/round28.tar.gz" -C $R .
cat $R/job*.log
for f in $R/parity/*/parity.md; do echo "### $f"; head -8 $f; done
tail -n 8 $R/generate/*.log
