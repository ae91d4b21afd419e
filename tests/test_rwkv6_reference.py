"""The RWKV6 references of hf_deltalog.kernels.rwkv6: DeltaLog against the eager recurrence, in float64 and fp32."""

import pytest
import torch
from utils import rel_err

from hf_deltalog.kernels.rwkv6 import (
    naive_deltalog_rwkv6_decode,
    naive_deltalog_rwkv6_materialize,
    naive_recurrent_rwkv6,
)


def inputs(B=3, T=20, H=2, K=8, V=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    w = -torch.rand(B, T, H, K, generator=g) * 1.5
    return [x.to(dtype) for x in (r(B, T, H, K), r(B, T, H, K), r(B, T, H, V), w)] + [r(H, K).to(dtype), r(B, H, K, V)]


def empty_log(B, H, K, V, M, dtype=torch.float32, factor_dtype=None):
    C, nan = M - 1, float("nan")  # stale slots hold NaN: they must never reach an output
    fd = factor_dtype or dtype
    return dict(log_decay=torch.zeros(B, H, K, dtype=dtype), k_log=torch.full((B, H, C, K), nan, dtype=fd),
                v_log=torch.full((B, H, C, V), nan, dtype=fd), decay_log=torch.full((B, H, C, K), nan, dtype=dtype),
                length=torch.zeros(B, dtype=torch.int32))


def test_dense_reference_by_definition():
    """One explicit step: o = r̃ᵀ(S + diag(u) k vᵀ), S' = diag(exp(w)) S + k vᵀ (Finch, Eq. 13-15)."""
    r, k, v, w, u, S0 = inputs(B=1, T=1, H=1, K=3, V=2, dtype=torch.float64)
    o, S = naive_recurrent_rwkv6(r, k, v, w, u, scale=0.5, initial_state=S0.double(), output_final_state=True)
    kv = torch.outer(k[0, 0, 0], v[0, 0, 0])
    expect_o = (0.5 * r[0, 0, 0]) @ (S0[0, 0].double() + u[0][:, None] * kv)
    expect_S = w[0, 0, 0].exp()[:, None] * S0[0, 0].double() + kv
    assert torch.allclose(o[0, 0, 0], expect_o) and torch.allclose(S[0, 0], expect_S)


@pytest.mark.parametrize("M", [1, 2, 4, 9])
def test_deltalog_equals_dense_fp64(M):
    B, T, H, K, V = 3, 20, 2, 8, 16
    r, k, v, w, u, S0 = inputs(B, T, H, K, V, dtype=torch.float64)
    S_ref, base = S0.double(), S0.double().clone()
    log = empty_log(B, H, K, V, M, torch.float64)
    for t in range(T):
        sl = slice(t, t + 1)
        o_ref, S_ref = naive_recurrent_rwkv6(r[:, sl], k[:, sl], v[:, sl], w[:, sl], u, initial_state=S_ref,
                                             output_final_state=True)
        o = naive_deltalog_rwkv6_decode(r[:, sl], k[:, sl], v[:, sl], w[:, sl], u, base, **log)
        assert rel_err(o, o_ref) < 1e-12, t
        assert rel_err(naive_deltalog_rwkv6_materialize(base, **log), S_ref) < 1e-12, t
        assert int(log["length"][0]) == (t + 1) % M


def test_bf16_activations_with_factors_stored_in_bf16():
    """Log factors in the activation dtype are the model's own inputs: no loss against the dense path in fp32."""
    B, T, H, K, V, M = 2, 48, 2, 8, 16, 4
    r, k, v, w, u, S0 = inputs(B, T, H, K, V, dtype=torch.bfloat16)
    o64, S64 = naive_recurrent_rwkv6(*(x.double() for x in (r, k, v, w, u)), initial_state=S0.double(),
                                     output_final_state=True)
    base, log = S0.clone(), empty_log(B, H, K, V, M, factor_dtype=torch.bfloat16)
    o = torch.cat([naive_deltalog_rwkv6_decode(r[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], w[:, t:t + 1], u, base,
                                               **log) for t in range(T)], dim=1)
    assert o.dtype == torch.bfloat16
    # The fp32 arithmetic is within 1e-5 of float64; the output is then rounded once to bf16 (2^-8 relative).
    assert rel_err(o, o64) < 4e-3
    assert rel_err(naive_deltalog_rwkv6_materialize(base, **log), S64) < 1e-5


def test_bad_inputs():
    r, k, v, w, u, S0 = inputs(2, 1, 2, 8, 16)
    log = empty_log(2, 2, 8, 16, 3)
    with pytest.raises(ValueError, match="u \\(the bonus\\) must be"):
        naive_deltalog_rwkv6_decode(r, k, v, w, u[0], S0.clone(), **log)
    with pytest.raises(ValueError, match="T = 1"):
        r2, k2, v2, w2, _, _ = inputs(2, 2, 2, 8, 16)
        naive_deltalog_rwkv6_decode(r2, k2, v2, w2, u, S0.clone(), **log)
    with pytest.raises(TypeError, match="base must be float32"):
        naive_deltalog_rwkv6_decode(r, k, v, w, u, S0.clone().half(), **log)
    with pytest.raises(TypeError, match="v must have a floating dtype"):  # was accepted, output truncated
        naive_deltalog_rwkv6_decode(r, k, (v * 10).int(), w, u, S0.clone(), **log)
    with pytest.raises(TypeError, match="must share one dtype"):
        naive_deltalog_rwkv6_decode(r, k, v, w, u, S0.clone(), **{**log, "log_decay": log["log_decay"].double()})


@pytest.mark.parametrize("M", [1, 4])
def test_v_first_base_equals_transposed_base(M):
    """``state_v_first=True`` keeps the base as ``[B, H, V, K]`` (the Triton kernel's layout): the same steps from
    the transposed base give the same outputs and logs, and a base that stays the transpose of the other one; the
    materialised state is ``[B, H, K, V]`` either way. K != V, rows mid-log and merging."""
    B, T, H, K, V = 3, 2 * M + 1, 2, 8, 16
    r, k, v, w, u, S0 = inputs(B, T, H, K, V, dtype=torch.float64)
    kv = dict(base=S0.double().clone(), **empty_log(B, H, K, V, M, torch.float64))
    vk = {name: t.clone() for name, t in kv.items()}
    vk["base"] = kv["base"].transpose(-1, -2).contiguous()
    for t in range(T):
        x = [y[:, t:t + 1] for y in (r, k, v, w)]
        o_kv = naive_deltalog_rwkv6_decode(*x, u, **kv)
        o_vk = naive_deltalog_rwkv6_decode(*x, u, **vk, state_v_first=True)
        assert rel_err(o_vk, o_kv) < 1e-13, t
        assert rel_err(vk["base"].transpose(-1, -2), kv["base"]) < 1e-13, t
        for name in ("log_decay", "k_log", "v_log", "decay_log", "length"):
            assert torch.allclose(vk[name], kv[name], rtol=1e-13, atol=0, equal_nan=True), (t, name)
        S_vk = naive_deltalog_rwkv6_materialize(**vk, state_v_first=True)
        assert S_vk.shape == (B, H, K, V) and rel_err(S_vk, naive_deltalog_rwkv6_materialize(**kv)) < 1e-13, t
    with pytest.raises(ValueError, match=r"base must have shape \(3, 2, 16, 8\) \(\[B, H, V, K\]: state_v_first\)"):
        naive_deltalog_rwkv6_decode(*[y[:, :1] for y in (r, k, v, w)], u, **kv, state_v_first=True)


def test_flags_and_non_tensors_refused():
    """A flag that is not a bool (the string "False" is truthy) or an argument that is not a tensor raises TypeError
    naming it, before anything is written."""
    r, k, v, w, u, S0 = inputs(2, 1, 2, 8, 16)
    log = empty_log(2, 2, 8, 16, 4)
    base = S0.clone()
    snapshot = [base.clone()] + [t.clone() for t in log.values()]
    with pytest.raises(TypeError, match="state_v_first must be True or False"):
        naive_deltalog_rwkv6_decode(r, k, v, w, u, base, **log, state_v_first="False")
    with pytest.raises(TypeError, match="u must be a torch.Tensor; got list"):
        naive_deltalog_rwkv6_decode(r, k, v, w, u.tolist(), base, **log)
    with pytest.raises(TypeError, match="length must be a torch.Tensor; got list"):
        naive_deltalog_rwkv6_decode(r, k, v, w, u, base, **{**log, "length": [0, 0]})
    for a, b in zip([base, *log.values()], snapshot):  # untouched (the stale slots hold NaN)
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(TypeError, match="state_v_first must be True or False"):
        naive_deltalog_rwkv6_materialize(base, **log, state_v_first=0)
    with pytest.raises(TypeError, match="output_final_state must be True or False"):
        naive_recurrent_rwkv6(r, k, v, w, u, output_final_state="False")
    with pytest.raises(TypeError, match="initial_state must be a torch.Tensor; got list"):
        naive_recurrent_rwkv6(r, k, v, w, u, initial_state=[0.0])
