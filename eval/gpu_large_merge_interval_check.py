"""Merge intervals up to MAX_MERGE_INTERVAL through the DeltaLog Triton kernels on a GPU: does each compile in
reasonable time, fit the GPU's shared memory, and match the PyTorch reference?

DeltaLogCache accepts any ``merge_interval`` in ``[1, 1024]``. The CPU's Triton interpreter has no shared-memory limit
and no compile step, so only a GPU shows what large ``M`` costs there. Before this check's first run (2026-12-03) the
RWKV6 prepare kernel failed to compile at K = 128 from M = 258 on (its ``[C, K]`` tiles' cumsum needed 256 KiB of
shared memory), and the KDA prepare kernel's unrolled walk over the log took 98 s to compile at M = 128 and over
400 s at M = 256; both now walk long logs in a loop (``MAX_LOG_TILE``, ``MAX_UNROLLED_SLOTS`` in their modules).

For each operator and ``M``: K = V = 128, Hk = 2 key heads, HV = 4 value heads (H = 4 for RWKV6), B = 4 rows with
live lengths ``[C, C − 1, 0, C // 2]`` (two rows merge within the steps, two append), V-first base, fp32 activations,
``--steps`` decode steps against the reference (``gpu_large_grid_check.run``: outputs, base, ``log_decay``, live log
slots, lengths; rtol = atol = 1e-4). ``seconds`` includes the Triton compile of that ``M`` (each ``C`` compiles its
own kernels). Prints one JSON line per case, exits 1 on any mismatch.

    python eval/gpu_large_merge_interval_check.py [--ops gdn kda rwkv6] [--merge-intervals 16 128 258 1024]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from gpu_large_grid_check import run  # eval/ is the script's folder


def check(op: str, M: int, dev: str, steps: int, K: int = 128, V: int = 128) -> dict:
    """One case of the module docstring (``K``, ``V``: the CPU test passes tiny ones); returns its JSON record."""
    C = M - 1
    lengths = [C, max(C - 1, 0), 0, C // 2]
    return run(op, 4, True, steps, dev, HK=2, HV=4, K=K, V=V, C=C, lengths=lengths)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--ops", nargs="+", default=["gdn", "kda", "rwkv6"], choices=["gdn", "kda", "rwkv6"])
    p.add_argument("--merge-intervals", type=int, nargs="+", default=[16, 128, 258, 1024])
    p.add_argument("--steps", type=int, default=3, help="decode steps per case")
    a = p.parse_args(argv)
    if not torch.cuda.is_available() or not str(a.device).startswith("cuda"):
        p.error("needs a CUDA device (compile times and shared memory are what it measures)")
    results = []
    for op in a.ops:
        for M in a.merge_intervals:
            try:
                results.append(check(op, M, a.device, a.steps))
            except Exception as e:  # noqa: BLE001 -- a compile failure is a result of this check
                results.append({"op": op, "M": M, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
            print(json.dumps(results[-1]), flush=True)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
