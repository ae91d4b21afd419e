"""CPU tests of the fused Triton DeltaLog GDN decode kernel, run under the Triton interpreter.

The kernel is checked against ``naive_deltalog_gdn_decode`` (its executable specification) step by step, outputs and
every buffer, and against the eager dense recurrence ``naive_recurrent_gated_delta_rule`` in float64 over several
merge cycles. Shapes are tiny and seeds fixed; the whole module runs in well under two minutes on two cores.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # must precede any triton import (the kernel module imports triton)

import numpy as np
import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as upstream

pytest.importorskip("triton", reason="triton is not installed: the fused DeltaLog kernel cannot run")

from hf_deltalog.kernels.gdn import HAS_TRITON  # noqa: E402
from hf_deltalog.kernels.gdn.fused_deltalog import (  # noqa: E402
    OP_KIND,
    default_launch_config,
    deltalog_gdn_workspace,
    fused_deltalog_gdn_decode,
)
from hf_deltalog.kernels.gdn.naive import (  # noqa: E402
    naive_deltalog_gdn_decode,
    naive_deltalog_gdn_materialize,
    naive_recurrent_gated_delta_rule,
)

BUFFER_NAMES = ("base", "log_decay", "k_log", "u_log", "decay_log", "length")
# transformers' pure-PyTorch recurrence, undecorated (a patch or FLA may be bound to the module global elsewhere)
UPSTREAM_RECURRENCE = getattr(upstream.torch_recurrent_gated_delta_rule, "__wrapped__",
                              upstream.torch_recurrent_gated_delta_rule)
UPSTREAM_RECURRENCE = getattr(UPSTREAM_RECURRENCE, "__deltalog_upstream__", UPSTREAM_RECURRENCE)


def make_state(B, Hk, HV, K, V, M, state_v_first, lengths, seed, length_dtype=torch.int32):
    """DeltaLog buffers with ``lengths[b]`` live entries per row (consistent cumulative decays, normalised keys) and
    every stale slot poisoned with NaN, so a stale read shows up as a NaN in the outputs."""
    gen = torch.Generator().manual_seed(seed)
    C = M - 1
    shape = (B, HV, V, K) if state_v_first else (B, HV, K, V)
    base = torch.randn(shape, generator=gen) * 0.5
    log_decay = torch.zeros(B, HV)
    nan = float("nan")
    k_log = torch.full((B, Hk, C, K), nan)
    u_log = torch.full((B, HV, C, V), nan)
    decay_log = torch.full((B, HV, C), nan)
    for b, L in enumerate(lengths):
        assert 0 <= L <= C
        steps = -torch.rand(HV, L + 1, generator=gen) * 0.3  # per-step log-decays g ≤ 0: each entry's own λ_i
        if L:
            decay_log[b, :, :L] = steps[:, :L]
            k_log[b, :, :L] = torch.nn.functional.normalize(torch.randn(Hk, L, K, generator=gen), dim=-1)
            u_log[b, :, :L] = torch.randn(HV, L, V, generator=gen) * 0.3
        log_decay[b] = steps[:, :L].sum(-1) if L else 0.0  # ℓ̄ = Σ λ_i
    length = torch.tensor(lengths, dtype=length_dtype)
    return [base, log_decay, k_log, u_log, decay_log, length]


def workspace(B, Hk, HV, K, M):
    """The kernel's scratch buffer, poisoned with NaN: what it holds between calls must never matter."""
    return deltalog_gdn_workspace(B, Hk, HV, K, M - 1, "cpu").fill_(float("nan"))


def make_inputs(B, Hk, HV, K, V, dtype, gen, gate_dtype=torch.float32):
    q = torch.randn(B, 1, Hk, K, generator=gen).to(dtype)
    k = torch.randn(B, 1, Hk, K, generator=gen).to(dtype)
    v = torch.randn(B, 1, HV, V, generator=gen).to(dtype)
    g = (-torch.rand(B, 1, HV, generator=gen) * 0.4).to(gate_dtype)
    beta = torch.rand(B, 1, HV, generator=gen).to(gate_dtype)
    return q, k, v, g, beta


