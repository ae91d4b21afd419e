"""GPU check: do the DeltaLog decode ops give bit-identical results eagerly and under ``torch.compile`` (Inductor)?

On a GPU each decode launcher is a ``triton_op`` (:mod:`hf_deltalog.kernels._op`): Inductor traces through
``wrap_triton`` and launches the kernels itself. The CPU tests cover the traced form only with the opaque custom op
(the interpreter cannot trace ``wrap_triton``), so this script checks the GPU form: for GDN (Hk = 16, HV = 32), KDA
and RWKV6 (H = 32), K = V = 128, M = 4 (C = 3), B = 4 rows starting at live lengths 0..3 (so appends and merges share
every launch), it runs ``--steps`` decode steps twice from the same state, once through the op eagerly and once
through ``torch.compile(fullgraph=True)``, and compares the outputs and every buffer with ``torch.equal`` (stale log
slots included: both runs start from the same buffers), reporting the largest output difference.

On an H200 (torch 2.11, Triton 3.6; eval/results/h200/round18/) every state buffer was bit-identical and the outputs
differed by rounding-sized amounts (BENCHMARKS.md, "torch.compile on the GPU").

    python eval/gpu_compile_check.py [--steps 6] [--out eval/results/gpu_compile_check.json]
    python eval/gpu_compile_check.py --cpu-smoke   # tiny heads on the CPU (TRITON_INTERPRET=1 set), opaque op, aot_eager

Exit status 1 when a state buffer differs or a step fails; with ``--strict`` also when an output differs (on the
H200 they did, by rounding-sized amounts; on the CPU they do not).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch


def _state(B, Hk, HV, K, V, C, kv_factor_dtype, decay_per_key, dev, gen):
    base = torch.randn(B, HV, V, K, device=dev, generator=gen) * 0.1  # V-first, as DeltaLogCache keeps it on a GPU
    log_decay = torch.zeros(B, HV, K, device=dev) if decay_per_key else torch.zeros(B, HV, device=dev)
    k_log = torch.randn(B, Hk, C, K, device=dev, generator=gen).to(kv_factor_dtype)
    u_log = torch.randn(B, HV, C, V, device=dev, generator=gen).to(kv_factor_dtype)
    decay_log = (-torch.rand(B, HV, C, K, device=dev, generator=gen) if decay_per_key
                 else -torch.rand(B, HV, C, device=dev, generator=gen))
    length = torch.arange(B, device=dev, dtype=torch.int32) % (C + 1)
    return [base, log_decay, k_log, u_log, decay_log, length]


def _run_gdn(fn, bufs, ws, steps, dev, seed, act=torch.bfloat16):
    from torch.nn.functional import logsigmoid
    gen = torch.Generator(device=dev).manual_seed(seed)
    B, HV, V, K = bufs[0].shape
    Hk = bufs[2].shape[1]
    outs = []
    for _ in range(steps):
        q, k = (torch.randn(B, 1, Hk, K, device=dev, generator=gen).to(act) for _ in range(2))
        v = torch.randn(B, 1, HV, V, device=dev, generator=gen).to(act)
        g = logsigmoid(torch.randn(B, 1, HV, device=dev, generator=gen))
        beta = torch.rand(B, 1, HV, device=dev, generator=gen)
        outs.append(fn(q, k, v, g, beta, *bufs, ws))
    return outs


def _run_rwkv6(fn, bufs, ws, steps, dev, seed, act=torch.bfloat16):
    gen = torch.Generator(device=dev).manual_seed(seed)
    B, H, V, K = bufs[0].shape
    u = torch.randn(H, K, device=dev, generator=gen) * 0.1
    outs = []
    for _ in range(steps):
        r, k = (torch.randn(B, 1, H, K, device=dev, generator=gen).to(act) for _ in range(2))
        v = torch.randn(B, 1, H, V, device=dev, generator=gen).to(act)
        w = -torch.rand(B, 1, H, K, device=dev, generator=gen).to(act)
        outs.append(fn(r, k, v, w, u, *bufs, ws))
    return outs


def check(operator: str, steps: int, dev: str, smoke: bool = False, scale: float | None = None,
          act: torch.dtype = torch.bfloat16) -> dict:
    from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode
    from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode
    from hf_deltalog.kernels.rwkv6.fused_deltalog import deltalog_rwkv6_workspace, fused_deltalog_rwkv6_decode

    B, K, V, C = (4, 16, 32, 3) if smoke else (4, 128, 128, 3)
    heads = 4 if smoke else 32
    gen = torch.Generator(device=dev).manual_seed(0)
    if operator == "gdn":
        Hk, HV = heads // 2, heads
        bufs = _state(B, Hk, HV, K, V, C, torch.float32, False, dev, gen)
        ws = deltalog_gdn_workspace(B, Hk, HV, K, C, dev)
        run = _run_gdn

        def op(q, k, v, g, beta, *rest):
            return fused_deltalog_gdn_decode(q, k, v, g, beta, *rest, scale=scale, state_v_first=True)
    elif operator == "kda":
        Hk = HV = heads
        bufs = _state(B, Hk, HV, K, V, C, torch.float32, True, dev, gen)
        ws = deltalog_kda_workspace(B, Hk, HV, K, C, dev)
        run = _run_gdn

        def op(q, k, v, g, beta, *rest):
            return fused_deltalog_kda_decode(q, k, v, g.unsqueeze(-1).expand(*g.shape, K).contiguous(), beta, *rest,
                                             scale=scale, state_v_first=True)
    else:
        Hk = HV = heads
        bufs = _state(B, Hk, HV, K, V, C, torch.bfloat16, True, dev, gen)
        ws = deltalog_rwkv6_workspace(B, HV, K, C, dev)
        run = _run_rwkv6

        def op(r, k, v, w, u, *rest):
            return fused_deltalog_rwkv6_decode(r, k, v, w, u, *rest, scale=scale, state_v_first=True)

    eager_bufs = [t.clone() for t in bufs]
    compiled_bufs = [t.clone() for t in bufs]
    eager_ws, compiled_ws = ws.clone(), ws.clone()
    eager_out = run(op, eager_bufs, eager_ws, steps, dev, seed=1, act=act)
    torch._dynamo.reset()
    backend = "aot_eager" if smoke else "inductor"
    compiled_out = run(torch.compile(op, fullgraph=True, backend=backend), compiled_bufs, compiled_ws, steps, dev,
                       seed=1, act=act)
    if dev == "cuda":
        torch.cuda.synchronize()
    names = ["base", "log_decay", "k_log", "u_log", "decay_log", "length"]
    out_diffs = [f"o step {i}" for i, (a, b) in enumerate(zip(eager_out, compiled_out)) if not torch.equal(a, b)]
    state_diffs = [n for n, a, b in zip(names, eager_bufs, compiled_bufs) if not torch.equal(a, b)]
    diffs = out_diffs + state_diffs
    return dict(operator=operator, backend=backend, scale=scale, activations=str(act), steps=steps,
                final_length=eager_bufs[5].tolist(), identical=not diffs, state_identical=not state_diffs,
                outputs_identical=not out_diffs, differing=diffs,
                max_abs_o_diff=max(float((a.float() - b.float()).abs().max()) for a, b in zip(eager_out, compiled_out)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--operators", nargs="+", default=["gdn", "kda", "rwkv6"], choices=["gdn", "kda", "rwkv6"])
    p.add_argument("--scale", type=float, default=None, help="query scale (default: the launchers' K ** -0.5)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="activations (default bf16)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--strict", action="store_true",
                   help="also fail when an output differs (by default only a state buffer or an error fails)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny heads on the CPU under TRITON_INTERPRET=1 (opaque op, aot_eager backend)")
    args = p.parse_args()
    if args.cpu_smoke:
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (hf_deltalog imports it lazily here)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --cpu-smoke with TRITON_INTERPRET=1)", file=sys.stderr)
        return 2
    results = []
    for operator in args.operators:
        try:
            r = check(operator, args.steps, "cpu" if args.cpu_smoke else "cuda", smoke=args.cpu_smoke, scale=args.scale,
                      act=getattr(torch, args.dtype))
        except Exception:  # report every operator, then fail
            r = dict(operator=operator, identical=False, error=traceback.format_exc())
        print(json.dumps(r), flush=True)
        results.append(r)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(torch=torch.__version__, results=results), indent=1))
    key = "identical" if args.strict else "state_identical"
    return 0 if all(r.get(key, False) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
