"""Inputs at the edge of the contract, for every operator's reference and Triton kernel (under the interpreter):
a step whose log-decay is huge, -inf or NaN, a length outside [0, C] (negative, above C, beyond int32), and buffers
the step must refuse before writing anything (aliased, expanded, a lossy log dtype, a zero head size)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before any triton import

import numpy as np
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


def run_both(op, xs, base, log, ws):
    """One step through the reference and the kernel on separate copies: (o_ref, o, ref buffers, kernel buffers),
    each buffer list being ``[base, *log]``."""
    _, _, _, _, naive, _, kernel, _ = CASES[op](torch.Generator().manual_seed(0))
    ref, ker = [base.clone(), *(t.clone() for t in log)], [base.clone(), *(t.clone() for t in log)]
    o_ref = naive(*xs, *ref)
    o = kernel(*xs, *ker, ws)
    return o_ref, o, ref, ker


@pytest.mark.parametrize("op", list(CASES))
def test_nan_log_decay_stays_nan_like_the_reference(op):
    """A NaN gate in one row makes that row NaN in the reference (torch.clamp keeps NaN) and in the eager recurrence;
    the kernel's floor must not turn it into the floor (a full decay that wipes the row's state and hides the NaN).
    The other row stays exact. Steps run through a merge, so the NaN also passes the log and the base."""
    x, log, decay_idx, _, naive, materialize, kernel, ws = CASES[op](torch.Generator().manual_seed(5))
    x[decay_idx][0, 2] = float("nan")  # row 0, step 2
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(6))
    ref, ker = [base.clone(), *(t.clone() for t in log)], [base.clone(), *(t.clone() for t in log)]
    for t in range(M + 2):  # appends, the merge at step M - 1, appends after it
        xs = step_inputs(x, t, op)
        o_ref = naive(*xs, *ref)
        o = kernel(*xs, *ker, ws)
        torch.testing.assert_close(o, o_ref, rtol=1e-5, atol=1e-5, equal_nan=True, msg=f"{op} step {t}")
        assert torch.isfinite(o[1]).all()
        if t == 3:  # RWKV6 reads the state before the step: its NaN shows from the next step on
            assert torch.isnan(o_ref[0]).any() and torch.isnan(o[0]).any()
    torch.testing.assert_close(materialize(*ker), materialize(*ref), rtol=1e-5, atol=1e-5, equal_nan=True)
    assert torch.isnan(ker[0][0]).any()  # the merge carried the NaN into row 0's base, as the reference's


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("big,dtype", [(2**32, torch.int64), (2**31 - 1, torch.int32)], ids=["2^32-int64", "2^31-1"])
def test_length_beyond_int32_merges_like_the_reference(op, big, dtype):
    """A length far above C merges, whatever its dtype: an int64 length of 2**32 must not wrap to 0 (an append into
    a live slot) and an int32 one of 2**31 - 1 must reach the decode kernel as a merge (not as -2**31 after a round
    trip through a float32 workspace)."""
    x, log, _, _, _, _, _, ws = CASES[op](torch.Generator().manual_seed(7))
    log[-1] = torch.tensor([big, 0], dtype=dtype)
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(8))
    o_ref, o, ref, ker = run_both(op, step_inputs(x, 0, op), base, log, ws)
    torch.testing.assert_close(o, o_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(ker, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert ker[-1].tolist() == [0, 1]


def overlapping(shape_a, shape_b):
    """Two contiguous fp32 tensors of the given shapes whose memory overlaps by half of the first."""
    na, nb = torch.Size(shape_a).numel(), torch.Size(shape_b).numel()
    flat = torch.zeros(na // 2 + nb + na)
    return flat[:na].view(shape_a), flat[na // 2:na // 2 + nb].view(shape_b)


def assert_refused(fn, exc, match, buffers):
    before = [t.clone() for t in buffers]
    with pytest.raises(exc, match=match):
        fn()
    for a, b in zip(buffers, before):
        assert torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)) if a.is_floating_point() else torch.equal(a, b)


def test_buffers_that_touch_without_sharing_an_element_are_accepted():
    """check_disjoint compares byte ranges: two buffers cut back to back from one allocation touch at a boundary and
    share no byte, so they are accepted; one element of overlap is refused (a mutation test found that a check of
    ``>`` instead of ``>=`` at the boundary, refusing such buffers, failed no test)."""
    from hf_deltalog.kernels.common import check_disjoint

    flat = torch.zeros(2 * 3 * 4 + 5)
    base, log_decay = flat[:24].view(2, 3, 4), flat[24:29]
    check_disjoint({"base": base, "log_decay": log_decay}, written=("base", "log_decay"))
    with pytest.raises(ValueError, match="base and log_decay share memory"):
        check_disjoint({"base": base, "log_decay": flat[23:28]}, written=("base", "log_decay"))


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_aliased_buffers_are_refused(op, impl):
    """The key log and the value log carved out of one allocation so that they overlap: both are written by the step,
    so it must refuse (ValueError naming both) and write nothing."""
    x, log, _, _, naive, _, kernel, ws = CASES[op](torch.Generator().manual_seed(9))
    log[1], log[2] = overlapping(log[1].shape, log[2].shape)
    log[1].normal_(generator=torch.Generator().manual_seed(10))
    log[-1][:] = 2
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(11))
    xs = step_inputs(x, 0, op)
    step = (lambda: naive(*xs, base, *log)) if impl == "reference" else (lambda: kernel(*xs, base, *log, ws))
    assert_refused(step, ValueError, r"k_log and [uv]_log share memory", [base, *log, ws])


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("which", [0, -1], ids=["log_decay", "length"])
def test_reference_refuses_an_expanded_buffer_before_writing(op, which):
    """The references update their buffers in place: an expanded (stride-0) one must be refused before the merge
    rewrites the base, as the kernels refuse it (a retry would otherwise apply the step twice)."""
    x, log, _, _, naive, _, _, _ = CASES[op](torch.Generator().manual_seed(12))
    log[-1][:] = M - 1  # every row merges: the base would be written first
    log[which] = log[which][:1].expand_as(log[which])
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(13))
    xs = step_inputs(x, 0, op)
    assert_refused(lambda: naive(*xs, base, *log), ValueError, "contiguous", [base, *log])


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_rwkv6_log_narrower_than_its_activations_is_refused(impl):
    """The RWKV6 key and value logs store k and v as they arrive: a bf16 log for fp32 activations would round every
    entry (relative error ~1e-3 instead of ~1e-7), so it is refused with a TypeError."""
    x, log, _, _, naive, _, kernel, ws = CASES["rwkv6"](torch.Generator().manual_seed(14))
    log[1] = log[1].bfloat16()
    base = torch.zeros(B, H, K, V)
    xs = step_inputs(x, 0, "rwkv6")
    step = (lambda: naive(*xs, base, *log)) if impl == "reference" else (lambda: kernel(*xs, base, *log, ws))
    assert_refused(step, TypeError, "k_log must be float32 or the dtype of its activation", [base, *log, ws])


def empty_head_case(op, K_, V_):
    """Step inputs, base, log and workspace for B = 2, H = 2, C = 3 with the given key / value head sizes."""
    C = 3
    z = lambda *s: torch.zeros(*s)  # noqa: E731
    if op == "gdn":
        xs = [z(B, 1, H, K_), z(B, 1, H, K_), z(B, 1, H, V_), z(B, 1, H), z(B, 1, H)]
        log = [z(B, H), z(B, H, C, K_), z(B, H, C, V_), z(B, H, C)]
        ws = deltalog_gdn_workspace(B, H, H, K_, C, "cpu")
    elif op == "kda":
        xs = [z(B, 1, H, K_), z(B, 1, H, K_), z(B, 1, H, V_), z(B, 1, H, K_), z(B, 1, H)]
        log = [z(B, H, K_), z(B, H, C, K_), z(B, H, C, V_), z(B, H, C, K_)]
        ws = deltalog_kda_workspace(B, H, H, K_, C, "cpu")
    else:
        xs = [z(B, 1, H, K_), z(B, 1, H, K_), z(B, 1, H, V_), z(B, 1, H, K_), z(H, K_)]
        log = [z(B, H, K_), z(B, H, C, K_), z(B, H, C, V_), z(B, H, C, K_)]
        ws = deltalog_rwkv6_workspace(B, H, K_, C, "cpu")
    return xs, z(B, H, K_, V_), log + [torch.zeros(B, dtype=torch.int32)], ws


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("impl", ["reference", "kernel"])
@pytest.mark.parametrize("K_,V_", [(0, 4), (4, 0)], ids=["K=0", "V=0"])
def test_zero_head_size_is_refused(op, impl, K_, V_):
    """K = 0 failed inside K ** -0.5, and V = 0 launched an empty decode grid that never advanced `length` while the
    prepare kernel advanced the rest of the log: both are refused with a ValueError naming the size."""
    _, _, _, _, naive, _, kernel, _ = CASES[op](torch.Generator().manual_seed(0))
    xs, base, log, ws = empty_head_case(op, K_, V_)
    step = (lambda: naive(*xs, base, *log)) if impl == "reference" else (lambda: kernel(*xs, base, *log, ws))
    assert_refused(step, ValueError, "head sizes and head counts must be ≥ 1", [base, *log, ws])


@pytest.mark.parametrize("materialize, value_log, heads", [
    (naive_deltalog_gdn_materialize, "u_log", "Hk"), (naive_deltalog_kda_materialize, "u_log", "Hk"),
    (naive_deltalog_rwkv6_materialize, "v_log", "H")])
def test_materialize_refuses_a_log_that_is_not_4d(materialize, value_log, heads):
    """A 3-D k_log (or a non-tensor) failed with a raw 'not enough values to unpack' (or AttributeError) before the
    references' shape checks: now a ValueError / TypeError naming the expected shapes."""
    B, H, C, K_, V_ = 2, 2, 3, 4, 5
    z = torch.zeros
    base, log_decay = z(B, H, K_, V_), z(B, H, K_) if materialize is not naive_deltalog_gdn_materialize else z(B, H)
    rest = (z(B, H, C, V_), z(B, H, C, K_) if materialize is not naive_deltalog_gdn_materialize else z(B, H, C),
            torch.zeros(B, dtype=torch.int64))
    with pytest.raises(ValueError, match=rf"k_log must be \[B, {heads}, C, K\] and {value_log} .*got k_log \(2, 2, 4\)"):
        materialize(base, log_decay, z(B, H, K_), *rest)
    with pytest.raises(TypeError, match="k_log must be a torch.Tensor; got list"):
        materialize(base, log_decay, [0.0], *rest)


