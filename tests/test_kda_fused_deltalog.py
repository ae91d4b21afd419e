"""CPU tests of the KDA DeltaLog Triton kernels under the Triton interpreter, against the PyTorch reference."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before any triton import

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: the KDA Triton kernels cannot run")

import hf_deltalog.kernels.kda.fused_deltalog as kda_fused  # noqa: E402
from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode  # noqa: E402
from hf_deltalog.kernels.kda.naive import (  # noqa: E402
    naive_deltalog_kda_decode,
    naive_deltalog_kda_materialize,
    naive_recurrent_kda,
)

from utils import live_slots  # noqa: E402

NAMES = ("base", "log_decay", "k_log", "u_log", "decay_log", "length")


def make_state(B, Hk, HV, K, V, M, lengths, seed):
    """Buffers with lengths[b] live entries (consistent log-decays: ℓ̄ = Σ λ_i, normalised keys); stale slots hold NaN."""
    gen = torch.Generator().manual_seed(seed)
    C, nan = M - 1, float("nan")
    base = torch.randn(B, HV, K, V, generator=gen) * 0.5
    log_decay = torch.zeros(B, HV, K)
    k_log, u_log = torch.full((B, Hk, C, K), nan), torch.full((B, HV, C, V), nan)
    decay_log = torch.full((B, HV, C, K), nan)
    for b, L in enumerate(lengths):
        lam = -torch.rand(HV, L + 1, K, generator=gen) * 0.3  # each entry's own log-decay
        if L:
            decay_log[b, :, :L] = lam[:, :L]
            k_log[b, :, :L] = torch.nn.functional.normalize(torch.randn(Hk, L, K, generator=gen), dim=-1)
            u_log[b, :, :L] = torch.randn(HV, L, V, generator=gen) * 0.3
            log_decay[b] = lam[:, :L].sum(1)  # ℓ̄ = Σ λ_i
    return [base, log_decay, k_log, u_log, decay_log, torch.tensor(lengths, dtype=torch.int32)]


def make_inputs(B, Hk, HV, K, V, dtype, gen):
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return (r(B, 1, Hk, K).to(dtype), r(B, 1, Hk, K).to(dtype), r(B, 1, HV, V).to(dtype),
            (-torch.rand(B, 1, HV, K, generator=gen) * 0.4).to(dtype), torch.rand(B, 1, HV, generator=gen).to(dtype))


def to_layout(state, v_first):
    return [state[0].transpose(-1, -2).contiguous() if v_first else state[0], *state[1:]]


# fp32: the same arithmetic in another summation order. Half dtypes: the output is rounded once to the half dtype
# after fp32 arithmetic, so it may differ by one ulp of that dtype.
OUT_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
           torch.float16: dict(rtol=2e-3, atol=2e-3)}


@pytest.mark.parametrize("M,v_first,dtype,lengths", [
    (1, False, torch.float32, [0, 0, 0]),
    (2, True, torch.float32, [0, 1, 0]),
    (4, False, torch.float32, [3, 0, 2]),
    (4, True, torch.bfloat16, [1, 3, 2]),
    (9, False, torch.float16, [8, 4, 0]),
])
def test_stepwise_matches_naive(M, v_first, dtype, lengths):
    run_stepwise(M, v_first, dtype, lengths, B=3, Hk=2, HV=2, K=16, V=8)


@pytest.mark.parametrize("M,v_first,lengths", [(4, True, [3, 0, 2]), (3, False, [2, 1, 0])])
def test_stepwise_gqa_uneven_dims(M, v_first, lengths):
    """GQA (G = 2: the merge's decayed keys are per value head, the key log per key head), K not a power of two (the
    masked key channels of every load and store) and V = 20 (three value tiles, the last one partial)."""
    run_stepwise(M, v_first, torch.float32, lengths, B=3, Hk=2, HV=4, K=12, V=20)


@pytest.mark.parametrize("prepare_warps", [2, 4])
def test_stepwise_prepare_warps(prepare_warps):
    """The prepare kernel's warps (a launch option) change no result: the same stepwise check, merges included."""
    run_stepwise(4, True, torch.float32, [3, 0, 2], B=3, Hk=2, HV=4, K=12, V=20, prepare_warps=prepare_warps)


