"""The PyTorch references of hf_deltalog.kernels.gdn against transformers' own GDN recurrence and float64."""

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as upstream
from utils import rel_err

from hf_deltalog.kernels.gdn import (
    naive_deltalog_gdn_decode,
    naive_deltalog_gdn_materialize,
    naive_recurrent_gated_delta_rule,
)

# transformers' pure-PyTorch recurrence (undecorated: FLA may be bound to the module global elsewhere).
UPSTREAM = getattr(upstream.torch_recurrent_gated_delta_rule, "__wrapped__", upstream.torch_recurrent_gated_delta_rule)
UPSTREAM = getattr(UPSTREAM, "__deltalog_upstream__", UPSTREAM)


def inputs(B=3, T=24, Hk=2, HV=4, K=8, V=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q, k, v = r(B, T, Hk, K), r(B, T, Hk, K), r(B, T, HV, V)
    gate = -torch.rand(B, T, HV, generator=g) * 2.0  # decays from 1 down to exp(-2)
    beta = torch.rand(B, T, HV, generator=g)
    S0 = r(B, HV, K, V)
    return [x.to(dtype) for x in (q, k, v, gate, beta)] + [S0]


def empty_log(B, Hk, HV, K, V, M, poison=True):
    C = M - 1
    fill = float("nan") if poison else 0.0  # stale slots must never reach an output
    return dict(
        log_decay=torch.zeros(B, HV),
        k_log=torch.full((B, Hk, C, K), fill),
        u_log=torch.full((B, HV, C, V), fill),
        decay_log=torch.full((B, HV, C), fill),
        length=torch.zeros(B, dtype=torch.int32),
    )


def test_dense_reference_matches_transformers():
    q, k, v, g, beta, S0 = inputs()
    o_up, S_up = UPSTREAM(q, k, v, g=g, beta=beta, initial_state=S0, output_final_state=True,
                          use_qk_l2norm_in_kernel=True)
    o, S = naive_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                            use_qk_l2norm_in_kernel=True)
    # transformers computes in fp32 whatever the input dtype; ours too for fp32 inputs: fp32 rounding apart
    # (einsum and sum reduce in different orders).
    assert rel_err(o, o_up) < 1e-6 and rel_err(S, S_up) < 1e-6


@pytest.mark.parametrize("M", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("state_v_first", [False, True], ids=["KV", "VK"])
def test_deltalog_equals_dense_fp64(M, state_v_first):
    """Step by step in float64: outputs and the materialised state equal eager decoding (exact arithmetic)."""
    B, T, Hk, HV, K, V = 3, 24, 2, 4, 8, 16
    q, k, v, g, beta, S0 = inputs(B, T, Hk, HV, K, V, dtype=torch.float64)
    S_ref = S0.double()
    base = (S_ref.transpose(-1, -2) if state_v_first else S_ref).clone().contiguous()
    log = {n: t.double() if t.is_floating_point() else t for n, t in empty_log(B, Hk, HV, K, V, M).items()}
    for t in range(T):
        sl = slice(t, t + 1)
        o_ref, S_ref = naive_recurrent_gated_delta_rule(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl],
                                                        initial_state=S_ref, output_final_state=True,
                                                        use_qk_l2norm_in_kernel=True)
        o = naive_deltalog_gdn_decode(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], base, **log,
                                      state_v_first=state_v_first)
        S = naive_deltalog_gdn_materialize(base, **log, state_v_first=state_v_first)
        assert rel_err(o, o_ref) < 1e-12, t
        assert rel_err(S, S_ref) < 1e-12, t
        assert int(log["length"][0]) == (t + 1) % M  # append M−1 times, then merge


def test_fp32_close_to_fp64_over_many_cycles():
    """fp32 DeltaLog stays as close to float64 as fp32 eager decoding does (no precision lost in the log)."""
    B, T, Hk, HV, K, V, M = 4, 96, 2, 4, 8, 16, 8
    q, k, v, g, beta, S0 = inputs(B, T, Hk, HV, K, V)
    o64, S64 = naive_recurrent_gated_delta_rule(*(x.double() for x in (q, k, v, g, beta)), initial_state=S0.double(),
                                                output_final_state=True, use_qk_l2norm_in_kernel=True)
    o32, S32 = naive_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)
    base, log = S0.clone(), empty_log(B, Hk, HV, K, V, M)
    o = torch.cat([naive_deltalog_gdn_decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g[:, t:t + 1],
                                             beta[:, t:t + 1], base, **log) for t in range(T)], dim=1)
    S = naive_deltalog_gdn_materialize(base, **log)
    assert rel_err(o, o64) < 1e-5 and rel_err(S, S64) < 1e-5
    # Within 2x of the eager fp32 error (plus fp32 rounding of the norm itself).
    assert rel_err(o, o64) <= 2 * rel_err(o32, o64) + 1e-7
    assert rel_err(S, S64) <= 2 * rel_err(S32, S64) + 1e-7