@pytest.mark.parametrize("op", list(CASES))
def test_compiled_kernel_step_refuses_aliased_buffers(op):
    """Under torch.compile the launcher's shared-memory check was skipped (traced tensors have no addresses) and
    nothing checked later: an append-only step with the value log carved out of the base wrote into the base. The
    opaque custom op (the interpreter's form) now checks inside the compiled graph, with the eager call's message,
    and writes nothing."""
    x, log, _, _, _, _, kernel, ws = CASES[op](torch.Generator().manual_seed(15))
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(16))
    log[2] = base.view(-1)[:log[2].numel()].view(log[2].shape)  # the value log aliases the base
    xs = step_inputs(x, 0, op)
    compiled = torch.compile(kernel, fullgraph=True, backend="aot_eager")
    assert_refused(lambda: compiled(*xs, base, *log, ws), ValueError,
                   r"[uv]_log and base share memory|base and [uv]_log share memory", [base, *log, ws])


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_decode_step_refuses_a_log_that_is_not_4d(op, impl):
    """The decode steps read the log's sizes before checking its rank: a non-tensor k_log failed with a raw
    AttributeError in the references, and a 3-D one got a message asking for a shape with C = -1. Now the TypeError
    and ValueError that materialize gives, before anything is written."""
    x, log, _, _, naive, _, kernel, ws = CASES[op](torch.Generator().manual_seed(17))
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(18))
    xs = step_inputs(x, 0, op)

    def step(k_log):
        args = [log[0], k_log, *log[2:]]
        return (lambda: naive(*xs, base, *args)) if impl == "reference" else (lambda: kernel(*xs, base, *args, ws))

    assert_refused(step(log[1][:, 0].contiguous()), ValueError, r"k_log must be \[B, H[k]?, C, K\] .*\(4-D\)",
                   [base, *log, ws])
    assert_refused(step(log[1].tolist()), TypeError, "k_log must be a torch.Tensor; got list", [base, *log, ws])


