"""Triton kernels for one DeltaLog RWKV6 decode step: a prepare launch and a decode launch (no host sync).

Math (:mod:`hf_deltalog.kernels.rwkv6.naive`, the executable specification; FLA's ``fused_recurrent_rwkv6`` for one
token): the output reads the state *before* this step, ``S_{t-1} = diag(exp(ℓ̄))·base + Σ_{i<L} diag(exp(ℓ̄ − Λ_i))
k_i v_iᵀ``, plus the bonus::

    o = baseᵀ(exp(ℓ̄) ⊙ r̃) + Σ_i ((exp(ℓ̄ − Λ_i) ⊙ k_i)·r̃) v_i + (r̃·(u ⊙ k)) v          (r̃ = scale·r)

then ``ℓ̄' = ℓ̄ + w`` and the row appends ``(k, v, w)`` (``L < C``) or merges ``exp(ℓ̄') ⊙ base + Σ_i (exp(ℓ̄' − Λ_i)
⊙ k_i) v_iᵀ + k vᵀ`` into the base (``L = C``). No delta-rule correction: nothing depends on the state but ``o``. The
log keeps each entry's own log-decay ``λ_i``; ``ℓ̄ − Λ_i = Σ_{j>i} λ_j`` is summed from the newest entry backwards (as
``kernels.common.later_decay_sums``), never as a difference of running sums. On a merge row the prepare kernel writes
the merge's decayed keys ``exp(ℓ̄' − Λ_i) ⊙ k_i`` into the decay slots, which the merge makes stale, and the decode
kernel's merge reads one decayed key per entry (formed once per head, not once per value tile).

1. ``_deltalog_rwkv6_prepare_kernel``, grid ``B · H``: forms ``exp(ℓ̄) ⊙ r̃``, the replay coefficients and the bonus
   once per head, advances ``log_decay``, appends ``k``, ``v`` and ``w`` (append rows), and writes the workspace.
2. ``_deltalog_rwkv6_decode_kernel``, grid ``B · H · NV``: one base tile per program, replays the live ``v_i``
   columns, writes ``o``; on merge rows writes the merged tile (a loop over the entries whose loads run one entry
   ahead). Head 0, tile 0 writes the row's new ``length``. With a log (``C > 0``), one warp and a tile of at most
   1,024 elements it is launched under a 64-register cap (:func:`hf_deltalog.kernels._op.decode_register_cap`).

Same contract as the GDN and KDA kernels: within a launch every element is written by one program and read by no
other; int64 offsets; fp32 elementwise products with ``tl.sum`` (never TF32); stale slots never reach an output. Log
factors may be stored in the activation dtype (they are the model's own inputs); state and decays are fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from hf_deltalog.kernels._op import (
    check_kernel_device, check_launch_options, check_launcher_arguments, check_tile_elements, decode_register_cap,
    default_prepare_warps, launch_device, register_decode_op,
)
from hf_deltalog.kernels.common import (
    check_dims, check_disjoint, check_flags, check_log_ranks, check_one_device, check_scale, check_workspace_sizes,
)
from hf_deltalog.kernels.rwkv6.naive import check_log_dtypes

__all__ = ["OP_NAME", "deltalog_rwkv6_workspace", "fused_deltalog_rwkv6_decode", "rwkv6_workspace_size"]

OP_NAME = "hf_deltalog::fused_deltalog_rwkv6_decode"

# The prepare kernel holds the log as [BC, BK] tiles (BC, BK: C and K rounded up to powers of two) up to this many
# elements (64 KiB of fp32; K = 128 up to M = 129, every benchmarked M), and walks it one slot at a time beyond: with
# Triton 3.6 the tiles' reverse cumsum took BC·BK·4 bytes of shared memory and failed to compile at K = 128, M = 258
# on an H200 (256 KiB needed, 227 KiB available; a Triton 3.9 compile for sm_90 needs 512 B), although
# M ≤ MAX_MERGE_INTERVAL = 1024 is accepted
MAX_LOG_TILE = 16384


@triton.jit
def _deltalog_rwkv6_prepare_kernel(
    r_ptr, k_ptr, v_ptr, w_ptr, u_ptr, log_decay_ptr, k_log_ptr, v_log_ptr, decay_log_ptr, length_ptr, ws_ptr, scale,
    stride_rb, stride_rh, stride_kb, stride_kh, stride_vb, stride_vh, stride_wb, stride_wh,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr,
    BC: tl.constexpr, WS: tl.constexpr, SLOT_LOOP: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    i_h = pid % H
    i_b = pid // H
    i_bh = i_b * H + i_h
    ws = ws_ptr + i_b * WS + i_h * (3 * K + 1 + C)
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    b_r = tl.load(r_ptr + i_b * stride_rb + i_h * stride_rh + offs_k, mask=mask_k, other=0.0).to(tl.float32) * scale
    b_k = tl.load(k_ptr + i_b * stride_kb + i_h * stride_kh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    b_w = tl.load(w_ptr + i_b * stride_wb + i_h * stride_wh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    b_w = tl.maximum(b_w, -104.0, propagate_nan=tl.PropagateNan.ALL)  # common.LOG_DECAY_FLOOR; NaN stays NaN
    b_u = tl.load(u_ptr + i_h * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    ell = tl.load(log_decay_ptr + i_bh * K + offs_k, mask=mask_k, other=0.0)  # ℓ̄ before this step
    # A length above C merges and a negative one appends nothing, as in the reference; it is clamped before the
    # int32 cast, so that an int64 length of 2**32 (or an int32 one of 2**31 - 1) still merges
    L = tl.maximum(tl.minimum(tl.load(length_ptr + i_b), C + 1), -2147483648).to(tl.int32)
    # Every load before the first store, none waiting for L (the program is latency-bound): all C slots are read and
    # the stale ones (i ≥ L) zeroed by tl.where before any product, so whatever they hold cannot reach an output.
    if (C > 0) & (not SLOT_LOOP):
        offs_c = tl.arange(0, BC)
        mask_c = offs_c < C
        b_kl = tl.load(k_log_ptr + i_bh * (C * K) + offs_c[:, None] * K + offs_k[None, :],
                       mask=mask_c[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
        p_next = decay_log_ptr + i_bh * (C * K) + (offs_c[:, None] + 1) * K + offs_k[None, :]
        lam_next = tl.load(p_next, mask=(offs_c[:, None] + 1 < C) & mask_k[None, :], other=0.0)  # λ_{i+1}
    if C > 0:
        offs_vf = tl.arange(0, BVF)
        mask_vf = offs_vf < V
        b_v = tl.load(v_ptr + i_b * stride_vb + i_h * stride_vh + offs_vf, mask=mask_vf, other=0.0)
    is_merge = L >= C

    tl.store(ws + offs_k, tl.exp(ell) * b_r, mask=mask_k)
    tl.store(ws + K + offs_k, ell + b_w, mask=mask_k)  # ℓ̄', for the merge
    tl.store(ws + 2 * K + offs_k, b_k, mask=mask_k)  # k, for the merge's k vᵀ
    tl.store(ws + 3 * K, tl.sum(b_r * b_u * b_k, axis=0))  # the bonus r̃·(u ⊙ k)
    if i_h == 0:
        # the phase, as int32 bits (exact for any length), for the decode kernel
        tl.store(ws_ptr + i_b * WS + WS - 1, L.to(tl.float32, bitcast=True))
    if (C > 0) & SLOT_LOOP:
        # Long logs: one [K] key and log-decay per slot, newest first, in a loop the compiler does not unroll (with
        # Triton 3.6 the [BC, BK] tiles below took BC·BK·4 bytes of shared memory for their cumsum: 256 KiB at
        # K = 128, M = 258, over an H200's 227 KiB). The same sums as the tiles' reverse cumsum, added newest first.
        later = tl.zeros([BK], dtype=tl.float32)  # Σ_{j>i, j<L} λ_j
        for n in range(C):
            i = C - 1 - n
            p_i = i_bh * (C * K) + i * K + offs_k
            k_i = tl.load(k_log_ptr + p_i, mask=mask_k, other=0.0).to(tl.float32)
            lam_i = tl.load(decay_log_ptr + p_i, mask=mask_k, other=0.0)
            live_i = i < L
            dk_i = tl.where(mask_k & live_i, tl.exp(later) * k_i, 0.0)
            tl.store(ws + 3 * K + 1 + i, tl.sum(dk_i * b_r, axis=0))
            if L >= C:  # merge row: slot i takes the merge's decayed key, as the tiles' store below
                tl.store(decay_log_ptr + p_i, tl.exp(later + b_w) * k_i, mask=mask_k)
            later += tl.where(mask_k & live_i, lam_i, 0.0)
        if (L >= 0) & (L < C):  # a length outside [0, C] writes nothing
            tl.store(k_log_ptr + i_bh * (C * K) + L * K + offs_k, b_k.to(k_log_ptr.dtype.element_ty), mask=mask_k)
            tl.store(v_log_ptr + i_bh * (C * V) + L * V + offs_vf, b_v.to(v_log_ptr.dtype.element_ty), mask=mask_vf)
            tl.store(decay_log_ptr + i_bh * (C * K) + L * K + offs_k, b_w, mask=mask_k)  # the own log-decay
    if (C > 0) & (not SLOT_LOOP):
        live = (offs_c < L) & mask_c
        mask_ck = live[:, None] & mask_k[None, :]
        # ℓ̄ − Λ_i = Σ_{j>i} λ_j (kernels.common.later_decay_sums): the entries' own log-decays, one slot shifted,
        # summed from the newest backwards
        lam_next = tl.where(mask_ck & (offs_c[:, None] + 1 < L), lam_next, 0.0)
        later = tl.cumsum(lam_next, axis=0, reverse=True)
        coef = tl.sum(tl.where(mask_ck, tl.exp(later) * b_kl, 0.0) * b_r[None, :], axis=1)
        tl.store(ws + 3 * K + 1 + offs_c, coef, mask=mask_c)
        if (L >= 0) & (L < C):  # a length outside [0, C] writes nothing
            tl.store(k_log_ptr + i_bh * (C * K) + L * K + offs_k, b_k.to(k_log_ptr.dtype.element_ty), mask=mask_k)
            tl.store(v_log_ptr + i_bh * (C * V) + L * V + offs_vf, b_v.to(v_log_ptr.dtype.element_ty), mask=mask_vf)
            tl.store(decay_log_ptr + i_bh * (C * K) + L * K + offs_k, b_w, mask=mask_k)  # the own log-decay
        if L >= C:
            # Merge row: every slot is live and stale once the merge resets the length, so the slots take the
            # merge's decayed keys exp(ℓ̄' − Λ_i) ⊙ k_i with ℓ̄' − Λ_i = w_t + Σ_{j>i} λ_j, formed here once per head
            # (the decode kernel's programs read them back instead of each exponentiating and re-reading the keys)
            tl.store(decay_log_ptr + i_bh * (C * K) + offs_c[:, None] * K + offs_k[None, :],
                     tl.exp(later + b_w[None, :]) * b_kl, mask=mask_c[:, None] & mask_k[None, :])
    tl.store(log_decay_ptr + i_bh * K + offs_k, tl.where(is_merge, 0.0, ell + b_w), mask=mask_k)


@triton.jit
def _deltalog_rwkv6_decode_kernel(
    v_ptr, o_ptr, base_ptr, v_log_ptr, decay_log_ptr, length_ptr, ws_ptr, stride_vb, stride_vh,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BC: tl.constexpr, NV: tl.constexpr, WS: tl.constexpr, STATE_V_FIRST: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    i_v = pid % NV
    i_bh = pid // NV
    i_h = i_bh % H
    i_b = i_bh // H
    ws = ws_ptr + i_b * WS + i_h * (3 * K + 1 + C)
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_v = offs_v < V

    L = tl.load(ws_ptr + i_b * WS + WS - 1).to(tl.int32, bitcast=True)
    is_merge = L >= C
    b_ar = tl.load(ws + offs_k, mask=mask_k, other=0.0)
    if STATE_V_FIRST:
        p_h = base_ptr + i_bh * (K * V) + offs_v[:, None] * K + offs_k[None, :]  # [BV, BK]
        mask_h = mask_v[:, None] & mask_k[None, :]
        b_h = tl.load(p_h, mask=mask_h, other=0.0)
        b_o = tl.sum(b_h * b_ar[None, :], axis=1)
    else:
        p_h = base_ptr + i_bh * (K * V) + offs_k[:, None] * V + offs_v[None, :]  # [BK, BV]
        mask_h = mask_k[:, None] & mask_v[None, :]
        b_h = tl.load(p_h, mask=mask_h, other=0.0)
        b_o = tl.sum(b_h * b_ar[:, None], axis=0)
    if C > 0:
        offs_c = tl.arange(0, BC)
        live = (offs_c < L) & (offs_c < C)
        coef = tl.load(ws + 3 * K + 1 + offs_c, mask=live, other=0.0)
        b_vl = tl.load(v_log_ptr + i_bh * (C * V) + offs_c[:, None] * V + offs_v[None, :],
                       mask=live[:, None] & mask_v[None, :], other=0.0).to(tl.float32)
        b_o += tl.sum(coef[:, None] * b_vl, axis=0)
    b_v = tl.load(v_ptr + i_b * stride_vb + i_h * stride_vh + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    b_o += tl.load(ws + 3 * K) * b_v
    tl.store(o_ptr + i_bh * V + offs_v, b_o.to(o_ptr.dtype.element_ty), mask=mask_v)

    if is_merge:
        ell = tl.load(ws + K + offs_k, mask=mask_k, other=0.0)
        b_k = tl.load(ws + 2 * K + offs_k, mask=mask_k, other=0.0)
        if STATE_V_FIRST:
            b_s = b_h * tl.exp(ell)[None, :] + b_v[:, None] * b_k[None, :]
        else:
            b_s = b_h * tl.exp(ell)[:, None] + b_k[:, None] * b_v[None, :]
        # Merge rows have every slot live (L ≥ C). The loads run one entry ahead, so that each entry's round trip
        # overlaps the previous entry's products instead of following them.
        if C > 0:
            # slot i of the decay log holds exp(ℓ̄' − Λ_i) ⊙ k_i on a merge row (written by the prepare kernel)
            p_dl = decay_log_ptr + i_bh * (C * K) + offs_k
            p_vl = v_log_ptr + i_bh * (C * V) + offs_v
            d_n = tl.load(p_dl, mask=mask_k, other=0.0)
            v_n = tl.load(p_vl, mask=mask_v, other=0.0).to(tl.float32)
            for i in range(C):
                k_i = d_n
                v_i = v_n
                j = tl.minimum(i + 1, C - 1)  # the last pass reloads entry C - 1 (in bounds, unused)
                d_n = tl.load(p_dl + j * K, mask=mask_k, other=0.0)
                v_n = tl.load(p_vl + j * V, mask=mask_v, other=0.0).to(tl.float32)
                if STATE_V_FIRST:
                    b_s += v_i[:, None] * k_i[None, :]
                else:
                    b_s += k_i[:, None] * v_i[None, :]
        tl.store(p_h, b_s, mask=mask_h)
    if (i_h == 0) & (i_v == 0):
        tl.store(length_ptr + i_b, tl.where(is_merge, 0, L + 1).to(length_ptr.dtype.element_ty))


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def rwkv6_workspace_size(H: int, K: int, C: int) -> int:
    """fp32 elements of one row's workspace: ``(exp(ℓ̄)⊙r̃, ℓ̄', k, bonus, C coefficients)`` per head, and the
    phase."""
    return H * (3 * K + 1 + C) + 1


def deltalog_rwkv6_workspace(B: int, H: int, K: int, C: int, device: torch.device | str) -> torch.Tensor:
    """Scratch buffer of :func:`fused_deltalog_rwkv6_decode`: fp32 ``[B, H·(3K + 1 + C) + 1]``. Raises TypeError /
    ValueError on sizes that are not ints or are negative."""
    check_workspace_sizes(B=B, H=H, K=K, C=C)
    return torch.zeros(B, rwkv6_workspace_size(H, K, C), dtype=torch.float32, device=device)


def _validate(r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace, state_v_first,
              block_v=8, num_warps=1, prepare_warps=None):
    named = dict(r=r, k=k, v=v, w=w, u=u, base=base, log_decay=log_decay, k_log=k_log, v_log=v_log,
                 decay_log=decay_log, length=length, workspace=workspace)
    # (every argument is a tensor here: the launcher checked, and the op's schema admits nothing else)
    if r.dim() != 4 or r.shape[1] != 1 or k.shape != r.shape or w.shape != r.shape:
        raise ValueError(f"r, k and w must all be [B, 1, H, K]; got r {tuple(r.shape)}, k {tuple(k.shape)}, "
                         f"w {tuple(w.shape)}")
    B, _, H, K = r.shape
    if v.dim() != 4 or v.shape[:3] != (B, 1, H):
        raise ValueError(f"v must be [B, 1, H, V]; got {tuple(v.shape)}")
    V = v.shape[3]
    check_dims(H=H, K=K, V=V)
    check_log_ranks(k_log, v_log, "v_log", "H", "H")
    C = k_log.shape[2]
    expect_base = (B, H, V, K) if state_v_first else (B, H, K, V)
    for name, t, shape in (("u", u, (H, K)), ("base", base, expect_base), ("log_decay", log_decay, (B, H, K)),
                           ("k_log", k_log, (B, H, C, K)), ("v_log", v_log, (B, H, C, V)),
                           ("decay_log", decay_log, (B, H, C, K)), ("length", length, (B,)),
                           ("workspace", workspace, (B, rwkv6_workspace_size(H, K, C)))):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}; got {tuple(t.shape)}")
    for name in ("r", "k", "v", "w", "u", "k_log", "v_log"):
        if named[name].dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise TypeError(f"{name} must be bfloat16, float16 or float32; got {named[name].dtype}")
    for name in ("base", "log_decay", "decay_log", "workspace"):
        if named[name].dtype != torch.float32:
            raise TypeError(f"{name} must be float32; got {named[name].dtype}")
    check_log_dtypes(k, v, k_log, v_log)
    if length.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"length must be int32 or int64; got {length.dtype}")
    check_one_device(named)
    check_kernel_device(r.device)
    for name in ("u", "base", "log_decay", "k_log", "v_log", "decay_log", "length", "workspace"):
        if not named[name].is_contiguous():
            raise ValueError(f"{name} must be contiguous; got strides {named[name].stride()} for shape "
                             f"{tuple(named[name].shape)}")
    for name in ("r", "k", "v", "w"):
        if named[name].stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride on its last dim; got strides {named[name].stride()}")
    check_launch_options(block_v, num_warps)
    check_launch_options(None, prepare_warps, "prepare_warps")


def _validate_op_args(r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace, scale,
                      state_v_first, block_v, num_warps, prepare_warps):
    """:func:`_validate` on the custom op's arguments (``prepare_warps`` 0 keeps the default)."""
    _validate(r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace, state_v_first, block_v,
              num_warps, prepare_warps or None)


