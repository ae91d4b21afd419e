"""Inputs at the edge of the contract, for every operator's reference and Triton kernel (under the interpreter):
a step whose log-decay is huge or -inf, and a length outside [0, C] (negative, or above C)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before any triton import

import pytest
import torch
from utils import rel_err

from hf_deltalog.kernels.gdn.naive import naive_deltalog_gdn_decode, naive_deltalog_gdn_materialize
from hf_deltalog.kernels.gdn.naive import naive_recurrent_gated_delta_rule
from hf_deltalog.kernels.kda.naive import naive_deltalog_kda_decode, naive_deltalog_kda_materialize, naive_recurrent_kda

triton = pytest.importorskip("triton", reason="the Triton kernels need triton")
from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode  # noqa: E402
from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode  # noqa: E402
from hf_deltalog.kernels.rwkv6.fused_deltalog import (  # noqa: E402
    deltalog_rwkv6_workspace,
    fused_deltalog_rwkv6_decode,
)
from hf_deltalog.kernels.rwkv6.naive import (  # noqa: E402
    naive_deltalog_rwkv6_decode,
    naive_deltalog_rwkv6_materialize,
    naive_recurrent_rwkv6,
)

B, H, K, V, M, T = 2, 2, 16, 8, 8, 12


def gdn_case(gen):
    x = [torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen),
         torch.randn(B, T, H, V, generator=gen), -torch.rand(B, T, H, generator=gen) * 0.01,
         torch.rand(B, T, H, generator=gen)]
    log = [torch.zeros(B, H), torch.zeros(B, H, M - 1, K), torch.zeros(B, H, M - 1, V), torch.zeros(B, H, M - 1),
           torch.zeros(B, dtype=torch.int32)]
    dense = lambda *a, S: naive_recurrent_gated_delta_rule(*a, initial_state=S, output_final_state=True,  # noqa: E731
                                                           use_qk_l2norm_in_kernel=True)
    return x, log, 3, dense, naive_deltalog_gdn_decode, naive_deltalog_gdn_materialize, fused_deltalog_gdn_decode, \
        deltalog_gdn_workspace(B, H, H, K, M - 1, "cpu")


def kda_case(gen):
    x = [torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen),
         torch.randn(B, T, H, V, generator=gen), -torch.rand(B, T, H, K, generator=gen) * 0.01,
         torch.rand(B, T, H, generator=gen)]
    log = [torch.zeros(B, H, K), torch.zeros(B, H, M - 1, K), torch.zeros(B, H, M - 1, V),
           torch.zeros(B, H, M - 1, K), torch.zeros(B, dtype=torch.int32)]
    dense = lambda *a, S: naive_recurrent_kda(*a, initial_state=S, output_final_state=True,  # noqa: E731
                                              use_qk_l2norm_in_kernel=True)
    return x, log, 3, dense, naive_deltalog_kda_decode, naive_deltalog_kda_materialize, fused_deltalog_kda_decode, \
        deltalog_kda_workspace(B, H, H, K, M - 1, "cpu")


def rwkv6_case(gen):
    x = [torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen) * 0.3,
         torch.randn(B, T, H, V, generator=gen), -torch.rand(B, T, H, K, generator=gen) * 0.01,
         torch.randn(H, K, generator=gen)]
    log = [torch.zeros(B, H, K), torch.zeros(B, H, M - 1, K), torch.zeros(B, H, M - 1, V),
           torch.zeros(B, H, M - 1, K), torch.zeros(B, dtype=torch.int32)]
    dense = lambda *a, S: naive_recurrent_rwkv6(*a, initial_state=S, output_final_state=True)  # noqa: E731
    return x, log, 3, dense, naive_deltalog_rwkv6_decode, naive_deltalog_rwkv6_materialize, \
        fused_deltalog_rwkv6_decode, deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu")


CASES = {"gdn": gdn_case, "kda": kda_case, "rwkv6": rwkv6_case}


def step_inputs(x, t, op):
    per_step = x if op != "rwkv6" else x[:4]
    out = [a[:, t:t + 1] for a in per_step]
    return out + ([x[4]] if op == "rwkv6" else [])


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("big", [-1e4, float("-inf")], ids=["-1e4", "-inf"])
def test_huge_decay_step_stays_exact(op, big):
    """One step decays by exp(-1e4) or exp(-inf) (= 0 in fp32), the others barely: the state and outputs stay as
    close to a float64 eager run as fp32 allows, with no NaN (the per-step floor of kernels.common)."""
    x, log, decay_idx, dense, naive, materialize, kernel, ws = CASES[op](torch.Generator().manual_seed(0))
    x[decay_idx][:, 2] = big
    S0 = torch.zeros(B, H, K, V)
    base_a, base_b = S0.clone(), S0.clone()
    log_a, log_b = [t.clone() for t in log], [t.clone() for t in log]
    S = S0.double()
    for t in range(T):
        xs = step_inputs(x, t, op)
        o_ref, S = dense(*(a.double() for a in xs), S=S)
        o_a = naive(*xs, base_a, *log_a)
        o_b = kernel(*xs, base_b, *log_b, ws)
        for o in (o_a, o_b):
            assert torch.isfinite(o).all() and rel_err(o, o_ref) < 1e-5, (op, t)
    for base, lg in ((base_a, log_a), (base_b, log_b)):
        assert rel_err(materialize(base, *lg), S) < 1e-5, op


@pytest.mark.parametrize("op", list(CASES))
def test_length_outside_the_log_writes_nothing(op):
    """length must be in [0, C]; a negative one (a caller's bug) must not write outside the buffers: the kernel and
    the reference both treat the row as an append that stores no entry."""
    x, log, _, _, naive, _, kernel, ws = CASES[op](torch.Generator().manual_seed(1))
    log[-1][:] = torch.tensor([-1, 0], dtype=torch.int32)
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(2))
    ref_log, ker_log = [t.clone() for t in log], [t.clone() for t in log]
    ref_base, ker_base = base.clone(), base.clone()
    xs = step_inputs(x, 0, op)
    o_ref = naive(*xs, ref_base, *ref_log)
    o = kernel(*xs, ker_base, *ker_log, ws)
    torch.testing.assert_close(o, o_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(ker_log, ref_log):
        assert torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)) if not a.is_floating_point() else \
            torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ker_log[-1].tolist() == [0, 1]


@pytest.mark.parametrize("op", list(CASES))
def test_length_above_the_log_merges_like_the_reference(op):
    """A length above C (a caller's bug) makes the row a merge of its C entries, in the kernel as in the reference:
    same output, same base, length reset to 0 (the KDA / RWKV6 kernels hand the merge its decayed keys through the
    decay slots on every merge row, L ≥ C, not only at L = C)."""
    x, log, _, _, naive, _, kernel, ws = CASES[op](torch.Generator().manual_seed(3))
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(4))
    ref_base, ker_base = base.clone(), base.clone()
    ref_log, ker_log = [t.clone() for t in log], [t.clone() for t in log]
    for t in range(M - 1):  # fill both rows' logs: length C
        xs = step_inputs(x, t, op)
        naive(*xs, ref_base, *ref_log)
        kernel(*xs, ker_base, *ker_log, ws)
    assert ker_log[-1].tolist() == ref_log[-1].tolist() == [M - 1, M - 1]
    ref_log[-1][0] = ker_log[-1][0] = M  # row 0: one past the log
    xs = step_inputs(x, M - 1, op)
    o_ref = naive(*xs, ref_base, *ref_log)
    o = kernel(*xs, ker_base, *ker_log, ws)
    torch.testing.assert_close(o, o_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ker_base, ref_base, rtol=1e-5, atol=1e-5)
    assert ker_log[-1].tolist() == ref_log[-1].tolist() == [0, 0]
