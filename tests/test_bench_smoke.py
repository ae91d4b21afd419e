"""The kernel benchmark script runs end to end (its --cpu-smoke mode: interpreter, tiny shapes), for each operator."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="the benchmark times the Triton kernels")

SCRIPT = Path(__file__).resolve().parents[1] / "eval" / "bench_gdn_decode.py"


@pytest.mark.parametrize("operator", ["gdn", "kda", "rwkv6"])
def test_bench_cpu_smoke(operator, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--operator", operator, "--batches", "1", "--ms", "2", "--numerics-batches", "1",
                "--numerics-ms", "2", "--rollout-steps", "4", "--no-compile", "--out", str(tmp_path)])
    result = json.loads((tmp_path / f"bench_{operator}_decode.json").read_text())
    ours = [r for r in result["rows"] if r["variant"] == "deltalog" and r.get("amortized_us")]
    assert {r["M"] for r in ours} == {1, 2} and {r["layout"] for r in ours} == {"KV", "VK"}
    numerics = result["numerics"][0]["results"]
    # bf16 activations: the output is rounded to bf16 (relative error ~2^-9); the state is fp32.
    assert all(r["out_rel"] < 1e-2 and r["state_rel"] < 1e-5 for r in numerics if r["variant"] == "ours")


def test_bench_min_sets_cpu_smoke(tmp_path):
    """--min-sets raises the number of rotated sets above the count the state size gives (2 in --cpu-smoke)."""
    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--operator", "kda", "--batches", "1", "--ms", "2", "--layouts", "VK", "--no-numerics",
                "--no-compile", "--min-sets", "3", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "bench_kda_decode.json").read_text())["rows"]
    assert rows and all(r["sets"] == 3 for r in rows)
    with pytest.raises(SystemExit):
        bench.parse_args(["--min-sets", "0"])


def test_bench_tune_select_cpu_smoke(tmp_path):
    """--tune sweeps launch options of the GDN kernel first; --tune-select runs the main benchmark with the winner."""
    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--batches", "1", "--ms", "2", "--layouts", "VK", "--no-numerics", "--no-compile",
                "--tune", "--tune-select", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench_gdn_decode.json").read_text())
    tuned = [r for r in result["tune"] if r.get("amortized_us")]
    assert len(tuned) == 3 and tuned[0]["options"] == {}  # the defaults are the reference of the selection
    assert result["kernel_overrides"]["selected_by_tune"] is True
    chosen = {k: v for k, v in result["kernel_overrides"].items() if k != "selected_by_tune"}
    assert chosen in [r["options"] for r in tuned] or all(v is None for v in chosen.values())
    ours = [r for r in result["rows"] if r["variant"] == "deltalog" and r["M"] == 2]
    assert [r["layout"] for r in ours] == ["VK"] and ours[0]["amortized_us"] > 0


def test_bench_merge_overrides_cpu_smoke(tmp_path):
    """--tune-only with a "merge" entry times cycles whose merge step runs other launch options than the appends."""
    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--tune", "--skip-main", "--no-numerics", "--no-compile", "--tune-batches", "1",
                "--tune-ms", "3", "--tune-only", "{}", '{"merge": {"block_v": 16, "num_warps": 2}}',
                "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench_gdn_decode.json").read_text())
    tuned = [r for r in result["tune"] if r.get("amortized_us")]
    assert [r["options"] for r in tuned] == [{}, {"merge": {"block_v": 16, "num_warps": 2}}]


def test_bench_stagger_cpu_smoke(tmp_path):
    """--stagger starts every timed cycle and numerics rollout as the cache's staggered restart does (row r at r mod M
    zero entries); the '_stagger' sweep option times aligned against staggered cycles in one process. B = 3 > M = 2,
    so the rows really start in different phases, and whole cycles bring each back to its start length (asserted by
    the script)."""
    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--operator", "kda", "--stagger", "--batches", "3", "--ms", "2", "--layouts", "VK",
                "--numerics-batches", "3", "--numerics-ms", "2", "--rollout-steps", "3", "--no-compile",
                "--tune", "--tune-only", "{}", '{"_stagger": true}',  # the sweep runs B = 2, M = 4 on the CPU
                "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench_kda_decode.json").read_text())
    assert result["kernel_overrides"]["_stagger"] is True
    assert [r["options"] for r in result["tune"] if r.get("amortized_us")] == [{}, {"_stagger": True}]
    assert {r["M"] for r in result["rows"] if r["variant"] == "deltalog" and r.get("amortized_us")} == {1, 2}
    numerics = [r for r in result["numerics"][0]["results"] if r["variant"] == "ours"]
    assert numerics and all(r["out_rel"] < 1e-2 and r["state_rel"] < 1e-5 for r in numerics)


def test_bench_tune_skip_main_cpu_smoke(tmp_path):
    """--tune --skip-main (the RWKV6/KDA launch-option sweep of eval/h200_round3_kernels.sh): the sweep over
    block_v x num_warps runs and nothing else; the watchdog option is accepted and switched off again afterwards."""
    import faulthandler

    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--operator", "rwkv6", "--tune", "--skip-main", "--no-numerics", "--no-compile",
                "--watchdog-s", "600", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench_rwkv6_decode.json").read_text())
    assert result["rows"] == [] and "numerics" not in result
    tuned = [r for r in result["tune"] if r.get("amortized_us")]
    assert len(tuned) == 3 and tuned[0]["options"] == {} and all(r["options"] == {} or set(r["options"]) ==
                                                                 {"block_v", "num_warps"} for r in tuned)
    assert bench.WATCHDOG_S == 0.0
    faulthandler.cancel_dump_traceback_later()  # no-op when nothing is armed (the script cancelled its own)


def _generate_check():
    spec = importlib.util.spec_from_file_location("gpu_generate_check", SCRIPT.parent / "gpu_generate_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    return check


def test_gpu_generate_check_cpu_smoke_lara_mini():
    """The LaraMini builder of eval/gpu_generate_check.py (sliding-window layers of 4 slots beside the GDN layers, an
    8-token prompt): fp32 tokens identical to the default cache, the DeltaLog kernel forced (M = 3), with past
    recording on; --graph decodes eagerly on a CPU; --sliding-window is checked."""
    rows = _generate_check().main(["--cpu-smoke", "--families", "lara_mini", "--dtypes", "float32", "--runs", "2:3",
                                   "--new-tokens", "5", "--past-recording"])  # strided q, k, v into the kernel
    assert [(r["family"], r["batch"], r["effective_merge_interval"], r["backends"], r["past_recording"])
            for r in rows] == [("lara_mini", 2, [3], ["triton"], True)]
    assert rows[0]["identical"] and rows[0]["max_abs_logit_diff_while_tokens_agree"] <= 1e-4
    assert "graph_eager" not in rows[0] and "graph_captured" not in rows[0] and rows[0]["sliding_window"] == 4
    # --graph: the static cache's decode loop (eager on a CPU) with a window that holds the prompt and new tokens
    rows = _generate_check().main(["--cpu-smoke", "--families", "lara_mini", "--dtypes", "float32", "--runs", "2:3",
                                   "--new-tokens", "5", "--graph", "--sliding-window", "13"])
    assert rows[0]["identical"] and rows[0]["graph_eager"]["identical_to_reference"] and "graph_captured" not in rows[0]
    assert rows[0]["sliding_window"] == 13
    for bad in (["--sliding-window", "0"], ["--families", "qwen3_5", "--sliding-window", "8"]):
        with pytest.raises(SystemExit):
            _generate_check().main(["--cpu-smoke", "--families", "lara_mini", *bad])


def test_gpu_generate_check_cpu_smoke():
    """eval/gpu_generate_check.py (transformers' models, for the H200) in its --cpu-smoke mode: --runs and --dtypes
    choose the runs; a bf16 run reports the token share and where tokens part, a forced M runs the DeltaLog kernel;
    --stagger-merges staggers the rows where there is a log (the policy's M = 1 for this tiny state has none)."""
    rows = _generate_check().main(["--cpu-smoke", "--families", "kimi_linear", "--dtypes", "bfloat16", "--runs", "2",
                                   "3:2", "--new-tokens", "3", "--stagger-merges"])
    assert [(r["dtype"], r["batch"], r["merge_interval"]) for r in rows] == [("torch.bfloat16", 2, None),
                                                                               ("torch.bfloat16", 3, 2)]
    assert rows[1]["effective_merge_interval"] == [2] and all(r["backends"] == ["triton"] for r in rows)
    assert [(r["effective_merge_interval"], r["staggered"]) for r in rows] == [([1], [False]), ([2], [True])]
    for r in rows:
        assert 0.0 <= r["token_agreement"] <= 1.0
        assert r["identical"] == (r["first_differing_step"] is None) == (r["top2_margin_at_first_difference"] is None)
        assert r["max_abs_logit_diff_while_tokens_agree"] < 0.1  # bf16 logits of a tiny model


def test_gpu_guard_check_cpu_smoke():
    """eval/gpu_guard_check.py (for the H200) in its --cpu-smoke mode, transformers' Qwen3.5: every guard case runs on
    the Triton backend (interpreted here) and passes."""
    spec = importlib.util.spec_from_file_location("gpu_guard_check", SCRIPT.parent / "gpu_guard_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    rows = check.main(["--cpu-smoke", "--families", "qwen3_5"])
    assert [r["case"] for r in rows] == ["multi_turn", "new_only_turns", "inference_mode_turns", "interrupted_prefill",
                                         "stopped_decode_step", "stopped_between_steps", "threads", "positional_generation_config",
                                         "manual_step_after_a_stop_between_layers", "static_stop_between_layers",
                                         "past_recording_static", "compiled_forward", "dtype_switch",
                                         "backward_raises", "refused_store_from_user_code"]
    assert all(r["ok"] for r in rows), rows
    assert rows[0]["backends"] == ["triton"] and rows[0]["max_abs_logit_diff"] <= 1e-5
    assert rows[-1]["refusals"] == [None, None] and rows[-1]["unchanged"] and rows[-1]["identical"]
    # --cases: only the named cases run; a name that matches no case is an error, not an empty pass
    assert [r["case"] for r in check.main(["--cpu-smoke", "--families", "qwen3_5", "--cases", "threads"])] == ["threads"]
    check.ONLY.clear()
    with pytest.raises(SystemExit):
        check.main(["--cpu-smoke", "--families", "qwen3_5", "--cases", "thread"])


def test_generate_check_runs_syntax():
    sys.path.insert(0, str(SCRIPT.parent))
    from generate_compare import parse_runs

    assert parse_runs(["4", "64:2"], []) == [(4, None), (64, 2)]
    assert parse_runs(None, [(8, None)]) == [(8, None)]
    for bad in ("0", "4:0", "x", "4:", "4:2:1"):
        with pytest.raises(ValueError, match="B or B:M"):
            parse_runs([bad], [])


def test_gpu_compile_check_cpu_smoke(tmp_path):
    """eval/gpu_compile_check.py --cpu-smoke: eager and torch.compile(aot_eager) decode steps of the opaque ops agree
    bit for bit, outputs and buffers, across a merge (C = 3, rows at every phase)."""
    script = SCRIPT.parent / "gpu_compile_check.py"
    out = tmp_path / "compile.json"
    run = subprocess.run([sys.executable, str(script), "--cpu-smoke", "--strict", "--steps", "2", "--operators", "gdn",
                          "rwkv6", "--out", str(out)], capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(out.read_text())["results"]
    assert [r["operator"] for r in results] == ["gdn", "rwkv6"]
    assert all(r["identical"] and r["final_length"] == [2, 3, 0, 1] for r in results)


def test_cache_host_overhead_script_runs():
    """eval/cache_host_overhead.py on a tiny config: the guard's check runs in its common case and the two decode
    variants (with and without the guard) both run; the numbers themselves are for the CPU report, not asserted."""
    spec = importlib.util.spec_from_file_location("cache_host_overhead", SCRIPT.parent / "cache_host_overhead.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    result = script.main(["--layers", "4", "--steps", "2", "--repeats", "1"])
    assert result["check_common_case_us"] > 0 and result["check_slow_path_us"] > 0
    assert set(result["step_ms_runs"]) == {"guard", "no_guard"} and all(len(v) == 1 for v in result["step_ms_runs"].values())


def test_stagger_tables_from_the_committed_results():
    """eval/stagger_tables.py (quoted in BENCHMARKS.md) reads the committed H200 JSONs: the kernel A/B, the whole-model
    A/B of rounds 51-53 (five points, where BENCHMARKS.md reports staggered slower at every one) and the tables."""
    spec = importlib.util.spec_from_file_location("stagger_tables", SCRIPT.parent / "stagger_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    root = SCRIPT.parent / "results" / "h200"
    tpot = tables.tpot_ab_table(root).splitlines()[2:]
    assert len(tpot) == 5 and all(" | +" in row for row in tpot)  # staggered / aligned time > 1 at every point
    assert len(tables.ab_table(root).splitlines()) == 2 + 33 and "**RWKV6**" in tables.full_tables(root)


def test_stagger_tables_plot(tmp_path):
    """``--plot`` draws the staggered kernel tables BENCHMARKS.md embeds: a PNG is written where asked, and the rows
    it draws are the tables' (RWKV6's B = 512 from round 49, every B of the table present for each operator)."""
    spec = importlib.util.spec_from_file_location("stagger_tables", SCRIPT.parent / "stagger_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    root = SCRIPT.parent / "results" / "h200"
    for op in tables.OPS:
        rows = tables.full_rows(root, op)
        assert {r["B"] for r in rows if r.get("amortized_us")} == {1, 8, 32, 64, 128, 256, 512}, op
    png = tables.plot_full_tables(root, tmp_path / "sub" / "tables.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_merge_interval_precision_script_smoke(tmp_path):
    """eval/merge_interval_precision.py on a few steps: every operator, decay regime and M gives a row of finite
    positive error ratios, and the JSON and CSV it writes hold the same rows."""
    spec = importlib.util.spec_from_file_location("merge_interval_precision",
                                                  SCRIPT.parent / "merge_interval_precision.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = script.main(["--out", str(tmp_path), "--steps", "6", "--seeds", "2", "--merge-intervals", "1", "3"])
    assert [(r["operator"], r["decay"], r["merge_interval"]) for r in rows] == [
        (op, decay, M) for op in ("gdn", "kda") for decay in ("none", "weak") for M in (1, 3)]
    ratios = [r[k] for r in rows for k in ("output_ratio_median", "output_ratio_max", "state_ratio_max")]
    assert all(0 < x < 10 for x in ratios), rows
    assert json.loads((tmp_path / "precision.json").read_text())["rows"] == rows
    assert len((tmp_path / "precision.csv").read_text().splitlines()) == 1 + len(rows)
    # the median of an even count is the mean of the two middle values (torch's median() gave the lower one: with
    # 2 seeds the minimum; 42nd review)
    assert script.median(torch.tensor([0.6, 0.87])) == pytest.approx(0.735)
    assert script.median(torch.tensor([3.0, 1.0, 2.0])) == 2.0


@pytest.mark.parametrize("op", ["gdn", "kda", "rwkv6"])
def test_large_grid_check_logic_on_tiny_shapes(op, monkeypatch):
    """eval/gpu_large_grid_check.py (run on the H200 at B·HV ≥ 65,536 and > 2**31 state elements) on tiny shapes under
    the interpreter: its rows-in-every-phase setup and its row-subset comparison with the reference pass for the real
    kernels in both layouts, and fail when the kernel's base is corrupted, so a GPU pass means the rows matched."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("gpu_large_grid_check", SCRIPT.parent / "gpu_large_grid_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    dims = {"HK": 2, "HV": 4, "K": 16, "V": 8}
    for v_first in (True, False):
        r = check.run(op, 6, v_first, 5, "cpu", **dims)
        assert r["ok"] and r["checked_rows"] == [0, 1, 3, 4, 5] and r["max_abs_diff"] < 1e-5, r
    real_case = check.case

    def corrupted_case(*args, **kwargs):  # the real kernel, then the last row's base off by 1e-3
        *head, kernel, gate = real_case(*args, **kwargs)

        def bad_kernel(*a, **kw):
            o = kernel(*a, **kw)
            a[5][-1] += 1e-3  # a[5]: the base buffer
            return o
        return (*head, bad_kernel, gate)

    monkeypatch.setattr(check, "case", corrupted_case)
    assert not check.run(op, 6, True, 5, "cpu", **dims)["ok"]


@pytest.mark.parametrize("op", ["gdn", "kda", "rwkv6"])
def test_large_merge_interval_check_on_tiny_shapes(op, monkeypatch):
    """eval/gpu_large_merge_interval_check.py (run on the H200 up to M = 1024) on tiny heads under the interpreter, at
    M = 20: KDA past its unrolled walk (16 slots), RWKV6 with its slot loop forced; two rows merge, two append."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import hf_deltalog.kernels.rwkv6.fused_deltalog as rwkv6_fused
    monkeypatch.setattr(rwkv6_fused, "MAX_LOG_TILE", 0)
    spec = importlib.util.spec_from_file_location("gpu_large_merge_interval_check",
                                                  SCRIPT.parent / "gpu_large_merge_interval_check.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    r = script.check(op, 20, "cpu", 3, K=8, V=8)
    assert r["ok"] and r["M"] == 20 and r["max_abs_diff"] < 1e-5, r
