#!/usr/bin/env bash
# One H200, at most ~420 s. (1) The full KDA table with the prepare kernel of rounds 36-37 (one [K] slot at a time):
# B = 1 ... 512, M = 2, 4, 8, 16, FLA in both layouts, fp64 rollouts at B = 64, 128, 256 (no ReplaySSM: its wheel is
# not carried this time). (2) Generate checks after the changes of this stop (fp32, greedy, default cache as the
# reference): Kimi-Linear architecture at B = 64 (the new KDA prepare kernel), and a float64 Qwen3.5-architecture
# model, which DeltaLogCache now decodes on the PyTorch backend under backend="auto".
#   OUT=/path bash eval/h200_round38.sh     # results: $OUT/round38.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round38; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 300 python3 -W ignore eval/bench_gdn_decode.py --operator kda --out $R/full/kda \
    --batches 1 8 32 64 128 256 512 --ms 2 4 8 16 --layouts VK --no-compile \
    --numerics-batches 64 128 256 --numerics-ms 4 8 > $R/kda_full.log 2>&1
stamp "kda table rc=$?"
python3 eval/gdn_report.py $R/full/kda/bench_kda_decode.json --out $R/full/kda > $R/kda_report.log 2>&1  # (its summary assumes GDN's policy: deleted after the run; kda_table.md is the table)
stamp "report rc=$?"; grep -E "^\| *(1|8|32|64|128|256|512) \|" $R/full/kda/*.md | head -8
( timeout 100 python3 eval/gpu_generate_check.py --families kimi_linear --runs 64 --dtypes float32 \
    --out $R/kimi_fp32.json > $R/kimi_fp32.log 2>&1; stamp "kimi rc=$?" ) &
( timeout 100 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 --dtypes float64 \
    --out $R/gdn_fp64.json > $R/gdn_fp64.log 2>&1; stamp "gdn fp64 rc=$?" ) &
wait
grep -h "{'family'" $R/kimi_fp32.log $R/gdn_fp64.log | cut -c1-400
stamp done
tar -czf "$OUT/round38.tar.gz" -C $R .
