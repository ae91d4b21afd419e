"""Triton kernels for one DeltaLog Kimi Delta Attention (KDA) decode step: a prepare launch and a decode launch.

Math (:mod:`hf_deltalog.kernels.kda.naive`, the executable specification; transformers'
``recurrent_kimi_delta_attention`` for ``T = 1``): per row and value head, ``S = diag(exp(ℓ̄))·base +
Σ_{i<L} diag(exp(ℓ̄ − Λ_i)) K_i U_iᵀ`` with a log-decay per key channel. With ``ℓ̄' = ℓ̄ + g`` and ``a = exp(ℓ̄')``::

    S'ᵀx = baseᵀ(a ⊙ x) + Σ_i ((exp(ℓ̄' − Λ_i) ⊙ K_i)·x) U_i          (x = k̂ or q̂)
    u = β (v − S'ᵀk̂),   o = S'ᵀq̂ + (q̂·k̂) u

then append ``(k̂, u, g_t)`` at slot ``L`` (``L < C``) or merge ``a ⊙ base + Σ_i (exp(ℓ̄' − Λ_i) ⊙ K_i) U_iᵀ + k̂ uᵀ``
into the base (``L = C``). The log keeps each entry's own log-decay ``λ_i``, and ``ℓ̄' − Λ_i = g_t + Σ_{j>i} λ_j`` is
summed from the newest entry backwards (as ``kernels.common.later_decay_sums``), never as a difference of running
sums; every exponent is ≤ 0 for ``g ≤ 0``. On a merge row the prepare kernel writes the decayed keys
``exp(ℓ̄' − Λ_i) ⊙ K_i`` into the decay slots, which the merge makes stale, and the decode kernel's merge reads one
decayed key per entry (formed once per head, not once per value tile).

Organisation (as the GDN kernels, :mod:`hf_deltalog.kernels.gdn.fused_deltalog`):

1. ``_deltalog_kda_prepare_kernel``, grid ``B · Hk``: normalises q and k once (``x / sqrt(Σx² + 1e-6)``, FLA's and
   transformers' KDA form), and for each of its ``G`` value heads forms ``a ⊙ q̂``, ``a ⊙ k̂``, ``ℓ̄'`` and the
   replay coefficients ``(exp(ℓ̄' − Λ_i) ⊙ K_i)·k̂`` and ``·q̂`` (the per-key rescaling of every deferred key happens
   here, once per value head, not once per value tile); advances ``log_decay`` and appends ``k̂`` / ``g_t``. It
   walks the log one ``[K]`` slot at a time, newest first, accumulating ``Σ_{j>i} λ_j`` as it goes.
2. ``_deltalog_kda_decode_kernel``, grid ``B · HV · NV`` (value tile fastest): reads the base tile once, replays the
   live ``U_i`` with the prepared coefficients, writes ``o``, then appends ``u`` or writes the merged tile; the program
   of value head 0 and tile 0 writes the row's new ``length``.

Within each launch every buffer element is written by one program and read by no other; program ids are int64
before any offset is formed; all products are fp32 elementwise products with ``tl.sum`` (never TF32); stale log
slots never reach an output (the decode kernel does not load them; the prepare kernel, which issues its loads before
the phase is known, adds no decay from them and zeroes their coefficients with ``tl.where``). The base keeps transformers' ``[B, HV, K, V]`` layout, or ``[B, HV, V, K]`` with
``state_v_first``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from hf_deltalog.kernels._op import (
    check_kernel_device, check_launch_options, check_launcher_arguments, check_tile_elements, launch_device,
    register_decode_op,
)
from hf_deltalog.kernels.common import (
    check_dims, check_disjoint, check_flags, check_log_ranks, check_one_device, check_scale, check_workspace_sizes,
)

__all__ = ["OP_NAME", "deltalog_kda_workspace", "fused_deltalog_kda_decode", "kda_workspace_size"]

OP_NAME = "hf_deltalog::fused_deltalog_kda_decode"

# The prepare kernel unrolls its walk over the log up to this many slots (every benchmarked M: 2 to 16) and loops
# beyond: unrolled, the compile time grows with C² (4.7 s at M = 32, 19 s at 64, 98 s at 128, over 400 s at 256 on an
# H200), although M ≤ MAX_MERGE_INTERVAL = 1024 is accepted
MAX_UNROLLED_SLOTS = 16

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _deltalog_kda_prepare_kernel(
    q_ptr, k_ptr, g_ptr, log_decay_ptr, k_log_ptr, decay_log_ptr, length_ptr, ws_ptr, scale,
    stride_qb, stride_qh, stride_kb, stride_kh, stride_gb, stride_gh,
    HK: tl.constexpr, HV: tl.constexpr, G: tl.constexpr, K: tl.constexpr, C: tl.constexpr, BK: tl.constexpr,
    BC: tl.constexpr, WS: tl.constexpr, USE_QK_L2NORM: tl.constexpr, UNROLL: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    i_hk = pid % HK
    i_b = pid // HK
    ws = ws_ptr + i_b * WS
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    b_q = tl.load(q_ptr + i_b * stride_qb + i_hk * stride_qh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + i_b * stride_kb + i_hk * stride_kh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    # A length above C merges and a negative one appends nothing, as in the reference; it is clamped before the
    # int32 cast, so that an int64 length of 2**32 (or an int32 one of 2**31 - 1) still merges
    L = tl.maximum(tl.minimum(tl.load(length_ptr + i_b), C + 1), -2147483648).to(tl.int32)
    p_kl = k_log_ptr + (i_b * HK + i_hk) * (C * K) + offs_k
    if USE_QK_L2NORM:
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
    b_q = b_q * scale
    qk = tl.sum(b_q * b_k, axis=0)
    is_merge = L >= C

    for j in range(G):
        i_hv = i_hk * G + j
        i_bh = i_b * HV + i_hv
        g_t = tl.load(g_ptr + i_b * stride_gb + i_hv * stride_gh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        ell = tl.load(log_decay_ptr + i_bh * K + offs_k, mask=mask_k, other=0.0)
        p_dl = decay_log_ptr + i_bh * (C * K) + offs_k
        if (C > 0) & UNROLL:
            # The log is walked from the newest slot back, one [K] key and log-decay per slot (no [C, K] tiles: 64
            # registers at C = 7, one wave of programs at B = 128; eval/results/h200/NOTES.md, round 36), each slot's
            # loads issued one slot ahead of its products. Stale slots (i ≥ L) add no decay and get a zero
            # coefficient (tl.where after the reduction), so whatever they hold cannot reach an output.
            k_n = tl.load(p_kl + (C - 1) * K, mask=mask_k, other=0.0)
            lam_n = tl.load(p_dl + (C - 1) * K, mask=mask_k, other=0.0)
        g_t = tl.maximum(g_t, -104.0, propagate_nan=tl.PropagateNan.ALL)  # common.LOG_DECAY_FLOOR; NaN stays NaN
        ell = ell + g_t
        a = tl.exp(ell)
        p_ws = ws + HK * K + i_hv * (3 * K + 1 + 2 * C)
        tl.store(p_ws + offs_k, a * b_k, mask=mask_k)
        tl.store(p_ws + K + offs_k, a * b_q, mask=mask_k)
        tl.store(p_ws + 2 * K + offs_k, ell, mask=mask_k)  # ℓ̄', for the merge
        tl.store(p_ws + 3 * K, qk)
        if (C > 0) & (not UNROLL):
            # Long logs: the same walk in a loop the compiler does not unroll (unrolled, the compile time grows with
            # C²: 98 s at M = 128 and over 400 s at M = 256 on an H200), each slot's coefficients stored as found
            later = g_t
            for n in range(C):
                i = C - 1 - n
                k_i = tl.load(p_kl + i * K, mask=mask_k, other=0.0)
                lam_i = tl.load(p_dl + i * K, mask=mask_k, other=0.0)
                dk_i = tl.exp(later) * k_i
                tl.store(p_ws + 3 * K + 1 + i, tl.where(i < L, tl.sum(dk_i * b_k, axis=0), 0.0))
                tl.store(p_ws + 3 * K + 1 + C + i, tl.where(i < L, tl.sum(dk_i * b_q, axis=0), 0.0))
                if L >= C:  # merge row: slot i takes the merge's decayed key, as in the unrolled walk
                    tl.store(p_dl + i * K, dk_i, mask=mask_k)
                later += tl.where(i < L, lam_i, 0.0)
        if (C > 0) & UNROLL:
            offs_c = tl.arange(0, BC)
            ck = tl.zeros([BC], dtype=tl.float32)
            cq = tl.zeros([BC], dtype=tl.float32)
            later = g_t  # ℓ̄' − Λ_i = g_t + Σ_{j>i, j<L} λ_j, summed from the newest back
            for n in tl.static_range(C):
                i = C - 1 - n
                k_i = k_n
                lam_i = lam_n
                if i > 0:
                    k_n = tl.load(p_kl + (i - 1) * K, mask=mask_k, other=0.0)
                    lam_n = tl.load(p_dl + (i - 1) * K, mask=mask_k, other=0.0)
                dk_i = tl.exp(later) * k_i  # exp(ℓ̄' − Λ_i) ⊙ K_i
                ck = tl.where(offs_c == i, tl.where(i < L, tl.sum(dk_i * b_k, axis=0), 0.0), ck)
                cq = tl.where(offs_c == i, tl.where(i < L, tl.sum(dk_i * b_q, axis=0), 0.0), cq)
                if L >= C:
                    # Merge row: every slot is live and stale once the merge resets the length, so slot i takes the
                    # merge's decayed key (its λ_i is already loaded), formed here once per head: the decode
                    # kernel's programs read it back instead of each exponentiating and re-reading the key
                    tl.store(p_dl + i * K, dk_i, mask=mask_k)
                if i > 0:
                    later += tl.where(i < L, lam_i, 0.0)
            tl.store(p_ws + 3 * K + 1 + offs_c, ck, mask=offs_c < C)
            tl.store(p_ws + 3 * K + 1 + C + offs_c, cq, mask=offs_c < C)
        if C > 0:
            if (L >= 0) & (L < C):  # a length outside [0, C] writes nothing
                tl.store(decay_log_ptr + i_bh * (C * K) + L * K + offs_k, g_t, mask=mask_k)  # own log-decay
        tl.store(log_decay_ptr + i_bh * K + offs_k, tl.where(is_merge, 0.0, ell), mask=mask_k)

    tl.store(ws + i_hk * K + offs_k, b_k, mask=mask_k)  # k̂, for the merge's k̂ uᵀ
    if i_hk == 0:
        # the phase, as int32 bits (exact for any length), for the decode kernel (which must not read `length`)
        tl.store(ws + WS - 1, L.to(tl.float32, bitcast=True))
    if C > 0:
        if (L >= 0) & (L < C):  # a length outside [0, C] writes nothing
            tl.store(k_log_ptr + (i_b * HK + i_hk) * (C * K) + L * K + offs_k, b_k, mask=mask_k)


@triton.jit
def _deltalog_kda_decode_kernel(
    v_ptr, beta_ptr, o_ptr, base_ptr, u_log_ptr, decay_log_ptr, length_ptr, ws_ptr,
    stride_vb, stride_vh, stride_betab, stride_betah,
    HK: tl.constexpr, HV: tl.constexpr, G: tl.constexpr, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, BC: tl.constexpr, NV: tl.constexpr, WS: tl.constexpr,
    STATE_V_FIRST: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    i_v = pid % NV
    i_bh = pid // NV
    i_hv = i_bh % HV
    i_b = i_bh // HV
    i_hk = i_hv // G
    ws = ws_ptr + i_b * WS
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_v = offs_v < V

    L = tl.load(ws + WS - 1).to(tl.int32, bitcast=True)
    is_merge = L >= C
    p_ws = ws + HK * K + i_hv * (3 * K + 1 + 2 * C)
    b_ak = tl.load(p_ws + offs_k, mask=mask_k, other=0.0)
    b_aq = tl.load(p_ws + K + offs_k, mask=mask_k, other=0.0)
    qk = tl.load(p_ws + 3 * K)

    if STATE_V_FIRST:
        p_h = base_ptr + i_bh * (K * V) + offs_v[:, None] * K + offs_k[None, :]  # [BV, BK]
        mask_h = mask_v[:, None] & mask_k[None, :]
        b_h = tl.load(p_h, mask=mask_h, other=0.0)
        s_k = tl.sum(b_h * b_ak[None, :], axis=1)
        s_q = tl.sum(b_h * b_aq[None, :], axis=1)
    else:
        p_h = base_ptr + i_bh * (K * V) + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
        mask_h = mask_k[:, None] & mask_v[None, :]
        b_h = tl.load(p_h, mask=mask_h, other=0.0)
        s_k = tl.sum(b_h * b_ak[:, None], axis=0)
        s_q = tl.sum(b_h * b_aq[:, None], axis=0)
    if C > 0:
        offs_c = tl.arange(0, BC)
        live = (offs_c < L) & (offs_c < C)
        ck = tl.load(p_ws + 3 * K + 1 + offs_c, mask=live, other=0.0)
        cq = tl.load(p_ws + 3 * K + 1 + C + offs_c, mask=live, other=0.0)
        b_u = tl.load(u_log_ptr + i_bh * (C * V) + offs_c[:, None] * V + offs_v[None, :],
                      mask=live[:, None] & mask_v[None, :], other=0.0)  # [BC, BV], live entries only
        s_k += tl.sum(ck[:, None] * b_u, axis=0)
        s_q += tl.sum(cq[:, None] * b_u, axis=0)

    b_v = tl.load(v_ptr + i_b * stride_vb + i_hv * stride_vh + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    b_beta = tl.load(beta_ptr + i_b * stride_betab + i_hv * stride_betah).to(tl.float32)
    b_u_new = b_beta * (b_v - s_k)
    tl.store(o_ptr + i_bh * V + offs_v, (s_q + qk * b_u_new).to(o_ptr.dtype.element_ty), mask=mask_v)

    if is_merge:
        ell = tl.load(p_ws + 2 * K + offs_k, mask=mask_k, other=0.0)
        b_k = tl.load(ws + i_hk * K + offs_k, mask=mask_k, other=0.0)
        if STATE_V_FIRST:
            b_s = b_h * tl.exp(ell)[None, :] + b_u_new[:, None] * b_k[None, :]
        else:
            b_s = b_h * tl.exp(ell)[:, None] + b_k[:, None] * b_u_new[None, :]
        for i in range(C):  # merge rows have every slot live (L ≥ C)
            # slot i holds exp(ℓ̄' − Λ_i) ⊙ K_i on a merge row (written by the prepare kernel)
            k_i = tl.load(decay_log_ptr + i_bh * (C * K) + i * K + offs_k, mask=mask_k, other=0.0)
            u_i = tl.load(u_log_ptr + i_bh * (C * V) + i * V + offs_v, mask=mask_v, other=0.0)
            if STATE_V_FIRST:
                b_s += u_i[:, None] * k_i[None, :]
            else:
                b_s += k_i[:, None] * u_i[None, :]
        tl.store(p_h, b_s, mask=mask_h)
    else:
        if C > 0:
            if L >= 0:  # a length outside [0, C] writes nothing
                tl.store(u_log_ptr + i_bh * (C * V) + L * V + offs_v, b_u_new, mask=mask_v)
    if (i_hv == 0) & (i_v == 0):
        tl.store(length_ptr + i_b, tl.where(is_merge, 0, L + 1).to(length_ptr.dtype.element_ty))


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def kda_workspace_size(Hk: int, HV: int, K: int, C: int) -> int:
    """fp32 elements of one row's workspace: k̂ per key head, ``(a⊙k̂, a⊙q̂, ℓ̄', q̂·k̂, 2C coefficients)`` per value
    head, and the phase."""
    return Hk * K + HV * (3 * K + 1 + 2 * C) + 1


def deltalog_kda_workspace(B: int, Hk: int, HV: int, K: int, C: int, device: torch.device | str) -> torch.Tensor:
    """Scratch buffer of :func:`fused_deltalog_kda_decode`: fp32 ``[B, Hk·K + HV·(3K + 1 + 2C) + 1]``; its content
    between calls does not matter. Raises TypeError / ValueError on sizes that are not ints or are
    negative."""
    check_workspace_sizes(B=B, Hk=Hk, HV=HV, K=K, C=C)
    return torch.zeros(B, kda_workspace_size(Hk, HV, K, C), dtype=torch.float32, device=device)


def _validate(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, state_v_first,
              block_v=8, num_warps=1, prepare_warps=None):
    named = dict(q=q, k=k, v=v, g=g, beta=beta, base=base, log_decay=log_decay, k_log=k_log, u_log=u_log,
                 decay_log=decay_log, length=length, workspace=workspace)
    # (every argument is a tensor here: the launcher checked, and the op's schema admits nothing else)
    if q.dim() != 4 or k.shape != q.shape or q.shape[1] != 1:
        raise ValueError(f"q and k must both be [B, 1, Hk, K]; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    B, _, Hk, K = q.shape
    if Hk == 0 or v.dim() != 4 or v.shape[:2] != (B, 1) or v.shape[2] % Hk:
        raise ValueError(f"v must be [B, 1, HV, V] with B = {B} and HV a multiple of Hk = {Hk}; got {tuple(v.shape)}")
    HV, V = v.shape[2], v.shape[3]
    check_dims(Hk=Hk, HV=HV, K=K, V=V)
    check_log_ranks(k_log, u_log, "u_log")
    C = k_log.shape[2]
    expect_base = (B, HV, V, K) if state_v_first else (B, HV, K, V)
    for name, t, shape in (("g", g, (B, 1, HV, K)), ("beta", beta, (B, 1, HV)), ("base", base, expect_base),
                           ("log_decay", log_decay, (B, HV, K)), ("k_log", k_log, (B, Hk, C, K)),
                           ("u_log", u_log, (B, HV, C, V)), ("decay_log", decay_log, (B, HV, C, K)),
                           ("length", length, (B,)), ("workspace", workspace, (B, kda_workspace_size(Hk, HV, K, C)))):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}; got {tuple(t.shape)}")
    for name in ("q", "k", "v"):
        if named[name].dtype not in _ACT_DTYPES:
            raise TypeError(f"{name} must be bfloat16, float16 or float32; got {named[name].dtype}")
    if k.dtype != q.dtype:
        raise TypeError(f"q and k must have the same dtype; got q {q.dtype} and k {k.dtype}")
    for name in ("g", "beta"):
        if not named[name].is_floating_point():
            raise TypeError(f"{name} must be a floating dtype; got {named[name].dtype}")
    for name in ("base", "log_decay", "k_log", "u_log", "decay_log", "workspace"):
        if named[name].dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {named[name].dtype}")
    if length.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"length must be int32 or int64; got {length.dtype}")
    check_one_device(named)
    check_kernel_device(q.device)
    for name in ("base", "log_decay", "k_log", "u_log", "decay_log", "length", "workspace"):
        if not named[name].is_contiguous():
            raise ValueError(f"{name} must be contiguous (it is updated in place); got strides "
                             f"{named[name].stride()} for shape {tuple(named[name].shape)}")
    for name in ("q", "k", "v", "g"):
        if named[name].stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride on its last dim; got strides {named[name].stride()}")
    check_launch_options(block_v, num_warps)
    check_launch_options(None, prepare_warps, "prepare_warps")


def _validate_op_args(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale,
                      use_qk_l2norm, state_v_first, block_v, num_warps, prepare_warps):
    """:func:`_validate` on the custom op's arguments (``prepare_warps`` 0 keeps the default)."""
    _validate(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, state_v_first, block_v,
              num_warps, prepare_warps or None)