@pytest.mark.parametrize("M,unrolled,lengths", [(4, 0, [3, 0, 2]), (19, 16, [17, 5, 18])])
def test_stepwise_slot_loop(monkeypatch, M, unrolled, lengths):
    """Past MAX_UNROLLED_SLOTS the prepare kernel walks the log in a loop that is not unrolled: forced at M = 4, and
    at M = 19 (C = 18) under the default limit of 16; GQA, uneven dims, merges and mixed phases included."""
    monkeypatch.setattr(kda_fused, "MAX_UNROLLED_SLOTS", unrolled)
    run_stepwise(M, M == 4, torch.float32, lengths, B=3, Hk=1, HV=2, K=12, V=6)


def run_stepwise(M, v_first, dtype, lengths, B, Hk, HV, K, V, **options):
    """2M + 1 steps of the kernel and the naive reference from the same state: outputs and every buffer (live slots
    of the decay log) after each step."""
    ref = to_layout(make_state(B, Hk, HV, K, V, M, lengths, seed=1), v_first)  # the reference in the same layout
    ours = [t.clone() for t in ref]
    ws = deltalog_kda_workspace(B, Hk, HV, K, M - 1, "cpu").fill_(float("nan"))
    gen = torch.Generator().manual_seed(2)
    for step in range(2 * M + 1):
        x = make_inputs(B, Hk, HV, K, V, dtype, gen)
        o = fused_deltalog_kda_decode(*x, *ours, ws, state_v_first=v_first, **options)
        o_ref = naive_deltalog_kda_decode(*x, *ref, state_v_first=v_first)
        assert torch.isfinite(o).all(), step
        torch.testing.assert_close(o.float(), o_ref.float(), **OUT_TOL[dtype], msg=f"step {step}")
        got = ours
        for name, a, b in zip(NAMES, got, ref):
            assert torch.equal(a.isnan(), b.isnan()), f"step {step}: {name} NaN pattern"
            if name == "decay_log":  # its stale slots are the merge's scratch: compare the live ones
                a, b = live_slots(a, got[-1]), live_slots(b, ref[-1])
            if a.is_floating_point():
                torch.testing.assert_close(a.nan_to_num(0.0), b.nan_to_num(0.0), rtol=1e-5, atol=2e-6,
                                           msg=f"step {step}: {name}")
            else:
                assert torch.equal(a, b), f"step {step}: {name}"


def test_rollout_matches_fp64_recurrence():
    B, Hk, HV, K, V, M = 2, 1, 2, 16, 16, 4
    state = make_state(B, Hk, HV, K, V, M, [0, 2], seed=3)
    S = naive_deltalog_kda_materialize(*[t.double() if t.is_floating_point() else t for t in state])
    ws = deltalog_kda_workspace(B, Hk, HV, K, M - 1, "cpu")
    gen = torch.Generator().manual_seed(4)
    for step in range(3 * M + 1):
        x = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
        o = fused_deltalog_kda_decode(*x, *state, ws)
        o_ref, S = naive_recurrent_kda(*(t.double() for t in x), initial_state=S, output_final_state=True,
                                       use_qk_l2norm_in_kernel=True)
        assert (o.double() - o_ref).abs().max() / o_ref.abs().max() < 2e-5, step
        assert (naive_deltalog_kda_materialize(*state).double() - S).abs().max() / S.abs().max() < 2e-5, step


@pytest.mark.parametrize("bad, error, match", [
    (lambda a: a.__setitem__(3, a[3][..., 0]), ValueError, "g must have shape"),
    (lambda a: a.__setitem__(6, a[6][..., 0].contiguous()), ValueError, "log_decay must have shape"),
    (lambda a: a.__setitem__(9, a[9].double()), TypeError, "decay_log must be float32"),
    (lambda a: a.__setitem__(11, a[11][:, :-1].contiguous()), ValueError, "workspace must have shape"),
    # these two messages gave no values
    (lambda a: a.__setitem__(5, a[5].transpose(-1, -2).contiguous().transpose(-1, -2)), ValueError,
     r"base must be contiguous.*got strides \(\d+, \d+, 1, \d+\) for shape \(2, \d+, 16, 8\)"),
    (lambda a: a.__setitem__(6, a[6].to("meta")), ValueError, r"one device; got \['cpu', 'meta'\]"),
    # (a mutation test, 76th review: dropping any of these checks failed no test; a strided input is read wrongly)
    *[(lambda a, i=i: a.__setitem__(i, torch.cat([a[i], a[i]], -1)[..., ::2]), ValueError,
       f"{name} must have unit stride") for i, name in enumerate("qkvg")],
    (lambda a: a.__setitem__(1, a[1].bfloat16()), TypeError, "q and k must have the same dtype"),
    (lambda a: a.__setitem__(4, a[4][..., None]), ValueError, r"beta must have shape \(2, 1, 1\)"),
])
def test_launcher_errors(bad, error, match):
    B, Hk, HV, K, V, M = 2, 1, 1, 16, 8, 3
    args = list(make_inputs(B, Hk, HV, K, V, torch.float32, torch.Generator().manual_seed(5)))
    args += make_state(B, Hk, HV, K, V, M, [0, 1], seed=6) + [deltalog_kda_workspace(B, Hk, HV, K, M - 1, "cpu")]
    bad(args)
    with pytest.raises(error, match=match):
        fused_deltalog_kda_decode(*args)


