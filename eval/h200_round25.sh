#!/usr/bin/env bash
# One H200, at most ~400 s: the full KDA and RWKV6 benchmarks (tables of BENCHMARKS.md; same options as round 14)
# of this tree, whose KDA / RWKV6 merges read the decayed keys the prepare kernel formed once per head (round 24).
# The two run one after the other on the one GPU.
#   OUT=/path bash eval/h200_round25.sh     # results: $OUT/round25.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round25; rm -rf $R; mkdir -p $R/full
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
full() {  # operator, timeout, extra args
  local op=$1 t=$2; shift 2
  stamp "full $op"
  timeout $t python3 eval/bench_gdn_decode.py --operator $op --out $R/full/$op $B \
      --layouts VK --no-compile --watchdog-s 60 "$@" > $R/full/$op.log 2>&1
  stamp "full $op rc=$?"
}
full kda 200 --ms 2 4 8 16 ${RS:+--replayssm-wheel "$RS"} --replayssm-ls 4 8 16 --numerics-batches 64 128 256 \
    --numerics-ms 4 8
tar -czf "$OUT/round25.tar.gz" -C $R .
full rwkv6 $(( 390 - $(date +%s) + T0 )) --ms 2 4 8 16 --numerics-batches 64 128 256 --numerics-ms 4 8
tar -czf "$OUT/round25.tar.gz" -C $R .
for f in $R/full/*.log; do echo "### $f"; grep -E "^ +(64|128|256|512) +(deltalog +VK +[48]|fla_)|^B=" $f | tail -40; done
