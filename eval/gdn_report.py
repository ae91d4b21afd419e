"""Summarise a GDN decode benchmark run (``bench_gdn_decode.json``): a markdown table and a speedup plot.

For each batch size: FLA's dense kernel in both state layouts, our kernel at M = 1 and at every M (V-first base,
the layout DeltaLogCache uses on the GPU), the best M, what DeltaLogCache's default policy runs (dense through FLA's
V-first kernel below 64 MiB of state per layer, DeltaLog with M = 8 above), and the floors. A run without M = 8
(``--quick``, ``--cpu-smoke``, ``--ms`` without 8) shows ``-`` in the M = 8 columns, and in the policy's where the
policy is DeltaLog, with a note; nothing is substituted for it.

    python eval/gdn_report.py eval/results/h200/bench_gdn_decode.json [--out eval/results/h200]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

POLICY_M = 8
DENSE_BELOW_STATE_BYTES = 64 << 20  # hf_deltalog.cache.DENSE_BELOW_STATE_BYTES["gdn"] (kept equal; checked in main)


def _us(row: dict | None, key: str = "amortized_us") -> str:
    value = None if row is None else row.get(key)
    return "-" if value is None else f"{value:.1f}"


def _ratio(num: float | None, den: float | None) -> str:
    return "-" if num is None or not den else f"{num / den:.2f}"


def missing_policy_note(result: dict) -> str | None:
    """The note for a run without the policy's M (None when it was measured at every batch size)."""
    rows = [r for r in result["rows"] if r["variant"] == "deltalog" and r["layout"] == "VK" and r["M"] == POLICY_M
            and r.get("amortized_us") is not None]
    missing = [B for B in result["batches"] if not any(r["B"] == B for r in rows)]
    if not missing:
        return None
    return (f"Note: DeltaLogCache's default policy runs M = {POLICY_M} above {DENSE_BELOW_STATE_BYTES >> 20} MiB of "
            f"state per layer, and this run has no M = {POLICY_M} (V-first) measurement at B = "
            f"{', '.join(map(str, missing))} (M values run: {sorted(result.get('Ms') or [])}): the M = {POLICY_M} "
            "columns, and the policy's where it is DeltaLog, show '-'.")


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
        ours = {m: get[("deltalog", "VK", m)] for m in [1] + Ms
                if ("deltalog", "VK", m) in get and get[("deltalog", "VK", m)].get("amortized_us") is not None}
        measured = [m for m in Ms if m in ours]
        best_m = min(measured, key=lambda m: ours[m]["amortized_us"]) if measured else None
        best = ours.get(best_m)
        state = B * shape["HV"] * shape["K"] * shape["V"] * 4
        dense = state < DENSE_BELOW_STATE_BYTES
        m8 = ours.get(POLICY_M)  # None: this run did not measure the policy's M (see missing_policy_note)
        policy_row = fla_vk if dense else m8
        policy_us = None if policy_row is None else policy_row.get("amortized_us")
        fla_us = fla_vk.get("amortized_us")
        best_us = None if best is None else best["amortized_us"]
        cells = [B, _us(fla_vk), _us(fla_kv), _us(ours.get(1))]
        cells += [_us(ours.get(m)) for m in Ms]
        cells += ["-" if best_m is None else best_m, _ratio(fla_us, best_us),
                  "dense (FLA VK)" if dense else f"DeltaLog M={POLICY_M}" + ("" if m8 else " (not measured)"),
                  "-" if policy_us is None else f"{policy_us:.1f}", _ratio(fla_us, policy_us),
                  f"{_us(m8, 'append_mean_us')} / {_us(m8, 'merge_us')}" if m8 else "-",
                  _us(fla_vk, "floor_us"), _us(m8, "floor_us"),
                  "-" if best is None else f"{100 * best['floor_fraction']:.0f}%"]
        rep = [r for r in rows if r["B"] == B and r["variant"] == "replayssm" and r.get("amortized_us")]
        rep_best = min(rep, key=lambda r: r["amortized_us"]) if rep else None
        cells += ([f"{rep_best['amortized_us']:.1f} (L={rep_best['M']})",
                   _ratio(rep_best["amortized_us"], best_us)] if rep_best else ["-", "-"])
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
        summary.append(dict(B=B, fla_vk=fla_us, fla_kv=fla_kv.get("amortized_us"),
                            best_M=best_m, best=best_us, m8=None if m8 is None else m8["amortized_us"],
                            policy=policy_us, ours_m1=None if 1 not in ours else ours[1]["amortized_us"],
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

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.axhline(1.0, color="black", lw=1, label="FLA fused_recurrent, V-first (fastest dense)")

    def curve(key, fmt, label, **kw):  # speedups over FLA V-first at the batch sizes where both were measured
        points = [(s["B"], s["fla_vk"] / s[key]) for s in summary if s["fla_vk"] and s.get(key)]
        if points:
            ax.plot([b for b, _ in points], [x for _, x in points], fmt, label=label, **kw)

    curve("fla_kv", "s--", "FLA, [K, V] layout", color="gray")
    curve("ours_m1", "o:", "ours, M = 1 (dense)")
    curve("m8", "o-", f"ours, DeltaLog M = {POLICY_M}")
    curve("best", "^-", "ours, best M")
    curve("policy", "k*", "DeltaLogCache default policy", ms=10)
    curve("replayssm", "d-.", "ReplaySSM (SGLang), best L", color="tab:red")
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
    try:
        result = json.loads(a.json.read_text())
        result["shape"], result["env"]  # noqa: B018 - the keys the report reads first
    except (OSError, ValueError, KeyError, TypeError) as e:
        why = "no such file" if isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {e}"
        p.error(f"{a.json}: {why}; expected the bench_gdn_decode.json written by eval/bench_gdn_decode.py")
    out = a.out or a.json.parent
    out.mkdir(parents=True, exist_ok=True)
    md, summary = table(result)
    note = missing_policy_note(result)
    if note:
        md = f"{note}\n\n{md}"
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
