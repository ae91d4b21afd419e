"""Table and plots of ``eval/tpot.py`` results (run where matplotlib is installed; the GPU machine needs neither).

    python eval/tpot_report.py eval/results/h200/tpot_qwen3_5_35b/tpot.json \\
        eval/results/h200/tpot_kimi_linear_48b/tpot.json     # prints the markdown table, writes PNGs beside the first

Functions are importable (``examples/speed.ipynb`` uses them): :func:`load`, :func:`table`, :func:`plot_tpot`,
:func:`plot_speedup`, :func:`plot_state_share`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CACHE_LABEL = {"default": "default cache (DynamicCache)", "static": "transformers StaticCache",
               "deltalog": "DeltaLogCache"}


def load(*paths) -> dict:
    """Results of one or more ``tpot.json`` files (runs and skipped runs concatenated; the first file's meta, with
    every file's command)."""
    datas = [json.loads(Path(p).read_text()) for p in paths]
    meta = dict(datas[0]["meta"], commands=[d["meta"].get("command") for d in datas])
    return dict(meta=meta, runs=[r for d in datas for r in d["runs"]],
                skipped=[s for d in datas for s in d.get("skipped", [])])


def _runs(data, **match):
    return [r for r in data["runs"] if all(r.get(k) == v for k, v in match.items())]


def _shown(data, **match):
    """The runs matching ``match``, one per model, batch size, mode and cache: the first listed, as :func:`table`
    shows (a re-timing loaded first supersedes older runs of the same point)."""
    seen, rows = set(), []
    for r in _runs(data, **match):
        key = (r["model"], r["batch"], r["mode"], r["cache"])
        if key not in seen:
            seen.add(key)
            rows.append(r)
    return rows


def _fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def table(data) -> str:
    """Markdown table: per model and batch size, TPOT of both caches in each mode, speedup, token agreement, peak
    memory, the share of GPU time in recurrent-state updates, the DeltaLog buffers' overhead and, where tokens part
    (graph runs with --record-margins), the median first differing step and the baseline's top-2 logit margin
    there (median / largest over the rows that part)."""
    head = ("| model | B | prompt | mode | baseline ms/tok | DeltaLog ms/tok | speedup | tokens equal | "
            "peak GiB (base / ours) | state-update share (base / ours) | log overhead | where tokens part |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    keys = sorted({(r["model"], r["batch"], r["mode"]) for r in data["runs"]},
                  key=lambda k: (k[0], k[1], k[2] != "graph"))
    for model, batch, mode in keys:
        base = next(iter(_runs(data, model=model, batch=batch, mode=mode, cache="static" if mode == "graph"
                               else "default")), None)
        ours = next(iter(_runs(data, model=model, batch=batch, mode=mode, cache="deltalog")), None)
        control = next(iter(_runs(data, model=model, batch=batch, mode=mode, cache="static_control")), None)
        ref = ours or base
        share = f"{_fmt(base and base.get('state_update_share'), '.1%')} / {_fmt(ours and ours.get('state_update_share'), '.1%')}"
        mem = f"{_fmt(base and base.get('peak_memory_gib'), '.1f')} / {_fmt(ours and ours.get('peak_memory_gib'), '.1f')}"
        spread = (lambda r: "" if r is None or r.get("repeats", 1) < 2 else
                  f" ({r['tpot_ms_min']:.2f}–{r['tpot_ms_max']:.2f})")
        lines.append(
            f"| {model} | {batch} | {ref['prompt_len']} | {mode} | {_fmt(base and base['tpot_ms'])}{spread(base)} | "
            f"{_fmt(ours and ours['tpot_ms'])}{spread(ours)} | {_fmt(ours and ours.get('speedup_vs_baseline'), '.3f')}× | "
            f"{_fmt(ours and ours.get('token_agreement'), '.1%')} | {mem} | {share} | "
            f"{_fmt(ours and ours.get('log_overhead'), '.1%')} | {_parting(ours)}{_control(control)} |")
    return "\n".join(lines)


def _control(run) -> str:
    """The baseline against itself with other prefill chunks (--control-batch-sizes), or ''."""
    if not run or run.get("token_agreement") is None:
        return ""
    return f"; control (baseline, prefill chunks of {run['control_prefill_chunk']}): " + \
        f"{run['token_agreement']:.1%} equal, {_parting(run)}"


def _parting(run) -> str:
    """'step s, margin m̃ / max' of the baseline at the first differing step of each parting row, or '–'."""
    m = (run or {}).get("margins_at_first_difference")
    if not m or not m.get("rows"):
        return "–"
    return (f"{m['rows']} rows, step {m['first_steps_median']:g}, margin {m['baseline_median']:.3f} / "
            f"{m['baseline_max']:.3f}")


def _log2_batch_axis(ax, ylabel):
    """Batch size on a log2 x axis, a grid and a small legend."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _finish(fig, path):
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=130)
    return fig


def _axes(plt, n):
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.8), squeeze=False)
    return fig, axes[0]


def plot_tpot(data, path=None):
    """TPOT (ms/token) against batch size, per model: both caches, both modes (the runs :func:`table` shows)."""
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in data["runs"]})
    fig, axes = _axes(plt, len(models))
    for ax, model in zip(axes, models):
        for mode, style in (("graph", "-"), ("eager", ":")):
            for cache, color in (("static", "C0"), ("default", "C0"), ("deltalog", "C3")):
                rows = sorted(_shown(data, model=model, mode=mode, cache=cache), key=lambda r: r["batch"])
                if not rows:
                    continue
                xs = [r["batch"] for r in rows]
                ax.plot(xs, [r["tpot_ms"] for r in rows], style, marker="o", color=color,
                        label=f"{CACHE_LABEL[cache]}, {mode}")
                lo = [r["tpot_ms_min"] for r in rows]
                hi = [r["tpot_ms_max"] for r in rows]
                ax.fill_between(xs, lo, hi, color=color, alpha=0.15)
        ax.set_title(model)
        _log2_batch_axis(ax, "ms per output token (decode)")
    return _finish(fig, path)


def plot_speedup(data, path=None):
    """DeltaLogCache's TPOT speedup over the baseline of the same mode, against batch size (the runs :func:`table`
    shows)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for i, model in enumerate(sorted({r["model"] for r in data["runs"]})):
        for mode, style in (("graph", "-"), ("eager", ":")):
            rows = sorted((r for r in _shown(data, model=model, mode=mode, cache="deltalog")
                           if r.get("speedup_vs_baseline")), key=lambda r: r["batch"])
            if rows:
                ax.plot([r["batch"] for r in rows], [r["speedup_vs_baseline"] for r in rows], style, marker="o",
                        color=f"C{i}", label=f"{model}, {mode}")
    ax.axhline(1.0, color="k", lw=0.8)
    _log2_batch_axis(ax, "TPOT speedup (baseline / DeltaLog)")
    return _finish(fig, path)


