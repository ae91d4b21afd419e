#!/usr/bin/env bash
# One H200, at most ~300 s. The review's fixes of the stop from 19:41 (2026-12-04) on the GPU: launch options that
# torch.compile makes symbolic (eval/gpu_symbolic_option_check.py, the triton_op form through Inductor with block_v
# 8, 16, 8), the ops' argument checks again (eval/gpu_op_check.py, the GDN op's raw_qk check added), the compile check
# (eval/gpu_compile_check.py), gpu_generate_check.py on Qwen3.5 / Kimi-Linear heads (fp32, captured graphs too) and
# FLA's model classes (their recognition now by the family's module). Wheels and setup: as eval/h200_round76.sh.
#   OUT=/path bash eval/h200_round77.sh     # results: $OUT/round77.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round77; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
python3 -c "import torch, triton, transformers, fla; print(torch.__version__, triton.__version__, transformers.__version__, fla.__version__)" > $R/versions.txt 2>&1
( timeout 200 python3 eval/gpu_symbolic_option_check.py > $R/symbolic.log 2>&1; echo "symbolic rc=$?" > $R/ops.rc
  timeout 100 python3 eval/gpu_op_check.py > $R/op_check.log 2>&1; echo "op_check rc=$?" >> $R/ops.rc
  timeout 200 python3 eval/gpu_compile_check.py --steps 6 --out $R/compile.json > $R/compile.log 2>&1
  echo "compile rc=$?" >> $R/ops.rc ) &
( timeout 250 python3 eval/gpu_generate_check.py --families qwen3_5 kimi_linear --runs 8 64:8 --dtypes float32 \
      --new-tokens 32 --graph --out $R/generate.json > $R/generate.log 2>&1; echo "generate rc=$?" > $R/generate.rc
  timeout 200 python3 eval/gpu_generate_check_fla.py --families gated_deltanet kda rwkv6 --dtypes float32 --runs 8:4 \
      --new-tokens 12 --out $R/fla.json > $R/fla.log 2>&1; echo "fla rc=$?" >> $R/generate.rc ) &
wait
cat $R/*.rc
echo "--- symbolic"; cut -c1-300 $R/symbolic.log | grep -v Warn
echo "--- ops"; tail -1 $R/op_check.log; grep -o '"operator": "[a-z0-9]*".*' $R/compile.log | sed -E 's/"scale.*"state_identical/ state_identical/' | cut -c1-200
for f in generate fla; do echo "--- $f"; grep -oE "'family': '[a-z0-9_]+', 'dtype': '[a-z0-9.]+', 'batch': [0-9]+|'identical': (True|False)" $R/$f.log | paste -sd' ' | sed 's/ .family/\n&/g'; tail -1 $R/$f.log | cut -c1-200; done
cat $R/versions.txt
tar -czf "$OUT/round77.tar.gz" -C $R .