@pytest.mark.parametrize("op", list(CASES))
def test_dense_reference_refuses_a_zero_key_size(op):
    """naive_recurrent_* with K = 0 failed with a ZeroDivisionError inside K ** -0.5: now the decode steps'
    ValueError."""
    gen = torch.Generator().manual_seed(19)
    q, v = torch.randn(1, 2, H, 0, generator=gen), torch.randn(1, 2, H, V, generator=gen)
    if op == "gdn":
        call = lambda: naive_recurrent_gated_delta_rule(q, q, v, torch.zeros(1, 2, H), torch.zeros(1, 2, H))  # noqa: E731
    elif op == "kda":
        call = lambda: naive_recurrent_kda(q, q, v, torch.zeros(1, 2, H, 0), torch.zeros(1, 2, H))  # noqa: E731
    else:
        call = lambda: naive_recurrent_rwkv6(q, q, v, torch.zeros(1, 2, H, 0), torch.zeros(H, 0))  # noqa: E731
    with pytest.raises(ValueError, match=r"head sizes and head counts must be ≥ 1; got \{'K': 0\}"):
        call()


def test_rwkv6_float32_log_for_float64_activations_is_taken():
    """The docstring said a log narrower than its activation is refused, yet float32 logs for float64 activations
    are taken (the caches keep fp32 state for a float64 model). The docstring now says so; this pins the behaviour:
    the step matches the all-fp64 step to float32 rounding of the logged k and v."""
    gen = torch.Generator().manual_seed(20)
    r, k, w = (torch.randn(B, 1, H, K, generator=gen, dtype=torch.float64) for _ in range(3))
    w = -w.abs() * 0.1
    v = torch.randn(B, 1, H, V, generator=gen, dtype=torch.float64)
    u = torch.randn(H, K, generator=gen, dtype=torch.float64)
    outs = []
    for log_dtype in (torch.float64, torch.float32):
        st = [torch.zeros(B, H, K, V, dtype=torch.float64), torch.zeros(B, H, K, dtype=torch.float64),
              torch.zeros(B, H, M - 1, K, dtype=log_dtype), torch.zeros(B, H, M - 1, V, dtype=log_dtype),
              torch.zeros(B, H, M - 1, K, dtype=torch.float64), torch.zeros(B, dtype=torch.int64)]
        for _ in range(2):
            naive_deltalog_rwkv6_decode(r, k, v, w, u, *st)
        outs.append(naive_deltalog_rwkv6_materialize(*st))
    assert outs[1].dtype == torch.float64
    assert 0 < (outs[1] - outs[0]).abs().max() < 1e-6