def test_custom_op_plain_entry_and_compile():
    """Plain launch == registered op == torch.compile(fullgraph=True) (no graph break); opcheck passes."""
    B, Hk, HV, K, V, M = 2, 1, 2, 16, 8, 3
    a = make_state(B, Hk, HV, K, V, M, [2, 0], seed=9)
    b, c = [t.clone() for t in a], [t.clone() for t in a]
    wa, wb, wc = (deltalog_kda_workspace(B, Hk, HV, K, M - 1, "cpu") for _ in range(3))
    compiled = torch.compile(fused_deltalog_kda_decode, fullgraph=True, backend="aot_eager")
    gen = torch.Generator().manual_seed(10)
    for step in range(3):
        x = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
        o_a = fused_deltalog_kda_decode(*x, *a, wa, use_custom_op=False)
        o_b = fused_deltalog_kda_decode(*x, *b, wb)
        o_c = compiled(*x, *c, wc)
        assert torch.equal(o_a, o_b) and torch.equal(o_a, o_c), step
        for name, ta, tb, tc in zip(NAMES, a, b, c):
            assert torch.equal(ta.nan_to_num(7.0), tb.nan_to_num(7.0)), f"step {step}: {name} (op)"
            assert torch.equal(ta.nan_to_num(7.0), tc.nan_to_num(7.0)), f"step {step}: {name} (compiled)"
    x = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
    args = (*x, *[t.nan_to_num(0.0) for t in a], wa, K**-0.5, True, False, 8, 1, 0)
    result = torch.library.opcheck(torch.ops.hf_deltalog.fused_deltalog_kda_decode, args)
    assert all(v == "SUCCESS" for v in result.values()), result


# a wrong type is a TypeError (floats and bools were ValueErrors), a bad value a ValueError
@pytest.mark.parametrize("bad, exc, match", [(dict(block_v=3), ValueError, "block_v must be a power of two"),
                                             (dict(num_warps=3), ValueError, "num_warps must be one of"),
                                             (dict(prepare_warps=3), ValueError, "prepare_warps must be one of"),
                                             (dict(num_warps=True), TypeError, "num_warps must be an int"),
                                             (dict(block_v=2.0), TypeError, "block_v must be an int"),
                                             (dict(prepare_warps="1"), TypeError, "prepare_warps must be an int"),
                                             # a string flag is truthy: "False" read the base in the other layout
                                             (dict(state_v_first="False"), TypeError,
                                              "state_v_first must be True or False"),
                                             (dict(use_custom_op=1), TypeError, "use_custom_op must be True or False")])
def test_launch_options_are_checked(bad, exc, match):
    B, Hk, HV, K, V, M = 2, 1, 1, 16, 8, 3
    args = list(make_inputs(B, Hk, HV, K, V, torch.float32, torch.Generator().manual_seed(5)))
    args += make_state(B, Hk, HV, K, V, M, [0, 1], seed=6) + [deltalog_kda_workspace(B, Hk, HV, K, M - 1, "cpu")]
    with pytest.raises(exc, match=match):
        fused_deltalog_kda_decode(*args, **bad)


def test_none_launch_options_keep_the_defaults():
    """block_v=None / num_warps=None (documented as the defaults, as the GDN launcher takes them) failed with
    int(None)."""
    B, Hk, HV, K, V, M = 2, 1, 2, 16, 8, 3
    x = list(make_inputs(B, Hk, HV, K, V, torch.float32, torch.Generator().manual_seed(5)))
    state = make_state(B, Hk, HV, K, V, M, [0, M - 1], seed=6)
    runs = []
    for kw in (dict(), dict(block_v=None, num_warps=None)):
        buffers = [t.clone() for t in state] + [deltalog_kda_workspace(B, Hk, HV, K, M - 1, "cpu")]
        runs.append((fused_deltalog_kda_decode(*x, *buffers, **kw), buffers[:-1]))
    assert torch.equal(runs[0][0], runs[1][0])
    assert all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) for a, b in zip(runs[0][1], runs[1][1]))