def test_rows_in_mixed_phases():
    """Rows at different live lengths share one call: each row advances on its own schedule."""
    B, Hk, HV, K, V, M = 4, 2, 4, 8, 16, 4
    q, k, v, g, beta, S0 = inputs(B, 12, Hk, HV, K, V, dtype=torch.float64)
    # Warm each row up to a different live length by giving it a different number of private steps.
    base = S0.double().clone()
    log = {n: t.double() if t.is_floating_point() else t for n, t in empty_log(B, Hk, HV, K, V, M).items()}
    dense = []
    for b in range(B):
        rb = slice(b, b + 1)
        sub = {n: t[rb].clone() for n, t in log.items()}
        Sb = base[rb].clone()
        S_ref = S0[rb].double()
        for t in range(b + 1):  # row b takes b + 1 steps: lengths 1, 2, 3, 0
            sl = slice(t, t + 1)
            naive_deltalog_gdn_decode(q[rb, sl], k[rb, sl], v[rb, sl], g[rb, sl], beta[rb, sl], Sb, **sub)
            _, S_ref = naive_recurrent_gated_delta_rule(q[rb, sl], k[rb, sl], v[rb, sl], g[rb, sl], beta[rb, sl],
                                                        initial_state=S_ref, output_final_state=True,
                                                        use_qk_l2norm_in_kernel=True)
        base[rb] = Sb
        for n in log:
            log[n][rb] = sub[n]
        dense.append(S_ref)
    assert log["length"].tolist() == [1, 2, 3, 0]
    S_ref = torch.cat(dense)
    for t in range(5, 12):  # then all rows step together, crossing merges at different steps
        sl = slice(t, t + 1)
        o = naive_deltalog_gdn_decode(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], base, **log)
        o_ref, S_ref = naive_recurrent_gated_delta_rule(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl],
                                                        initial_state=S_ref, output_final_state=True,
                                                        use_qk_l2norm_in_kernel=True)
        assert rel_err(o, o_ref) < 1e-12
        assert rel_err(naive_deltalog_gdn_materialize(base, **log), S_ref) < 1e-12


