"""eval/multi_gpu_check.py end to end on the CPU (one device): the script's code paths, not a two-GPU result."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("multi_gpu_check", ROOT / "eval" / "multi_gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_multi_gpu_check_smoke(tmp_path):
    rows = _load().main(["--smoke", "--checkpoints", "gdn", "--dtypes", "float32", "--out", str(tmp_path / "m.json")])
    assert (tmp_path / "m.json").exists()
    assert [r["mode"] for r in rows] == ["generate", "generate", "static, graph_generate(capture=False)"]
    # fp32 on one device: DeltaLog must give the default cache's tokens, with its tensors on the layers' device.
    assert all(r["placement_ok"] and r["identical_tokens"] == 1.0 for r in rows)
    assert rows[0]["max_abs_dlogit"] < 1e-4


def test_multi_gpu_check_needs_two_gpus(tmp_path):
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs: the refusal path does not apply")
    with pytest.raises(SystemExit, match="needs two CUDA devices"):
        _load().main(["--out", str(tmp_path / "m.json")])