@pytest.mark.parametrize("op", list(CASES))
def test_workspace_helpers_check_their_sizes(op):
    """A negative C gave a workspace with no error, and a float size a torch-internal message (52nd review)."""
    helper = {"gdn": lambda *a: deltalog_gdn_workspace(2, 2, 4, *a, "cpu"),
              "kda": lambda *a: deltalog_kda_workspace(2, 2, 4, *a, "cpu"),
              "rwkv6": lambda *a: deltalog_rwkv6_workspace(2, 4, *a, "cpu")}[op]
    with pytest.raises(ValueError, match=r"C must be ≥ 0 \(C = M − 1 log slots\); got -1"):
        helper(8, -1)
    with pytest.raises(TypeError, match="K must be an int; got 2.5"):
        helper(2.5, 7)
    assert helper(8, 0).shape[0] == 2


OP_OPTIONS = {  # the registered ops' arguments after the workspace, as the launchers pass their defaults
    "gdn": [None, True, False, 0, 0, 0, -1, 0],  # scale, l2norm, state_v_first, block_v, warps, heads, raw_qk, prep
    "kda": [None, True, False, 8, 1, 0],  # scale, l2norm, state_v_first, block_v, num_warps, prepare_warps
    "rwkv6": [None, False, 8, 1, 0],  # scale, state_v_first, block_v, num_warps, prepare_warps
}


