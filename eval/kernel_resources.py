"""Compile the DeltaLog GDN decode kernels for sm_90 (H100/H200) on any machine and print its resource usage.

No GPU is needed: Triton compiles to a cubin for the target and ``cuobjdump --dump-resource-usage`` (shipped with
Triton) reads registers, spills (local memory) and shared memory. Use it to check register pressure before spending
GPU time.

    python eval/kernel_resources.py [--configs "7,8,VK,1" "7,16,KV,2" ...]   # C, BV, layout, num_warps
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

POINTERS = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", g_ptr="*fp32", beta_ptr="*bf16", o_ptr="*bf16",
                base_ptr="*fp32", log_decay_ptr="*fp32", k_log_ptr="*fp32", u_log_ptr="*fp32", decay_log_ptr="*fp32",
                length_ptr="*i32", ws_ptr="*fp32")


def usage(kernel, C: int, BV: int, layout: str, num_warps: int, Hk: int = 16, HV: int = 32, K: int = 128,
          V: int = 128) -> str:
    every = dict(HK=Hk, HV=HV, G=HV // Hk, K=K, V=V, C=C, BK=triton.next_power_of_2(K), BV=BV,
                 BC=triton.next_power_of_2(max(C, 1)), NV=triton.cdiv(V, BV), WS=fd.workspace_size(Hk, HV, K, C),
                 USE_QK_L2NORM=True, STATE_V_FIRST=layout == "VK")
    consts = {name: every[name] for name in kernel.arg_names if name in every}
    signature = {}
    for name in kernel.arg_names:
        if name in POINTERS:
            signature[name] = POINTERS[name]
        elif name == "scale":
            signature[name] = "fp32"
        elif name.startswith("stride"):
            signature[name] = "i32"
        else:
            signature[name] = "constexpr"
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=consts),
                              target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps))
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return next((line.strip() for line in out.splitlines() if "REG" in line), out.strip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="*", default=["7,8,VK,1", "7,8,KV,1", "31,8,VK,1", "0,8,VK,1", "7,16,VK,1",
                                                    "7,32,VK,2"])
    for spec in p.parse_args().configs:
        C, BV, layout, nw = spec.split(",")
        for kernel in (fd._deltalog_gdn_prepare_kernel, fd._deltalog_gdn_decode_kernel):
            print(f"{kernel.__name__:30} C={C:>2} BV={BV:>2} {layout} warps={nw}: "
                  f"{usage(kernel, int(C), int(BV), layout, int(nw))}", flush=True)


if __name__ == "__main__":
    main()