def assert_same_buffers(ours, ref, tag):
    for name, x, y in zip(BUFFER_NAMES, ours, ref):
        assert x.dtype == y.dtype and x.shape == y.shape, f"{tag}: {name} dtype/shape changed"
        # Stale slots keep whatever they held (NaN here): the NaN pattern must match exactly.
        assert torch.equal(x.isnan(), y.isnan()), f"{tag}: {name} NaN pattern differs"
        if x.dtype.is_floating_point:
            # Same fp32 math in a different summation order: a few ulps, growing slowly through merges.
            torch.testing.assert_close(x.nan_to_num(0.0), y.nan_to_num(0.0), rtol=1e-5, atol=2e-6, msg=f"{tag}: {name}")
        else:
            assert torch.equal(x, y), f"{tag}: {name} {x.tolist()} != {y.tolist()}"


# Output tolerances against the naive reference, which casts the same activations to fp32 and rounds its output to
# q.dtype exactly like the kernel: the only difference is fp32 summation order (~1e-7) before the final rounding,
# which can flip one rounding step, i.e. one ulp of the output dtype (bf16: 2^-8 relative, fp16: 2^-11).
OUT_TOL = {
    torch.float32: dict(rtol=1e-5, atol=2e-6),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}

# (id, B, Hk, HV, K, V, M, state_v_first, dtype, block_v, initial lengths, steps)
STEP_CASES = [
    ("kfirst-M8", 3, 2, 4, 16, 32, 8, False, torch.float32, None, [0, 3, 7], 9),
    ("vfirst-M8", 3, 2, 4, 16, 32, 8, True, torch.float32, None, [0, 3, 7], 9),
    ("KneV-vfirst-M2", 3, 2, 4, 32, 16, 2, True, torch.float32, 8, [0, 1, 1], 4),
    ("KneV-kfirst-M4", 3, 2, 4, 32, 16, 4, False, torch.float32, None, [3, 0, 2], 5),
    ("dense-M1", 3, 2, 4, 16, 32, 1, False, torch.float32, None, [0, 0, 0], 2),
    ("dense-M1-vfirst", 2, 1, 2, 32, 16, 1, True, torch.float32, None, [0, 0], 2),
    ("nonpow2-G3-vfirst", 2, 2, 6, 20, 24, 4, True, torch.float32, 16, [1, 3], 5),
    ("nonpow2-G3-kfirst", 2, 2, 6, 20, 24, 4, False, torch.float32, 16, [2, 0], 3),
    ("M17-kfirst-BC16", 2, 1, 2, 16, 32, 17, False, torch.float32, 16, [16, 14], 4),
    ("M17-vfirst-BC16", 2, 1, 2, 16, 32, 17, True, torch.float32, 32, [15, 16], 3),
    ("bf16-kfirst-M2", 3, 2, 4, 16, 32, 2, False, torch.bfloat16, 32, [0, 1, 0], 3),
    ("bf16-vfirst-M8", 3, 2, 4, 32, 16, 8, True, torch.bfloat16, 16, [6, 7, 0], 3),
    ("fp16-vfirst-M2", 3, 2, 4, 16, 32, 2, True, torch.float16, 32, [1, 0, 1], 3),
    ("fp16-kfirst-M8", 3, 2, 4, 32, 16, 8, False, torch.float16, 16, [7, 2, 5], 3),
]


@pytest.mark.parametrize(
    "B,Hk,HV,K,V,M,state_v_first,dtype,block_v,lengths,steps", [c[1:] for c in STEP_CASES], ids=[c[0] for c in STEP_CASES]
)
def test_stepwise_matches_naive(B, Hk, HV, K, V, M, state_v_first, dtype, block_v, lengths, steps):
    assert HAS_TRITON
    ours = make_state(B, Hk, HV, K, V, M, state_v_first, lengths, seed=1)
    ref = [t.clone() for t in ours]
    ws = workspace(B, Hk, HV, K, M)
    gen = torch.Generator().manual_seed(2)
    for step in range(steps):
        q, k, v, g, beta = make_inputs(B, Hk, HV, K, V, dtype, gen)
        o = fused_deltalog_gdn_decode(q, k, v, g, beta, *ours, ws, state_v_first=state_v_first, block_v=block_v)
        o_ref = naive_deltalog_gdn_decode(q, k, v, g, beta, *ref, state_v_first=state_v_first)
        tag = f"step {step}"
        assert o.dtype == dtype and o.shape == (B, 1, HV, V), tag
        assert torch.isfinite(o).all(), f"{tag}: non-finite output (a stale NaN slot leaked?)"
        torch.testing.assert_close(o.float(), o_ref.float(), **OUT_TOL[dtype], msg=tag)
        assert_same_buffers(ours, ref, tag)


