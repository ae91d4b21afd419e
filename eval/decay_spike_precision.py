"""How close DeltaLog's fp32 decode stays to float64 when the per-step log-decays mix rare strong decays ("spikes")
with weak ones, against the dense fp32 recurrence: the three PyTorch references, one row per operator and decay kind.

Why: an earlier representation kept, per entry ``i`` of the log, the cumulative log-decay ``Λ_i`` since the last merge
and replayed the entry with ``exp(ℓ̄ − Λ_i)`` of two fp32 running sums. After a strong decay (a log-decay of −20 … −80
in one step) both carried an absolute rounding error of about ``|ℓ̄|·2⁻²⁴``, which their difference, the small
log-decay of the steps after the spike, inherited (10–15× the dense recurrence's error). Since 2026-11-30 each entry
keeps its own step's log-decay and ``ℓ̄ − Λ_i`` is summed over the later entries from the newest backwards
(``hf_deltalog.kernels.common.later_decay_sums``; the Triton kernels compute the same), so DeltaLog stays within about
the dense recurrence's error; this script is the check. The dense recurrence multiplies by ``exp(g_t)`` one step at a
time. With weak decays only (the ``smooth`` rows, the benchmarks' inputs) the two errors are alike.

For each operator (GDN: scalar decay per head; KDA and RWKV6: a decay per key channel) and decay kind, T decode steps
(B = 4, Hk = 2, HV = 4 for GDN/KDA, H = 2 for RWKV6, K = 16, V = 8, M = 8), reports the largest output error relative
to the float64 dense recurrence's largest output, for the dense fp32 recurrence and for DeltaLog's fp32 decode, and
their ratio. Fixed seeds; CPU; a few seconds (the Triton kernels need ``TRITON_INTERPRET=1`` on a CPU: ~2 min).

    python eval/decay_spike_precision.py [--steps 48] [--out eval/results/decay_spike_precision.json]
    TRITON_INTERPRET=1 python eval/decay_spike_precision.py --backends torch triton
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_types import positive_int

from hf_deltalog.interpreter import interpreting
from hf_deltalog.kernels.gdn import naive_deltalog_gdn_decode, naive_recurrent_gated_delta_rule  # noqa: E402
from hf_deltalog.kernels.kda import naive_deltalog_kda_decode, naive_recurrent_kda  # noqa: E402
from hf_deltalog.kernels.rwkv6 import naive_deltalog_rwkv6_decode, naive_recurrent_rwkv6  # noqa: E402

B, HK, HV, K, V, M = 4, 2, 4, 16, 8, 8


def log_decays(shape, kind: str, g: torch.Generator) -> torch.Tensor:
    """Per-step log-decays: "smooth" in [−0.05, 0]; "spiky": the same with 15 % of the entries in [−80, −20]."""
    w = -torch.rand(*shape, generator=g) * 0.05
    if kind == "spiky":
        spike = torch.rand(*shape, generator=g) < 0.15
        w = torch.where(spike, -20.0 - 60.0 * torch.rand(*shape, generator=g), w)
    return w


def _decode_fn(op: str, backend: str, workspace_args: tuple):
    """The DeltaLog decode step of `op` on `backend` ("torch": the reference; "triton": the kernel, with a workspace
    of `workspace_args` = the workspace function's arguments)."""
    if backend == "torch":
        return {"gdn": naive_deltalog_gdn_decode, "kda": naive_deltalog_kda_decode,
                "rwkv6": naive_deltalog_rwkv6_decode}[op]
    import importlib

    module = importlib.import_module(f"hf_deltalog.kernels.{op}.fused_deltalog")
    fn = getattr(module, f"fused_deltalog_{op}_decode")
    ws_fn = getattr(module, f"deltalog_{op}_workspace")
    ws = ws_fn(*workspace_args, "cpu")
    return lambda *a, **kw: fn(*a, workspace=ws, **kw)


def run(op: str, kind: str, T: int, seed: int = 0, backend: str = "torch") -> dict:
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    C = M - 1
    if op == "rwkv6":
        H = 2
        r, k, v, u = rnd(B, T, H, K), rnd(B, T, H, K), rnd(B, T, H, V), 0.5 * rnd(H, K)
        w = log_decays((B, T, H, K), kind, g)
        dense = lambda *x: naive_recurrent_rwkv6(*x, scale=1.0)[0]  # noqa: E731
        o64, o32 = dense(*(x.double() for x in (r, k, v, w, u))), dense(r, k, v, w, u)
        log = dict(base=torch.zeros(B, H, K, V), log_decay=torch.zeros(B, H, K), k_log=torch.zeros(B, H, C, K),
                   v_log=torch.zeros(B, H, C, V), decay_log=torch.zeros(B, H, C, K),
                   length=torch.zeros(B, dtype=torch.int64))
        decode = _decode_fn(op, backend, (B, H, K, C))
        step = lambda t: decode(r[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], w[:, t:t + 1], u,  # noqa: E731
                                scale=1.0, **log)
    else:
        q, k, v, beta = rnd(B, T, HK, K), rnd(B, T, HK, K), rnd(B, T, HV, V), torch.rand(B, T, HV, generator=g)
        per_key = (K,) if op == "kda" else ()
        gate = log_decays((B, T, HV, *per_key), kind, g)
        dense_fn = naive_recurrent_kda if op == "kda" else naive_recurrent_gated_delta_rule
        dense = lambda *x: dense_fn(*x, use_qk_l2norm_in_kernel=True)[0]  # noqa: E731
        o64, o32 = dense(*(x.double() for x in (q, k, v, gate, beta))), dense(q, k, v, gate, beta)
        log = dict(base=torch.zeros(B, HV, K, V), log_decay=torch.zeros(B, HV, *per_key),
                   k_log=torch.zeros(B, HK, C, K), u_log=torch.zeros(B, HV, C, V),
                   decay_log=torch.zeros(B, HV, C, *per_key), length=torch.zeros(B, dtype=torch.int64))
        decode = _decode_fn(op, backend, (B, HK, HV, K, C))
        step = lambda t: decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], gate[:, t:t + 1],  # noqa: E731
                                beta[:, t:t + 1], use_qk_l2norm_in_kernel=True, **log)
    o_dl = torch.cat([step(t) for t in range(T)], dim=1)
    scale = o64.abs().max().item()
    dense_err = (o32.double() - o64).abs().max().item() / scale
    deltalog_err = (o_dl.double() - o64).abs().max().item() / scale
    return dict(operator=op, backend=backend, decays=kind, steps=T, merge_interval=M, dense_fp32_error=dense_err,
                deltalog_fp32_error=deltalog_err, ratio=deltalog_err / dense_err)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=positive_int, default=48, help="decode steps per row (at least 1)")
    p.add_argument("--backends", nargs="+", default=["torch"], choices=["torch", "triton"],
                   help="triton: the Triton kernels too (on a CPU under TRITON_INTERPRET=1: a minute or two)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if "triton" in a.backends:  # the kernels run on CPU tensors: only Triton's interpreter runs them there
        if importlib.util.find_spec("triton") is None:
            p.error("--backends triton needs triton installed; use --backends torch without it")
        if not interpreting():
            p.error("--backends triton runs the Triton kernels on the CPU, which needs Triton's interpreter: set "
                    "TRITON_INTERPRET=1 in the environment before Python starts (TRITON_INTERPRET=1 python "
                    "eval/decay_spike_precision.py --backends torch triton), or use --backends torch")
    rows = [run(op, kind, a.steps, backend=be) for be in a.backends for op in ("gdn", "kda", "rwkv6")
            for kind in ("smooth", "spiky")]
    print("| backend | operator | decays | dense fp32 error | DeltaLog fp32 error | ratio |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['operator']} | {r['decays']} | {r['dense_fp32_error']:.2e} "
              f"| {r['deltalog_fp32_error']:.2e} | {r['ratio']:.1f} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(dict(rows=rows, torch=torch.__version__), indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
