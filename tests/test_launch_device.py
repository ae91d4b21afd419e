"""Kernel launches on the device of their tensors (a model spread over several GPUs): the guard's logic, and that
every public launcher goes through it. The two-GPU effect itself is measured in eval/multi_gpu_check.py."""

import contextlib
import importlib

import pytest
import torch

from hf_deltalog.kernels import _op


class _FakeCudaTensor:
    def __init__(self, index):
        self.device = torch.device("cuda", index)


def test_guard_switches_only_to_another_cuda_device(monkeypatch):
    entered = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: entered.append(d) or contextlib.nullcontext())
    with _op.launch_device(_FakeCudaTensor(1)):
        pass
    assert entered == [torch.device("cuda", 1)]
    with _op.launch_device(_FakeCudaTensor(0)), _op.launch_device(torch.zeros(1)):  # current device, CPU
        pass
    assert entered == [torch.device("cuda", 1)]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # Inductor's launches set their own device
    with _op.launch_device(_FakeCudaTensor(1)):
        pass
    assert entered == [torch.device("cuda", 1)]


@pytest.mark.parametrize("module, launcher", [
    ("hf_deltalog.kernels.gdn.fused_deltalog", "fused_deltalog_gdn_decode"),
    ("hf_deltalog.kernels.kda.fused_deltalog", "fused_deltalog_kda_decode"),
    ("hf_deltalog.kernels.rwkv6.fused_deltalog", "fused_deltalog_rwkv6_decode"),
])
@pytest.mark.parametrize("use_custom_op", [False, True])
def test_every_launcher_launches_inside_the_guard(monkeypatch, module, launcher, use_custom_op):
    """Both kernel launches of a step (prepare, decode) run inside ``launch_device`` of the step's first tensor, when
    the launcher launches them itself and when the registered op's body does (the kernels are replaced by recorders;
    the argument checks, which need real shapes, by no-ops)."""
    mod = importlib.import_module(module)
    events = []

    @contextlib.contextmanager
    def guard(t):
        events.append(("enter", t))
        yield
        events.append(("exit", t))

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: events.append(("launch", self.name))

    kernels = [name for name in vars(mod) if name.startswith("_deltalog_") and name.endswith("_kernel")]
    assert len(kernels) == 2, kernels
    for name in kernels:
        monkeypatch.setattr(mod, name, Recorder(name))
    monkeypatch.setattr(mod, "wrap_triton", lambda kernel: kernel)
    monkeypatch.setattr(mod, "launch_device", guard)
    monkeypatch.setattr(mod, "_validate", lambda *a, **k: None)
    first = torch.zeros(1, 1, 2, 4)
    tensors = [first] + [torch.zeros(1, 1, 2, 4) for _ in range(11)]
    out = getattr(mod, launcher)(*tensors, use_custom_op=use_custom_op)
    assert out.shape == (1, 1, 2, 4)
    assert [e[0] for e in events] == ["enter", "launch", "launch", "exit"] and events[0][1] is first
    assert "prepare" in events[1][1] and "decode" in events[2][1]