@pytest.mark.parametrize("op", list(CASES))
def test_registered_op_called_directly_checks_its_arguments(op):
    """``torch.ops.hf_deltalog.fused_deltalog_<op>_decode`` is public, but its body ran only the shared-memory check:
    a one-column workspace made the kernels write into the tensor after it, an fp64 base was merged into, a float
    length advanced, and a q with a last-dim stride of 2 gave wrong outputs, all silently. Each is now refused with
    the launcher's message before anything is written; with valid arguments the op gives the launcher's result."""
    registered = getattr(torch.ops.hf_deltalog, f"fused_deltalog_{op}_decode")
    x, log, _, _, _, _, kernel, ws = CASES[op](torch.Generator().manual_seed(30))
    log[-1][:] = M - 1  # every row merges: the base would be written
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(31))
    xs = step_inputs(x, 0, op)
    opts = OP_OPTIONS[op]
    call = lambda *a: lambda: registered(*a)
    # a workspace of one column per row, carved from an allocation whose remainder is another tensor
    flat = torch.zeros(B + 64)
    small_ws, neighbour = flat[:B].view(B, 1), flat[B:]
    assert_refused(call(*xs, base, *log, small_ws, *opts), ValueError, "workspace must have shape",
                   [base, *log, flat])
    assert not neighbour.any()
    assert_refused(call(*xs, base.double(), *log, ws, *opts), TypeError, "base must be float32", [base, *log, ws])
    bad_length = [*log[:-1], log[-1].float()]
    assert_refused(call(*xs, base, *bad_length, ws, *opts), TypeError, "length must be int32 or int64",
                   [base, *bad_length, ws])
    strided = [torch.repeat_interleave(xs[0], 2, dim=-1)[..., ::2], *xs[1:]]  # q's values, last-dim stride 2
    assert_refused(call(*strided, base, *log, ws, *opts), ValueError, "must have unit stride on its last dim",
                   [base, *log, ws])
    direct_base, direct_log = base.clone(), [t.clone() for t in log]
    o_direct = registered(*xs, direct_base, *direct_log, ws, *opts)
    o = kernel(*xs, base, *log, ws)
    assert torch.equal(o_direct, o) and torch.equal(direct_base, base)
    assert all(torch.equal(a, b) for a, b in zip(direct_log, log))


