"""Edge inputs through the DeltaLog Triton kernels on a GPU, against the PyTorch references on the same device.

For GDN, KDA and RWKV6 (B = 3, Hk = 2 and HV = 4 for GDN / KDA, K = 64, V = 32, M = 8, 20 steps, fp32 activations):
a NaN gate in row 0 at step 5 must make row 0 NaN exactly where the reference is (the kernels' log-decay floor keeps
NaN), and a length far above C injected into row 1 at step 3 (2**32 in an int64 buffer, 2**31 - 1 in an int32 one)
must merge as in the reference. Row 2 runs normally throughout. Prints one JSON line per case and exits 1 on any
mismatch: outputs, base, log-decay and the live log slots compared with rtol = atol = 1e-4 (NaN equal to NaN), lengths
exactly (stale slots are scratch: the KDA / RWKV6 kernels keep the merge's decayed keys there).

    python eval/gpu_edge_check.py [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode
from hf_deltalog.kernels.gdn.naive import naive_deltalog_gdn_decode
from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode
from hf_deltalog.kernels.kda.naive import naive_deltalog_kda_decode
from hf_deltalog.kernels.rwkv6.fused_deltalog import deltalog_rwkv6_workspace, fused_deltalog_rwkv6_decode
from hf_deltalog.kernels.rwkv6.naive import naive_deltalog_rwkv6_decode

B, HK, HV, K, V, M, T = 3, 2, 4, 64, 32, 8, 20
C = M - 1


def case(op: str, dev: str, length_dtype: torch.dtype, gen: torch.Generator, B=B, HK=HK, HV=HV, K=K, V=V, C=C, T=T):
    """(per-step inputs [T entries], base, log buffers, workspace, reference, kernel, index of the gate input).

    The inputs are drawn from ``gen`` on its own device (a CPU generator: drawn there, then moved to ``dev``; a CUDA
    one draws on the GPU, for states too large to draw on the host). RWKV6 has no key heads (``HK`` unused)."""
    r = lambda *s: torch.randn(*s, generator=gen, device=gen.device).to(dev)  # noqa: E731
    u = lambda *s: torch.rand(*s, generator=gen, device=gen.device).to(dev)  # noqa: E731
    length = torch.zeros(B, dtype=length_dtype, device=dev)
    if op == "gdn":
        x = [r(B, T, HK, K), r(B, T, HK, K), r(B, T, HV, V), -u(B, T, HV) * 0.1, u(B, T, HV)]
        log = [torch.zeros(B, HV, device=dev), torch.zeros(B, HK, C, K, device=dev), torch.zeros(B, HV, C, V, device=dev),
               torch.zeros(B, HV, C, device=dev), length]
        return x, r(B, HV, K, V), log, deltalog_gdn_workspace(B, HK, HV, K, C, dev), naive_deltalog_gdn_decode, \
            fused_deltalog_gdn_decode, 3
    if op == "kda":
        x = [r(B, T, HK, K), r(B, T, HK, K), r(B, T, HV, V), -u(B, T, HV, K) * 0.1, u(B, T, HV)]
        log = [torch.zeros(B, HV, K, device=dev), torch.zeros(B, HK, C, K, device=dev),
               torch.zeros(B, HV, C, V, device=dev), torch.zeros(B, HV, C, K, device=dev), length]
        return x, r(B, HV, K, V), log, deltalog_kda_workspace(B, HK, HV, K, C, dev), naive_deltalog_kda_decode, \
            fused_deltalog_kda_decode, 3
    x = [r(B, T, HV, K), r(B, T, HV, K) * 0.3, r(B, T, HV, V), -u(B, T, HV, K) * 0.1, r(HV, K)]
    log = [torch.zeros(B, HV, K, device=dev), torch.zeros(B, HV, C, K, device=dev), torch.zeros(B, HV, C, V, device=dev),
           torch.zeros(B, HV, C, K, device=dev), length]
    return x, r(B, HV, K, V), log, deltalog_rwkv6_workspace(B, HV, K, C, dev), naive_deltalog_rwkv6_decode, \
        fused_deltalog_rwkv6_decode, 3


def run(op: str, dev: str, length_dtype: torch.dtype, big: int) -> dict:
    x, base, log, ws, naive, kernel, gate = case(op, dev, length_dtype, torch.Generator().manual_seed(0))
    x[gate][0, 5] = float("nan")
    ref, ker = [base.clone(), *(t.clone() for t in log)], [base.clone(), *(t.clone() for t in log)]
    worst, ok, nan_seen = 0.0, True, False
    for t in range(T):
        if t == 3:
            ref[-1][1] = big
            ker[-1][1] = big
        xs = [a[:, t:t + 1] for a in x[:4]] + ([x[4][:, t:t + 1]] if op != "rwkv6" else [x[4]])
        o_ref = naive(*xs, *ref)
        o = kernel(*xs, *ker, ws)
        nan_seen |= bool(torch.isnan(o[0]).any())
        assert torch.equal(ker[-1], ref[-1]), (op, t, ker[-1].tolist(), ref[-1].tolist())
        live = torch.arange(C, device=dev)[None, :] < ref[-1][:, None].clamp(0, C)  # [B, C]: slots a row still reads
        pairs = [(o, o_ref), (ker[0], ref[0]), (ker[1], ref[1])]  # o, base, log_decay
        for a, b in zip(ker[2:5], ref[2:5]):  # the logs: live slots only (merge rows keep scratch in stale ones)
            m = live.view(B, 1, C, *([1] * (a.dim() - 3))).expand_as(a)
            pairs.append((a[m], b[m]))
        for a, b in pairs:
            if a.is_floating_point():
                ok &= torch.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True)
                both = torch.isfinite(a) & torch.isfinite(b)
                worst = max(worst, float((a - b)[both].abs().max()) if both.any() else 0.0)
        ok &= bool(torch.isfinite(o[1:]).all())
    return dict(op=op, length_dtype=str(length_dtype), injected_length=big, ok=bool(ok and nan_seen),
                row0_nan_seen=nan_seen, max_abs_diff_finite=worst, final_length=ker[-1].tolist())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    results = [run(op, a.device, dt, big) for op in ("gdn", "kda", "rwkv6")
               for dt, big in ((torch.int64, 2**32), (torch.int32, 2**31 - 1))]
    for r in results:
        print(json.dumps(r))
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
