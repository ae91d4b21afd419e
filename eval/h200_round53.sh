#!/usr/bin/env bash
# One H200, at most ~470 s. Rounds 51-52: graph-mode TPOT of the Qwen3.5-35B-A3B architecture is 1.2 % slower at
# B = 256 with the default's staggered merge phases than with aligned ones (both orders of the two runs), although
# the GDN kernels themselves take 1.2 % less device time per step in the same runs. This round: (1) the Kimi-Linear-
# 48B-A3B architecture (KDA, the policy's M = 4) at B = 256, aligned run first, 8 profiled steps; (2) Qwen3.5 at
# B = 64 with the aligned run first (round 52's time limit cut its default run).
# Ran on 2026-12-02 with the code of commit 6430d37, when the default staggered; tpot.py's --aligned-batch-sizes /
# --aligned-first became --staggered-batch-sizes / --staggered-first in 35c2ef0 (the default is now aligned): check out
# 6430d37 to run this as it ran.
#   OUT=/path bash eval/h200_round53.sh     # results: $OUT/round53.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round53; rm -rf $R; mkdir -p $R/tpot_kimi $R/tpot_qwen
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=8
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
left() { echo $(( ${1} - $(date +%s) + T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv 2>&1
summary() {
python3 - $1 <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    p = r.get("profile") or {}
    print(r["cache"], r["batch"], f"tpot {r['tpot_ms']:.3f}", r.get("staggered"), r.get("merge_intervals"),
          f"profiled step {p.get('step_ms', 0):.3f} ms, state update {p.get('state_update_ms', 0):.4f} ms")
PY
}
timeout 300 python3 eval/tpot.py --out $R/tpot_kimi --models kimi_linear_48b_a3b --batch-sizes 256 --modes graph \
    --prefill-chunk-tokens 8192 --memory-fraction 0.96 --repeats 4 --new-tokens 32 --aligned-batch-sizes 256 \
    --aligned-first --profile-steps 8 > $R/tpot_kimi/tpot.log 2>&1
stamp "kimi rc=$?"; grep -E "TPOT|run |skip" $R/tpot_kimi/tpot.log | cut -c1-260; summary $R/tpot_kimi/tpot.json
tar -czf "$OUT/round53.tar.gz" -C $R .
timeout $(left 465) python3 eval/tpot.py --out $R/tpot_qwen --models qwen3_5_35b_a3b --batch-sizes 64 --modes graph \
    --repeats 4 --new-tokens 32 --aligned-batch-sizes 64 --aligned-first --profile-steps 16 > $R/tpot_qwen/tpot.log 2>&1
stamp "qwen rc=$?"; grep -E "TPOT|run |skip" $R/tpot_qwen/tpot.log | cut -c1-260; summary $R/tpot_qwen/tpot.json
tar -czf "$OUT/round53.tar.gz" -C $R .