@pytest.mark.parametrize("op", list(CASES))
def test_a_decode_tile_over_tritons_limit_is_refused_before_anything_is_written(op):
    """The decode launch runs after the prepare launch has advanced the log-decay and written the log slot: a value
    tile that Triton refuses only when it compiles the decode kernel (K = 2048 × block_v = 1024: 2**21 elements, over
    Triton's 2**20) left the state part-way through a step (log_decay advanced, length not). It is now refused before
    either launch, naming the tile and the options that shrink it."""
    Bb, Hh, Kb, Vb, C = 1, 1, 2048, 1024, 1
    gen = torch.Generator().manual_seed(32)
    q, k = torch.randn(Bb, 1, Hh, Kb, generator=gen), torch.randn(Bb, 1, Hh, Kb, generator=gen)
    v = torch.randn(Bb, 1, Hh, Vb, generator=gen)
    base, k_log, length = torch.zeros(Bb, Hh, Kb, Vb), torch.zeros(Bb, Hh, C, Kb), torch.zeros(Bb, dtype=torch.int32)
    value_log = torch.zeros(Bb, Hh, C, Vb)
    if op == "gdn":
        xs = [q, k, v, -torch.rand(Bb, 1, Hh, generator=gen), torch.rand(Bb, 1, Hh, generator=gen)]
        log = [torch.zeros(Bb, Hh), k_log, value_log, torch.zeros(Bb, Hh, C), length]
        ws = deltalog_gdn_workspace(Bb, Hh, Hh, Kb, C, "cpu")
    else:
        g = -torch.rand(Bb, 1, Hh, Kb, generator=gen)
        last = torch.rand(Bb, 1, Hh, generator=gen) if op == "kda" else torch.randn(Hh, Kb, generator=gen)
        xs = [q, k, v, g, last]
        log = [torch.zeros(Bb, Hh, Kb), k_log, value_log, torch.zeros(Bb, Hh, C, Kb), length]
        ws = (deltalog_kda_workspace(Bb, Hh, Hh, Kb, C, "cpu") if op == "kda"
              else deltalog_rwkv6_workspace(Bb, Hh, Kb, C, "cpu"))
    kernel = CASES[op](torch.Generator().manual_seed(0))[6]
    assert_refused(lambda: kernel(*xs, base, *log, ws, block_v=1024), ValueError,
                   r"decode kernel's base_tile would hold 2,097,152 elements, over Triton's limit of 1,048,576 .*"
                   r"smaller block_v", [base, *log, ws])


@pytest.mark.parametrize("op", list(CASES))
def test_aot_eager_hands_the_op_copies_so_an_aliased_input_reads_the_state_before_the_step(op):
    """What check_disjoint's docstring says of functionalization: compiled with ``aot_eager`` (no re-inplacing), the
    opaque op receives copies of the buffers it writes, so an input that is a view of one of them (here v, a live
    slot of the value log) is not refused, and the step gives exactly the eager result with a copy of that input:
    no race. The eager call refuses it."""
    x, log, _, _, _, _, kernel, ws = CASES[op](torch.Generator().manual_seed(33))
    log[2].normal_(generator=torch.Generator().manual_seed(34))
    log[-1][:] = 2  # slots 0 and 1 live
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(35))
    xs = step_inputs(x, 0, op)
    ref_base, ref_log, ref_ws = base.clone(), [t.clone() for t in log], ws.clone()
    alias = list(xs)
    alias[2] = log[2][:, None, :, 0, :]  # v: [B, 1, H, V], a view of value-log slot 0
    o_ref = kernel(*xs[:2], alias[2].clone(), *xs[3:], ref_base, *ref_log, ref_ws)
    assert_refused(lambda: kernel(*alias, base, *log, ws), ValueError, "share memory", [base, *log, ws])
    torch._dynamo.reset()
    o = torch.compile(kernel, fullgraph=True, backend="aot_eager")(*alias, base, *log, ws)
    assert torch.equal(o, o_ref) and torch.equal(base, ref_base)
    assert all(torch.equal(a, b) for a, b in zip(log, ref_log))