def _launch(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale, use_qk_l2norm,
            state_v_first, block_v, num_warps, prepare_warps, wrap):
    # Every check here, in the body: the registered op can be called directly (torch.ops.hf_deltalog...), and its
    # opaque form runs this body with real tensors inside a compiled graph too (check_disjoint skips traced and fake
    # tensors). Nothing is written before all of them pass.
    _validate_op_args(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale,
                      use_qk_l2norm, state_v_first, block_v, num_warps, prepare_warps)
    check_disjoint(dict(q=q, k=k, v=v, g=g, beta=beta, base=base,
                        log_decay=log_decay, k_log=k_log, u_log=u_log, decay_log=decay_log, length=length,
                        workspace=workspace),
                   ("base", "log_decay", "k_log", "u_log", "decay_log", "length", "workspace"))
    B, _, Hk, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    C = k_log.shape[2]
    scale = float(K**-0.5 if scale is None else scale)
    BK, BC, BV = _next_pow2(K), _next_pow2(max(C, 1)), min(block_v, _next_pow2(V))
    # the decode launch runs after the prepare launch has written the log: its tiles are checked before either
    check_tile_elements("decode", base_tile=BV * BK, log_tile=BC * BV)
    o = torch.empty((B, 1, HV, V), dtype=q.dtype, device=q.device)
    if B == 0:
        return o
    NV = triton.cdiv(V, BV)
    WS = kda_workspace_size(Hk, HV, K, C)
    kl, ul, dl = (k_log, u_log, decay_log) if C > 0 else (base, base, base)
    with launch_device(q):  # Triton launches on the current device: make it q's (a model on several GPUs)
        wrap(_deltalog_kda_prepare_kernel)[(B * Hk,)](
            q, k, g, log_decay, kl, dl, length, workspace, scale,
            q.stride(0), q.stride(2), k.stride(0), k.stride(2), g.stride(0), g.stride(2),
            HK=Hk, HV=HV, G=HV // Hk, K=K, C=C, BK=BK, BC=BC, WS=WS, USE_QK_L2NORM=use_qk_l2norm,
            UNROLL=C <= MAX_UNROLLED_SLOTS, num_warps=prepare_warps or 1,
        )
        wrap(_deltalog_kda_decode_kernel)[(B * HV * NV,)](
            v, beta, o, base, ul, dl, length, workspace,
            v.stride(0), v.stride(2), beta.stride(0), beta.stride(2),
            HK=Hk, HV=HV, G=HV // Hk, K=K, V=V, C=C, BK=BK, BV=BV, BC=BC, NV=NV, WS=WS,
            STATE_V_FIRST=state_v_first, num_warps=num_warps,
        )
    return o