def plot_state_share(data, path=None):
    """Share of decode time spent updating recurrent states (torch profiler), per batch size and cache."""
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in data["runs"] if r.get("state_update_share") is not None})
    fig, axes = _axes(plt, max(1, len(models)))
    for ax, model in zip(axes, models):
        batches = sorted({r["batch"] for r in _runs(data, model=model, mode="graph")})
        width = 0.38
        for j, cache in enumerate(("static", "deltalog")):
            vals = []
            for b in batches:
                row = next(iter(_runs(data, model=model, mode="graph", cache=cache, batch=b)), None)
                vals.append(100 * row["state_update_share"] if row and row.get("state_update_share") is not None
                            else 0.0)
            ax.bar([k + (j - 0.5) * width for k in range(len(batches))], vals, width, label=CACHE_LABEL[cache],
                   color="C0" if cache == "static" else "C3")
        ax.set_xticks(range(len(batches)), [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel("% of decode-step time in recurrent-state update")
        clock = next((r["profile"]["clock"] for r in _runs(data, model=model) if r.get("profile")), "gpu")
        ax.set_title(f"{model} ({clock} time)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    return _finish(fig, path)


def _not_tpot_results(path: Path) -> str | None:
    """Why ``path`` is not a ``tpot.json`` written by ``eval/tpot.py`` (None: it is one)."""
    if not path.is_file():
        return "no such file" if not path.exists() else "not a file"
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"not readable as JSON ({e})"
    if not (isinstance(data, dict) and isinstance(data.get("meta"), dict) and isinstance(data.get("runs"), list)):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        return f"JSON without eval/tpot.py's 'meta' and 'runs' (it holds {keys})"
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="tpot.json file(s) written by eval/tpot.py")
    a = p.parse_args(argv)
    for path in a.results:
        why = _not_tpot_results(path)
        if why:
            p.error(f"{path}: {why}; expected a tpot.json written by eval/tpot.py")
    import matplotlib

    matplotlib.use("Agg")
    data = load(*a.results)
    out = a.results[0].parent
    plot_tpot(data, out / "tpot.png")
    plot_speedup(data, out / "tpot_speedup.png")
    plot_state_share(data, out / "state_update_share.png")
    meta = data["meta"]
    print(f"{meta.get('gpu', 'CPU')}; torch {meta['torch']}, transformers {meta['transformers']}, triton "
          f"{meta.get('triton')}, fla {meta.get('fla')}; {meta.get('started')}")
    print("commands:\n  " + "\n  ".join(str(c) for c in meta["commands"]) + "\n")
    print(table(data))
    for s in data.get("skipped", []):
        print(f"skipped: {s}")


if __name__ == "__main__":
    main()
