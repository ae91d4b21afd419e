"""Compile the DeltaLog decode kernels (GDN, KDA, RWKV6) for sm_90 (H100/H200) on any machine and print their resource
usage.

No GPU is needed: Triton compiles to a cubin for the target and ``cuobjdump --dump-resource-usage`` (shipped with
Triton) reads registers, spills (local memory) and shared memory. Use it to check register pressure before spending
GPU time. The compile specialises the arguments as a launch of the benchmark shape does (aligned pointers, strides
divisible by 16, unit strides constant) and uses this machine's Triton, which may differ from the GPU's: the
profiler's reading on the GPU is the reference (eval/results/h200/NOTES.md).

    python eval/kernel_resources.py [--operator gdn|kda|rwkv6] [--configs "7,8,VK,1" "7,16,KV,2" ...]
                                    # each config: C, BV, layout, num_warps (the launch options of the kernels)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from hf_deltalog.kernels.gdn import fused_deltalog as fd  # noqa: E402
from hf_deltalog.kernels.kda import fused_deltalog as fk  # noqa: E402
from hf_deltalog.kernels.rwkv6 import fused_deltalog as fr  # noqa: E402

# per operator: (prepare kernel, decode kernel, workspace elements per row for (Hk, HV, K, C), log-factor dtype)
OPERATORS = {
    "gdn": (fd._deltalog_gdn_prepare_kernel, fd._deltalog_gdn_decode_kernel, fd.workspace_size, "*fp32"),
    "kda": (fk._deltalog_kda_prepare_kernel, fk._deltalog_kda_decode_kernel, fk.kda_workspace_size, "*fp32"),
    "rwkv6": (fr._deltalog_rwkv6_prepare_kernel, fr._deltalog_rwkv6_decode_kernel,
              lambda Hk, HV, K, C: fr.rwkv6_workspace_size(HV, K, C), "*bf16"),
}

POINTERS = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", g_ptr="*fp32", beta_ptr="*bf16", o_ptr="*bf16",
                base_ptr="*fp32", log_decay_ptr="*fp32", k_log_ptr="*fp32", u_log_ptr="*fp32", decay_log_ptr="*fp32",
                length_ptr="*i32", ws_ptr="*fp32")


# MAXNREG=64 compiles the decode kernels (not the prepare kernels) under that register cap, as a launch with
# maxnreg=64 does
MAXNREG = int(os.environ.get("MAXNREG", "0"))


def usage(operator: str, kernel, C: int, BV: int, layout: str, num_warps: int, Hk: int = 16, HV: int = 32,
          K: int = 128, V: int = 128) -> str:
    """One line of ``cuobjdump --dump-resource-usage`` (registers, local memory = spills, shared memory) for the
    kernel compiled with the default launch options of the benchmark shape (GDN: Hk = 16, HV = 32; KDA and RWKV6
    have no GQA, so Hk = HV)."""
    if operator != "gdn":
        Hk = HV
    ws, log_dtype = OPERATORS[operator][2], OPERATORS[operator][3]
    every = dict(HK=Hk, H=HV, HV=HV, G=HV // Hk, K=K, V=V, C=C, BK=triton.next_power_of_2(K), BV=BV,
                 BC=triton.next_power_of_2(max(C, 1)), BG=triton.next_power_of_2(HV // Hk), NV=triton.cdiv(V, BV),
                 WS=ws(Hk, HV, K, C), USE_QK_L2NORM=True, STATE_V_FIRST=layout == "VK", RAW_QK=True, HPP=1,
                 USE_PDL=False, STORE_QK=False, BVF=triton.next_power_of_2(V))
    consts = {name: every[name] for name in kernel.arg_names if name in every}
    signature = {}
    for name in kernel.arg_names:
        if name in ("k_log_ptr", "v_log_ptr") and operator == "rwkv6":
            signature[name] = log_dtype
        elif name in POINTERS:
            signature[name] = POINTERS[name]
        elif name.endswith("_ptr"):
            signature[name] = "*bf16"
        elif name == "scale":
            signature[name] = "fp32"
        elif name.startswith("stride"):
            signature[name] = "i32"
        else:
            signature[name] = "constexpr"
    # Specialise as Triton's JIT does at a launch of the benchmark shape: every pointer 16-byte aligned (torch's
    # allocations are) and every stride a multiple of 16, except the per-head strides of the [B, 1, H] gates (g,
    # beta), which are 1 and become constants. Without these facts the compiler cannot vectorise the loads.
    attrs = {}
    for name in kernel.arg_names:
        if name in ("stride_betah", "stride_gh"):
            signature[name], consts[name] = "constexpr", 1
        elif name.endswith("_ptr") or name.startswith("stride"):
            attrs[(kernel.arg_names.index(name),)] = [["tt.divisibility", 16]]
    cap = {"maxnreg": MAXNREG} if MAXNREG and "decode" in kernel.__name__ else {}
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=consts, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, **cap))
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return next((line.strip() for line in out.splitlines() if "REG" in line), out.strip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--operator", choices=sorted(OPERATORS), default="gdn")
    p.add_argument("--configs", nargs="*", default=["7,8,VK,1", "7,8,KV,1", "31,8,VK,1", "0,8,VK,1", "7,16,VK,1",
                                                    "7,32,VK,2"])
    args = p.parse_args()
    for spec in args.configs:
        C, BV, layout, nw = spec.split(",")
        for kernel in OPERATORS[args.operator][:2]:
            print(f"{kernel.__name__:32} C={C:>2} BV={BV:>2} {layout} warps={nw}: "
                  f"{usage(args.operator, kernel, int(C), int(BV), layout, int(nw))}", flush=True)


if __name__ == "__main__":
    main()
