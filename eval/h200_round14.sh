#!/usr/bin/env bash
# x2 H200 run of 2026-11-30, at most ~400 s of wall time: the full KDA and RWKV6 benchmarks of this
# tree, whose KDA / RWKV6 merges read the exponents that the prepare kernel wrote into the decay slots the merge makes
# stale (rounds 12 and 13: 1-7 % faster than fcf6729 at B = 128 and 512). The tables of BENCHMARKS.md; same options as
# round 8's full runs (eval/h200_round8.sh).
#   OUT=/path bash eval/h200_round14.sh     # results: $OUT/round14.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round14; rm -rf $R; mkdir -p $R/full
export PYTHONUNBUFFERED=1
RS=$(ls .rssm/*.zip .whl_ext/sglang-*.whl 2>/dev/null | head -1)
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
python3 -c "
import torch, triton, transformers
from importlib.metadata import version
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__,
      'transformers', transformers.__version__, 'fla-core', version('fla-core'))" > $R/versions.txt 2>&1
B='--batches 1 8 32 64 128 256 512'
full() {  # GPU, operator, timeout, extra args
  local gpu=$1 op=$2 t=$3; shift 3
  stamp "full $op"
  CUDA_VISIBLE_DEVICES=$gpu timeout $t python3 eval/bench_gdn_decode.py --operator $op --out $R/full/$op $B \
      --layouts VK --no-compile --watchdog-s 60 "$@" > $R/full/$op.log 2>&1
  stamp "full $op rc=$?"
}
full 0 kda 330 --ms 2 4 8 16 ${RS:+--replayssm-wheel "$RS"} --replayssm-ls 4 8 16 --numerics-batches 64 128 256 \
    --numerics-ms 4 8 > $R/gpu0.log 2>&1 &
a=$!
full 1 rwkv6 330 --ms 2 4 8 16 --numerics-batches 64 128 256 --numerics-ms 4 8 > $R/gpu1.log 2>&1 &
b=$!
wait $a $b
cat $R/gpu0.log $R/gpu1.log
tar -czf "$OUT/round14.tar.gz" -C $R .
for f in $R/full/*.log; do echo "### $f"; grep -E "^ +[0-9]+ deltalog +VK|policy|^B=|ours/FLA" $f | tail -60; done
