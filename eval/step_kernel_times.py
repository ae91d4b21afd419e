"""Device time of each kernel of a DeltaLog step (prepare and decode, append and merge steps), per operator.

Runs whole cycles (M − 1 appends, one merge) of the GDN, KDA and RWKV6 Triton kernels at the benchmark shape
(``eval/bench_gdn_decode.py``'s inputs: HV = 32, Hk = 16 for GDN, K = V = 128, fp32 V-first base, bf16 activations)
under ``torch.profiler`` and reports the mean device time (µs) of the prepare and the decode kernel on append steps
(by live length) and on the merge step. Kernel durations only: launch gaps are not counted (the CUDA-graph cycle
times of the benchmark include them).

    python eval/step_kernel_times.py [--batch 128] [--ms 4 8] [--operators gdn kda rwkv6] [--prepare-warps 0 2 4]
                                     [--prepare-maxnreg 0 64] [--cycles 6] [--out F.json]
                                     # 0: the launcher's default (no register cap on the prepare kernel)
    ncu --set full -k regex:_prepare --launch-skip 9 --launch-count 1 python eval/step_kernel_times.py --cycles 0 ...
                                     # --cycles 0: only the 2·M warm-up steps (step 9: an append at L = 1)

``--prepare-maxnreg N`` compiles the prepare kernel under an N-register cap (Triton's ``maxnreg`` launch option, as
``hf_deltalog.kernels._op.decode_register_cap`` does for the decode kernel), an experiment the launchers do not
expose: at 64 registers, 4,096 one-warp programs fit the H200's 132 SMs in one wave (32 resident blocks per SM).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gdn_decode as bench  # noqa: E402


def prepare_kernel(operator: str):
    """The operator's prepare kernel (a Triton ``JITFunction``)."""
    from hf_deltalog.kernels.gdn import fused_deltalog as fd
    from hf_deltalog.kernels.kda import fused_deltalog as fk
    from hf_deltalog.kernels.rwkv6 import fused_deltalog as fr
    return dict(gdn=fd._deltalog_gdn_prepare_kernel, kda=fk._deltalog_kda_prepare_kernel,
                rwkv6=fr._deltalog_rwkv6_prepare_kernel)[operator]


@contextlib.contextmanager
def prepare_register_cap(operator: str, maxnreg: int):
    """Launch the operator's prepare kernel with ``maxnreg=maxnreg`` inside the block (0: unchanged)."""
    kernel = prepare_kernel(operator)
    if not maxnreg:
        yield
        return
    run = kernel.run
    kernel.run = lambda *a, **kw: run(*a, maxnreg=maxnreg, **kw)  # `kernel[grid](...)` calls `kernel.run`
    try:
        yield
    finally:
        del kernel.run  # back to the class's method


def kernel_times(operator: str, B: int, M: int, cycles: int, launch: dict | None = None) -> dict:
    bench.OP = bench.Operator(operator)
    Hk = 16 if operator == "gdn" else 32
    s = bench.Shape(B=B, Hk=Hk, HV=32, K=128, V=128)
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    st = bench.make_deltalog_set(torch, s, M, True, dev, gen)
    x = bench.make_inputs(torch, s, torch.bfloat16, dev, gen)

    def step():
        bench.OP.decode(*x, st["base"], st["log_decay"], st["k_log"], st["u_log"], st["decay_log"], st["length"],
                        st["workspace"], state_v_first=True, launch=launch)

    for _ in range(2 * M):  # compile both phases, end at length 0
        step()
    torch.cuda.synchronize()
    assert int(st["length"].max()) == 0
    if not cycles:  # --cycles 0: the 2·M warm-up steps only, for Nsight Compute (ncu --launch-skip ...)
        return {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(cycles * M):
            step()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if "_deltalog_" in e.name and e.device_type.name == "CUDA"),
                    key=lambda e: e.time_range.start)
    names = [e.name for e in events]
    assert len(events) == 2 * cycles * M, (len(events), names[:4])
    out = {}
    for c in range(M):  # step c of each cycle: live length c, the last one merges
        prep = [events[2 * (k * M + c)].time_range.elapsed_us() for k in range(cycles)]
        dec = [events[2 * (k * M + c) + 1].time_range.elapsed_us() for k in range(cycles)]
        out[f"L={c}" + (" merge" if c == M - 1 else "")] = dict(prepare_us=statistics.median(prep),
                                                               decode_us=statistics.median(dec))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--ms", type=int, nargs="+", default=[4, 8])
    p.add_argument("--operators", nargs="+", default=["gdn", "kda", "rwkv6"])
    p.add_argument("--cycles", type=int, default=6)
    p.add_argument("--prepare-warps", type=int, nargs="+", default=[0], help="0: the launcher's default")
    p.add_argument("--prepare-maxnreg", type=int, nargs="+", default=[0], help="0: no register cap")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this script profiles the Triton kernels on a GPU (there is no CPU mode)")
    result = dict(batch=args.batch, device=torch.cuda.get_device_name(), torch=torch.__version__, rows={})
    runs = [(op, M, pw, cap) for op in args.operators for M in args.ms for pw in args.prepare_warps
            for cap in args.prepare_maxnreg]
    for op, M, pw, cap in runs:
        with prepare_register_cap(op, cap):
            t = kernel_times(op, args.batch, M, args.cycles, dict(prepare_warps=pw or None))
        tag = f"{op} M={M}" + (f" prepare_warps={pw}" if pw else "") + (f" maxnreg={cap}" if cap else "")
        result["rows"][tag] = t
        if not t:
            continue
        app = [v for k, v in t.items() if "merge" not in k]
        mer = next(v for k, v in t.items() if "merge" in k)
        prep, dec = statistics.mean(a["prepare_us"] for a in app), statistics.mean(a["decode_us"] for a in app)
        print(f"{tag:28s} B={args.batch}: appends prepare {prep:6.1f} + decode {dec:6.1f} us (mean over L);  merge "
              f"prepare {mer['prepare_us']:6.1f} + decode {mer['decode_us']:6.1f} us;  by L: "
              + ", ".join(f"{k}: {v['prepare_us']:.1f}+{v['decode_us']:.1f}" for k, v in t.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
