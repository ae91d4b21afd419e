"""How far DeltaLog's fp32 decoding lies from an fp64 reference as the merge interval grows, against the dense fp32
recurrence's own distance (CPU, the PyTorch references).

For each operator (GDN, KDA), decay regime and merge interval M, ``--seeds`` random rollouts of ``--steps`` one-token
steps (B = 2, Hk = 2, HV = 4, K = 16, V = 8; q, k, v standard normal, β uniform in [0, 1)) are decoded three ways:
the dense recurrence in fp64 (the reference: ``naive_recurrent_gated_delta_rule`` / ``naive_recurrent_kda``), the
dense recurrence in fp32, and the DeltaLog decode reference (``naive_deltalog_*_decode``) in fp32 with C = M − 1 log
slots. Reported: the ratio of DeltaLog's output error to the dense fp32 output error (max |Δo| / max |o₆₄| each),
median and max over the seeds, and the same ratio for the final state. The issue's standard is a ratio ≤ 1.1.

Decay regimes: ``none`` (g = 0: no forgetting, where the replay sums up to C nearly cancelling rank-1 terms) and
``weak`` (g uniform in [−0.05, 0]).

    python eval/merge_interval_precision.py --out eval/results/cpu/merge_interval_precision [--steps 200 --seeds 8]
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_types import positive_int  # noqa: E402

from hf_deltalog.kernels.gdn.naive import (  # noqa: E402
    naive_deltalog_gdn_decode,
    naive_deltalog_gdn_materialize,
    naive_recurrent_gated_delta_rule,
)
from hf_deltalog.kernels.kda.naive import (  # noqa: E402
    naive_deltalog_kda_decode,
    naive_deltalog_kda_materialize,
    naive_recurrent_kda,
)

B, HK, HV, K, V = 2, 2, 4, 16, 8
OPS = {"gdn": (naive_recurrent_gated_delta_rule, naive_deltalog_gdn_decode, naive_deltalog_gdn_materialize),
       "kda": (naive_recurrent_kda, naive_deltalog_kda_decode, naive_deltalog_kda_materialize)}


def rel_max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


def rollout(op: str, inputs: tuple, M: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DeltaLog decoding of ``inputs`` one token at a time in fp32, from a zero state: outputs [B, T, HV, V], state."""
    _, decode, materialize = OPS[op]
    per_key = (K,) if op == "kda" else ()
    C = M - 1
    bufs = dict(base=torch.zeros(B, HV, K, V), log_decay=torch.zeros(B, HV, *per_key),
                k_log=torch.zeros(B, HK, C, K), u_log=torch.zeros(B, HV, C, V),
                decay_log=torch.zeros(B, HV, C, *per_key), length=torch.zeros(B, dtype=torch.int64))
    outs = [decode(*(x[:, t:t + 1] for x in inputs), use_qk_l2norm_in_kernel=True, **bufs)
            for t in range(inputs[0].shape[1])]
    return torch.cat(outs, 1), materialize(*bufs.values())


def median(x: torch.Tensor) -> float:
    """The median: for an even count the mean of the two middle values (``torch.Tensor.median`` returns the lower
    one, which with 2 seeds is the minimum)."""
    return torch.quantile(x.double(), 0.5).item()


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for precision.json and precision.csv")
    p.add_argument("--steps", type=positive_int, default=200)
    p.add_argument("--seeds", type=positive_int, default=8)
    p.add_argument("--merge-intervals", type=positive_int, nargs="+", default=[1, 4, 8, 16, 64, 1024])
    args = p.parse_args(argv)
    rows = []
    for op in OPS:
        dense = OPS[op][0]
        per_key = (K,) if op == "kda" else ()
        for regime in ("none", "weak"):
            ratios: dict[int, list[tuple[float, float]]] = {M: [] for M in args.merge_intervals}
            for seed in range(args.seeds):
                gen = torch.Generator().manual_seed(seed)
                T = args.steps
                q, k = torch.randn(B, T, HK, K, generator=gen), torch.randn(B, T, HK, K, generator=gen)
                v = torch.randn(B, T, HV, V, generator=gen)
                g = (torch.zeros(B, T, HV, *per_key) if regime == "none"
                     else -0.05 * torch.rand(B, T, HV, *per_key, generator=gen))
                beta = torch.rand(B, T, HV, generator=gen)
                inputs = (q, k, v, g, beta)
                o64, s64 = dense(*(x.double() for x in inputs), output_final_state=True, use_qk_l2norm_in_kernel=True)
                o32, s32 = dense(*inputs, output_final_state=True, use_qk_l2norm_in_kernel=True)
                e_o, e_s = rel_max_err(o32, o64), rel_max_err(s32, s64)
                for M in args.merge_intervals:
                    o, s = rollout(op, inputs, M)
                    ratios[M].append((rel_max_err(o, o64) / e_o, rel_max_err(s, s64) / e_s))
            for M, r in ratios.items():
                out, state = torch.tensor([x[0] for x in r]), torch.tensor([x[1] for x in r])
                row = dict(operator=op, decay=regime, merge_interval=M, steps=args.steps, seeds=args.seeds,
                           output_ratio_median=median(out), output_ratio_max=out.max().item(),
                           state_ratio_median=median(state), state_ratio_max=state.max().item())
                rows.append(row)
                print(f"{op} decay={regime:4s} M={M:5d}: output error / dense's median {row['output_ratio_median']:.2f}"
                      f" max {row['output_ratio_max']:.2f}; state median {row['state_ratio_median']:.2f} max "
                      f"{row['state_ratio_max']:.2f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = dict(torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
                command=" ".join(["python", "eval/merge_interval_precision.py", *(argv or sys.argv[1:])]))
    (args.out / "precision.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    with open(args.out / "precision.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


if __name__ == "__main__":
    main()
