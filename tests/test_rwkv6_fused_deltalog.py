"""CPU tests of the RWKV6 DeltaLog Triton kernels under the Triton interpreter, against the PyTorch reference."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before any triton import

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: the RWKV6 Triton kernels cannot run")

import hf_deltalog.kernels.rwkv6.fused_deltalog as rwkv6_fused  # noqa: E402
from hf_deltalog.kernels.rwkv6.fused_deltalog import (  # noqa: E402
    deltalog_rwkv6_workspace,
    fused_deltalog_rwkv6_decode,
)
from hf_deltalog.kernels.rwkv6.naive import (  # noqa: E402
    naive_deltalog_rwkv6_decode,
    naive_deltalog_rwkv6_materialize,
    naive_recurrent_rwkv6,
)

from utils import live_slots  # noqa: E402

NAMES = ("base", "log_decay", "k_log", "v_log", "decay_log", "length")


def make_state(B, H, K, V, M, lengths, seed, factor_dtype=torch.float32):
    """Buffers with lengths[b] live entries (consistent log-decays: ℓ̄ = Σ λ_i); stale slots hold NaN."""
    gen = torch.Generator().manual_seed(seed)
    C, nan = M - 1, float("nan")
    base = torch.randn(B, H, K, V, generator=gen) * 0.5
    log_decay = torch.zeros(B, H, K)
    k_log = torch.full((B, H, C, K), nan, dtype=factor_dtype)
    v_log = torch.full((B, H, C, V), nan, dtype=factor_dtype)
    decay_log = torch.full((B, H, C, K), nan)
    for b, L in enumerate(lengths):
        lam = -torch.rand(H, L + 1, K, generator=gen) * 0.3  # each entry's own log-decay
        if L:
            decay_log[b, :, :L] = lam[:, :L]
            k_log[b, :, :L] = (torch.randn(H, L, K, generator=gen) * 0.3).to(factor_dtype)
            v_log[b, :, :L] = (torch.randn(H, L, V, generator=gen) * 0.3).to(factor_dtype)
            log_decay[b] = lam[:, :L].sum(1)  # ℓ̄ = Σ λ_i
    return [base, log_decay, k_log, v_log, decay_log, torch.tensor(lengths, dtype=torch.int32)]


def make_inputs(B, H, K, V, dtype, gen):
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return (r(B, 1, H, K).to(dtype), (r(B, 1, H, K) * 0.3).to(dtype), r(B, 1, H, V).to(dtype),
            (-torch.rand(B, 1, H, K, generator=gen) * 0.4).to(dtype))


# fp32: the same arithmetic in another order. Half dtypes: the output is rounded once to the half dtype.
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
    run_stepwise(M, v_first, dtype, lengths, B=3, H=2, K=16, V=8)


@pytest.mark.parametrize("M,v_first,dtype,lengths", [(4, True, torch.float32, [3, 0, 2]),
                                                     (3, False, torch.bfloat16, [2, 1, 0])])
def test_stepwise_uneven_dims(M, v_first, dtype, lengths):
    """K not a power of two (the masked key channels of every load and store, the merge's decayed keys included) and
    V = 20 (three value tiles, the last one partial)."""
    run_stepwise(M, v_first, dtype, lengths, B=3, H=2, K=12, V=20)


@pytest.mark.parametrize("prepare_warps", [2, 4])
def test_stepwise_prepare_warps(prepare_warps):
    """The prepare kernel's warps (a launch option) change no result: the same stepwise check, merges included."""
    run_stepwise(4, True, torch.float32, [3, 0, 2], B=3, H=2, K=12, V=20, prepare_warps=prepare_warps)


@pytest.mark.parametrize("M,v_first,dtype,lengths", [(4, True, torch.float32, [3, 0, 2]),
                                                     (6, False, torch.bfloat16, [5, 1, 4])])
def test_stepwise_slot_loop(monkeypatch, M, v_first, dtype, lengths):
    """Past MAX_LOG_TILE elements of [C, K] tile the prepare kernel walks the log one slot at a time (forced here by
    a limit of 0): the same stepwise check, merges, mixed phases and factors in the activation dtype included."""
    monkeypatch.setattr(rwkv6_fused, "MAX_LOG_TILE", 0)
    run_stepwise(M, v_first, dtype, lengths, B=3, H=2, K=12, V=20)


def run_stepwise(M, v_first, dtype, lengths, B, H, K, V, **options):
    """2M + 1 steps of the kernel and the naive reference from the same state: outputs and every buffer (live slots
    of the decay log) after each step."""
    factor_dtype = torch.float32 if dtype == torch.float32 else dtype  # factors in the activation dtype
    ref = make_state(B, H, K, V, M, lengths, seed=1, factor_dtype=factor_dtype)
    if v_first:  # the reference in the kernel's layout
        ref[0] = ref[0].transpose(-1, -2).contiguous()
    ours = [t.clone() for t in ref]
    u = torch.randn(H, K, generator=torch.Generator().manual_seed(3)).to(dtype)
    ws = deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu").fill_(float("nan"))
    gen = torch.Generator().manual_seed(2)
    for step in range(2 * M + 1):
        x = make_inputs(B, H, K, V, dtype, gen)
        o = fused_deltalog_rwkv6_decode(*x, u, *ours, ws, state_v_first=v_first, **options)
        o_ref = naive_deltalog_rwkv6_decode(*x, u, *ref, state_v_first=v_first)
        assert torch.isfinite(o).all(), step
        torch.testing.assert_close(o.float(), o_ref.float(), **OUT_TOL[dtype], msg=f"step {step}")
        got = ours
        for name, a, b in zip(NAMES, got, ref):
            assert torch.equal(a.isnan(), b.isnan()), f"step {step}: {name} NaN pattern"
            if name == "decay_log":  # its stale slots are the merge's scratch: compare the live ones
                a, b = live_slots(a, got[-1]), live_slots(b, ref[-1])
            if a.is_floating_point():
                torch.testing.assert_close(a.float().nan_to_num(0.0), b.float().nan_to_num(0.0), rtol=1e-5, atol=2e-6,
                                           msg=f"step {step}: {name}")
            else:
                assert torch.equal(a, b), f"step {step}: {name}"


def test_rollout_matches_fp64_recurrence():
    B, H, K, V, M = 2, 2, 16, 16, 4
    state = make_state(B, H, K, V, M, [0, 2], seed=3)
    u = torch.randn(H, K, generator=torch.Generator().manual_seed(4))
    S = naive_deltalog_rwkv6_materialize(*[t.double() if t.is_floating_point() else t for t in state])
    ws = deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu")
    gen = torch.Generator().manual_seed(5)
    for step in range(3 * M + 1):
        x = make_inputs(B, H, K, V, torch.float32, gen)
        o = fused_deltalog_rwkv6_decode(*x, u, *state, ws)
        o_ref, S = naive_recurrent_rwkv6(*(t.double() for t in x), u.double(), initial_state=S,
                                         output_final_state=True)
        assert (o.double() - o_ref).abs().max() / o_ref.abs().max() < 2e-5, step
        assert (naive_deltalog_rwkv6_materialize(*state).double() - S).abs().max() / S.abs().max() < 2e-5, step


@pytest.mark.parametrize("bad, error, match", [
    (lambda a: a.__setitem__(4, a[4][0]), ValueError, "u must have shape"),
    (lambda a: a.__setitem__(6, a[6][..., 0].contiguous()), ValueError, "log_decay must have shape"),
    (lambda a: a.__setitem__(9, a[9].double()), TypeError, "decay_log must be float32"),
    (lambda a: a.__setitem__(11, a[11][:, :-1].contiguous()), ValueError, "workspace must have shape"),
    # these two messages gave no values
    (lambda a: a.__setitem__(5, a[5].transpose(-1, -2).contiguous().transpose(-1, -2)), ValueError,
     r"base must be contiguous.*got strides \(\d+, \d+, 1, \d+\) for shape \(2, \d+, 16, 8\)"),
    (lambda a: a.__setitem__(6, a[6].to("meta")), ValueError, r"one device; got \['cpu', 'meta'\]"),
    # (a mutation test, 76th review: dropping any of these checks failed no test; a strided u read wrong values)
    *[(lambda a, i=i: a.__setitem__(i, torch.cat([a[i], a[i]], -1)[..., ::2]), ValueError,
       f"{name} must have unit stride") for i, name in enumerate("rkvw")],
    (lambda a: a.__setitem__(4, torch.cat([a[4], a[4]], -1)[..., ::2]), ValueError, "u must be contiguous"),
])
def test_launcher_errors(bad, error, match):
    B, H, K, V, M = 2, 1, 16, 8, 3
    args = list(make_inputs(B, H, K, V, torch.float32, torch.Generator().manual_seed(6))) + [torch.randn(H, K)]
    args += make_state(B, H, K, V, M, [0, 1], seed=7) + [deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu")]
    bad(args)
    with pytest.raises(error, match=match):
        fused_deltalog_rwkv6_decode(*args)


def test_custom_op_plain_entry_and_compile():
    """Plain launch == registered op == torch.compile(fullgraph=True) (no graph break); opcheck passes."""
    B, H, K, V, M = 2, 2, 16, 8, 3
    a = make_state(B, H, K, V, M, [2, 0], seed=9)
    b, c = [t.clone() for t in a], [t.clone() for t in a]
    wa, wb, wc = (deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu") for _ in range(3))
    u = torch.randn(H, K, generator=torch.Generator().manual_seed(11))
    compiled = torch.compile(fused_deltalog_rwkv6_decode, fullgraph=True, backend="aot_eager")
    gen = torch.Generator().manual_seed(10)
    for step in range(3):
        x = make_inputs(B, H, K, V, torch.float32, gen)
        o_a = fused_deltalog_rwkv6_decode(*x, u, *a, wa, use_custom_op=False)
        o_b = fused_deltalog_rwkv6_decode(*x, u, *b, wb)
        o_c = compiled(*x, u, *c, wc)
        assert torch.equal(o_a, o_b) and torch.equal(o_a, o_c), step
        for name, ta, tb, tc in zip(NAMES, a, b, c):
            assert torch.equal(ta.nan_to_num(7.0), tb.nan_to_num(7.0)), f"step {step}: {name} (op)"
            assert torch.equal(ta.nan_to_num(7.0), tc.nan_to_num(7.0)), f"step {step}: {name} (compiled)"
    x = make_inputs(B, H, K, V, torch.float32, gen)
    args = (*x, u, *[t.nan_to_num(0.0) for t in a], wa, K**-0.5, False, 8, 1, 0)
    result = torch.library.opcheck(torch.ops.hf_deltalog.fused_deltalog_rwkv6_decode, args)
    assert all(v == "SUCCESS" for v in result.values()), result


# a wrong type is a TypeError (floats and bools were ValueErrors), a bad value a ValueError
@pytest.mark.parametrize("bad, exc, match", [(dict(block_v=0), ValueError, "block_v must be a power of two"),
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
    B, H, K, V, M = 2, 1, 16, 8, 3
    args = list(make_inputs(B, H, K, V, torch.float32, torch.Generator().manual_seed(6))) + [torch.randn(H, K)]
    args += make_state(B, H, K, V, M, [0, 1], seed=7) + [deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu")]
    with pytest.raises(exc, match=match):
        fused_deltalog_rwkv6_decode(*args, **bad)


def test_none_launch_options_keep_the_defaults():
    """block_v=None / num_warps=None (documented as the defaults, as the GDN launcher takes them) failed with
    int(None)."""
    B, H, K, V, M = 2, 2, 16, 8, 3
    x = list(make_inputs(B, H, K, V, torch.float32, torch.Generator().manual_seed(6))) + [torch.randn(H, K)]
    state = make_state(B, H, K, V, M, [0, M - 1], seed=7)
    runs = []
    for kw in (dict(), dict(block_v=None, num_warps=None)):
        buffers = [t.clone() for t in state] + [deltalog_rwkv6_workspace(B, H, K, M - 1, "cpu")]
        runs.append((fused_deltalog_rwkv6_decode(*x, *buffers, **kw), buffers[:-1]))
    assert torch.equal(runs[0][0], runs[1][0])
    assert all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) for a, b in zip(runs[0][1], runs[1][1]))