def test_triton_interpret_set_after_the_import_gets_a_clear_error(tmp_path):
    """Triton reads TRITON_INTERPRET when a kernel is defined: set after hf_deltalog's kernels were imported, a CPU
    call passed the device check and failed in Triton with "0 active drivers". Now a ValueError says to set it before
    the import; nothing is written."""
    import subprocess
    import sys

    script = tmp_path / "late.py"
    script.write_text(
        "import os, torch\n"
        "os.environ.pop('TRITON_INTERPRET', None)\n"
        "from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "B, H, K, V, C = 1, 1, 4, 4, 1\n"
        "base, length = torch.zeros(B, H, K, V), torch.zeros(B, dtype=torch.int32)\n"
        "log = [torch.zeros(B, H), torch.zeros(B, H, C, K), torch.zeros(B, H, C, V), torch.zeros(B, H, C), length]\n"
        "try:\n"
        "    fused_deltalog_gdn_decode(torch.randn(B, 1, H, K), torch.randn(B, 1, H, K), torch.randn(B, 1, H, V),\n"
        "                              -torch.rand(B, 1, H), torch.rand(B, 1, H), base, *log,\n"
        "                              deltalog_gdn_workspace(B, H, H, K, C, 'cpu'))\n"
        "except ValueError as e:\n"
        "    print('REFUSED', e, 'written', bool(base.any() or length.any() or log[0].any()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "REFUSED TRITON_INTERPRET=1 was set after hf_deltalog's kernels were imported" in run.stdout, run.stdout
    assert run.stdout.strip().endswith("written False"), run.stdout


@pytest.mark.parametrize("op", list(CASES))
def test_a_decode_log_tile_over_tritons_limit_is_refused_before_anything_is_written(op):
    """The decode kernel also holds a ``[next_pow2(C), block_v]`` tile of the value log: C = 1,025 slots × block_v =
    1,024 is 2**21 elements (the base tile, K = 8 × 1,024, is small), refused before either launch."""
    Bb, Hh, Kb, Vb, C = 1, 1, 8, 1024, 1025
    gen = torch.Generator().manual_seed(36)
    q, k = torch.randn(Bb, 1, Hh, Kb, generator=gen), torch.randn(Bb, 1, Hh, Kb, generator=gen)
    v = torch.randn(Bb, 1, Hh, Vb, generator=gen)
    base, length = torch.zeros(Bb, Hh, Kb, Vb), torch.zeros(Bb, dtype=torch.int32)
    k_log, value_log = torch.zeros(Bb, Hh, C, Kb), torch.zeros(Bb, Hh, C, Vb)
    if op == "gdn":
        xs = [q, k, v, -torch.rand(Bb, 1, Hh, generator=gen), torch.rand(Bb, 1, Hh, generator=gen)]
        log = [torch.zeros(Bb, Hh), k_log, value_log, torch.zeros(Bb, Hh, C), length]
        ws = deltalog_gdn_workspace(Bb, Hh, Hh, Kb, C, "cpu")
    else:
        last = torch.rand(Bb, 1, Hh, generator=gen) if op == "kda" else torch.randn(Hh, Kb, generator=gen)
        xs = [q, k, v, -torch.rand(Bb, 1, Hh, Kb, generator=gen), last]
        log = [torch.zeros(Bb, Hh, Kb), k_log, value_log, torch.zeros(Bb, Hh, C, Kb), length]
        ws = (deltalog_kda_workspace(Bb, Hh, Hh, Kb, C, "cpu") if op == "kda"
              else deltalog_rwkv6_workspace(Bb, Hh, Kb, C, "cpu"))
    kernel = CASES[op](torch.Generator().manual_seed(0))[6]
    assert_refused(lambda: kernel(*xs, base, *log, ws, block_v=1024), ValueError,
                   r"decode kernel's log_tile would hold 2,097,152 elements", [base, *log, ws])


@pytest.mark.parametrize("op", list(CASES))
def test_a_launch_option_that_compile_makes_symbolic_is_accepted(op):
    """torch.compile makes an int argument symbolic once it changes between calls (automatic dynamic): the op's fake,
    which now checks the launch options, refused the SymInt ``block_v`` ("block_v must be an int ... got s23") on the
    second call (found by a review). Both calls now give the eager results."""
    x, log, _, _, _, _, kernel, ws = CASES[op](torch.Generator().manual_seed(37))
    base0 = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(38))
    xs = step_inputs(x, 0, op)

    def step(block_v, base, log, ws):
        return kernel(*xs, base, *log, ws, block_v=block_v)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for block_v in (2, 4):
        eager_state = [base0.clone(), [t.clone() for t in log], ws.clone()]
        state = [base0.clone(), [t.clone() for t in log], ws.clone()]
        o_eager = step(block_v, *eager_state)
        o = compiled(block_v, *state)
        assert torch.equal(o, o_eager) and torch.equal(state[0], eager_state[0])
        assert all(torch.equal(a, b) for a, b in zip(state[1], eager_state[1]))


