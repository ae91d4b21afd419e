"""Experiment: a GDN DeltaLog decode step in one launch of one program per (row, value head).

The package's kernel (``hf_deltalog.kernels.gdn.fused_deltalog``) takes two launches per step: a prepare kernel forms
the replay coefficients once per key head, then one-warp programs decode one ``[8, K]`` base tile each. Rounds 20–21
(``eval/results/h200/NOTES.md``) measured a single launch of tile programs that each recompute the coefficients: 1.3×
slower. This probe measures the other single-launch organisation: one program per (row, value head) forms its
coefficients once (a GQA group's ``G`` value heads each do it: ``G``× the key-side work instead of the 16×–32× of
rounds 20–21) and then walks the head's ``V / BV`` value tiles in a loop, the next tile's base load issued before the
current tile is reduced (``prefetch``) or by Triton's loop pipeliner (``stages``). No workspace; the row's ``length``
is written by the row's last program, found with an atomic count (``acq_rel``), so a launch never races on it.

V-first base only (the benchmark's fastest layout). Same semantics as
:func:`hf_deltalog.kernels.gdn.naive.naive_deltalog_gdn_decode`, buffer for buffer (``--check``, CPU interpreter or
GPU). ``--bench`` (GPU): CUDA-graph-timed whole cycles of both kernels in one process, passes in opposite orders.

    TRITON_INTERPRET=1 python eval/gdn_grouped_probe.py --check      # CPU: small shapes against the reference
    python eval/gdn_grouped_probe.py --check --bench --out DIR        # H200: correctness, then the A/B
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))


@triton.jit
def _gdn_grouped_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, base_ptr, log_decay_ptr, k_log_ptr, u_log_ptr, decay_log_ptr,
    length_ptr, count_ptr, scale,
    stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh, stride_gb, stride_gh, stride_bb, stride_bh,
    HK: tl.constexpr, HV: tl.constexpr, G: tl.constexpr, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, BC: tl.constexpr, NV: tl.constexpr, PREFETCH: tl.constexpr,
    STAGES: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    i_hv = pid % HV
    i_b = pid // HV
    i_hk = i_hv // G
    bh = i_b * HV + i_hv
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    offs_v = tl.arange(0, BV)
    p_tile = base_ptr + bh * (V * K) + offs_v[:, None] * K + offs_k[None, :]  # tile 0 of [V, K]
    if PREFETCH:  # the first tile's load goes out before the key-side work
        h_next = tl.load(p_tile, mask=(offs_v[:, None] < V) & mask_k[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_b * stride_qb + i_hk * stride_qh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + i_b * stride_kb + i_hk * stride_kh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    L = tl.maximum(tl.minimum(tl.load(length_ptr + i_b), C + 1), -2147483648).to(tl.int32)
    g_t = tl.load(g_ptr + i_b * stride_gb + i_hv * stride_gh).to(tl.float32)
    beta = tl.load(beta_ptr + i_b * stride_bb + i_hv * stride_bh).to(tl.float32)
    ell = tl.load(log_decay_ptr + bh)
    if C > 0:
        offs_c = tl.arange(0, BC)
        mask_c = offs_c < C
        b_kl = tl.load(k_log_ptr + (i_b * HK + i_hk) * (C * K) + offs_c[:, None] * K + offs_k[None, :],
                       mask=mask_c[:, None] & mask_k[None, :], other=0.0)
        lam_next = tl.load(decay_log_ptr + bh * C + offs_c + 1, mask=offs_c + 1 < C, other=0.0)
    b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
    b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
    b_q = b_q * scale
    qk = tl.sum(b_q * b_k, axis=0)
    is_merge = L >= C
    g_t = tl.maximum(g_t, -104.0, propagate_nan=tl.PropagateNan.ALL)
    ell = ell + g_t
    a = tl.exp(ell)
    if C > 0:
        live = (offs_c < L) & mask_c
        b_kl = tl.where(live[:, None], b_kl, 0.0)
        lam_next = tl.where((offs_c + 1 < L) & live, lam_next, 0.0)
        w = tl.where(live, tl.exp(tl.cumsum(lam_next, axis=0, reverse=True) + g_t), 0.0)  # [BC]
        wq = w * tl.sum(b_kl * b_q[None, :], axis=1)
        wk = w * tl.sum(b_kl * b_k[None, :], axis=1)
    for j in tl.range(0, NV, num_stages=STAGES):
        v_r = j * BV + offs_v
        mask_r = v_r < V
        mask_t = mask_r[:, None] & mask_k[None, :]
        if PREFETCH:
            b_h = h_next
            h_next = tl.load(p_tile + (j + 1) * (BV * K), mask=((v_r + BV) < V)[:, None] & mask_k[None, :] & (j + 1 < NV),
                             other=0.0)
        else:
            b_h = tl.load(p_tile + j * (BV * K), mask=mask_t, other=0.0)
        s_k = a * tl.sum(b_h * b_k[None, :], axis=1)
        s_q = a * tl.sum(b_h * b_q[None, :], axis=1)
        if C > 0:
            mask_cr = live[:, None] & mask_r[None, :]
            b_u = tl.load(u_log_ptr + (bh * C + offs_c[:, None]) * V + v_r[None, :], mask=mask_cr, other=0.0)
            s_k += tl.sum(wk[:, None] * b_u, axis=0)
            s_q += tl.sum(wq[:, None] * b_u, axis=0)
        b_v = tl.load(v_ptr + i_b * stride_vb + i_hv * stride_vh + v_r, mask=mask_r, other=0.0).to(tl.float32)
        u_new = beta * (b_v - s_k)
        tl.store(o_ptr + bh * V + v_r, (s_q + qk * u_new).to(o_ptr.dtype.element_ty), mask=mask_r)
        if is_merge:
            b_s = a * b_h + u_new[:, None] * b_k[None, :]
            if C > 0:
                p_kl = k_log_ptr + (i_b * HK + i_hk) * (C * K) + offs_k
                p_ul = u_log_ptr + bh * (C * V) + v_r
                for i in tl.static_range(C):
                    w_i = tl.sum(tl.where(offs_c == i, w, 0.0), axis=0)
                    k_i = tl.load(p_kl + i * K, mask=mask_k, other=0.0)
                    u_i = w_i * tl.load(p_ul + i * V, mask=mask_r, other=0.0)
                    b_s += u_i[:, None] * k_i[None, :]
            tl.store(p_tile + j * (BV * K), b_s, mask=mask_t)
        else:
            if C > 0:  # noqa: SIM102 - C is a constexpr, L a runtime value
                if L >= 0:
                    tl.store(u_log_ptr + (bh * C + L) * V + v_r, u_new, mask=mask_r)
    if C > 0:  # noqa: SIM102 - C is a constexpr, L a runtime value
        if (L >= 0) & (L < C):
            tl.store(decay_log_ptr + bh * C + L, g_t)
            if i_hv % G == 0:  # one value head of the group writes the key head's slot
                tl.store(k_log_ptr + (i_b * HK + i_hk) * (C * K) + L * K + offs_k, b_k, mask=mask_k)
    tl.store(log_decay_ptr + bh, tl.where(is_merge, 0.0, ell))
    # the row's last program writes its length: every program of the row has read it by then
    done = tl.atomic_add(count_ptr + i_b, 1, sem="acq_rel")
    if done == HV - 1:
        tl.store(length_ptr + i_b, tl.where(is_merge, 0, L + 1).to(length_ptr.dtype.element_ty))
        tl.store(count_ptr + i_b, 0)


def grouped_gdn_decode(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, count, *, block_v=32,
                       num_warps=4, prefetch=True, stages=1):
    """One step, V-first base ``[B, HV, V, K]``; ``count``: int32 ``[B]`` zeros (left zero after each launch)."""
    B, _, Hk, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    C = k_log.shape[2]
    o = torch.empty(B, 1, HV, V, device=q.device, dtype=q.dtype)
    BK = triton.next_power_of_2(K)
    BV = min(block_v, triton.next_power_of_2(V))
    _gdn_grouped_kernel[(B * HV,)](
        q, k, v, g, beta, o, base, log_decay, k_log, u_log, decay_log, length, count, K**-0.5,
        q.stride(0), q.stride(2), k.stride(0), k.stride(2), v.stride(0), v.stride(2), g.stride(0), g.stride(2),
        beta.stride(0), beta.stride(2),
        HK=Hk, HV=HV, G=HV // Hk, K=K, V=V, C=C, BK=BK, BV=BV, BC=triton.next_power_of_2(max(C, 1)),
        NV=triton.cdiv(V, BV), PREFETCH=prefetch, STAGES=stages, num_warps=num_warps,
    )
    return o


def _buffers(B, Hk, HV, K, V, C, device, gen, phases):
    base = (torch.randn(B, HV, V, K, generator=gen) * 0.05).to(device)
    log_decay = (-torch.rand(B, HV, generator=gen)).to(device)
    k_log = torch.nn.functional.normalize(torch.randn(B, Hk, C, K, generator=gen), dim=-1).to(device)
    u_log = (torch.randn(B, HV, C, V, generator=gen) * 0.1).to(device)
    decay_log = (-torch.rand(B, HV, C, generator=gen) * 0.3).to(device)
    length = torch.tensor(phases, dtype=torch.int32).to(device)
    return dict(base=base, log_decay=log_decay, k_log=k_log, u_log=u_log, decay_log=decay_log, length=length)


def check(device, variants) -> list[dict]:
    """Several steps from mixed phases against the reference, buffer for buffer (live log slots)."""
    from hf_deltalog.kernels.gdn.naive import naive_deltalog_gdn_decode

    rows = []
    for (B, Hk, HV, K, V, M) in [(4, 2, 4, 16, 32, 4), (3, 1, 2, 32, 16, 1), (5, 2, 4, 16, 32, 2), (4, 2, 4, 32, 16, 8)]:
        C = M - 1
        for kw in variants:
            gen = torch.Generator().manual_seed(B * 100 + M)
            phases = [i % (C + 1) for i in range(B)]
            ref = _buffers(B, Hk, HV, K, V, C, device, gen, phases)
            ours = {n: t.clone() for n, t in ref.items()}
            count = torch.zeros(B, dtype=torch.int32, device=device)
            worst = 0.0
            for step in range(M + 2):
                q = torch.randn(B, 1, Hk, K, generator=gen).to(device)
                k = torch.randn(B, 1, Hk, K, generator=gen).to(device)
                v = torch.randn(B, 1, HV, V, generator=gen).to(device)
                g = (-torch.rand(B, 1, HV, generator=gen) * 0.5).to(device)
                beta = torch.rand(B, 1, HV, generator=gen).to(device)
                o_ref = naive_deltalog_gdn_decode(q, k, v, g, beta, *ref.values(), state_v_first=True)
                o = grouped_gdn_decode(q, k, v, g, beta, *ours.values(), count, block_v=kw["block_v"],
                                       num_warps=kw["num_warps"], prefetch=kw["prefetch"], stages=kw["stages"])
                worst = max(worst, (o.float() - o_ref.float()).abs().max().item())
                L = ref["length"].long()
                for name in ("base", "log_decay"):
                    worst = max(worst, (ours[name] - ref[name]).abs().max().item())
                for name in ("k_log", "u_log", "decay_log"):
                    for b in range(B):  # live slots only: stale ones are not part of the state
                        n = int(L[b])
                        if n:
                            worst = max(worst, (ours[name][b, :, :n] - ref[name][b, :, :n]).abs().max().item())
                same_len = torch.equal(ours["length"], ref["length"]) and not count.any()
                if not same_len:
                    worst = float("inf")
            rows.append(dict(shape=[B, Hk, HV, K, V, M], **kw, max_abs_diff=worst, ok=worst <= 2e-5))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def bench(out: Path, Bs, Ms, variants, passes=2) -> list[dict]:
    """Whole cycles (M − 1 appends + 1 merge, all rows in phase, as bench_gdn_decode.py's aligned runs), CUDA graphs,
    median of trials; the package kernel (default launch) and each variant, in one process."""
    from bench_gdn_decode import GpuTimer

    from hf_deltalog.kernels.gdn import deltalog_gdn_workspace, fused_deltalog_gdn_decode

    timer = GpuTimer(trials=7)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    Hk, HV, K, V = 16, 32, 128, 128
    rows = []
    kinds = [("package", None)] + [
        (f"grouped bv{v['block_v']} w{v['num_warps']} pf{int(v['prefetch'])} st{v['stages']}", v) for v in variants]
    for p in range(passes):
        for B in Bs:
            state_bytes = B * HV * K * V * 4
            R = max(1, min(128, -(-4 * l2 // state_bytes)))
            for M in Ms:
                C = M - 1
                for name, kw in (kinds if p % 2 == 0 else kinds[::-1]):
                    gen = torch.Generator().manual_seed(M)
                    sets, inputs = [], []
                    for _ in range(R):
                        st = _buffers(B, Hk, HV, K, V, C, "cuda", gen, [0] * B)
                        st["log_decay"].zero_()
                        st["extra"] = (deltalog_gdn_workspace(B, Hk, HV, K, C, "cuda") if kw is None
                                       else torch.zeros(B, dtype=torch.int32, device="cuda"))
                        sets.append(st)
                        inputs.append((
                            torch.randn(B, 1, Hk, K, generator=gen).to("cuda", torch.bfloat16),
                            torch.randn(B, 1, Hk, K, generator=gen).to("cuda", torch.bfloat16),
                            torch.randn(B, 1, HV, V, generator=gen).to("cuda", torch.bfloat16),
                            (-torch.rand(B, 1, HV, generator=gen) * 0.5).to("cuda"),
                            torch.rand(B, 1, HV, generator=gen).to("cuda")))

                    def step(r, sets=sets, inputs=inputs, kw=kw):
                        st, x = sets[r], inputs[r]
                        bufs = (st["base"], st["log_decay"], st["k_log"], st["u_log"], st["decay_log"], st["length"])
                        if kw is None:
                            return lambda: fused_deltalog_gdn_decode(*x, *bufs, st["extra"], state_v_first=True)
                        return lambda: grouped_gdn_decode(*x, *bufs, st["extra"], **kw)

                    fns = [step(r) for r in range(R)] * M
                    timer.warm(fns)
                    for st in sets:
                        st["length"].zero_()
                    graph = timer.capture(fns)
                    us = timer.time_single_graph(graph, M * R)
                    ok = all(int(st["length"].max()) == 0 for st in sets)
                    phases = [timer.capture([step(r) for r in range(R)]) for _ in range(M)]
                    per_phase, _ = timer.time_graphs(phases, [R] * M)
                    rows.append(dict(kind=name, B=B, M=M, pass_=p, amortized_us=round(us, 2),
                                     append_us=round(sum(per_phase[:-1]) / max(M - 1, 1), 2),
                                     merge_us=round(per_phase[-1], 2), sets=R, lengths_back_to_0=ok))
                    print(json.dumps(rows[-1]), flush=True)
                    graph = phases = sets = inputs = None  # free the states before the next kind's
                    torch.cuda.empty_cache()
                out.mkdir(parents=True, exist_ok=True)
                (out / "bench.json").write_text(json.dumps(rows, indent=1))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--batches", type=int, nargs="+", default=[128, 512])
    p.add_argument("--ms", type=int, nargs="+", default=[8, 16])
    p.add_argument("--variants", nargs="+", default=["32:4:1:1", "16:2:1:1", "8:1:1:1", "32:4:0:2", "16:4:0:3"],
                   help="block_v:num_warps:prefetch:stages")
    p.add_argument("--out", type=Path, default=Path("/tmp/gdn_grouped_probe"))
    a = p.parse_args(argv)
    variants = []
    for s in a.variants:
        bv, nw, pf, st = (int(x) for x in s.split(":"))
        variants.append(dict(block_v=bv, num_warps=nw, prefetch=bool(pf), stages=st))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    failed = False
    if a.check:
        rows = check(device, variants)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "check.json").write_text(json.dumps(rows, indent=1))
        failed = not all(r["ok"] for r in rows)
        print(f"check: {sum(r['ok'] for r in rows)} of {len(rows)} pass", flush=True)
    if a.bench and not failed:
        bench(a.out, a.batches, a.ms, variants)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