def _launch(r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace, scale, state_v_first,
            block_v, num_warps, prepare_warps, wrap):
    # Every check here, in the body: the registered op can be called directly (torch.ops.hf_deltalog...), and its
    # opaque form runs this body with real tensors inside a compiled graph too (check_disjoint skips traced and fake
    # tensors). Nothing is written before all of them pass.
    _validate_op_args(r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace, scale,
                      state_v_first, block_v, num_warps, prepare_warps)
    check_disjoint(dict(r=r, k=k, v=v, w=w, u=u, base=base,
                        log_decay=log_decay, k_log=k_log, v_log=v_log, decay_log=decay_log, length=length,
                        workspace=workspace),
                   ("base", "log_decay", "k_log", "v_log", "decay_log", "length", "workspace"))
    B, _, H, K = r.shape
    V = v.shape[3]
    C = k_log.shape[2]
    scale = float(K**-0.5 if scale is None else scale)
    BK, BC, BV = _next_pow2(K), _next_pow2(max(C, 1)), min(block_v, _next_pow2(V))
    # the decode launch runs after the prepare launch has written the log: its tiles are checked before either
    check_tile_elements("decode", base_tile=BV * BK, log_tile=BC * BV)
    o = torch.empty((B, 1, H, V), dtype=r.dtype, device=r.device)
    if B == 0:
        return o
    NV = triton.cdiv(V, BV)
    WS = rwkv6_workspace_size(H, K, C)
    slot_loop = BC * BK > MAX_LOG_TILE
    kl, vl, dl = (k_log, v_log, decay_log) if C > 0 else (base, base, base)
    with launch_device(r):  # Triton launches on the current device: make it r's (a model on several GPUs)
        wrap(_deltalog_rwkv6_prepare_kernel)[(B * H,)](
            r, k, v, w, u, log_decay, kl, vl, dl, length, workspace, scale,
            r.stride(0), r.stride(2), k.stride(0), k.stride(2), v.stride(0), v.stride(2), w.stride(0), w.stride(2),
            H=H, K=K, V=V, C=C, BK=BK, BVF=_next_pow2(V), BC=BC, WS=WS, SLOT_LOOP=slot_loop,
            num_warps=prepare_warps or default_prepare_warps(BK, 1 if slot_loop else BC),
        )
        wrap(_deltalog_rwkv6_decode_kernel)[(B * H * NV,)](
            v, o, base, vl, dl, length, workspace, v.stride(0), v.stride(2),
            H=H, K=K, V=V, C=C, BK=BK, BV=BV, BC=BC, NV=NV, WS=WS, STATE_V_FIRST=state_v_first, num_warps=num_warps,
            **decode_register_cap(C, num_warps, BK * BV),
        )
    return o


