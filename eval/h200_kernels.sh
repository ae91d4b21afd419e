#!/usr/bin/env bash
# One H200 run of the decode-kernel benchmarks (GDN, KDA, RWKV6) and the KDA generate check; writes under $OUT.
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   bash eval/h200_kernels.sh        # needs .whl/ (fla-core, flash-linear-attention, transformers) and, for the
#                                    # ReplaySSM baseline, SGLang's wheel in .whl_ext/
set -u
OUT=${OUT:-eval/results/h200}
SGL=$(ls .whl_ext/sglang-*.whl 2>/dev/null | head -1)
mkdir -p "$OUT"/{gdn,kda,rwkv6,generate}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.csv" 2>&1
python3 - <<'PY' > "$OUT/versions.txt" 2>&1
import torch, triton, transformers
from importlib.metadata import version
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "transformers", transformers.__version__, "fla-core", version("fla-core"))
PY
echo "== GDN (tune, then the main run with the selected options)"
timeout 300 python3 eval/bench_gdn_decode.py --out "$OUT/gdn" --tune --tune-select --tune-batches 64 256 \
    --tune-ms 8 16 --layouts VK --no-compile ${SGL:+--replayssm-wheel "$SGL"} --replayssm-ls 8 16 \
    --numerics-batches 64 128 256 --numerics-ms 8 16 > "$OUT/gdn/bench.log" 2>&1
echo "gdn rc=$?"; tail -60 "$OUT/gdn/bench.log"
echo "== KDA"
timeout 120 python3 eval/bench_gdn_decode.py --operator kda --out "$OUT/kda" --batches 1 8 32 64 128 256 512 \
    --ms 2 4 8 16 --layouts VK --no-compile ${SGL:+--replayssm-wheel "$SGL"} --replayssm-ls 4 8 16 \
    --numerics-batches 64 128 256 --numerics-ms 4 > "$OUT/kda/bench.log" 2>&1
echo "kda rc=$?"; tail -45 "$OUT/kda/bench.log"
echo "== RWKV6"
timeout 75 python3 eval/bench_gdn_decode.py --operator rwkv6 --out "$OUT/rwkv6" --batches 1 8 32 64 128 256 512 \
    --ms 2 4 8 16 --layouts VK KV --no-compile --numerics-batches 128 --numerics-ms 4 > "$OUT/rwkv6/bench.log" 2>&1
echo "rwkv6 rc=$?"; tail -40 "$OUT/rwkv6/bench.log"
echo "== generate checks (KDA dense-FLA small batch and DeltaLog batch; GDN DeltaLog batch)"
timeout 40 python3 eval/gpu_generate_check.py --families kimi_linear --batch 4 --out "$OUT/generate/kimi_b4.json" > "$OUT/generate/kimi_b4.log" 2>&1; echo "kimi b4 rc=$?"; tail -5 "$OUT/generate/kimi_b4.log"
timeout 40 python3 eval/gpu_generate_check.py --families kimi_linear qwen3_5 --batch 32 --out "$OUT/generate/b32.json" > "$OUT/generate/b32.log" 2>&1; echo "b32 rc=$?"; tail -8 "$OUT/generate/b32.log"