def test_the_gdn_op_refuses_a_raw_qk_outside_its_three_values():
    """The GDN op takes ``raw_qk`` as an int (-1: the default, 0, 1); 5 ran as True and -7 as the default."""
    registered = torch.ops.hf_deltalog.fused_deltalog_gdn_decode
    x, log, _, _, _, _, _, ws = CASES["gdn"](torch.Generator().manual_seed(39))
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(40))
    xs = step_inputs(x, 0, "gdn")
    for bad in (5, -7):
        opts = [None, True, False, 0, 0, 0, bad, 0]
        assert_refused(lambda: registered(*xs, base, *log, ws, *opts), ValueError,
                       rf"the op's raw_qk must be -1 \(the default\), 0 or 1; got {bad}", [base, *log, ws])


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("impl", ["dense", "reference", "kernel"])
def test_a_scale_that_is_not_a_real_number_is_refused(op, impl):
    """``scale`` is the query scale: None (``K ** -0.5``) or a real number. The launchers called ``float(scale)``, so
    ``"0.5"`` was taken as 0.5, while the references failed inside a product with torch's message; ``True`` was 1.0
    in both. Now a TypeError, before anything is written; a NumPy float is a real number and gives what the same
    Python float gives."""
    dense = {"gdn": naive_recurrent_gated_delta_rule, "kda": naive_recurrent_kda, "rwkv6": naive_recurrent_rwkv6}[op]
    x, log, _, _, naive, _, kernel, ws = CASES[op](torch.Generator().manual_seed(31))
    log[-1][:] = M - 1  # every row merges: a step would write the base first
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(32))
    xs = step_inputs(x, 0, op)

    def call(scale, buffers):
        b, *lg, w = buffers
        if impl == "dense":
            return dense(*xs, initial_state=b, scale=scale)[0]
        return naive(*xs, b, *lg, scale=scale) if impl == "reference" else kernel(*xs, b, *lg, w, scale=scale)

    for bad in ("0.5", True, 0.5j, torch.tensor(0.5)):
        assert_refused(lambda: call(bad, [base, *log, ws]), TypeError,  # noqa: B023 - called at once
                       r"scale must be None \(K \*\* -0.5\) or a real number", [base, *log, ws])
    with_numpy = call(np.float64(0.25), [t.clone() for t in (base, *log, ws)])
    assert torch.equal(with_numpy, call(0.25, [t.clone() for t in (base, *log, ws)]))
    if impl == "kernel":  # torch.compile hands a NumPy scalar to the launcher as a tensor: still taken
        torch._dynamo.reset()
        kernel = torch.compile(kernel, fullgraph=True, backend="aot_eager")
        assert torch.equal(with_numpy, call(np.float64(0.25), [t.clone() for t in (base, *log, ws)]))


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_a_decode_step_refuses_tensors_on_two_devices(op, impl):
    """A buffer on another device (here: meta) is refused by the decode references too, with the kernels' message
    and before anything is written; they failed in torch ("Tensor on device cpu is not on the expected device
    meta!")."""
    x, log, _, _, naive, _, kernel, ws = CASES[op](torch.Generator().manual_seed(33))
    log[-1][:] = M - 1  # every row merges: a step would write the base first
    base = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(34))
    xs = step_inputs(x, 0, op)
    on_meta = torch.empty_like(log[1], device="meta")
    step = ((lambda: naive(*xs, base, log[0], on_meta, *log[2:])) if impl == "reference"
            else (lambda: kernel(*xs, base, log[0], on_meta, *log[2:], ws)))
    assert_refused(step, ValueError, r"all tensors must be on one device; got \['cpu', 'meta'\]", [base, *log, ws])
