"""The evaluation scripts' CPU smoke modes with FLA installed: the kernel benchmark for RWKV6 with FLA's
fused_recurrent_rwkv6 baseline (an autotuned kernel, collapsed by conftest.py) beside ours; the FLA generate check."""

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "eval" / "bench_gdn_decode.py"


def test_bench_rwkv6_cpu_smoke_with_fla_baseline(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_gdn_decode", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    bench.main(["--cpu-smoke", "--operator", "rwkv6", "--batches", "1", "--ms", "2", "--numerics-batches", "1",
                "--numerics-ms", "2", "--rollout-steps", "4", "--no-compile", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench_rwkv6_decode.json").read_text())
    assert result["fla_available"]
    rows = {r["variant"]: r for r in result["rows"] if r["variant"].startswith("fla")}
    assert rows["fla_kfirst"]["amortized_us"] > 0  # FLA's kernel ran (only its [K, V] layout exists)
    assert rows["fla_vfirst"]["amortized_us"] is None
    numerics = result["numerics"][0]["results"]
    fla = [r for r in numerics if r["variant"] == "fla" and "out_rel" in r]
    ours = [r for r in numerics if r["variant"] == "ours"]
    assert len(fla) == 1 and fla[0]["layout"] == "KV" and ours
    # bf16 activations: outputs rounded to bf16 (relative error ~2^-9) on both paths; the state is fp32.
    assert all(r["out_rel"] < 1e-2 and r["state_rel"] < 1e-5 for r in fla + ours)


def test_gpu_generate_check_fla_cpu_smoke():
    """eval/gpu_generate_check_fla.py (for the H200) runs end to end in its --cpu-smoke mode (one family: the code
    path is the same for all three)."""
    spec = importlib.util.spec_from_file_location("gpu_generate_check_fla", SCRIPT.parent / "gpu_generate_check_fla.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    rows = check.main(["--cpu-smoke", "--families", "rwkv6", "--new-tokens", "3"])
    assert [r["merge_interval"] for r in rows] == [None, 2]
    # hf_deltalog's Triton kernels, interpreted (the smoke ran the PyTorch backend: 31st review)
    assert all(r["backends"] == ["triton"] for r in rows), [r["backends"] for r in rows]
    assert all(r["identical"] and r["max_abs_logit_diff_while_tokens_agree"] <= 1e-4 for r in rows)
    assert all(r["reference_vs_full_forward_max_abs_logit_diff"] <= 1e-4 for r in rows)


def test_gpu_generate_check_fla_runs_and_dtypes_cpu_smoke():
    """--families/--dtypes/--runs (eval/h200_round3_kernels.sh runs GatedDeltaNet and KDA at one batch, one dtype per
    process): exactly the chosen runs, in bf16 no full-forward check of the reference (it is an fp32 check), and
    --stagger-merges staggers the rows."""
    spec = importlib.util.spec_from_file_location("gpu_generate_check_fla", SCRIPT.parent / "gpu_generate_check_fla.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    rows = check.main(["--cpu-smoke", "--families", "kda", "--dtypes", "bfloat16", "--runs", "3:2", "--new-tokens", "3",
                       "--stagger-merges"])
    assert [(r["family"], r["dtype"], r["batch"], r["merge_interval"], r["staggered"]) for r in rows] == [
        ("kda", "torch.bfloat16", 3, 2, [True])]
    assert rows[0]["effective_merge_interval"] == [2] and rows[0]["reference_vs_full_forward_max_abs_logit_diff"] is None
    assert rows[0]["backends"] == ["triton"]
    assert rows[0]["identical"] == (rows[0]["first_differing_step"] is None)
    assert rows[0]["max_abs_logit_diff_while_tokens_agree"] < 0.1  # bf16 logits of a tiny model


def test_gpu_guard_check_fla_cpu_smoke():
    """eval/gpu_guard_check.py (for the H200) in its --cpu-smoke mode on FLA's RWKV6 model: every guard case passes on
    the Triton backend (interpreted here)."""
    spec = importlib.util.spec_from_file_location("gpu_guard_check", SCRIPT.parent / "gpu_guard_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    rows = check.main(["--cpu-smoke", "--families", "fla_rwkv6"])
    assert [r["case"] for r in rows] == ["multi_turn", "new_only_turns", "interrupted_prefill", "stopped_decode_step",
                                         "stopped_between_steps", "threads", "inference_mode_then_plain",
                                         "legacy_snapshot", "manual_step_after_a_stop_between_stores",
                                         "refused_store_from_user_code"]
    assert all(r["ok"] for r in rows), rows
    assert rows[0]["backends"] == ["triton"] and rows[0]["max_abs_logit_diff"] <= 1e-5
    assert rows[-1]["refusals"] == [None, None] and rows[-1]["unchanged"] and rows[-1]["identical"]