def test_extreme_decay_underflows_to_zero_without_nan():
    B, Hk, HV, K, V, M = 2, 1, 2, 8, 4, 8
    q, k, v, g, beta, S0 = inputs(B, 10, Hk, HV, K, V)
    g = torch.full_like(g, -200.0)  # exp(-200) underflows in fp32; differences of log-decays must stay <= 0
    base, log = S0.clone(), empty_log(B, Hk, HV, K, V, M)
    for t in range(10):
        o = naive_deltalog_gdn_decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g[:, t:t + 1], beta[:, t:t + 1],
                                      base, **log)
        assert torch.isfinite(o).all()
    assert torch.isfinite(naive_deltalog_gdn_materialize(base, **log)).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_activations(dtype):
    """Half-precision q/k/v/g/beta: computed in fp32 like transformers does; output in the activation dtype."""
    B, T, Hk, HV, K, V, M = 2, 12, 2, 4, 8, 16, 4
    q, k, v, g, beta, S0 = inputs(B, T, Hk, HV, K, V, dtype=dtype)
    base, log = S0.clone(), empty_log(B, Hk, HV, K, V, M)
    S_up = S0.clone()
    for t in range(T):
        sl = slice(t, t + 1)
        o = naive_deltalog_gdn_decode(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], base, **log)
        o_up, S_up = UPSTREAM(q[:, sl], k[:, sl], v[:, sl], g=g[:, sl], beta=beta[:, sl], initial_state=S_up,
                              output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert o.dtype == dtype and base.dtype == torch.float32
        # Same fp32 arithmetic in another order, then one rounding to the half dtype: at most one ulp apart.
        ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
        assert ((o.float() - o_up.float()).abs() <= ulp * o_up.float().abs() + 1e-6).all()
        assert rel_err(naive_deltalog_gdn_materialize(base, **log), S_up) < 1e-5


def test_bad_inputs():
    B, Hk, HV, K, V, M = 2, 2, 4, 8, 16, 4
    q, k, v, g, beta, S0 = inputs(B, 1, Hk, HV, K, V)
    log = empty_log(B, Hk, HV, K, V, M, poison=False)
    with pytest.raises(ValueError, match="base must be"):
        naive_deltalog_gdn_decode(q, k, v, g, beta, S0.transpose(-1, -2).contiguous(), **log)
    with pytest.raises(ValueError, match="T = 1"):
        q2, k2, v2, g2, b2, _ = inputs(B, 2, Hk, HV, K, V)
        naive_deltalog_gdn_decode(q2, k2, v2, g2, b2, S0.clone(), **log)
    with pytest.raises(ValueError, match="multiple of the key heads"):
        q3, k3, _, _, _, _ = inputs(B, 1, 3, HV, K, V)
        naive_deltalog_gdn_decode(q3, k3, v, g, beta, S0.clone(), **log)
    with pytest.raises(ValueError, match="positive multiple of the key heads Hk=0"):  # not a ZeroDivisionError
        naive_deltalog_gdn_decode(q[:, :, :0], k[:, :, :0], v, g, beta, S0.clone(), **log)
    with pytest.raises(TypeError, match="length must be int32 or int64"):
        naive_deltalog_gdn_decode(q, k, v, g, beta, S0.clone(), **{**log, "length": log["length"].float()})
    with pytest.raises(TypeError, match="base must be float32"):
        naive_deltalog_gdn_decode(q, k, v, g, beta, S0.clone().half(), **log)
    # Found by the eleventh review: integer activations were accepted (the output came back as truncated int64 and
    # the buffers were updated); mixed fp32 / fp64 buffers failed in einsum; HV not a multiple of Hk in materialize
    # failed in einsum too.
    snapshot = {name: t.clone() for name, t in log.items()}
    with pytest.raises(TypeError, match="q must have a floating dtype"):
        naive_deltalog_gdn_decode((q * 10).long(), (k * 10).long(), v, g, beta, S0.clone(), **log)
    with pytest.raises(TypeError, match="must share one dtype.*u_log torch.float64"):
        naive_deltalog_gdn_decode(q, k, v, g, beta, S0.clone(), **{**log, "u_log": log["u_log"].double()})
    assert all(torch.equal(log[name], t) for name, t in snapshot.items())
    with pytest.raises(ValueError, match="HV=3 .* multiple of the key heads Hk=2"):
        naive_deltalog_gdn_materialize(S0[:, :3].clone(), **{**log, "log_decay": log["log_decay"][:, :3],
                                                             "u_log": log["u_log"][:, :3],
                                                             "decay_log": log["decay_log"][:, :3]})
    # materialize promotes mixed fp32 / fp64 buffers, as its docstring says
    log["length"] = torch.tensor([1, 2], dtype=torch.int32)
    for name in ("k_log", "u_log", "decay_log"):
        log[name].normal_(generator=torch.Generator().manual_seed(3))
    mixed = naive_deltalog_gdn_materialize(S0, **{**log, "k_log": log["k_log"].double()})
    assert mixed.dtype == torch.float64
    ref = naive_deltalog_gdn_materialize(S0.double(), **{n: t.double() if t.is_floating_point() else t
                                                         for n, t in log.items()})
    assert torch.equal(mixed, ref)


def test_flags_and_non_tensors_refused():
    """A flag that is not a bool (the string "False" is truthy: with K = V it silently read the base in the other
    layout, found by the 69th review) or an argument that is not a tensor raises TypeError naming it, before anything
    is written."""
    B, Hk, HV, K, V, M = 2, 1, 2, 8, 8, 4  # K = V: a wrong layout would not show in a shape
    q, k, v, g, beta, S0 = inputs(B, 1, Hk, HV, K, V)
    log = empty_log(B, Hk, HV, K, V, M, poison=False)
    base = S0.clone()
    snapshot = [base.clone()] + [t.clone() for t in log.values()]
    for flags in (dict(state_v_first="False"), dict(use_qk_l2norm_in_kernel="False"), dict(state_v_first=None)):
        with pytest.raises(TypeError, match=f"{next(iter(flags))} must be True or False"):
            naive_deltalog_gdn_decode(q, k, v, g, beta, base, **log, **flags)
    with pytest.raises(TypeError, match="v must be a torch.Tensor; got list"):
        naive_deltalog_gdn_decode(q, k, v.tolist(), g, beta, base, **log)
    with pytest.raises(TypeError, match="log_decay must be a torch.Tensor; got NoneType"):
        naive_deltalog_gdn_decode(q, k, v, g, beta, base, **{**log, "log_decay": None})
    for a, b in zip([base, *log.values()], snapshot):  # untouched (the stale slots hold NaN)
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(TypeError, match="state_v_first must be True or False"):
        naive_deltalog_gdn_materialize(base, **log, state_v_first="True")
    with pytest.raises(TypeError, match="output_final_state must be True or False"):
        naive_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=1)
    with pytest.raises(TypeError, match="use_qk_l2norm_in_kernel must be True or False"):
        naive_recurrent_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel="True")
    with pytest.raises(TypeError, match="initial_state must be a torch.Tensor; got list"):
        naive_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=[0.0])
