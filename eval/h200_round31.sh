#!/usr/bin/env bash
# The probe runs of 2026-12-01 (results in eval/results/h200/round30/probe_sweep/, ladder/, kernel_times/), as run
# on one H200 (steps 1-2 need torch and triton only; step 3 imports the bench, run with the .whl packages):
#   1. the append's grid against other tile heights and persistent pipelined programs, B = 64 ... 512;
#   2. the append's extra work added step by step onto a pure read of the base (the "ladder"), B = 128 and 512.
#   OUT=/path bash eval/h200_round31.sh
set -u
OUT=${OUT:-/tmp/out}
mkdir -p $OUT/probe_sweep $OUT/ladder
for b in 64 128 256 512; do
  python3 -W ignore eval/stream_read_probe.py --batch $b --stages 3 --out $OUT/probe_sweep/b$b.json \
      2>&1 | tee $OUT/probe_sweep/b$b.log
done
for b in 128 512; do
  python3 -W ignore eval/stream_read_probe.py --batch $b --ladder --direct-only --out $OUT/ladder/ladder_b$b.json \
      2>&1 | tee $OUT/ladder/ladder_b$b.log
done
# 3. the device time of each kernel of a step (prepare, decode) for the three operators, B = 128, M = 4 and 8
#    (results in eval/results/h200/round30/kernel_times/):
mkdir -p $OUT/kernel_times
python3 -W ignore eval/step_kernel_times.py --batch 128 --ms 4 8 --out $OUT/kernel_times/b128.json \
    2>&1 | tee $OUT/kernel_times/b128.log
