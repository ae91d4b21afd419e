"""The documented CPU commands in the environment the README's test command installs (flash-linear-attention and
triton both present, no GPU, no TRITON_INTERPRET): transformers binds its GDN / KDA layers to FLA's Triton kernels
there, which fail without a GPU ("0 active drivers"), so the quickstart and the parity script crashed (found by a
breaker review). They now hide FLA from transformers on such a CPU (hf_deltalog.interpreter.hide_fla_on_cpu), and the
parity script runs FLA's RWKV6 checkpoint with FLA's PyTorch references there (--fla-kernels auto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "eval" / "checkpoints"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only situation: no GPU on this machine")


def run_without_interpreter(*args: str) -> subprocess.CompletedProcess:
    """Run a script in a fresh process with FLA importable and TRITON_INTERPRET unset (this suite sets it)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_fla_and_triton_are_importable_in_the_subprocess():
    """What makes the other tests meaningful: FLA and triton import there, without the interpreter."""
    run = run_without_interpreter("-c", "import fla, triton, os; print(os.environ.get('TRITON_INTERPRET'))")
    assert run.returncode == 0 and run.stdout.strip() == "None", run.stderr[-2000:]


def test_quickstart_runs_with_fla_installed():
    run = run_without_interpreter("examples/quickstart.py", "--new-tokens", "6", "--device", "cpu")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "token agreement: 100.0% (identical)" in run.stdout, run.stdout


def test_parity_script_runs_transformers_and_fla_checkpoints_with_fla_installed(tmp_path):
    """One call per kind: the GDN checkpoint (FLA hidden from transformers) and the RWKV6 checkpoint (FLA's PyTorch
    references); mixing both in one call is refused with the reason."""
    for name in ("gdn-shakespeare", "rwkv6-shakespeare"):
        out = tmp_path / name
        run = run_without_interpreter("eval/lm_eval_parity.py", "--pretrained", str(CHECKPOINTS / name), "--limit", "2",
                                      "--batch-size", "2", "--device", "cpu", "--tasks", "shakespeare_next_line_mc",
                                      "--quiet", "--out", str(out))
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads((out / "parity.json").read_text())
        row = report["checkpoints"][0]["tasks"]["shakespeare_next_line_mc"]
        assert row["metrics_identical"] and row["max_abs_loglikelihood_diff"] <= 1e-5, row
        assert report["meta"]["fla_hidden_from_transformers"] == (name == "gdn-shakespeare")
        assert report["meta"]["fla_kernels"] == "torch"
    both = run_without_interpreter("eval/lm_eval_parity.py", "--pretrained", str(CHECKPOINTS / "gdn-shakespeare"),
                                   str(CHECKPOINTS / "rwkv6-shakespeare"), "--limit", "2", "--device", "cpu")
    assert both.returncode != 0 and "in separate calls" in both.stderr, both.stderr[-2000:]
