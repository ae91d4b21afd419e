#!/usr/bin/env bash
# x2 H200 run of 2026-11-30 (later), at most ~450 s of wall time: the kept kernels of rounds 16-17 (GDN and RWKV6:
# merge loop with loads one entry ahead, decode kernel under a 64-register cap when C > 0; KDA unchanged).
# GPU 0: the full GDN table (with ReplaySSM and numerics) and the full RWKV6 table. GPU 1: eager vs torch.compile
# (Inductor) bit-identity of the three decode ops (eval/gpu_compile_check.py), then generate() with DeltaLogCache
# against the default cache on the Qwen3.5-architecture check model (eval/gpu_generate_check.py).
#   OUT=/path bash eval/h200_round18.sh     # results: $OUT/round18.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round18; rm -rf $R; mkdir -p $R/full
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
python3 -c "
import torch, triton, transformers
from importlib.metadata import version
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__,
      'transformers', transformers.__version__, 'fla-core', version('fla-core'))" > $R/versions.txt 2>&1
RS=$(ls .rssm/*.zip .whl_ext/sglang-*.whl 2>/dev/null | head -1)
B='--batches 1 8 32 64 128 256 512'
full() {  # operator, timeout, extra args
  local op=$1 t=$2; shift 2
  stamp "full $op"
  timeout $t python3 eval/bench_gdn_decode.py --operator $op --out $R/full/$op $B --layouts VK --no-compile \
      --watchdog-s 60 "$@" > $R/full/$op.log 2>&1
  stamp "full $op rc=$?"
}
(
  export CUDA_VISIBLE_DEVICES=0
  full gdn 250 --ms 2 4 8 16 32 ${RS:+--replayssm-wheel "$RS"} --replayssm-ls 8 16 --numerics-batches 64 128 256 \
      --numerics-ms 8 16
  full rwkv6 180 --ms 2 4 8 16 --numerics-batches 64 128 256 --numerics-ms 4 8
) > $R/gpu0.log 2>&1 &
a=$!
(
  export CUDA_VISIBLE_DEVICES=1
  stamp "compile check"
  timeout 150 python3 eval/gpu_compile_check.py --out $R/gpu_compile_check.json > $R/gpu_compile_check.log 2>&1
  stamp "compile check rc=$?"
  stamp "generate check"
  timeout $(( 430 - $(date +%s) + T0 )) python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 128 \
      --dtypes float32 bfloat16 --new-tokens 64 --out $R/gpu_generate_check.json > $R/gpu_generate_check.log 2>&1
  stamp "generate check rc=$?"
) > $R/gpu1.log 2>&1 &
b=$!
wait $a $b
cat $R/gpu0.log $R/gpu1.log
tar -czf "$OUT/round18.tar.gz" -C $R .
cut -c1-400 $R/gpu_compile_check.log | tail -5
tail -12 $R/gpu_generate_check.log
for f in $R/full/*.log; do echo "### $f"; grep -E "policy|fastest|B= |copy bandwidth" $f | tail -20; done