def _op_body(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, base: torch.Tensor,
    log_decay: torch.Tensor, k_log: torch.Tensor, u_log: torch.Tensor, decay_log: torch.Tensor, length: torch.Tensor,
    workspace: torch.Tensor, scale: float | None, use_qk_l2norm_in_kernel: bool, state_v_first: bool, block_v: int,
    num_warps: int, prepare_warps: int,
) -> torch.Tensor:
    return _launch(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale,
                   use_qk_l2norm_in_kernel, state_v_first, block_v, num_warps, prepare_warps, wrap_triton)


def _op_fake(q, k, v, *rest):
    _validate_op_args(q, k, v, *rest)  # while torch.compile traces the opaque op: the launcher's errors, at once
    return q.new_empty((q.shape[0], 1, v.shape[2], v.shape[3]))


_op = register_decode_op(
    OP_NAME, _op_body, ("base", "log_decay", "k_log", "u_log", "decay_log", "length", "workspace"), _op_fake)


def fused_deltalog_kda_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    base: torch.Tensor,
    log_decay: torch.Tensor,
    k_log: torch.Tensor,
    u_log: torch.Tensor,
    decay_log: torch.Tensor,
    length: torch.Tensor,
    workspace: torch.Tensor,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = True,
    state_v_first: bool = False,
    *,
    block_v: int | None = 8,
    num_warps: int | None = 1,
    prepare_warps: int | None = None,
    use_custom_op: bool = True,
) -> torch.Tensor:
    """One DeltaLog KDA decode step for every row (two launches, no host sync; buffers updated in place).

    Same semantics as :func:`hf_deltalog.kernels.kda.naive.naive_deltalog_kda_decode`.

    Args:
        q, k: ``[B, 1, Hk, K]`` bf16/fp16/fp32; v: ``[B, 1, HV, V]``; g: ``[B, 1, HV, K]`` log-decay per key channel
            (any float dtype); beta: ``[B, 1, HV]``.
        base: fp32 ``[B, HV, K, V]`` (``[B, HV, V, K]`` with ``state_v_first``); log_decay: fp32 ``[B, HV, K]``;
        k_log: fp32 ``[B, Hk, C, K]``; u_log: fp32 ``[B, HV, C, V]``; decay_log: fp32 ``[B, HV, C, K]``;
        length: int32/int64 ``[B]``; workspace: :func:`deltalog_kda_workspace`. All mutated in place. Only the live
        slots (``i < length``) of the logs are state: after a merge row the stale decay slots hold that merge's
        decayed keys ``exp(ℓ̄' − Λ_i) ⊙ K_i`` (the kernels' scratch), not the entries' log-decays.
        scale: default ``K ** -0.5``. block_v / num_warps: the decode kernel's value tile and warps (None: 8 and 1).
        prepare_warps: warps per prepare program (one per row and key head); None: 1 (the program holds ``[K]``
            vectors only, 64 registers at C = 7 and 72 at C = 31 in an sm_90 compile, so more warps only split its
            reductions; timed on the H200 at M = 4 and 8).
        use_custom_op: dispatch through ``torch.ops.hf_deltalog.fused_deltalog_kda_decode`` (declares its mutations,
            so ``torch.compile`` traces it without a graph break); False launches the kernels directly.

    Returns:
        ``o`` ``[B, 1, HV, V]`` in ``q.dtype``.

    Raises:
        TypeError: a non-tensor argument, a wrong dtype (q/k/v bf16/fp16/fp32, g/beta floating, state buffers and
            ``workspace`` fp32, ``length`` int32/int64), or a launch option (``block_v``, ``num_warps``,
            ``prepare_warps``) that is neither None nor an int, or a flag (``use_qk_l2norm_in_kernel``,
            ``state_v_first``, ``use_custom_op``) that is not a bool, or a ``scale`` that is not None or a real number.
        ValueError: wrong shapes, devices (CPU only under ``TRITON_INTERPRET=1``) or layouts, a zero head size or
            head count, a buffer the step writes sharing memory with another argument, or a launch option's bad value
            (``block_v`` not a power of two, warps not in 1, 2, 4, 8, 16). Messages say what is accepted.
            The shared-memory check runs on every eager call; under ``torch.compile`` only through the opaque custom
            op (:func:`hf_deltalog.kernels.common.check_disjoint`). Also a decode tile over Triton's 2**20 elements
            (``block_v × next_pow2(K)`` or ``next_pow2(C) × block_v``), or ``TRITON_INTERPRET=1`` set only after this
            module was imported.

    Every check runs before anything is written, also when ``torch.ops.hf_deltalog.fused_deltalog_kda_decode`` is
    called directly (``prepare_warps`` 0 keeps the default there). Inference only: the op has no autograd formula.
    """
    check_flags(use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first,
                use_custom_op=use_custom_op)
    # the values, shapes and devices: in _launch
    check_launcher_arguments(dict(q=q, k=k, v=v, g=g, beta=beta, base=base, log_decay=log_decay, k_log=k_log,
                                  u_log=u_log, decay_log=decay_log, length=length, workspace=workspace),
                             block_v, num_warps, prepare_warps)
    check_scale(scale)
    args = (q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace,
            None if scale is None else float(scale), bool(use_qk_l2norm_in_kernel), bool(state_v_first),
            int(8 if block_v is None else block_v), int(1 if num_warps is None else num_warps), int(prepare_warps or 0))
    if use_custom_op:
        return torch.ops.hf_deltalog.fused_deltalog_kda_decode(*args)
    return _launch(*args, lambda kernel: kernel)
