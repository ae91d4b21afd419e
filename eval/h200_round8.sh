#!/usr/bin/env bash
# Kernel re-timing of 2026-11-30 (x2 H200 when lent, else one), at most ~560 s of wall time. Re-times the three decode
# kernels after two changes made since the last timings in BENCHMARKS.md:
#   "prefix"  = commit b9493e6 (the kernels timed in BENCHMARKS.md, before the decay-precision fix),
#   "fixed"   = commit 6002f4e (after the decay-precision fix: a shifted decay load and a reverse scan per prepare
#               program, the KDA/RWKV6 merges walking the log newest-first),
#   "hoisted" = this tree (the three prepare kernels issue every load before the first store and none waits for the
#               phase L: one memory round trip per prepare program instead of up to four).
# GPU 0: the full GDN and RWKV6 benchmarks of "hoisted" (the tables of BENCHMARKS.md).
# GPU 1: the full KDA benchmark of "hoisted", then the A/B: the same subset (B = 64, 128, 256; two M; V-first; no
#        numerics) for each version, one process per version, back to back on one GPU.
# With one GPU: the GDN benchmark, then the A/B (GDN three versions, KDA and RWKV6 two), nothing else.
# The old versions are `git archive <commit> hf_deltalog eval/bench_gdn_decode.py` under .ab/<name>/ (git-ignored,
# carried); ReplaySSM comes from the one module of SGLang's published wheel (sglang-0.5.23), zipped alone into
# .rssm/ so that the call fits its size limit (the bench extracts that module and nothing else either way).
#   OUT=/path bash eval/h200_round8.sh     # results: $OUT/round8.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round8; rm -rf $R; mkdir -p $R/{full,ab}
export PYTHONUNBUFFERED=1
RS=$(ls .rssm/*.zip .whl_ext/sglang-*.whl 2>/dev/null | head -1)
NGPU=$(nvidia-smi -L | wc -l)
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
  timeout $t python3 eval/bench_gdn_decode.py --operator $op --out $R/full/$op $B --layouts VK --no-compile \
      --watchdog-s 60 "$@" > $R/full/$op.log 2>&1
  stamp "full $op rc=$?"
}
ab() {  # operator, version, M values
  local op=$1 ver=$2; shift 2
  local root=$PWD; [ "$ver" != hoisted ] && root=$PWD/.ab/$ver
  stamp "ab $op $ver"
  (cd $root && PYTHONPATH=/tmp/site:$root timeout 75 python3 eval/bench_gdn_decode.py --operator $op \
      --out $R/ab/${op}_$ver --batches 64 128 256 --ms "$@" --layouts VK --no-compile --no-numerics \
      > $R/ab/${op}_$ver.log 2>&1)
  stamp "ab $op $ver rc=$?"
}
GDN_FULL=(gdn 270 --ms 2 4 8 16 32 ${RS:+--replayssm-wheel "$RS"} --replayssm-ls 8 16 --numerics-batches 64 128 256
          --numerics-ms 8 16)
if [ "$NGPU" -ge 2 ]; then
  (
    export CUDA_VISIBLE_DEVICES=0
    full "${GDN_FULL[@]}"
    full rwkv6 170 --ms 2 4 8 16 --numerics-batches 64 128 256 --numerics-ms 4 8
  ) > $R/gpu0.log 2>&1 &
  a=$!
  (
    export CUDA_VISIBLE_DEVICES=1
    full kda 190 --ms 2 4 8 16 ${RS:+--replayssm-wheel "$RS"} --replayssm-ls 4 8 16 --numerics-batches 64 128 256 \
        --numerics-ms 4
    for v in hoisted fixed prefix; do ab gdn $v 8 16; done
    for v in hoisted fixed; do ab kda $v 4 8; done
    for v in hoisted fixed; do ab rwkv6 $v 4 8; done
  ) > $R/gpu1.log 2>&1 &
  b=$!
  wait $a; wait $b
else
  (
    full "${GDN_FULL[@]}"
    for v in hoisted fixed prefix; do ab gdn $v 8 16; done
    for v in hoisted fixed; do ab kda $v 4; done
    for v in hoisted fixed; do ab rwkv6 $v 8; done
  ) > $R/gpu0.log 2>&1
fi
tar -czf "$OUT/round8.tar.gz" -C $R .
cat $R/gpu*.log
for f in $R/full/*.log; do echo "### $f"; grep -E "^B=|policy|fastest|ours/FLA|copy bandwidth" $f | tail -40; done
for f in $R/ab/*.log; do echo "### $f"; grep -E "^\[.*B=" $f | tail -4; done
