#!/usr/bin/env bash
# One H200, at most ~560 s. The stop from 19:41 of 2026-12-04 on the GPU: the decode ops now check their arguments in
# the op's body (torch.ops.hf_deltalog.* called directly; launch_device moved into the body; a decode tile over
# Triton's 2**20 elements refused before the prepare launch), and FLA models are recognised by their model class too.
# Runs, side by side on the one GPU:
#   eval/gpu_op_check.py (the triton_op form called directly: bad arguments refused with nothing written, a valid call
#   bit-identical to the launcher); eval/gpu_compile_check.py (the triton_op form through Inductor, as round 68);
#   eval/gpu_edge_check.py (NaN gate, length far above C); the GPU guard check; gpu_generate_check.py on Qwen3.5 /
#   Kimi-Linear heads (fp32, captured graphs too); FLA's model classes (gpu_generate_check_fla.py).
# Wheels (carry .whl; as round 74): transformers 5.25.0, kernels 0.19.1, huggingface_hub 2.4.0, httpx2 / httpcore2
# 2.16.2, truststore 0.10.5, tomlkit 0.15.3, fla-core / flash-linear-attention 0.6.0. From the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   OUT=/path bash eval/h200_round76.sh     # results: $OUT/round76.tar.gz
set -u
OUT=${OUT:-/tmp/out}
N=${ROUND:-76}  # round 79 ran these same checks on a later tree (eval/h200_round79.sh)
R=/tmp/round$N; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.csv 2>&1
git rev-parse HEAD > $R/commit.txt 2>&1
python3 -c "import torch, triton, transformers, kernels, huggingface_hub, fla; print(torch.__version__, triton.__version__, transformers.__version__, kernels.__version__, huggingface_hub.__version__, fla.__version__)" > $R/versions.txt 2>&1
( timeout 540 python3 eval/gpu_guard_check.py --out $R/guard.json > $R/guard.log 2>&1; echo "guard rc=$?" > $R/guard.rc ) &
( timeout 120 python3 eval/gpu_op_check.py > $R/op_check.log 2>&1; echo "op_check rc=$?" > $R/ops.rc
  timeout 200 python3 eval/gpu_compile_check.py --steps 6 --out $R/compile.json > $R/compile.log 2>&1
  echo "compile rc=$?" >> $R/ops.rc
  timeout 150 python3 eval/gpu_edge_check.py > $R/edge.log 2>&1; echo "edge rc=$?" >> $R/ops.rc ) &
( timeout 270 python3 eval/gpu_generate_check.py --families qwen3_5 kimi_linear --runs 8 64:8 --dtypes float32 \
      --new-tokens 32 --graph --out $R/generate.json > $R/generate.log 2>&1; echo "generate rc=$?" > $R/generate.rc
  timeout 240 python3 eval/gpu_generate_check_fla.py --families gated_deltanet kda rwkv6 --dtypes float32 --runs 8:4 \
      --new-tokens 12 --out $R/fla.json > $R/fla.log 2>&1; echo "fla rc=$?" >> $R/generate.rc ) &
wait
cat $R/*.rc
echo "--- ops"; cat $R/op_check.log | cut -c1-200; tail -4 $R/compile.log | cut -c1-300; tail -8 $R/edge.log | cut -c1-300
echo "--- guard"; grep -E '"ok": false' $R/guard.log | cut -c1-600; tail -2 $R/guard.log | cut -c1-300
for f in generate fla; do echo "--- $f"; grep -E "^\{|Error" $R/$f.log | cut -c1-420; tail -2 $R/$f.log | cut -c1-300; done
cat $R/versions.txt
tar -czf "$OUT/round$N.tar.gz" -C $R .
