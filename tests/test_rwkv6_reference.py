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
