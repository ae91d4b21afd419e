"""eval/train_tiny.py --fla: with flash-linear-attention installed, GDN trains on transformers' PyTorch recurrences by
default (FLA's gated chunked backward refuses Hopper GPUs under Triton < 3.7.1), and the switch really decides which
kernels run: on a CPU without the Triton interpreter, FLA's kernels cannot run, so with transformers 5.24 only the
hidden-FLA run can train (5.25 calls FLA for CUDA inputs only)."""

import os
import subprocess
import sys
from pathlib import Path

import transformers
from packaging.version import Version

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
    """transformers 5.24 binds FLA's Triton kernels for inputs on any device, so --fla yes fails on a CPU without the
    interpreter; 5.25 calls them for CUDA inputs only and trains on its PyTorch path on a CPU."""
    run = _train(tmp_path, "yes")
    if Version(transformers.__version__) < Version("5.25"):
        assert run.returncode != 0  # transformers bound FLA's Triton kernels, which need a GPU (or the interpreter)
        assert "fla" in run.stderr or "triton" in run.stderr.lower(), run.stderr[-2000:]
    else:
        assert run.returncode == 0, run.stderr[-3000:]
        assert (tmp_path / "yes" / "model.safetensors").exists()


def _load_train_tiny():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_tiny", ROOT / "eval" / "train_tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rwkv6_torch_references_compute_fla_kernels_forward_and_backward():
    """train_tiny's --rwkv6-kernels torch (FLA's PyTorch references of every Triton op of the RWKV6 model) computes the
    model FLA's kernels compute (run here under the Triton interpreter): the logits and the weight gradients of the
    same fused-norm model (fuse_norm=True, so the fused layer norm is swapped too) over 12 tokens, fp32; the swapped
    names are put back on exit."""
    import fla.layers.rwkv6 as layer
    import fla.modules.norm.layernorm as norms
    import torch
    from fla.models import RWKV6Config, RWKV6ForCausalLM
    from fla.modules.activations import ACT2FN

    from hf_deltalog.interpreter import fused_recurrent_under_interpreter

    tt = _load_train_tiny()
    config = RWKV6Config(hidden_size=64, vocab_size=96, num_hidden_layers=2, num_heads=2, expand_k=0.25,
                         expand_v=0.5, proj_low_rank_dim=8, gate_low_rank_dim=8, hidden_ratio=2,
                         fuse_cross_entropy=False, fuse_norm=True)
    ids = torch.randint(3, 96, (2, 12), generator=torch.Generator().manual_seed(0))
    before = (layer.fused_recurrent_rwkv6, layer.chunk_rwkv6, norms.layer_norm, norms.group_norm, ACT2FN["swish"])

    def run(kind):
        torch.manual_seed(0)
        with tt.rwkv6_kernels(kind):
            model = RWKV6ForCausalLM(config)
            with torch.no_grad():
                for module in model.modules():
                    if hasattr(module, "bonus"):
                        module.bonus.normal_(0.0, 0.5)  # zero at init: random so the bonus term counts
            fused_recurrent_under_interpreter(model)
            logits = model(input_ids=ids).logits
            logits.float().square().mean().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_logits, ref_grads = run("fla")
    logits, grads = run("torch")
    assert (layer.fused_recurrent_rwkv6, layer.chunk_rwkv6, norms.layer_norm, norms.group_norm,
            ACT2FN["swish"]) == before
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) > 20
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-3, atol=1e-6, msg=name)


def test_rwkv6_trains_on_cpu_with_torch_references(tmp_path):
    """The default --rwkv6-kernels torch trains the FLA RWKV6 model on a CPU without the Triton interpreter (FLA's
    kernels cannot run there)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(ROOT / "eval" / "train_tiny.py"), "train", "--model", "rwkv6", "--smoke", "--device",
           "cpu", "--out", str(tmp_path / "rwkv6")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "rwkv6" / "model.safetensors").exists()
    fla_run = subprocess.run(cmd[:-2] + ["--rwkv6-kernels", "fla", "--out", str(tmp_path / "fla")],
                             capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert fla_run.returncode != 0  # FLA's Triton kernels need a GPU (or the interpreter)
