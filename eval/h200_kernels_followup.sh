#!/usr/bin/env bash
# Follow-up H200 run: KDA and RWKV6 decode benchmarks (ReplaySSM KDA baseline), the experimental PDL launch of
# the GDN kernel, and the GPU generate checks; everything packed into $OUT/kernels.tar.gz (the device returns <= 8 files).
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/kres; rm -rf $R; mkdir -p $R/{gdn_pdl,kda,rwkv6,generate}
SGL=$(ls .whl_ext/sglang-*.whl 2>/dev/null | head -1)
pack() { tar -czf "$OUT/kernels.tar.gz" -C $R . ; }
echo "== GDN: programmatic dependent launch vs default"
timeout 60 python3 eval/bench_gdn_decode.py --out $R/gdn_pdl --batches 8 --ms 8 --layouts VK --no-compile --no-numerics \
    --tune --tune-batches 8 64 128 256 --tune-ms 8 --tune-only '{}' '{"_pdl": true}' > $R/gdn_pdl/bench.log 2>&1
echo "gdn pdl rc=$?"; grep "tune B=" $R/gdn_pdl/bench.log; pack
echo "== KDA"
timeout 130 python3 eval/bench_gdn_decode.py --operator kda --out $R/kda --batches 1 8 32 64 128 256 512 \
    --ms 2 4 8 16 --layouts VK --no-compile ${SGL:+--replayssm-wheel "$SGL"} --replayssm-ls 4 8 16 \
    --numerics-batches 64 128 256 --numerics-ms 4 > $R/kda/bench.log 2>&1
echo "kda rc=$?"; grep "policy" -A8 $R/kda/bench.log | head -9; pack
echo "== RWKV6"
timeout 120 python3 eval/bench_gdn_decode.py --operator rwkv6 --out $R/rwkv6 --batches 1 8 32 64 128 256 512 \
    --ms 2 4 8 16 --layouts VK KV --no-compile --numerics-batches 64 128 256 --numerics-ms 4 > $R/rwkv6/bench.log 2>&1
echo "rwkv6 rc=$?"; grep "policy" -A8 $R/rwkv6/bench.log | head -9; grep "ours/FLA" $R/rwkv6/bench.log | head -4; pack
echo "== generate checks"
timeout 90 python3 eval/gpu_generate_check.py --families kimi_linear --batch 4 --out $R/generate/kimi_b4.json > $R/generate/kimi_b4.log 2>&1
echo "kimi b4 rc=$?"; tail -6 $R/generate/kimi_b4.log; pack
timeout 90 python3 eval/gpu_generate_check.py --families kimi_linear qwen3_5 --batch 32 --out $R/generate/b32.json > $R/generate/b32.log 2>&1
echo "b32 rc=$?"; tail -10 $R/generate/b32.log; pack
