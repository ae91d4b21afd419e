"""Large grids through the DeltaLog Triton kernels on a GPU: rows × heads beyond 65,535 and states beyond 2**31
elements, against the PyTorch references on a few rows.

Issue 3 asks for value-tiled kernels whose grid is flattened on axis 0 with 64-bit offsets, "so batch × heads beyond
65,535 launches correctly". The benchmarks stop at B = 512 (B · HV = 16,384, 2**28 state elements), where neither
CUDA's 65,535 limit of grid axes 1 and 2 nor int32 offsets are reached. Here, for GDN and KDA (HV = 32 value heads,
Hk = 16 key heads) and RWKV6 (H = 32), K = V = 128, fp32 activations, M = 4 (C = 3), V-first base (what
DeltaLogCache's Triton backend keeps) and [K, V]:

- B = 2,048: B · HV = 65,536 (rows × heads one past CUDA's 65,535);
- B = 4,100: 2,149,580,800 fp32 state elements (8.6 GB), past 2**31, so the last rows' base offsets need 64 bits.

Each run starts from a random base and a random log with rows in every phase (``length = row mod (C + 1)``), takes
``--steps`` decode steps (every row merges at least once), and compares rows {0, 1, B/2, B − 2, B − 1}, run through the
reference on their own, with the kernel's rows: outputs, base, ``log_decay``, the live log slots and the lengths
(rtol = atol = 1e-4; lengths exactly). Prints one JSON line per case and exits 1 on any mismatch. Needs ~18 GB of
GPU memory (one case at a time).

    python eval/gpu_large_grid_check.py [--device cuda] [--batches 2048 4100] [--steps 6]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import torch
from gpu_edge_check import case  # eval/ is the script's folder

HK, HV, K, V, M = 16, 32, 128, 128, 4
C = M - 1


def run(op: str, B: int, v_first: bool, steps: int, dev: str, HK=HK, HV=HV, K=K, V=V, C=C,
        lengths: list[int] | None = None) -> dict:
    """One case (the module's head sizes and log capacity ``C`` unless given: the CPU test runs the same code on tiny
    ones under the interpreter; ``lengths``: the rows' live entries, default ``row mod (C + 1)``); returns its JSON
    record."""
    t0 = time.perf_counter()
    gen = torch.Generator(device=dev).manual_seed(0)
    x, base, log, ws, naive, kernel, _ = case(op, dev, torch.int64, gen, B=B, HK=HK, HV=HV, K=K, V=V, C=C, T=steps)
    log_decay, k_log, u_log, decay_log, length = log
    # a live log in every phase: random contents, log-decays ≤ 0, length = row mod (C + 1)
    k_log.copy_(torch.randn(k_log.shape, generator=gen, device=dev) * 0.1)
    u_log.copy_(torch.randn(u_log.shape, generator=gen, device=dev) * 0.1)
    decay_log.copy_(-torch.rand(decay_log.shape, generator=gen, device=dev) * 0.1)
    log_decay.copy_(-torch.rand(log_decay.shape, generator=gen, device=dev))
    length.copy_(torch.arange(B, device=dev) % (C + 1) if lengths is None else torch.tensor(lengths, device=dev))
    rows = torch.tensor(sorted({0, 1, B // 2, B - 2, B - 1}), device=dev)
    # the reference's copy of the checked rows, in its [K, V] layout
    ref = [base[rows].clone()] + [t[rows].clone() for t in log]
    if v_first:
        base = base.transpose(-1, -2).contiguous()  # the kernel's buffer: [B, HV, V, K]

    def xs_of(t: int, sel=slice(None)) -> list[torch.Tensor]:  # step t's inputs of rows sel (RWKV6's bonus: [H, K])
        return [a[sel, t:t + 1] for a in x[:4]] + ([x[4][sel, t:t + 1]] if op != "rwkv6" else [x[4]])

    worst, ok = 0.0, True
    for t in range(steps):
        o = kernel(*xs_of(t), base, *log, ws, state_v_first=v_first)
        o_ref = naive(*xs_of(t, rows), *ref)
        ok &= torch.equal(length[rows], ref[-1])
        live = torch.arange(C, device=dev)[None, :] < ref[-1][:, None].clamp(0, C)  # [rows, C]
        got_base = base[rows].transpose(-1, -2) if v_first else base[rows]
        pairs = [(o[rows], o_ref), (got_base, ref[0]), (log[0][rows], ref[1])]
        for a, b in zip(log[1:4], ref[2:5]):  # the logs: live slots only
            a = a[rows]
            m = live.view(len(rows), 1, C, *([1] * (a.dim() - 3))).expand_as(a)
            pairs.append((a[m], b[m]))
        for a, b in pairs:
            ok &= torch.allclose(a, b, rtol=1e-4, atol=1e-4)
            worst = max(worst, float((a - b).abs().max()) if a.numel() else 0.0)
        ok &= bool(torch.isfinite(o).all())
    if torch.device(dev).type == "cuda":
        torch.cuda.synchronize(dev)
    elements = base.numel()
    return {"op": op, "B": B, "M": C + 1, "K": K,
            "layout": "VK" if v_first else "KV", "rows_x_heads": B * HV, "state_elements": elements,
            "past_int32": elements > 2**31 - 1, "steps": steps, "checked_rows": rows.tolist(), "ok": bool(ok),
            "max_abs_diff": worst, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batches", type=int, nargs="+", default=[2048, 4100])
    p.add_argument("--steps", type=int, default=6, help="decode steps per case (≥ M so that every row merges)")
    p.add_argument("--ops", nargs="+", default=["gdn", "kda", "rwkv6"], choices=["gdn", "kda", "rwkv6"])
    a = p.parse_args(argv)
    if not torch.cuda.is_available() or not str(a.device).startswith("cuda"):
        p.error("needs a CUDA device (the Triton kernels at these sizes; the CPU interpreter would take hours)")
    torch.backends.cuda.matmul.allow_tf32 = False
    results = []
    for op in a.ops:
        for B in a.batches:
            for v_first in (True, False):
                results.append(run(op, B, v_first, a.steps, a.device))
                gc.collect()
                torch.cuda.empty_cache()  # the next case allocates its own 8.6 GB state
                print(json.dumps(results[-1]), flush=True)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
