"""eval/tpot.py end to end on the CPU (tiny fp32 model, capture off), its memory plan, and the report."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

EVAL = Path(__file__).resolve().parents[1] / "eval"
GIB = 1 << 30


def load(name):
    spec = importlib.util.spec_from_file_location(name, EVAL / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_tpot_cpu_smoke(tmp_path):
    tpot = load("tpot")
    tpot.main(["--cpu-smoke", "--out", str(tmp_path), "--batch-sizes", "2", "--new-tokens", "3",
               "--eager-new-tokens", "3", "--prefill-chunk-tokens", "8", "--record-margins",  # 2 rows x 4 tokens: chunked
               "--control-batch-sizes", "2", "--staggered-batch-sizes", "2"])
    data = json.loads((tmp_path / "tpot.json").read_text())
    runs = {(r["mode"], r["cache"]): r for r in data["runs"]}
    assert set(runs) == {("graph", "static"), ("graph", "deltalog"), ("graph", "static_control"),
                         ("graph", "deltalog_staggered"), ("eager", "default"), ("eager", "deltalog")}
    assert data["skipped"] == []
    for (mode, cache), r in runs.items():
        assert r["batch"] == 2 and r["prompt_len"] == 8 and r["tpot_ms"] > 0
        assert r["steps_timed"] == (2 * 3 if mode == "graph" else 2)  # graph: 2 repeats x 3 steps; eager: 3 tokens
        if cache.startswith("deltalog"):
            assert r["staggered"] == [cache == "deltalog_staggered"]  # the default: aligned merge phases
    for mode in ("graph", "eager"):
        ours = runs[(mode, "deltalog")]
        assert ours["identical"] and ours["token_agreement"] == 1.0  # fp32: the caches give the same tokens
        assert ours["speedup_vs_baseline"] > 0 and ours["crop_ring_bytes"] == 0
    assert runs[("graph", "deltalog")]["captured"] is False
    assert runs[("graph", "deltalog")]["margins_at_first_difference"]["rows"] == 0  # --record-margins, no row parts
    control = runs[("graph", "static_control")]  # the baseline again, prompt prefilled in chunks of 2 instead of 4
    assert control["control_prefill_chunk"] == 2 and control["token_agreement"] == 1.0
    staggered = runs[("graph", "deltalog_staggered")]  # --staggered-batch-sizes: DeltaLogCache(stagger_merges=True)
    assert staggered["identical"]
    assert staggered["staggered_speedup_vs_default"] == runs[("graph", "deltalog")]["tpot_ms"] / staggered["tpot_ms"]
    assert "staggered_speedup_vs_default" not in runs[("graph", "deltalog")]  # the ratio goes on the second run
    for cache in ("static", "deltalog", "static_control"):
        prof = runs[("graph", cache)]["profile"]
        assert prof["clock"] == "cpu" and prof["steps"] == 3 and 0 < prof["share"] < 1
    assert (tmp_path / "tpot.csv").read_text().count("\n") == 7

    report = load("tpot_report")
    pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (the dev extra installs it)")
    report.main([str(tmp_path / "tpot.json")])
    for png in ("tpot.png", "tpot_speedup.png", "state_update_share.png"):
        assert (tmp_path / png).stat().st_size > 1000
    assert "| smoke | 2 | 8 | graph |" in report.table(data)
    assert "control (baseline, prefill chunks of 2): 100.0% equal" in report.table(data)


def test_tpot_staggered_first_cpu_smoke(tmp_path):
    """--staggered-first swaps the two DeltaLog runs of --staggered-batch-sizes; the ratio goes on the second one."""
    tpot = load("tpot")
    tpot.main(["--cpu-smoke", "--out", str(tmp_path), "--batch-sizes", "2", "--new-tokens", "2", "--modes", "graph",
               "--profile-steps", "0", "--staggered-batch-sizes", "2", "--staggered-first"])
    runs = json.loads((tmp_path / "tpot.json").read_text())["runs"]
    assert [r["cache"] for r in runs] == ["static", "deltalog_staggered", "deltalog"]
    staggered, ours = runs[1:]
    assert "staggered_speedup_vs_default" not in staggered and staggered["staggered"] == [True]
    assert ours["staggered_speedup_vs_default"] == ours["tpot_ms"] / staggered["tpot_ms"] and ours["identical"]
    assert "staggered_speedup_vs_default" in (tmp_path / "tpot.csv").read_text().splitlines()[0]

    # eval/stagger_tables.py reads this naming too (rounds 51-53 wrote deltalog = staggered, deltalog_aligned)
    tables = load("stagger_tables")
    rows = tables.tpot_ab_table(tmp_path.parent, sources=((tmp_path.name, "."),)).splitlines()[2:]
    assert len(rows) == 1 and rows[0].startswith(f"| {tmp_path.name} | smoke | 2 | staggered | ")


def test_tpot_exits_nonzero_when_a_run_fails(tmp_path, monkeypatch):
    """A DeltaLog run that failed (--merge-interval 5000 did, before it was checked at parse time) left the baseline's
    results alone and the script exited 0. It keeps writing what succeeded, names what failed and exits non-zero."""
    tpot = load("tpot")
    real = tpot.run_graph

    def run_graph(model, cache_kind, *args, **kwargs):
        if cache_kind == "deltalog":
            raise ValueError("a DeltaLog run that fails")
        return real(model, cache_kind, *args, **kwargs)

    monkeypatch.setattr(tpot, "run_graph", run_graph)
    with pytest.raises(SystemExit) as err:
        tpot.main(["--cpu-smoke", "--out", str(tmp_path), "--batch-sizes", "1", "--new-tokens", "2", "--modes",
                   "graph", "--profile-steps", "0"])
    message = str(err.value.code)  # sys.exit(message): exit status 1
    assert message.startswith("1 of the requested runs failed") and str(tmp_path / "tpot.json") in message
    assert "smoke graph deltalog B=1: error: ValueError: a DeltaLog run that fails" in message
    data = json.loads((tmp_path / "tpot.json").read_text())
    assert [r["cache"] for r in data["runs"]] == ["static"] and [s["cache"] for s in data["skipped"]] == ["deltalog"]


@pytest.mark.parametrize("args, message", [
    (["--staggered-batch-sizes", "4"], "--staggered-batch-sizes adds graph-mode runs at batch sizes of --batch-sizes"),
    (["--staggered-batch-sizes", "2", "--modes", "eager"], "--staggered-batch-sizes adds graph-mode runs"),
    (["--control-batch-sizes", "4"], "--control-batch-sizes adds graph-mode runs"),
    (["--staggered-first"], "--staggered-first orders the runs of --staggered-batch-sizes"),
])
def test_tpot_refuses_extras_it_would_not_run(args, message, capsys):
    tpot = load("tpot")
    with pytest.raises(SystemExit):
        tpot.parse(["--cpu-smoke", "--out", "/nonexistent", "--batch-sizes", "2", *args])
    assert message in capsys.readouterr().err


def test_memory_plan_of_the_full_size_architectures():
    """Weights and per-row cache sizes from the published configs (built on the meta device), and the prompt length
    the plan keeps on a 139 GiB GPU: Qwen3.5-35B-A3B keeps 1,024 tokens at B = 256; Kimi-Linear-48B-A3B (91.5 GiB
    of bf16 weights, an MLA cache of 7 layers x 32 heads x (192 + 128) values per token) must shorten it there."""
    tpot = load("tpot")
    qwen = tpot.model_geometry(tpot.build_model("qwen3_5_35b_a3b", "meta"))
    kimi = tpot.model_geometry(tpot.build_model("kimi_linear_48b_a3b", "meta"))
    assert (qwen["linear_layers"], qwen["attention_layers"], kimi["linear_layers"], kimi["attention_layers"]) == \
        (30, 10, 20, 7)
    assert 34.6e9 < qwen["weight_bytes"] / 2 < 34.7e9 and 49.1e9 < kimi["weight_bytes"] / 2 < 49.2e9
    assert qwen["state_bytes_per_row"] == 30 * 32 * 128 * 128 * 4
    assert kimi["kv_bytes_per_token_row"] == 7 * 32 * (128 + 64 + 128) * 2
    capacity, headroom = 0.95 * 139 * GIB, 8 * GIB
    assert tpot.plan_prompt(qwen, 256, 1024, 140, capacity, headroom)[0] == 1024
    assert tpot.plan_prompt(kimi, 64, 1024, 140, capacity, headroom)[0] == 1024
    kept, need = tpot.plan_prompt(kimi, 256, 1024, 140, capacity, headroom)
    assert 64 <= kept < 1024 and kept % 64 == 0 and need <= capacity


def test_agreement_reports_the_margins_where_rows_part():
    import torch

    tpot = load("tpot")
    a = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7, 8]])
    b = torch.tensor([[1, 2, 9, 4], [1, 2, 3, 4], [5, 0, 7, 8]])  # row 0 parts at step 2, row 2 at step 1
    ours = torch.tensor([[0.5, 0.5, 0.01, 1.0], [1.0] * 4, [2.0, 0.02, 1.0, 1.0]])
    base = torch.tensor([[0.5, 0.5, 0.03, 1.0], [1.0] * 4, [2.0, 0.04, 1.0, 1.0]])
    r = tpot.agreement(a, b, ours, base)
    assert r["first_differing_step"] == 1 and r["token_agreement"] == pytest.approx(10 / 12) and not r["identical"]
    m = r["margins_at_first_difference"]
    assert m["rows"] == 2 and m["baseline_max"] == pytest.approx(0.04) and m["ours_max"] == pytest.approx(0.02)
    assert m["first_steps_median"] == 1.5
    assert "margins_at_first_difference" not in tpot.agreement(a, b)