# Launch options change which program computes what (value heads per program, who normalises q and k, prepare warps),
# never the result: every combination against the reference, rows in mixed phases, both layouts, K != V, G = 4.
LAUNCH_CASES = [
    ("hpp2-vfirst", True, torch.float32, dict(heads_per_program=2)),
    ("hpp4-kfirst", False, torch.float32, dict(heads_per_program=4, block_v=8)),
    ("rawqk-vfirst-bf16", True, torch.bfloat16, dict(raw_qk=True)),
    ("prepared-qk-vfirst", True, torch.float32, dict(raw_qk=False)),
    ("prepared-qk-kfirst-bf16", False, torch.bfloat16, dict(raw_qk=False, prepare_warps=2)),
    ("rawqk-hpp2-kfirst", False, torch.float32, dict(raw_qk=True, heads_per_program=2, num_warps=2)),
    ("rawqk-hpp2-vfirst-prep4", True, torch.float16, dict(raw_qk=True, heads_per_program=2, prepare_warps=4)),
    ("hpp2-vfirst-bv16-prep2", True, torch.float32, dict(heads_per_program=2, block_v=16, prepare_warps=2)),
]


@pytest.mark.parametrize("state_v_first,dtype,launch", [c[1:] for c in LAUNCH_CASES], ids=[c[0] for c in LAUNCH_CASES])
def test_launch_options_match_naive(state_v_first, dtype, launch):
    B, Hk, HV, K, V, M = 3, 2, 8, 32, 16, 4
    ours = make_state(B, Hk, HV, K, V, M, state_v_first, [0, 2, 3], seed=21)
    ref = [t.clone() for t in ours]
    ws = workspace(B, Hk, HV, K, M)
    gen = torch.Generator().manual_seed(22)
    for step in range(5):  # every row passes a merge
        q, k, v, g, beta = make_inputs(B, Hk, HV, K, V, dtype, gen)
        o = fused_deltalog_gdn_decode(q, k, v, g, beta, *ours, ws, state_v_first=state_v_first, **launch)
        o_ref = naive_deltalog_gdn_decode(q, k, v, g, beta, *ref, state_v_first=state_v_first)
        torch.testing.assert_close(o.float(), o_ref.float(), **OUT_TOL[dtype], msg=f"step {step}")
        assert_same_buffers(ours, ref, f"step {step}")


def test_launch_options_may_change_from_step_to_step():
    """Steps of one cycle launched with different options (e.g. a wider tile for the merge step, as the benchmark's
    "merge" overrides do) leave the same state and outputs as the reference: launches share no per-config state."""
    B, Hk, HV, K, V, M = 2, 2, 4, 32, 16, 3
    ours = make_state(B, Hk, HV, K, V, M, True, [0, 0], seed=31)
    ref = [t.clone() for t in ours]
    ws = workspace(B, Hk, HV, K, M)
    gen = torch.Generator().manual_seed(32)
    per_step = [dict(), dict(raw_qk=False), dict(block_v=16, num_warps=2, raw_qk=True), dict(heads_per_program=2)]
    for step, launch in enumerate(per_step):  # append, append, merge (block_v 16), append
        q, k, v, g, beta = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
        o = fused_deltalog_gdn_decode(q, k, v, g, beta, *ours, ws, state_v_first=True, **launch)
        o_ref = naive_deltalog_gdn_decode(q, k, v, g, beta, *ref, state_v_first=True)
        torch.testing.assert_close(o, o_ref, **OUT_TOL[torch.float32], msg=f"step {step}")
        assert_same_buffers(ours, ref, f"step {step}")


def test_options_int64_length_scale_no_l2norm_gate_dtypes():
    """int64 length, an explicit scale, use_qk_l2norm_in_kernel=False, bf16/fp64 gates and strided activations."""
    B, Hk, HV, K, V, M = 3, 1, 3, 16, 16, 3
    ours = make_state(B, Hk, HV, K, V, M, False, [2, 0, 1], seed=3, length_dtype=torch.int64)
    ref = [t.clone() for t in ours]
    ws = workspace(B, Hk, HV, K, M)
    gen = torch.Generator().manual_seed(4)
    for step, gate_dtype in enumerate((torch.bfloat16, torch.float64, torch.float16)):
        q, k, v, g, beta = make_inputs(B, Hk, HV, K, V, torch.float32, gen, gate_dtype)
        q, k = q * 0.2, k * 0.2  # unnormalised keys: keep the state bounded
        # q and k as non-contiguous views of one fused projection, as a model produces them.
        qk = torch.cat([q, k], dim=-1)
        q, k = qk[..., :K], qk[..., K:]
        assert not q.is_contiguous()
        kw = dict(scale=0.3, use_qk_l2norm_in_kernel=False)
        o = fused_deltalog_gdn_decode(q, k, v, g, beta, *ours, ws, **kw)
        o_ref = naive_deltalog_gdn_decode(q, k, v, g, beta, *ref, **kw)
        torch.testing.assert_close(o, o_ref, **OUT_TOL[torch.float32])
        assert_same_buffers(ours, ref, f"step {step}")


