#!/usr/bin/env bash
# One H200, at most ~560 s: lm-eval parity of the current kernels in fp32 on the GPU for the two checkpoints that have
# none there in full (GDN: never on a GPU in fp32; RWKV6: 100 documents in round 10), and GDN in bf16 again (round 4
# predates the GDN kernel's register cap and merge prefetch of rounds 16-17). Three jobs share the GPU (tiny models):
#   1. RWKV6 checkpoint, fp32, batch 64, M = 8 forced (our RWKV6 Triton kernel), all 500 documents per task;
#   2. GDN checkpoint, fp32, batch 64, M = 8 forced, all 500 documents per task;
#   3. GDN checkpoint, bf16, batch 64, M = 8 forced, all 500 documents per task.
# Needs the wheels of eval/h200_issue6_wheels.txt in .whl_lmeval/ (installed with --no-deps) besides .whl/.
#   OUT=/path bash eval/h200_round29.sh     # results: $OUT/round29.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round29; rm -rf $R; mkdir -p $R/parity
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
( parity rwkv6_fp32_m8 550 --dtype float32 --merge-interval 8 --pretrained eval/checkpoints/rwkv6-shakespeare ) > $R/job1.log 2>&1 &
( parity gdn_fp32_m8 540 --dtype float32 --merge-interval 8 --pretrained eval/checkpoints/gdn-shakespeare ) > $R/job2.log 2>&1 &
( parity gdn_bf16_m8 540 --dtype bfloat16 --merge-interval 8 --pretrained eval/checkpoints/gdn-shakespeare ) > $R/job3.log 2>&1 &
wait
tar -czf "$OUT/round29.tar.gz" -C $R .
cat $R/job*.log
for f in $R/parity/*/parity.md; do echo "### $f"; cat $f; done
