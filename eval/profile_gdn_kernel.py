"""Launch the DeltaLog GDN kernels once per phase (an append step at L = 3, a merge step) for Nsight Compute.

    ncu --clock-control none --set full -k regex:_deltalog_gdn python eval/profile_gdn_kernel.py [--batch 128]
"""

from __future__ import annotations

import argparse
import sys

import torch

from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--merge-interval", type=int, default=8)
    p.add_argument("--state-v-first", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--block-v", type=int, default=None)
    p.add_argument("--num-warps", type=int, default=None)
    p.add_argument("--prepare-warps", type=int, default=None)
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this script launches the GDN kernels on a GPU for Nsight Compute (there is no CPU "
                 "mode)")
    B, Hk, HV, K, V, C = a.batch, 16, 32, 128, 128, a.merge_interval - 1
    dev, bf = "cuda", torch.bfloat16
    torch.manual_seed(0)
    q, k = (torch.randn(B, 1, Hk, K, device=dev, dtype=bf) for _ in range(2))
    v = torch.randn(B, 1, HV, V, device=dev, dtype=bf)
    g = -torch.rand(B, 1, HV, device=dev)
    beta = torch.rand(B, 1, HV, device=dev, dtype=bf)
    shape = (B, HV, V, K) if a.state_v_first else (B, HV, K, V)
    bufs = dict(base=torch.randn(shape, device=dev) * 0.1, log_decay=-torch.rand(B, HV, device=dev),
                k_log=torch.randn(B, Hk, C, K, device=dev) * 0.1, u_log=torch.randn(B, HV, C, V, device=dev) * 0.1,
                decay_log=-torch.rand(B, HV, C, device=dev), length=torch.zeros(B, dtype=torch.int32, device=dev))
    workspace = deltalog_gdn_workspace(B, Hk, HV, K, C, dev)
    for L in (3, C):  # one append step, one merge step
        bufs["length"].fill_(L)
        fused_deltalog_gdn_decode(q, k, v, g, beta, *bufs.values(), workspace, state_v_first=a.state_v_first,
                                  block_v=a.block_v, num_warps=a.num_warps,
                                  prepare_warps=a.prepare_warps, use_custom_op=False)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
