"""The KDA references of hf_deltalog.kernels.kda against transformers' own KDA recurrence and float64."""

import pytest
import torch
from transformers.models.kimi_linear import modeling_kimi_linear as upstream
from utils import rel_err

from hf_deltalog.kernels.kda import naive_deltalog_kda_decode, naive_deltalog_kda_materialize, naive_recurrent_kda

UPSTREAM = getattr(upstream.recurrent_kimi_delta_attention, "__wrapped__", upstream.recurrent_kimi_delta_attention)


def inputs(B=3, T=20, Hk=2, HV=2, K=8, V=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q, k, v = r(B, T, Hk, K), r(B, T, Hk, K), r(B, T, HV, V)
    gate = -torch.rand(B, T, HV, K, generator=g) * 1.5  # per-key decays from 1 down to exp(-1.5)
    beta = torch.rand(B, T, HV, generator=g)
    S0 = r(B, HV, K, V)
    return [x.to(dtype) for x in (q, k, v, gate, beta)] + [S0]


def empty_log(B, Hk, HV, K, V, M, dtype=torch.float32):
    C, nan = M - 1, float("nan")  # stale slots hold NaN: they must never reach an output
    return dict(log_decay=torch.zeros(B, HV, K, dtype=dtype), k_log=torch.full((B, Hk, C, K), nan, dtype=dtype),
                u_log=torch.full((B, HV, C, V), nan, dtype=dtype), decay_log=torch.full((B, HV, C, K), nan, dtype=dtype),
                length=torch.zeros(B, dtype=torch.int32))


def test_dense_reference_matches_transformers():
    q, k, v, g, beta, S0 = inputs()  # transformers' KDA has Hk = HV
    o_up, S_up = UPSTREAM(q, k, v, g, beta, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, S = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True,
                               use_qk_l2norm_in_kernel=True)
    assert rel_err(o, o_up) < 1e-6 and rel_err(S, S_up) < 1e-6  # both fp32, reductions in another order


@pytest.mark.parametrize("M", [1, 2, 4, 9])
@pytest.mark.parametrize("heads", [(2, 2), (1, 3), (2, 4)], ids=["H2", "GQA1-3", "GQA2-4"])  # 2-4: a mapping of
# key heads to value heads other than repeat_interleave differs only with Hk > 1 (a mutation test found it uncaught)
def test_deltalog_equals_dense_fp64(M, heads):
    Hk, HV = heads
    B, T, K, V = 3, 20, 8, 16
    q, k, v, g, beta, S0 = inputs(B, T, Hk, HV, K, V, dtype=torch.float64)
    S_ref, base = S0.double(), S0.double().clone()
    log = empty_log(B, Hk, HV, K, V, M, torch.float64)
    log["length"][1] = min(1, M - 1)  # rows out of phase: row 1 starts with one entry (a zero update)
    if M > 1:
        log["k_log"][1, :, 0], log["u_log"][1, :, 0], log["decay_log"][1, :, 0] = 0.0, 0.0, 0.0
    for t in range(T):
        sl = slice(t, t + 1)
        o_ref, S_ref = naive_recurrent_kda(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], initial_state=S_ref,
                                           output_final_state=True, use_qk_l2norm_in_kernel=True)
        o = naive_deltalog_kda_decode(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], base, **log)
        assert rel_err(o, o_ref) < 1e-12, t
        assert rel_err(naive_deltalog_kda_materialize(base, **log), S_ref) < 1e-12, t


def test_fp32_and_bf16_gate_close_to_fp64():
    B, T, Hk, HV, K, V, M = 2, 64, 2, 2, 8, 16, 4
    q, k, v, g, beta, S0 = inputs(B, T, Hk, HV, K, V)
    g = g.bfloat16()  # bailing_hybrid's gate arrives in the model dtype
    o64, S64 = naive_recurrent_kda(q.double(), k.double(), v.double(), g.double(), beta.double(),
                                   initial_state=S0.double(), output_final_state=True, use_qk_l2norm_in_kernel=True)
    base, log = S0.clone(), empty_log(B, Hk, HV, K, V, M)
    o = torch.cat([naive_deltalog_kda_decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g[:, t:t + 1],
                                             beta[:, t:t + 1], base, **log) for t in range(T)], dim=1)
    assert rel_err(o, o64) < 1e-5 and rel_err(naive_deltalog_kda_materialize(base, **log), S64) < 1e-5


def test_long_decays_underflow_without_nan():
    B, Hk, HV, K, V, M = 2, 1, 1, 8, 4, 8
    q, k, v, g, beta, S0 = inputs(B, 12, Hk, HV, K, V)
    g = torch.full_like(g, -300.0)
    base, log = S0.clone(), empty_log(B, Hk, HV, K, V, M)
    for t in range(12):
        o = naive_deltalog_kda_decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g[:, t:t + 1], beta[:, t:t + 1],
                                      base, **log)
        assert torch.isfinite(o).all()


