"""Summarise a GDN decode benchmark run (``bench_gdn_decode.json``): a markdown table and a speedup plot.

For each batch size: FLA's dense kernel in both state layouts, our kernel at M = 1 and at every M (V-first base,
the layout DeltaLogCache uses on the GPU), the best M, what DeltaLogCache's default policy runs (dense through FLA's
V-first kernel below 64 MiB of state per layer, DeltaLog with M = 8 above), and the floors.

    python eval/gdn_report.py eval/results/h200/bench_gdn_decode.json [--out eval/results/h200]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

POLICY_M = 8
DENSE_BELOW_STATE_BYTES = 64 << 20  # hf_deltalog.cache.DENSE_BELOW_STATE_BYTES["gdn"] (kept equal; checked in main)


def table(result: dict) -> tuple[str, list[dict]]:
    shape = result["shape"]
    rows = result["rows"]
    out, summary = [], []
    Ms = sorted({r["M"] for r in rows if r["variant"] == "deltalog" and r["M"] and r["M"] > 1})
    head = ["B", "FLA VK µs", "FLA KV µs", "ours M=1 µs"] + [f"M={m} µs" for m in Ms] + [
        "best M", "best ×FLA-VK", "policy", "policy µs", "policy ×FLA-VK", "M=8 append (mean) / merge µs",
        "dense floor", f"DeltaLog floor M={POLICY_M}", "best %floor", "ReplaySSM best L µs", "best ×ReplaySSM"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for B in result["batches"]:
        get = {(r["variant"], r["layout"], r["M"]): r for r in rows if r["B"] == B}
        fla_vk, fla_kv = get[("fla_vfirst", "VK", None)], get[("fla_kfirst", "KV", None)]
        ours = {m: get[("deltalog", "VK", m)] for m in [1] + Ms if ("deltalog", "VK", m) in get}
        best_m = min((m for m in Ms if m in ours), key=lambda m: ours[m]["amortized_us"])
        best = ours[best_m]
        state = B * shape["HV"] * shape["K"] * shape["V"] * 4
        dense = state < DENSE_BELOW_STATE_BYTES
        policy_us = fla_vk["amortized_us"] if dense else ours[POLICY_M]["amortized_us"]
        m8 = ours[POLICY_M]
        cells = [B, f"{fla_vk['amortized_us']:.1f}", f"{fla_kv['amortized_us']:.1f}", f"{ours[1]['amortized_us']:.1f}"]
        cells += [f"{ours[m]['amortized_us']:.1f}" for m in Ms]
        cells += [best_m, f"{fla_vk['amortized_us'] / best['amortized_us']:.2f}",
                  "dense (FLA VK)" if dense else f"DeltaLog M={POLICY_M}", f"{policy_us:.1f}",
                  f"{fla_vk['amortized_us'] / policy_us:.2f}",
                  f"{m8['append_mean_us']:.1f} / {m8['merge_us']:.1f}",
                  f"{fla_vk['floor_us']:.1f}", f"{m8['floor_us']:.1f}", f"{100 * best['floor_fraction']:.0f}%"]
        rep = [r for r in rows if r["B"] == B and r["variant"] == "replayssm" and r.get("amortized_us")]
        rep_best = min(rep, key=lambda r: r["amortized_us"]) if rep else None
        cells += ([f"{rep_best['amortized_us']:.1f} (L={rep_best['M']})",
                   f"{rep_best['amortized_us'] / best['amortized_us']:.2f}"] if rep_best else ["-", "-"])
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
        summary.append(dict(B=B, fla_vk=fla_vk["amortized_us"], fla_kv=fla_kv["amortized_us"],
                            best_M=best_m, best=best["amortized_us"], m8=m8["amortized_us"], policy=policy_us,
                            ours_m1=ours[1]["amortized_us"],
                            replayssm=rep_best["amortized_us"] if rep_best else None))
    return "\n".join(out), summary


def numerics_table(result: dict) -> str:
    lines = ["| B | variant | M | layout | output rel. err | state rel. err | output ratio vs FLA |", "|---|---|---|---|---|---|---|"]
    for block in result.get("numerics", []):
        for r in block["results"]:
            ratio = r.get("out_ratio_vs_fla")
            lines.append(f"| {block['B']} | {r['variant']} | {r['M'] or '-'} | {r['layout']} | {r['out_rel']:.3e} | "
                         f"{r['state_rel']:.2e} | {'' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(lines)


def plot(summary: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Bs = [s["B"] for s in summary]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.axhline(1.0, color="black", lw=1, label="FLA fused_recurrent, V-first (fastest dense)")
    ax.plot(Bs, [s["fla_vk"] / s["fla_kv"] for s in summary], "s--", color="gray", label="FLA, [K, V] layout")
    ax.plot(Bs, [s["fla_vk"] / s["ours_m1"] for s in summary], "o:", label="ours, M = 1 (dense)")
    ax.plot(Bs, [s["fla_vk"] / s["m8"] for s in summary], "o-", label="ours, DeltaLog M = 8")
    ax.plot(Bs, [s["fla_vk"] / s["best"] for s in summary], "^-", label="ours, best M")
    ax.plot(Bs, [s["fla_vk"] / s["policy"] for s in summary], "k*", ms=10, label="DeltaLogCache default policy")
    rep = [(s["B"], s["fla_vk"] / s["replayssm"]) for s in summary if s.get("replayssm")]
    if rep:
        ax.plot([b for b, _ in rep], [x for _, x in rep], "d-.", color="tab:red", label="ReplaySSM (SGLang), best L")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch B")
    ax.set_ylabel("speedup over FLA V-first (amortized µs per token)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", type=Path)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    try:
        from hf_deltalog.cache import DENSE_BELOW_STATE_BYTES as used

        assert used["gdn"] == DENSE_BELOW_STATE_BYTES, "the report's policy threshold differs from the cache's"
    except ImportError:
        pass
    result = json.loads(a.json.read_text())
    out = a.out or a.json.parent
    md, summary = table(result)
    env = result["env"]
    s = result["shape"]
    title = (f"GDN decode, HV={s['HV']} Hk={s['Hk']} K={s['K']} V={s['V']}, fp32 state, bf16 activations, "
             f"{env['gpu']}")
    text = (f"{title}; copy bandwidth {result['bandwidth_GBps']:.0f} GB/s; torch {env['torch']}, triton "
            f"{env['triton']}, fla {env['fla']}, driver {env['driver']}.\n\n{md}\n\n{numerics_table(result)}\n")
    (out / "gdn_decode_summary.md").write_text(text)
    plot(summary, out / "gdn_decode_speedup.png", title)
    print(text)


if __name__ == "__main__":
    main()
