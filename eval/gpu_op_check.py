"""GPU check of the registered decode ops' own argument checks (the ``triton_op`` form, a GPU's default).

``torch.ops.hf_deltalog.fused_deltalog_{gdn,kda,rwkv6}_decode`` validate their arguments in the op's body since the
2026-12-04 stop from 19:41 (before, only the Python launchers did). The CPU tests cover the opaque form under the
interpreter (tests/test_extreme_inputs.py); this script calls the ``triton_op`` form directly on a CUDA device, for
each operator (B = 2, Hk = 2, HV = 4 for GDN / KDA, H = 4 for RWKV6, K = 64, V = 32, C = 3, rows merging), with:

- a one-column workspace carved from an allocation whose remainder is another tensor, an fp64 base, a float32
  length, and a q (r) of last-dim stride 2: each must raise the launcher's error and leave every buffer (and the
  neighbouring tensor) unchanged;
- a decode tile over Triton's 2**20 elements (K = 2048, V = 1024, ``block_v`` = 1024): refused before either launch;
- valid arguments: the op's output and buffers bit-identical to the launcher's.

Prints one JSON line per case and exits 1 on any failure (and, with a message, without a CUDA device).

    python eval/gpu_op_check.py [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode
from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode
from hf_deltalog.kernels.rwkv6.fused_deltalog import deltalog_rwkv6_workspace, fused_deltalog_rwkv6_decode

OPTIONS = {  # the ops' arguments after the workspace, as the launchers pass their defaults
    "gdn": [None, True, False, 0, 0, 0, -1, 0],
    "kda": [None, True, False, 8, 1, 0],
    "rwkv6": [None, False, 8, 1, 0],
}


def case(op: str, B: int, Hk: int, HV: int, K: int, V: int, C: int, device: str, seed: int):
    """Step inputs, base, log buffers (log-decay, keys, values, decays, length) and workspace of one operator, every
    row about to merge (length = C)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, device=device)
    neg = lambda *s: -torch.rand(*s, generator=gen, device=device) * 0.1
    length = torch.full((B,), C, dtype=torch.int32, device=device)
    if op == "gdn":
        xs = [rnd(B, 1, Hk, K), rnd(B, 1, Hk, K), rnd(B, 1, HV, V), neg(B, 1, HV), torch.rand(B, 1, HV, device=device)]
        log = [neg(B, HV), rnd(B, Hk, C, K), rnd(B, HV, C, V), neg(B, HV, C), length]
        ws = deltalog_gdn_workspace(B, Hk, HV, K, C, device)
    elif op == "kda":
        xs = [rnd(B, 1, Hk, K), rnd(B, 1, Hk, K), rnd(B, 1, HV, V), neg(B, 1, HV, K),
              torch.rand(B, 1, HV, device=device)]
        log = [neg(B, HV, K), rnd(B, Hk, C, K), rnd(B, HV, C, V), neg(B, HV, C, K), length]
        ws = deltalog_kda_workspace(B, Hk, HV, K, C, device)
    else:
        xs = [rnd(B, 1, HV, K), rnd(B, 1, HV, K) * 0.3, rnd(B, 1, HV, V), neg(B, 1, HV, K), rnd(HV, K)]
        log = [neg(B, HV, K), rnd(B, HV, C, K), rnd(B, HV, C, V), neg(B, HV, C, K), length]
        ws = deltalog_rwkv6_workspace(B, HV, K, C, device)
    return xs, rnd(B, HV, K, V), log, ws


LAUNCHERS = {"gdn": fused_deltalog_gdn_decode, "kda": fused_deltalog_kda_decode, "rwkv6": fused_deltalog_rwkv6_decode}


def refused(fn, exc, text, buffers) -> dict:
    before = [t.clone() for t in buffers]
    try:
        fn()
        return {"ok": False, "error": "not refused"}
    except exc as e:
        unchanged = all(torch.equal(a, b) for a, b in zip(buffers, before))
        return {"ok": text in str(e) and unchanged, "message": str(e)[:160], "unchanged": unchanged}


def check(op: str, device: str) -> list[dict]:
    registered = getattr(torch.ops.hf_deltalog, f"fused_deltalog_{op}_decode")
    opts = OPTIONS[op]
    xs, base, log, ws = case(op, 2, 2, 4, 64, 32, 3, device, 0)
    out = []
    flat = torch.zeros(2 + 256, device=device)
    small_ws, neighbour = flat[:2].view(2, 1), flat[2:]
    r = refused(lambda: registered(*xs, base, *log, small_ws, *opts), ValueError, "workspace must have shape",
                [base, *log, flat])
    r["ok"] = r["ok"] and not bool(neighbour.any())
    out.append({"op": op, "case": "one-column workspace", **r})
    out.append({"op": op, "case": "fp64 base", **refused(lambda: registered(*xs, base.double(), *log, ws, *opts),
                                                         TypeError, "base must be float32", [base, *log, ws])})
    bad = [*log[:-1], log[-1].float()]
    out.append({"op": op, "case": "float32 length", **refused(lambda: registered(*xs, base, *bad, ws, *opts),
                                                              TypeError, "length must be int32 or int64",
                                                              [base, *bad, ws])})
    strided = [torch.repeat_interleave(xs[0], 2, dim=-1)[..., ::2], *xs[1:]]
    out.append({"op": op, "case": "q stride 2", **refused(lambda: registered(*strided, base, *log, ws, *opts),
                                                          ValueError, "unit stride on its last dim",
                                                          [base, *log, ws])})
    big_xs, big_base, big_log, big_ws = case(op, 1, 1, 1, 2048, 1024, 1, device, 1)
    out.append({"op": op, "case": "decode tile over 2**20", **refused(
        lambda: LAUNCHERS[op](*big_xs, big_base, *big_log, big_ws, block_v=1024), ValueError,
        "over Triton's limit", [big_base, *big_log, big_ws])})
    d_base, d_log, d_ws = base.clone(), [t.clone() for t in log], ws.clone()
    o_direct = registered(*xs, d_base, *d_log, d_ws, *opts)
    o = LAUNCHERS[op](*xs, base, *log, ws)
    same = torch.equal(o_direct, o) and torch.equal(d_base, base) and all(
        torch.equal(a, b) for a, b in zip(d_log, log))
    out.append({"op": op, "case": "valid direct call = launcher", "ok": bool(same)})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this script checks the triton_op form on a GPU", file=sys.stderr)
        return 1
    failures = 0
    for op in ("gdn", "kda", "rwkv6"):
        for row in check(op, args.device):
            print(json.dumps(row), flush=True)
            failures += not row["ok"]
    print(json.dumps({"failures": failures}))
    return int(failures > 0)


if __name__ == "__main__":
    sys.exit(main())
