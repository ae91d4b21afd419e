"""DeltaLog's replay keeps fp32 precision when strong and weak per-step decays mix (eval/decay_spike_precision.py).

Each log entry keeps its own step's log-decay, and the decay an entry went through since it was written is summed
from the newest entry backwards. The former representation (the cumulative log-decay at each entry, replayed as the
difference of two fp32 running sums) lost the small later decays' precision after a strong one: 10-15x the dense
fp32 recurrence's error against float64 on these inputs (the spiky rows). Both the PyTorch references and the Triton
kernels (under the interpreter here) are checked.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))
from decay_spike_precision import run  # noqa: E402

# DeltaLog and the dense recurrence are two fp32 computations of the same numbers in different orders: on these
# inputs their errors against float64 differ by a factor 0.6-1.3 when nothing cancels; the defect measured 10-15.
RATIO = 2.0


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("op", ["gdn", "kda", "rwkv6"])
@pytest.mark.parametrize("kind", ["smooth", "spiky"])
def test_deltalog_as_close_to_fp64_as_dense(op, kind, backend):
    row = run(op, kind, T=24, backend=backend)
    assert row["deltalog_fp32_error"] <= RATIO * row["dense_fp32_error"], row
    assert row["deltalog_fp32_error"] < 1e-6, row
