"""How fast can a Triton kernel stream a DeltaLog base on the GPU? A probe for the append step's memory pattern.

An append step reads the whole fp32 base once (``[B, HV, V, K]``, V-first) in ``[8, K]`` tiles, one warp per tile
(65,536 programs at B = 128, HV = 32, K = V = 128), and writes only a few bytes per tile. The GDN append runs at
0.84-0.87 of its floor at B = 128 (BENCHMARKS.md). This script times that read pattern alone, with no log, against
persistent programs that loop over tiles with Triton's loop pipeliner (``tl.range(..., num_stages=S)``: the next
tiles' loads become asynchronous copies into shared memory, in flight while the current tile is reduced), and
against the copy bandwidth. Each kernel computes ``o[t, :] = base_tile[t] @ q[head(t)]`` (fp32), checked against
torch.

    python eval/stream_read_probe.py [--batch 128] [--out eval/results/h200/stream_read_probe.json]

Prints µs per pass over the base and GB/s (base bytes / time); writes the table as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def direct_read(base_ptr, q_ptr, o_ptr, K: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr):
    """One program per ``[BV, K]`` tile (the append's grid)."""
    t = tl.program_id(0).to(tl.int64)
    offs_k = tl.arange(0, K)
    offs_v = tl.arange(0, BV)
    q = tl.load(q_ptr + (t // NV) * K + offs_k).to(tl.float32)
    h = tl.load(base_ptr + (t * BV + offs_v)[:, None] * K + offs_k[None, :])
    tl.store(o_ptr + t * BV + offs_v, tl.sum(h * q[None, :], axis=1))


@triton.jit
def persistent_read(base_ptr, q_ptr, o_ptr, n_tiles, K: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr,
                    STAGES: tl.constexpr):
    """Programs that loop over tiles ``pid, pid + P, ...``; with STAGES > 1 the pipeliner prefetches the next tiles."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs_k = tl.arange(0, K)
    offs_v = tl.arange(0, BV)
    for t in tl.range(pid, n_tiles, nprog, num_stages=STAGES):
        # int32 offsets: at most 2^31 elements (B <= 512 here)
        q = tl.load(q_ptr + (t // NV) * K + offs_k).to(tl.float32)
        h = tl.load(base_ptr + (t * BV + offs_v)[:, None] * K + offs_k[None, :])
        tl.store(o_ptr + t * BV + offs_v, tl.sum(h * q[None, :], axis=1))


@triton.jit
def ladder_read(base_ptr, q_ptr, k_ptr, ws_ptr, u_ptr, v_ptr, o_ptr, un_ptr, K: tl.constexpr, BV: tl.constexpr,
                NV: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, QK: tl.constexpr, LOG: tl.constexpr,
                EPILOGUE: tl.constexpr):
    """The append's work added step by step onto ``direct_read`` (one program per ``[BV, K]`` tile):
    QK: raw bf16 q and k of the tile's head, each l2-normalised, and two reductions over the tile (S q̂, S k̂);
    LOG: the row's log length L from a workspace, then the live ``[BC, BV]`` coefficient and value-log tiles
    folded into both results: 1 masked by L, as the decode kernel loads them; 2 all slots loaded before L arrives,
    the dead ones zeroed after; 3 a fixed mask of 3 live slots, no L at all;
    EPILOGUE: v and β loads (β read from v's buffer: a stand-in load of the same size), u = β (v − S k̂) and o
    stores (the append's outputs)."""
    t = tl.program_id(0).to(tl.int64)
    bh = t // NV
    offs_k = tl.arange(0, K)
    offs_v = tl.arange(0, BV)
    q = tl.load(q_ptr + bh * K + offs_k).to(tl.float32)
    if QK:
        k = tl.load(k_ptr + bh * K + offs_k).to(tl.float32)
        q = q * tl.rsqrt(tl.sum(q * q, axis=0) + 1e-6)
        k = k * tl.rsqrt(tl.sum(k * k, axis=0) + 1e-6)
    h = tl.load(base_ptr + (t * BV + offs_v)[:, None] * K + offs_k[None, :])
    s_q = tl.sum(h * q[None, :], axis=1)
    if QK:
        s_k = tl.sum(h * k[None, :], axis=1)
    else:
        s_k = s_q
    if LOG:
        offs_c = tl.arange(0, BC)
        p_wq = ws_ptr + bh * (2 * C + 1) + 1 + offs_c
        p_u = u_ptr + (bh * C + offs_c[:, None]) * (NV * BV) + (t % NV) * BV + offs_v[None, :]
        if LOG == 1:  # as the decode kernel: the loads wait for L (their mask)
            L = tl.load(ws_ptr + bh * (2 * C + 1)).to(tl.int32)
            live = (offs_c < L) & (offs_c < C)
            wq = tl.load(p_wq, mask=live, other=0.0)
            wk = tl.load(p_wq + C, mask=live, other=0.0)
            u = tl.load(p_u, mask=live[:, None], other=0.0)
        elif LOG == 2:  # every slot loaded at once, the dead ones zeroed after L arrives
            L = tl.load(ws_ptr + bh * (2 * C + 1)).to(tl.int32)
            live = (offs_c < L) & (offs_c < C)
            wq = tl.where(live, tl.load(p_wq, mask=offs_c < C, other=0.0), 0.0)
            wk = tl.where(live, tl.load(p_wq + C, mask=offs_c < C, other=0.0), 0.0)
            u = tl.where(live[:, None], tl.load(p_u, mask=(offs_c < C)[:, None], other=0.0), 0.0)
        else:  # no length at all: a fixed mask of 3 live slots (the cost of the tiles without the L round trip)
            live = offs_c < 3
            wq = tl.load(p_wq, mask=live, other=0.0)
            wk = tl.load(p_wq + C, mask=live, other=0.0)
            u = tl.load(p_u, mask=live[:, None], other=0.0)
        s_q += tl.sum(wq[:, None] * u, axis=0)
        s_k += tl.sum(wk[:, None] * u, axis=0)
    if EPILOGUE:
        v = tl.load(v_ptr + t * BV + offs_v).to(tl.float32)
        beta = tl.load(v_ptr + bh).to(tl.float32)
        tl.store(un_ptr + t * BV + offs_v, beta * (v - s_k))
        tl.store(o_ptr + t * BV + offs_v, s_q)
    else:
        tl.store(o_ptr + t * BV + offs_v, s_q + 0.0 * s_k)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--stages", type=int, nargs="*", default=[1, 2, 3, 4], help="num_stages of the persistent runs")
    p.add_argument("--ladder", action="store_true", help="also the append's extra work added step by step")
    p.add_argument("--direct-only", action="store_true", help="only the append's grid ([8, K] tiles, 1 warp)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this probe times Triton kernels on a GPU (there is no CPU mode)")
    dev = torch.device("cuda")
    B, HV, K, V, BV = args.batch, args.heads, 128, 128, 8
    NV = V // BV
    base = torch.randn(B, HV, V, K, device=dev)
    q = torch.randn(B, HV, K, device=dev, dtype=torch.bfloat16)
    n_tiles = B * HV * NV
    o = torch.empty(n_tiles * BV, device=dev)
    ref = torch.einsum("bhvk,bhk->bhv", base, q.float()).reshape(-1)
    nbytes = base.numel() * 4
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    x = torch.empty(1 << 28, device=dev)  # 1 GiB
    y = torch.empty_like(x)
    copy_ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=50, rep=500, return_mode="median")
    copy_bw = 2 * x.numel() * 4 / (copy_ms * 1e-3) / 1e9
    del x, y
    rows = []

    def graph_us(fn, launches: int = 20, repeats: int = 30) -> float:
        """Median µs per launch of a CUDA graph of ``launches`` back-to-back launches (no host launch gaps)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(repeats):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            out.append(1e3 * start.elapsed_time(end) / launches)
        return statistics.median(out)

    def run(name, fn, **meta):
        o.zero_()
        fn()
        torch.cuda.synchronize()
        err = (o - ref).abs().max().item() / ref.abs().max().item()
        times = [triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") for _ in range(3)]
        us = 1e3 * statistics.median(times)
        g_us = graph_us(fn)
        row = dict(name=name, us=us, graph_us=g_us, GBps=nbytes / (us * 1e-6) / 1e9,
                   graph_GBps=nbytes / (g_us * 1e-6) / 1e9, rel_err=err, **meta)
        rows.append(row)
        print(f"{name:44s} {us:8.1f} us  {row['GBps']:7.0f} GB/s  ({row['GBps'] / copy_bw:5.2f} of copy BW);  "
              f"graph {g_us:8.1f} us  {row['graph_GBps']:7.0f} GB/s  ({row['graph_GBps'] / copy_bw:5.2f})  "
              f"err {err:.1e}", flush=True)

    print(f"B={B} HV={HV} K=V=128: base {nbytes / 2**20:.0f} MiB, {n_tiles} tiles, {sms} SMs, "
          f"copy bandwidth {copy_bw:.0f} GB/s (1 GiB device-to-device copy, read + write)", flush=True)
    run("direct, 1 warp, one program per tile", lambda: direct_read[(n_tiles,)](base, q, o, K=K, BV=BV, NV=NV,
                                                                                 num_warps=1))
    if args.ladder:  # the append's extra work, step by step (o is not checked against torch here: err is n/a)
        C, BC, Lv = 7, 8, 3
        k = torch.randn_like(q)
        ws = torch.zeros(B * HV, 2 * C + 1, device=dev)
        ws[:, 0] = Lv
        ws[:, 1:] = torch.randn(B * HV, 2 * C, device=dev) * 0.1
        u = torch.randn(B, HV, C, V, device=dev) * 0.1
        v = torch.randn(B, HV, V, device=dev, dtype=torch.bfloat16)
        un = torch.empty_like(o)
        steps = [("ladder: + raw k, l2 norms, second reduction", dict(QK=True, LOG=False, EPILOGUE=False)),
                 ("ladder: + log length and live log tiles", dict(QK=True, LOG=1, EPILOGUE=False)),
                 ("ladder: + v, beta, u and o stores", dict(QK=True, LOG=1, EPILOGUE=True)),
                 ("ladder variant: log tiles loaded before L", dict(QK=True, LOG=2, EPILOGUE=True)),
                 ("ladder variant: log tiles without L (fixed 3)", dict(QK=True, LOG=3, EPILOGUE=True)),
                 ("ladder variant: stores, no log", dict(QK=True, LOG=0, EPILOGUE=True))]
        for name, flags in steps:
            run(name, lambda flags=flags: ladder_read[(n_tiles,)](base, q, k, ws, u, v, o, un, K=K, BV=BV, NV=NV, C=C,
                                                                  BC=BC, num_warps=1, **flags), **flags)
        args.stages = []
    if args.direct_only:
        args.stages = []
    for bv in () if args.direct_only else (4, 16):  # other tile heights (same output layout: BV rows per tile)
        run(f"direct, 1 warp, [{bv}, K] tiles", lambda bv=bv: direct_read[(B * HV * (V // bv),)](
            base, q, o, K=K, BV=bv, NV=V // bv, num_warps=1), block_v=bv)
    for stages in args.stages:
        for per_sm in (8, 16, 32):
            grid = min(n_tiles, sms * per_sm)
            run(f"persistent, {per_sm:2d} programs/SM, num_stages={stages}",
                lambda grid=grid, stages=stages: persistent_read[(grid,)](base, q, o, n_tiles, K=K, BV=BV, NV=NV,
                                                                          STAGES=stages, num_warps=1),
                stages=stages, programs_per_sm=per_sm)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(batch=B, heads=HV, base_bytes=nbytes, sms=sms, copy_GBps=copy_bw,
                           device=torch.cuda.get_device_name(dev), torch=torch.__version__,
                           triton=triton.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
