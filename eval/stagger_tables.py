"""Markdown tables of the staggered-merge measurements (H200, 2026-12-01/02, rounds 47-53), from their committed JSONs.

1. Same-process kernel A/B: ``bench_gdn_decode.py --tune --tune-only '{}' '{"_stagger": true}' '{}'`` (aligned,
   staggered, aligned again) per operator; µs per token, the change against the mean of the two aligned runs.
2. Same-process whole-model A/B (rounds 51-53, ``eval/tpot.py`` in graph mode, the two DeltaLog runs in both orders):
   ms per token, and the recurrence kernels' device time per step from the profiled steps where they ran.
3. The kernel tables with staggered phases (``--stagger``, what ``DeltaLogCache(stagger_merges=True)`` runs): FLA's
   faster layout in the same run, ours per M, the best M and its speedup, the fraction of the DeltaLog floor,
   ReplaySSM's best ring length (GDN, KDA). RWKV6's B = 512 row is round 49's (round 48's limit cut it).

    python eval/stagger_tables.py [--root eval/results/h200] [--plot eval/results/h200/staggered_kernel_tables.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

OPS = ("gdn", "kda", "rwkv6")


def _ab_files(root: Path) -> list[Path]:
    """The kernel A/B runs: round 47's, round 49's (M = 8 and M = 16)."""
    files = [root / "round47" / "stagger" / op / f"bench_{op}_decode.json" for op in OPS]
    return files + [root / "round49" / "ab" / name / f"bench_{op}_decode.json"
                    for op in OPS for name in (op, f"{op}_m16")]


def ab_table(root: Path) -> str:
    lines = ["| operator | B | M | aligned µs (two runs) | staggered µs | change |", "|---|---|---|---|---|---|"]
    points = {}
    for f in _ab_files(root):
        op = f.parent.name.split("_")[0]
        for t in json.loads(f.read_text())["tune"]:
            kind = "staggered" if t["options"].get("_stagger") else "aligned"
            points.setdefault((OPS.index(op), op, t["B"], t["M"]), {}).setdefault(kind, []).append(t["amortized_us"])
    for (_, op, B, M), p in sorted(points.items()):
        aligned, staggered = statistics.mean(p["aligned"]), p["staggered"][0]
        lines.append(f"| {op} | {B} | {M} | {' / '.join(f'{x:.1f}' for x in p['aligned'])} | {staggered:.1f} | "
                     f"{100 * (staggered / aligned - 1):+.1f} % |")
    return "\n".join(lines)


# (round, folder): the tpot.json of each whole-model A/B. Rounds 51-53 ran when the default staggered (runs
# "deltalog", staggered, and "deltalog_aligned"); tpot.py now writes "deltalog" (aligned) and "deltalog_staggered". The
# table tells the two runs apart by what each recorded ("staggered": [True] / [False]), so it reads both namings.
TPOT_AB = (("round51", "tpot_qwen"), ("round52", "tpot_qwen"), ("round53", "tpot_qwen"), ("round53", "tpot_kimi"))


def _ab_pair(runs: list[dict]) -> tuple[dict, dict] | None:
    """The (aligned, staggered) DeltaLog runs among one batch's runs; None where one is missing (a time limit cut it).
    Raises ValueError for runs that do not say whether they staggered, or for two of a kind."""
    ours = [r for r in runs if r["cache"].startswith("deltalog")]
    if any(r.get("staggered") not in ([True], [False]) for r in ours):
        raise ValueError(f"DeltaLog runs without a staggered record: {[(r['cache'], r.get('staggered')) for r in ours]}")
    aligned = [r for r in ours if r["staggered"] == [False]]
    staggered = [r for r in ours if r["staggered"] == [True]]
    if len(aligned) > 1 or len(staggered) > 1:
        raise ValueError(f"expected one aligned and one staggered run; got {[r['cache'] for r in ours]}")
    return (aligned[0], staggered[0]) if aligned and staggered else None


def tpot_ab_table(root: Path, sources=TPOT_AB) -> str:
    lines = [("| round | model | B | first DeltaLog run | StaticCache ms | aligned ms | staggered ms | staggered / "
              "aligned time | recurrence ms per step, aligned / staggered |"), "|---|---|---|---|---|---|---|---|---|"]
    for rnd, folder in sources:
        runs = json.loads((root / rnd / folder / "tpot.json").read_text())["runs"]
        for B in sorted({r["batch"] for r in runs}, reverse=True):
            at = [r for r in runs if r["batch"] == B and r["mode"] == "graph"]
            pair = _ab_pair(at)
            if pair is None:
                continue  # a run the time limit cut
            aligned, staggered = pair
            static = next(r for r in at if r["cache"] == "static")
            first = "aligned" if runs.index(aligned) < runs.index(staggered) else "staggered"
            prof = [r.get("profile", {}).get("state_update_ms") for r in (aligned, staggered)]
            cells = [rnd, staggered["model"], B, first, f"{static['tpot_ms']:.2f}", f"{aligned['tpot_ms']:.2f}",
                     f"{staggered['tpot_ms']:.2f}", f"{100 * (staggered['tpot_ms'] / aligned['tpot_ms'] - 1):+.1f} %",
                     " / ".join(f"{x:.3f}" for x in prof) if None not in prof else "–"]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def full_rows(root: Path, op: str) -> list[dict]:
    """The rows of one operator's staggered kernel table: round 48's, with RWKV6's B = 512 from round 49."""
    rows = json.loads((root / "round48" / "full" / op / f"bench_{op}_decode.json").read_text())["rows"]
    if op == "rwkv6":  # round 48's limit cut B = 512; round 49 ran it alone
        extra = json.loads((root / "round49" / "full" / op / f"bench_{op}_decode.json").read_text())["rows"]
        rows = [r for r in rows if r["B"] != 512] + extra
    return rows


