"""eval/train_tiny.py --fla: with flash-linear-attention installed, GDN trains on transformers' PyTorch recurrences by
default (FLA's gated chunked backward refuses Hopper GPUs under Triton < 3.7.1), and the switch really decides which
kernels run: on a CPU without the Triton interpreter, FLA's kernels cannot run, so only the hidden-FLA run can train."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _train(tmp_path, fla):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # FLA's kernels cannot run here
    cmd = [sys.executable, str(ROOT / "eval" / "train_tiny.py"), "train", "--model", "gdn", "--smoke", "--device",
           "cpu", "--fla", fla, "--out", str(tmp_path / fla)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_gdn_trains_without_fla_by_default(tmp_path):
    run = _train(tmp_path, "auto")
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "auto" / "model.safetensors").exists()


def test_fla_yes_uses_fla_kernels(tmp_path):
    run = _train(tmp_path, "yes")
    assert run.returncode != 0  # transformers bound FLA's Triton kernels, which need a GPU (or the interpreter)
    assert "fla" in run.stderr or "triton" in run.stderr.lower(), run.stderr[-2000:]
