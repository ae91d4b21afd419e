#!/usr/bin/env bash
# One H200, at most ~580 s. The cache's default (stagger_merges=None) staggers the rows' merge phases from 128 MiB of
# state per layer at M = 4 to 8 (rounds 47-49). (1) In parallel, fp32 generate checks where that default staggers, at
# real head sizes against each model's own cache: Kimi-Linear architecture (KDA, H = 32, K = V = 128) at B = 64 (the
# policy's M = 4) and B = 128 at M = 8; FLA's GatedDeltaNet and KDA classes at B = 64 and RWKV6 at B = 256 (meant
# to stagger too, but FLA's RWKV6 heads there are K = 32, V = 64: 64 MiB, below the threshold; the row records
# staggered = False). The rows record which layers staggered. (2) Then graph-mode TPOT of the Qwen3.5-35B-A3B architecture at
# B = 256 and 64 (the default staggers both), with DeltaLogCache(stagger_merges=False) in the same process
# (--aligned-batch-sizes): the first TPOT since the default changed, and its A/B against aligned phases.
# Ran on 2026-12-02 with the code of commit 6430d37, when the default staggered; tpot.py's --aligned-batch-sizes /
# --aligned-first became --staggered-batch-sizes / --staggered-first in 35c2ef0 (the default is now aligned): check out
# 6430d37 to run this as it ran.
#   OUT=/path bash eval/h200_round51.sh     # results: $OUT/round51.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round51; rm -rf $R; mkdir -p $R/tpot_qwen
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
left() { echo $(( ${1} - $(date +%s) + T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
export OMP_NUM_THREADS=4
( timeout 230 python3 eval/gpu_generate_check.py --families kimi_linear --runs 64 128:8 --dtypes float32 \
    --out $R/kda_fp32.json > $R/kda_fp32.log 2>&1; stamp "kimi rc=$?" ) &
( timeout 230 python3 eval/gpu_generate_check_fla.py --families gated_deltanet kda --runs 64 --dtypes float32 \
    --out $R/fla_gdn_kda_fp32.json > $R/fla_gdn_kda_fp32.log 2>&1; stamp "fla gdn/kda rc=$?" ) &
( timeout 230 python3 eval/gpu_generate_check_fla.py --families rwkv6 --runs 256 --dtypes float32 \
    --out $R/fla_rwkv6_fp32.json > $R/fla_rwkv6_fp32.log 2>&1; stamp "fla rwkv6 rc=$?" ) &
wait
for f in kda_fp32 fla_gdn_kda_fp32 fla_rwkv6_fp32; do
  echo "--- $f"; grep -E "^\{|max \|dlogit\||Error|error" $R/$f.log | cut -c1-420
done
tar -czf "$OUT/round51.tar.gz" -C $R .
export OMP_NUM_THREADS=8
timeout $(left 575) python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b --batch-sizes 256 64 \
    --modes graph --repeats 4 --new-tokens 32 --aligned-batch-sizes 256 64 --profile-steps 0 \
    > $R/tpot_qwen/tpot.log 2>&1
stamp "tpot rc=$?"; grep -E "TPOT|run |skip" $R/tpot_qwen/tpot.log | cut -c1-260
tar -czf "$OUT/round51.tar.gz" -C $R .