def full_tables(root: Path) -> str:
    out = []
    for op in OPS:
        rows = full_rows(root, op)
        Ms = sorted({r["M"] for r in rows if r["variant"] == "deltalog" and r["M"] and r["M"] > 1})
        head = ["B", "FLA µs (faster layout)"] + [f"M={m} µs" for m in Ms] + ["best M", "×FLA", "% of floor"]
        head += ["ReplaySSM best µs", "×ReplaySSM"] if op != "rwkv6" else []
        out += [f"**{op.upper()}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for B in sorted({r["B"] for r in rows}):
            at = [r for r in rows if r["B"] == B and r.get("amortized_us")]
            fla = min((r for r in at if r["variant"].startswith("fla")), key=lambda r: r["amortized_us"])
            ours = {r["M"]: r for r in at if r["variant"] == "deltalog" and r["layout"] == "VK"}
            best_m = min((m for m in Ms if m in ours), key=lambda m: ours[m]["amortized_us"])
            best = ours[best_m]
            cells = [B, f"{fla['amortized_us']:.1f} ({fla['layout']})"]
            cells += [f"{ours[m]['amortized_us']:.1f}" if m in ours else "–" for m in Ms]
            cells += [best_m, f"{fla['amortized_us'] / best['amortized_us']:.2f}",
                      f"{100 * best['floor_fraction']:.0f} %"]
            if op != "rwkv6":
                rep = [r for r in at if r["variant"] == "replayssm"]
                r = min(rep, key=lambda r: r["amortized_us"]) if rep else None
                cells += [f"{r['amortized_us']:.1f} (L={r['M']})", f"{r['amortized_us'] / best['amortized_us']:.2f}"] \
                    if r else ["–", "–"]
            out.append("| " + " | ".join(str(c) for c in cells) + " |")
        out.append("")
    return "\n".join(out)


def plot_full_tables(root: Path, path: Path) -> Path:
    """The staggered kernel tables as one PNG, a column per operator. Top: µs per token against B (log-log) for FLA's
    faster layout at each B, ours per M (V-first base), ReplaySSM's best ring length (GDN, KDA), the dense floor
    (2 × state bytes / copy bandwidth) and the DeltaLog floor at M = 8, all from the same runs. Bottom: the speedup
    of each over FLA's faster layout at the same B. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, len(OPS), figsize=(15, 9), sharey="row")
    for ax, sax, op in zip(grid[0], grid[1], OPS):
        rows = [r for r in full_rows(root, op) if r.get("amortized_us")]
        Bs = sorted({r["B"] for r in rows})

        def best(pred, rows=rows, Bs=Bs):  # [(B, fastest µs among the rows pred accepts)]
            pts = []
            for B in Bs:
                at = [r for r in rows if r["B"] == B and pred(r)]
                if at:
                    pts.append((B, min(r["amortized_us"] for r in at)))
            return pts

        series = {"FLA (faster layout)": best(lambda r: r["variant"].startswith("fla"))}
        for M in sorted({r["M"] for r in rows if r["variant"] == "deltalog" and r["M"] and r["M"] > 1}):
            series[f"DeltaLog M={M}"] = best(lambda r, M=M: r["variant"] == "deltalog" and r["M"] == M
                                             and r["layout"] == "VK")
        if op != "rwkv6":
            series["ReplaySSM (best L)"] = best(lambda r: r["variant"] == "replayssm")
        color = {name: f"C{i}" for i, name in enumerate(series)}  # one color per series in both panels
        for name, pts in series.items():
            style = "-s" if not name.startswith("DeltaLog") else "-o"
            ax.plot([b for b, _ in pts], [t for _, t in pts], style, label=name, markersize=3, linewidth=1,
                    color=color[name])
        floors = {"dense floor": lambda r: r["variant"] == "deltalog" and r["M"] == 1,
                  "DeltaLog floor M=8": lambda r: r["variant"] == "deltalog" and r["M"] == 8}
        for name, pred in floors.items():
            pts = {r["B"]: r["floor_us"] for r in rows if pred(r) and r.get("floor_us")}
            ax.plot(sorted(pts), [pts[b] for b in sorted(pts)], "--", linewidth=0.8, label=name,
                    color="k" if name == "dense floor" else "grey")
        fla = dict(series["FLA (faster layout)"])
        for name, pts in series.items():
            if name.startswith("FLA"):
                continue
            style = "-s" if not name.startswith("DeltaLog") else "-o"
            sax.plot([b for b, _ in pts], [fla[b] / t for b, t in pts], style, label=name, markersize=3, linewidth=1,
                     color=color[name])
        sax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(f"{op.upper()} decode, H200, staggered phases")
        ax.legend(fontsize=7)
        sax.set_xlabel("batch B")
        sax.legend(fontsize=7)
        for a in (ax, sax):
            a.set_xscale("log", base=2)
            a.grid(True, which="both", linewidth=0.3)
    grid[0][0].set_ylabel("µs per decode token (amortized over whole cycles)")
    grid[1][0].set_ylabel("speedup over FLA's faster layout (same run)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def source_files(root: Path) -> list[Path]:
    """The committed JSONs the three tables read, under ``root``."""
    files = _ab_files(root) + [root / rnd / folder / "tpot.json" for rnd, folder in TPOT_AB]
    files += [root / "round48" / "full" / op / f"bench_{op}_decode.json" for op in OPS]
    return files + [root / "round49" / "full" / "rwkv6" / "bench_rwkv6_decode.json"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, default=Path(__file__).parent / "results" / "h200",
                   help="the H200 results folder holding round47/ ... round53/ (default: eval/results/h200)")
    p.add_argument("--plot", type=Path, default=None, metavar="PNG",
                   help="also draw the staggered kernel tables (one panel per operator) into this PNG")
    a = p.parse_args(argv)
    missing = [str(f.relative_to(a.root)) for f in source_files(a.root) if not f.is_file()]
    if missing:
        p.error(f"--root {a.root}: not the H200 results folder (expected round47/ ... round53/ with the "
                f"staggered-merge measurements); missing {len(missing)} of its files, e.g. {', '.join(missing[:3])}")
    print(ab_table(a.root), "", tpot_ab_table(a.root), "", full_tables(a.root), sep="\n")
    if a.plot is not None:
        print(f"wrote {plot_full_tables(a.root, a.plot)}")


if __name__ == "__main__":
    main()