def _op_body(
    r: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, u: torch.Tensor, base: torch.Tensor,
    log_decay: torch.Tensor, k_log: torch.Tensor, v_log: torch.Tensor, decay_log: torch.Tensor, length: torch.Tensor,
    workspace: torch.Tensor, scale: float | None, state_v_first: bool, block_v: int, num_warps: int,
    prepare_warps: int,
) -> torch.Tensor:
    return _launch(r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace, scale, state_v_first,
                   block_v, num_warps, prepare_warps, wrap_triton)


def _op_fake(r, k, v, *rest):
    _validate_op_args(r, k, v, *rest)  # while torch.compile traces the opaque op: the launcher's errors, at once
    return r.new_empty((r.shape[0], 1, r.shape[2], v.shape[3]))


_op = register_decode_op(
    OP_NAME, _op_body, ("base", "log_decay", "k_log", "v_log", "decay_log", "length", "workspace"), _op_fake)


def fused_deltalog_rwkv6_decode(
    r: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    base: torch.Tensor,
    log_decay: torch.Tensor,
    k_log: torch.Tensor,
    v_log: torch.Tensor,
    decay_log: torch.Tensor,
    length: torch.Tensor,
    workspace: torch.Tensor,
    scale: float | None = None,
    state_v_first: bool = False,
    *,
    block_v: int | None = 8,
    num_warps: int | None = 1,
    prepare_warps: int | None = None,
    use_custom_op: bool = True,
) -> torch.Tensor:
    """One DeltaLog RWKV6 decode step for every row (two launches; buffers updated in place).

    Same semantics as :func:`hf_deltalog.kernels.rwkv6.naive.naive_deltalog_rwkv6_decode`.

    Args:
        r, k, w: ``[B, 1, H, K]`` (bf16/fp16/fp32; w a log-decay ≤ 0); v: ``[B, 1, H, V]``; u: ``[H, K]`` bonus.
        base: fp32 ``[B, H, K, V]`` (``[B, H, V, K]`` with ``state_v_first``); log_decay: fp32 ``[B, H, K]``;
        k_log ``[B, H, C, K]`` and v_log ``[B, H, C, V]`` fp32 or the activations' dtype (which stores them losslessly);
        decay_log: fp32 ``[B, H, C, K]``; length: int32/int64 ``[B]``; workspace: :func:`deltalog_rwkv6_workspace`.
        Only the live slots (``i < length``) of the logs are state: after a merge row the stale decay slots hold that
        merge's decayed keys ``exp(ℓ̄' − Λ_i) ⊙ k_i`` (the kernels' scratch), not the entries' log-decays.
        scale: default ``K ** -0.5`` (FLA's RWKV6 layer passes 1.0).
        block_v / num_warps: the decode kernel's value tile and warps (None: 8 and 1). prepare_warps: warps per
            prepare program (one per row and head); None: :func:`hf_deltalog.kernels._op.default_prepare_warps`.
        use_custom_op: dispatch through ``torch.ops.hf_deltalog.fused_deltalog_rwkv6_decode`` (declares its
            mutations, so ``torch.compile`` traces it without a graph break); False launches the kernels directly.

    Returns:
        ``o`` ``[B, 1, H, V]`` in ``r.dtype``.

    Raises:
        TypeError: a non-tensor argument, wrong dtypes (including a key or value log narrower than its activation:
            it must be float32 or the activation's dtype, which it stores losslessly), or a launch option
            (``block_v``, ``num_warps``, ``prepare_warps``) that is neither None nor an int, or a flag
            (``state_v_first``, ``use_custom_op``) that is not a bool, or a ``scale`` that is not None or a real
            number.
        ValueError: wrong shapes, devices (CPU only under ``TRITON_INTERPRET=1``) or layouts, a zero head size or
            head count, a buffer the step writes sharing memory with another argument, or a launch option's bad value
            (``block_v`` not a power of two, warps not in 1, 2, 4, 8, 16). The shared-memory check runs on every
            eager call; under ``torch.compile`` only through the opaque custom op
            (:func:`hf_deltalog.kernels.common.check_disjoint`). Also a decode tile over Triton's 2**20 elements
            (``block_v × next_pow2(K)`` or ``next_pow2(C) × block_v``), or ``TRITON_INTERPRET=1`` set only after this
            module was imported.

    Every check runs before anything is written, also when ``torch.ops.hf_deltalog.fused_deltalog_rwkv6_decode`` is
    called directly (``prepare_warps`` 0 keeps the default there). Inference only: the op has no autograd formula.
    """
    check_flags(state_v_first=state_v_first, use_custom_op=use_custom_op)
    # the values, shapes and devices: in _launch
    check_launcher_arguments(dict(r=r, k=k, v=v, w=w, u=u, base=base, log_decay=log_decay, k_log=k_log,
                                  v_log=v_log, decay_log=decay_log, length=length, workspace=workspace),
                             block_v, num_warps, prepare_warps)
    check_scale(scale)
    args = (r, k, v, w, u, base, log_decay, k_log, v_log, decay_log, length, workspace,
            None if scale is None else float(scale), bool(state_v_first), int(8 if block_v is None else block_v),
            int(1 if num_warps is None else num_warps), int(prepare_warps or 0))
    if use_custom_op:
        return torch.ops.hf_deltalog.fused_deltalog_rwkv6_decode(*args)
    return _launch(*args, lambda kernel: kernel)
