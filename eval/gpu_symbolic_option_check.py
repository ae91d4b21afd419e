"""GPU check: a launch option that ``torch.compile`` makes symbolic, through the ``triton_op`` form (a GPU's default).

``torch.compile`` turns an int argument into a ``SymInt`` once it changes between calls (automatic dynamic). The CPU
test (tests/test_extreme_inputs.py::test_a_launch_option_that_compile_makes_symbolic_is_accepted) covers the opaque op;
here Inductor traces the ``triton_op`` body, where ``block_v`` becomes a kernel constexpr. For GDN, KDA and RWKV6
(B = 4, Hk = 2 / HV = 4 for GDN and KDA, H = 4 for RWKV6, K = 64, V = 32, C = 3, rows at lengths 0..3) a compiled step
(``fullgraph=True``, Inductor) is called with ``block_v`` 8, 16 and 8 again; each call's output and buffers are compared
with an eager call from the same state: state buffers bit-identical (the workspace, scratch, is reported only: on an
H200 Inductor's runs left it different while outputs and state were bit-identical), bf16 outputs within 2**-7 of the
largest output
(about two bf16 rounding steps: eval/gpu_compile_check.py found Inductor's outputs rounding-sized apart, up to 0.016
for RWKV6). Prints one JSON line per call; exit status 1 on a failure (and, with a message, without a CUDA device).

    python eval/gpu_symbolic_option_check.py
"""

from __future__ import annotations

import json
import sys
import traceback

import torch

from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode
from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode
from hf_deltalog.kernels.rwkv6.fused_deltalog import deltalog_rwkv6_workspace, fused_deltalog_rwkv6_decode

B, HK, HV, K, V, C = 4, 2, 4, 64, 32, 3


def state(op: str, device: str):
    gen = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=gen, device=device)
    neg = lambda *s: -torch.rand(*s, generator=gen, device=device) * 0.1
    length = torch.arange(B, dtype=torch.int32, device=device)
    bf = torch.bfloat16
    if op == "gdn":
        xs = [rnd(B, 1, HK, K).to(bf), rnd(B, 1, HK, K).to(bf), rnd(B, 1, HV, V).to(bf), neg(B, 1, HV),
              torch.rand(B, 1, HV, device=device)]
        bufs = [rnd(B, HV, K, V), neg(B, HV), rnd(B, HK, C, K), rnd(B, HV, C, V), neg(B, HV, C), length,
                deltalog_gdn_workspace(B, HK, HV, K, C, device)]
        return fused_deltalog_gdn_decode, xs, bufs
    if op == "kda":
        xs = [rnd(B, 1, HK, K).to(bf), rnd(B, 1, HK, K).to(bf), rnd(B, 1, HV, V).to(bf), neg(B, 1, HV, K),
              torch.rand(B, 1, HV, device=device)]
        bufs = [rnd(B, HV, K, V), neg(B, HV, K), rnd(B, HK, C, K), rnd(B, HV, C, V), neg(B, HV, C, K), length,
                deltalog_kda_workspace(B, HK, HV, K, C, device)]
        return fused_deltalog_kda_decode, xs, bufs
    xs = [rnd(B, 1, HV, K).to(bf), (rnd(B, 1, HV, K) * 0.3).to(bf), rnd(B, 1, HV, V).to(bf), neg(B, 1, HV, K).to(bf),
          rnd(HV, K).to(bf)]
    bufs = [rnd(B, HV, K, V), neg(B, HV, K), rnd(B, HV, C, K), rnd(B, HV, C, V), neg(B, HV, C, K), length,
            deltalog_rwkv6_workspace(B, HV, K, C, device)]
    return fused_deltalog_rwkv6_decode, xs, bufs


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: this script checks the triton_op form on a GPU", file=sys.stderr)
        return 1
    failures = 0
    for op in ("gdn", "kda", "rwkv6"):
        launcher, xs, bufs = state(op, "cuda")

        def step(block_v, *buffers, launcher=launcher, xs=xs):
            return launcher(*xs, *buffers, block_v=block_v)

        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)
        for block_v in (8, 16, 8):
            row = {"op": op, "block_v": block_v}
            try:
                eager_bufs, comp_bufs = [t.clone() for t in bufs], [t.clone() for t in bufs]
                o_eager = step(block_v, *eager_bufs)
                o = compiled(block_v, *comp_bufs)
                torch.cuda.synchronize()
                row["max_abs_o_diff"] = float((o.float() - o_eager.float()).abs().max())
                names = ["base", "log_decay", "k_log", "value_log", "decay_log", "length"]
                row["differing"] = [n for n, a, b in zip(names, comp_bufs, eager_bufs) if not torch.equal(a, b)]
                row["state_identical"] = not row["differing"]
                # scratch (its content between calls does not matter); reported, not judged
                row["workspace_identical"] = torch.equal(comp_bufs[-1], eager_bufs[-1])
                row["ok"] = row["state_identical"] and row["max_abs_o_diff"] <= 2**-7 * max(
                    1.0, float(o_eager.float().abs().max()))
            except Exception as e:  # noqa: BLE001 - reported, counted as a failure
                row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                           trace=traceback.format_exc()[-1500:])
            failures += not row["ok"]
            print(json.dumps(row), flush=True)
    print(json.dumps({"failures": failures}))
    return int(failures > 0)


if __name__ == "__main__":
    sys.exit(main())