def test_bad_inputs():
    q, k, v, g, beta, S0 = inputs(2, 1, 2, 2, 8, 16)
    log = empty_log(2, 2, 2, 8, 16, 4)
    with pytest.raises(ValueError, match="g must be"):
        naive_deltalog_kda_decode(q, k, v, g[..., 0], beta, S0.clone(), **log)
    with pytest.raises(ValueError, match="decay_log must have shape"):
        naive_deltalog_kda_decode(q, k, v, g, beta, S0.clone(), **{**log, "decay_log": log["decay_log"][..., 0]})
    with pytest.raises(ValueError, match="positive multiple of the key heads Hk=0"):  # not a ZeroDivisionError
        naive_deltalog_kda_decode(q[:, :, :0], k[:, :, :0], v, g, beta, S0.clone(), **log)
    with pytest.raises(TypeError, match="length must be int32 or int64"):
        naive_deltalog_kda_decode(q, k, v, g, beta, S0.clone(), **{**log, "length": log["length"].float()})
    with pytest.raises(TypeError, match="k must have a floating dtype"):  # was accepted, output truncated
        naive_deltalog_kda_decode(q, (k * 10).int(), v, g, beta, S0.clone(), **log)
    with pytest.raises(TypeError, match="must share one dtype"):  # failed in einsum
        naive_deltalog_kda_decode(q, k, v, g, beta, S0.clone(), **{**log, "decay_log": log["decay_log"].double()})
    with pytest.raises(ValueError, match="HV=2 .* multiple of the key heads Hk=4"):  # failed in repeat/einsum
        naive_deltalog_kda_materialize(S0.clone(), **{**log, "k_log": log["k_log"].repeat(1, 2, 1, 1)})
    assert naive_deltalog_kda_materialize(S0, **{**log, "u_log": log["u_log"].double()}).dtype == torch.float64


@pytest.mark.parametrize("M", [1, 4])
def test_v_first_base_equals_transposed_base(M):
    """``state_v_first=True`` keeps the base as ``[B, HV, V, K]`` (the Triton kernel's layout): the same steps from
    the transposed base give the same outputs and logs, and a base that stays the transpose of the other one; the
    materialised state is ``[B, HV, K, V]`` either way. GQA, K != V, rows mid-log and merging."""
    B, T, Hk, HV, K, V = 3, 2 * M + 1, 1, 2, 8, 16
    q, k, v, g, beta, S0 = inputs(B, T, Hk, HV, K, V, dtype=torch.float64)
    kv = dict(base=S0.double().clone(), **empty_log(B, Hk, HV, K, V, M, torch.float64))
    vk = {name: t.clone() for name, t in kv.items()}
    vk["base"] = kv["base"].transpose(-1, -2).contiguous()
    for t in range(T):
        x = [y[:, t:t + 1] for y in (q, k, v, g, beta)]
        o_kv = naive_deltalog_kda_decode(*x, **kv)
        o_vk = naive_deltalog_kda_decode(*x, **vk, state_v_first=True)
        assert rel_err(o_vk, o_kv) < 1e-13, t
        assert rel_err(vk["base"].transpose(-1, -2), kv["base"]) < 1e-13, t
        for name in ("log_decay", "k_log", "u_log", "decay_log", "length"):
            assert torch.allclose(vk[name], kv[name], rtol=1e-13, atol=0, equal_nan=True), (t, name)
        S_vk = naive_deltalog_kda_materialize(**vk, state_v_first=True)
        assert S_vk.shape == (B, HV, K, V) and rel_err(S_vk, naive_deltalog_kda_materialize(**kv)) < 1e-13, t
    with pytest.raises(ValueError, match=r"base must have shape \(3, 2, 16, 8\) \(\[B, HV, V, K\]: state_v_first\)"):
        naive_deltalog_kda_decode(*[y[:, :1] for y in (q, k, v, g, beta)], **kv, state_v_first=True)


def test_flags_and_non_tensors_refused():
    """A flag that is not a bool (the string "False" is truthy) or an argument that is not a tensor raises TypeError
    naming it, before anything is written."""
    q, k, v, g, beta, S0 = inputs(2, 1, 2, 2, 8, 16)
    log = empty_log(2, 2, 2, 8, 16, 4)
    base = S0.clone()
    snapshot = [base.clone()] + [t.clone() for t in log.values()]
    for flags in (dict(state_v_first="False"), dict(use_qk_l2norm_in_kernel="False"), dict(state_v_first=None)):
        with pytest.raises(TypeError, match=f"{next(iter(flags))} must be True or False"):
            naive_deltalog_kda_decode(q, k, v, g, beta, base, **log, **flags)
    with pytest.raises(TypeError, match="q must be a torch.Tensor; got list"):
        naive_deltalog_kda_decode(q.tolist(), k, v, g, beta, base, **log)
    with pytest.raises(TypeError, match="base must be a torch.Tensor; got NoneType"):
        naive_deltalog_kda_decode(q, k, v, g, beta, None, **log)
    for a, b in zip([base, *log.values()], snapshot):  # untouched (the stale slots hold NaN)
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(TypeError, match="state_v_first must be True or False"):
        naive_deltalog_kda_materialize(base, **log, state_v_first=1)
    with pytest.raises(TypeError, match="output_final_state must be True or False"):
        naive_recurrent_kda(q, k, v, g, beta, output_final_state="yes")
    with pytest.raises(TypeError, match="use_qk_l2norm_in_kernel must be True or False"):
        naive_recurrent_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=1)
    with pytest.raises(TypeError, match="initial_state must be a torch.Tensor; got list"):
        naive_recurrent_kda(q, k, v, g, beta, initial_state=[0.0])