# Against the dense recurrence in float64: the kernel runs fp32 arithmetic, so errors are ~1e-7 per step and stay
# well below 1e-5 relative over a few cycles; bf16 activations are fed to the reference as the same bf16 values, so the
# only extra error there is the bf16 rounding of the output (≤ 2^-9 relative, checked against the output's max).
ROLLOUT_TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (8e-3, 2e-5), torch.float16: (2e-3, 2e-5)}


@pytest.mark.parametrize(
    "M,state_v_first,dtype",
    [
        (1, False, torch.float32),
        (2, True, torch.float32),
        (8, False, torch.float32),
        (8, True, torch.float32),
        (8, True, torch.bfloat16),
        (2, False, torch.float16),
    ],
)
def test_rollout_matches_fp64_recurrence(M, state_v_first, dtype):
    """Every step of ≥ 3 merge cycles against the dense recurrence in float64 (``naive_recurrent_gated_delta_rule``)
    and against transformers' own ``torch_recurrent_gated_delta_rule`` (fp32 inside, carrying its own state), with
    K ≠ V, two value heads per key head and two value tiles per head."""
    B, Hk, HV, K, V = 2, 2, 4, 16, 32
    C = M - 1
    lengths = [0, C // 2]  # rows out of phase from the first step
    ours = make_state(B, Hk, HV, K, V, M, state_v_first, lengths, seed=5)
    S = naive_deltalog_gdn_materialize(*[t.double() if t.is_floating_point() else t for t in ours], state_v_first=state_v_first)
    ws = workspace(B, Hk, HV, K, M)
    gen = torch.Generator().manual_seed(6)
    steps = 3 * M + 1  # ≥ 3 merge cycles for every row
    out_tol, state_tol = ROLLOUT_TOL[dtype]
    S_upstream = S.float()
    merges = torch.zeros(B, dtype=torch.int64)
    for step in range(steps):
        q, k, v, g, beta = make_inputs(B, Hk, HV, K, V, dtype, gen)
        merges += (ours[5] >= C).long()
        o = fused_deltalog_gdn_decode(q, k, v, g, beta, *ours, ws, state_v_first=state_v_first, block_v=16)
        o_ref, S = naive_recurrent_gated_delta_rule(
            q.double(), k.double(), v.double(), g.double(), beta.double(),
            initial_state=S, output_final_state=True, use_qk_l2norm_in_kernel=True,
        )
        err_o = (o.double() - o_ref).abs().max() / o_ref.abs().max()
        assert err_o < out_tol, f"step {step}: output relative error {err_o:.2e}"
        o_up, S_upstream = UPSTREAM_RECURRENCE(q, k, v, g.float(), beta.float(), initial_state=S_upstream,
                                               output_final_state=True, use_qk_l2norm_in_kernel=True)
        err_up = (o.double() - o_up.double()).abs().max() / o_up.double().abs().max()
        assert err_up < out_tol, f"step {step}: output relative difference to transformers' {err_up:.2e}"
        S_ours = naive_deltalog_gdn_materialize(*ours, state_v_first=state_v_first).double()
        err_s = (S_ours - S).abs().max() / S.abs().max()
        assert err_s < state_tol, f"step {step}: state relative error {err_s:.2e}"
    assert (merges >= 3).all(), f"expected ≥ 3 merges per row, got {merges.tolist()}"


def test_stale_slots_never_leak():
    """Stale slots full of NaN/inf, rows at every phase: outputs and live state stay finite and exact."""
    B, Hk, HV, K, V, M = 4, 1, 2, 16, 16, 4
    C = M - 1
    ours = make_state(B, Hk, HV, K, V, M, False, [0, 1, 2, 3], seed=7)
    for t in ours[2:5]:
        t[t.isnan()] = float("inf")  # +inf times a zero weight would be NaN too
    ref = [t.clone() for t in ours]
    ws = workspace(B, Hk, HV, K, M)
    gen = torch.Generator().manual_seed(8)
    for step in range(2):
        q, k, v, g, beta = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
        o = fused_deltalog_gdn_decode(q, k, v, g, beta, *ours, ws, block_v=16)
        o_ref = naive_deltalog_gdn_decode(q, k, v, g, beta, *ref)
        assert torch.isfinite(o).all()
        torch.testing.assert_close(o, o_ref, **OUT_TOL[torch.float32])
        assert torch.isfinite(naive_deltalog_gdn_materialize(*ours)).all()
        assert torch.isfinite(ours[0]).all()
    assert ours[5].tolist() == [2, 3, 0, 1]  # rows 2 and 3 merged once (L = C), the others appended twice
    assert C == 3


def test_custom_op_plain_entry_and_compile():
    """Plain launch == registered op; torch.compile(fullgraph=True) traces the op without a graph break; opcheck."""
    B, Hk, HV, K, V, M = 2, 1, 2, 16, 16, 3
    a = make_state(B, Hk, HV, K, V, M, True, [2, 0], seed=9)
    b = [t.clone() for t in a]
    c = [t.clone() for t in a]
    ca, cb, cc = (workspace(B, Hk, HV, K, M) for _ in range(3))
    gen = torch.Generator().manual_seed(10)
    compiled = torch.compile(
        lambda *args: fused_deltalog_gdn_decode(*args, state_v_first=True), fullgraph=True, backend="aot_eager"
    )
    for step in range(3):
        x = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
        o_a = fused_deltalog_gdn_decode(*x, *a, ca, state_v_first=True, use_custom_op=False)
        o_b = fused_deltalog_gdn_decode(*x, *b, cb, state_v_first=True)
        o_c = compiled(*x, *c, cc)
        assert torch.equal(o_a, o_b) and torch.equal(o_a, o_c)
        for name, ta, tb, tc in zip(BUFFER_NAMES, a, b, c):
            assert torch.equal(ta.nan_to_num(7.0), tb.nan_to_num(7.0)), f"step {step}: {name} (op)"
            assert torch.equal(ta.nan_to_num(7.0), tc.nan_to_num(7.0)), f"step {step}: {name} (compiled)"
    x = make_inputs(B, Hk, HV, K, V, torch.float32, gen)
    args = (*x, *[t.nan_to_num(0.0) for t in a], ca.nan_to_num(0.0), K**-0.5, True, True, 16, 0, 2, 1, 0)
    result = torch.library.opcheck(torch.ops.hf_deltalog.fused_deltalog_gdn_decode, args)
    assert all(v == "SUCCESS" for v in result.values()), result
    assert OP_KIND == "custom_op"  # the interpreter cannot trace wrap_triton; GPUs get the triton_op form


def test_decode_register_cap(monkeypatch):
    """The 64-register cap goes only to one-warp decode launches with a log (C > 0) and a tile of at most 1,024
    elements (the [8, 128] tile it was measured on; larger tiles spill under it), and never to ROCm builds."""
    from hf_deltalog.kernels._op import decode_register_cap

    assert decode_register_cap(7, 1, 8 * 128) == {"maxnreg": 64}
    assert decode_register_cap(1, 1, 8 * 64) == {"maxnreg": 64}
    assert decode_register_cap(0, 1, 8 * 128) == {}  # the dense kernel measured 1 % slower under the cap
    assert decode_register_cap(7, 2, 8 * 128) == {} and decode_register_cap(7, 4, 16 * 128) == {}
    assert decode_register_cap(7, 1, 8 * 256) == {} and decode_register_cap(7, 1, 16 * 128) == {}  # K = 256, BV = 16
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert decode_register_cap(7, 1, 8 * 128) == {}  # maxnreg is an NVIDIA option


def test_default_launch_config():
    # a dense-decode-shaped program ([8, K], one warp, one value head) normalising raw q/k, one prepare warp at M = 8
    assert default_launch_config(256, 16, 32, 128, 128, 7) == (8, 1, 1, True, 1)
    assert default_launch_config(256, 16, 32, 128, 128, 15).prepare_warps == 4  # a [16, 128] log tile: more warps
    for B in (1, 3, 64, 512):
        for K, V in ((16, 32), (64, 64), (128, 128), (256, 128), (20, 24)):
            for C in (0, 1, 7, 31):
                cfg = default_launch_config(B, 2, 6, K, V, C)
                vmax = 1 << (V - 1).bit_length()
                assert (cfg.block_v & (cfg.block_v - 1)) == 0 and min(8, vmax) <= cfg.block_v <= vmax, cfg
                assert cfg.num_warps in (1, 2, 4) and cfg.prepare_warps in (1, 2, 4), cfg
                assert 3 % cfg.heads_per_program == 0, cfg  # must divide G = 6 // 2


def _good_args(B=2, Hk=1, HV=2, K=16, V=16, M=3):
    gen = torch.Generator().manual_seed(11)
    x = list(make_inputs(B, Hk, HV, K, V, torch.float32, gen))
    bufs = make_state(B, Hk, HV, K, V, M, False, [0, 1], seed=12)
    return x + bufs + [workspace(B, Hk, HV, K, M)]


def _set(i, fn):
    def mutate(args, kw):
        args[i] = fn(args[i])

    return mutate


def _kw(**extra):
    def mutate(args, kw):
        kw.update(extra)

    return mutate


# Indices into the positional arguments: q k v g beta base log_decay k_log u_log decay_log length workspace.
BAD_INPUTS = [
    ("q-3d", _set(0, lambda t: t[:, 0]), ValueError, "q and k must both be"),
    ("k-shape", _set(1, lambda t: torch.cat([t, t], dim=-1)), ValueError, "q and k must both be"),
    ("T=2", lambda a, kw: [a.__setitem__(i, torch.cat([a[i], a[i]], 1)) for i in range(5)], ValueError, "T = 1"),
    ("v-rows", _set(2, lambda t: t[:1]), ValueError, "v must be"),
    ("gqa", lambda a, kw: [a.__setitem__(i, torch.cat([a[i]] * 4, 2)) for i in (0, 1)], ValueError, "multiple of the key"),
    ("g-shape", _set(3, lambda t: t[:, 0]), ValueError, "g must be"),
    ("beta-shape", _set(4, lambda t: t[..., :1]), ValueError, "beta must be"),
    ("vfirst-square-accepted", _kw(state_v_first=True), None, None),  # K = V: both layouts share a shape
    ("base-shape", _set(5, lambda t: t[..., :8].contiguous()), ValueError, "base must be"),
    ("k_log-shape", _set(7, lambda t: t[:, :, :, :8].contiguous()), ValueError, "k_log must have shape"),
    ("u_log-C", _set(8, lambda t: t[:, :, :1].contiguous()), ValueError, "u_log must have shape"),
    ("decay_log-shape", _set(9, lambda t: t[..., None]), ValueError, "decay_log must have shape"),
    ("length-shape", _set(10, lambda t: t[:1]), ValueError, "length must have shape"),
    ("workspace-shape", _set(11, lambda t: t[:, :-1].contiguous()), ValueError, "workspace must have shape"),
    ("q-fp64", lambda a, kw: [a.__setitem__(i, a[i].double()) for i in (0, 1)], TypeError, "bfloat16, float16 or float32"),
    ("qk-dtypes", _set(1, lambda t: t.half()), TypeError, "same dtype"),
    ("v-int", _set(2, lambda t: t.int()), TypeError, "v must be"),
    ("g-int", _set(3, lambda t: t.int()), TypeError, "g must be a floating dtype"),
    ("base-fp64", _set(5, lambda t: t.double()), TypeError, "base must be float32"),
    ("u_log-bf16", _set(8, lambda t: t.bfloat16()), TypeError, "u_log must be float32"),
    ("length-float", _set(10, lambda t: t.float()), TypeError, "length must be int32 or int64"),
    ("workspace-bf16", _set(11, lambda t: t.bfloat16()), TypeError, "workspace must be float32"),
    ("not-tensor", _set(3, lambda t: t.tolist()), TypeError, "g must be a torch.Tensor"),
    ("base-noncontig", _set(5, lambda t: t.transpose(-1, -2).contiguous().transpose(-1, -2)), ValueError, "contiguous"),
    ("v-stride", _set(2, lambda t: torch.cat([t, t], -1)[..., ::2]), ValueError, "unit stride"),
    # (a mutation test: dropping q or k from the unit-stride check failed no test, and a strided q read wrong values)
    ("q-stride", _set(0, lambda t: torch.cat([t, t], -1)[..., ::2]), ValueError, "unit stride"),
    ("k-stride", _set(1, lambda t: torch.cat([t, t], -1)[..., ::2]), ValueError, "unit stride"),
    ("device", _set(5, lambda t: t.to("meta")), ValueError, "one device"),
    ("block_v", _kw(block_v=12), ValueError, "block_v"),
    ("num_warps", _kw(num_warps=3), ValueError, "num_warps"),
    ("prepare_warps", _kw(prepare_warps=5), ValueError, "prepare_warps must be one of"),
    ("heads_per_program", _kw(heads_per_program=4), ValueError, "heads_per_program must be a power of two dividing"),
    # bools and floats passed the checks (True == 1, 1.0 == 1) and raw_qk="no" read as True; a wrong type is a
    # TypeError (it was a ValueError), a numpy integer is taken as an int (it was refused)
    ("num_warps-bool", _kw(num_warps=True), TypeError, "num_warps must be an int"),
    ("num_warps-float", _kw(num_warps=1.0), TypeError, "num_warps must be an int"),
    ("block_v-bool", _kw(block_v=True), TypeError, "block_v must be an int"),
    ("block_v-str", _kw(block_v="8"), TypeError, "block_v must be an int"),
    ("prepare_warps-float", _kw(prepare_warps=2.0), TypeError, "prepare_warps must be an int"),
    ("heads_per_program-bool", _kw(heads_per_program=True), TypeError, "heads_per_program must be an int"),
    ("raw_qk-str", _kw(raw_qk="no"), TypeError, "raw_qk must be True, False or None"),
    # a string flag is truthy: "False" silently read the base in the other layout (65th review)
    ("state_v_first-str", _kw(state_v_first="False"), TypeError, "state_v_first must be True or False"),
    ("l2norm-int", _kw(use_qk_l2norm_in_kernel=0), TypeError, "use_qk_l2norm_in_kernel must be True or False"),
    ("numpy-options", _kw(block_v=np.int64(8), num_warps=np.int32(1), heads_per_program=np.int64(1)), None, None),
]


@pytest.mark.parametrize("mutate,exc,match", [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS])
def test_launcher_errors(mutate, exc, match):
    args, kw = _good_args(), {}
    mutate(args, kw)
    if exc is None:
        fused_deltalog_gdn_decode(*args, **kw)  # accepted
        return
    with pytest.raises(exc, match=match):
        fused_deltalog_gdn_decode(*args, **kw)


@pytest.mark.parametrize("value", ["1", "true", "True", "ON", "yes", "y", "0", "", "2", "false", "off", " 1", "t"])
def test_interpreting_reads_triton_interpret_as_triton_does(monkeypatch, value):
    """``TRITON_INTERPRET=false`` (or ``off``, ``2``) was read as interpreting: the Triton backend was then allowed on
    a CPU where Triton itself compiles for a GPU, and a GPU run registered the slower opaque op (76th review). Now the
    value means what it means to Triton's own reader (``getenv_bool``, asked here in the same environment)."""
    from triton._C.libtriton import getenv_bool

    from hf_deltalog.kernels._op import interpreting

    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert interpreting() is getenv_bool("TRITON_INTERPRET", False)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert interpreting() is False


def test_launch_options_take_every_warp_count_triton_launches():
    """1, 2, 4, 8 and 16 warps are accepted, 3 and 32 refused (a mutation test, 76th review: refusing 16 failed no
    test)."""
    from hf_deltalog.kernels._op import check_launch_options

    for warps in (1, 2, 4, 8, 16, np.int64(16)):
        check_launch_options(8, warps)
    for warps in (3, 32):
        with pytest.raises(ValueError, match=rf"num_warps must be one of 1, 2, 4, 8, 16 .*; got {warps}"):
            check_launch_options(None, warps)


def test_cpu_requires_interpreter(monkeypatch):
    """CPU tensors run only on kernels that Triton defined under its interpreter (TRITON_INTERPRET=1 when this package
    was imported; simulated here as not): refused as not CUDA, or, with the variable set only now, with a message
    saying to set it before the import."""
    from hf_deltalog.kernels import _op

    monkeypatch.setattr(_op, "KERNELS_INTERPRETED", False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        fused_deltalog_gdn_decode(*_good_args())
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1 was set after hf_deltalog's kernels were imported"):
        fused_deltalog_gdn_decode(*_good_args())
