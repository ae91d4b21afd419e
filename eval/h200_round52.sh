#!/usr/bin/env bash
# One H200, at most ~420 s. Round 51 measured graph-mode TPOT (Qwen3.5-35B-A3B architecture) 1.2 % slower with the
# default's staggered merge phases than with aligned ones at B = 256 (46.76 / 46.22 ms) and 0.4 % at B = 64, while the
# kernel benchmark measured staggered 0.2-2.3 % faster per step. This round separates the kernels from the rest:
# the same two DeltaLog runs in the other order (--aligned-first), each with 16 profiled steps (two M = 8 cycles: the
# recurrence kernels' device time per step, and the top kernels), and at B = 256 the static baseline's control run
# (the same math prefilled in other chunks: how far rounding alone, through other tokens and expert choices of this
# random-weight MoE, moves TPOT).
# Ran on 2026-12-02 with the code of commit 6430d37, when the default staggered; tpot.py's --aligned-batch-sizes /
# --aligned-first became --staggered-batch-sizes / --staggered-first in 35c2ef0 (the default is now aligned): check out
# 6430d37 to run this as it ran.
#   OUT=/path bash eval/h200_round52.sh     # results: $OUT/round52.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round52; rm -rf $R; mkdir -p $R/tpot_qwen
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
timeout 410 python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b --batch-sizes 256 64 \
    --modes graph --repeats 4 --new-tokens 32 --aligned-batch-sizes 256 64 --aligned-first --profile-steps 16 \
    --control-batch-sizes 256 > $R/tpot_qwen/tpot.log 2>&1
stamp "tpot rc=$?"; grep -E "TPOT|run |skip" $R/tpot_qwen/tpot.log | cut -c1-260
python3 - $R/tpot_qwen/tpot.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    p = r.get("profile") or {}
    print(r["cache"], r["batch"], f"tpot {r['tpot_ms']:.3f}", f"kernels {p.get('kernel_ms', 0):.3f} ms/step",
          f"state update {p.get('state_update_ms', 0):.4f} ms/step", f"recurrence share {p.get('recurrence_kernels_share')}")
    for k in (p.get("top_kernels") or [])[:8]:
        print(f"    {k['ms_per_step']:.4f}  {k['name'][:100]}")
PY
tar -czf "$OUT/round52.tar.gz" -C $R .
