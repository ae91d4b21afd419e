"""Triton kernels for one DeltaLog Gated DeltaNet decode step (replay, output, append-or-merge; two launches).

Math (seed paper, Eq. 7; the recurrence is transformers' ``torch_recurrent_gated_delta_rule`` for ``T = 1``). Per row
``b`` and value head ``h`` the logical state is ``S = exp(ℓ̄)·base + Σ_{i<L} exp(ℓ̄ − Λ_i) K_i U_iᵀ`` (``S ∈ R^{K×V}``).
With ``ℓ̄' = ℓ̄ + g``, ``a = exp(ℓ̄')`` and ``w_i = exp(ℓ̄' − Λ_i)`` the kernel computes, without materialising ``S``::

    S'ᵀk̂ = a·baseᵀk̂ + Σ_i w_i (K_i·k̂) U_i          S'ᵀq̂ = a·baseᵀq̂ + Σ_i w_i (K_i·q̂) U_i
    u = β (v − S'ᵀk̂)                                  o = S'ᵀq̂ + (q̂·k̂) u

then, per row, *appends* ``(k̂, u, g_t)`` at slot ``L`` when ``L < C`` or *merges* (``base ← a·base + Σ_i w_i K_i U_iᵀ +
k̂ uᵀ``, ``ℓ̄ ← 0``, ``L ← 0``) when ``L ≥ C``. :func:`hf_deltalog.kernels.gdn.naive.naive_deltalog_gdn_decode` is the
executable specification; these kernels match it buffer for buffer.

Kernel design: two launches per step, no host synchronisation
----------------------------------------------------------------
1. ``_deltalog_gdn_prepare_kernel``, grid ``B · Hk`` (one program per row and key head): l2-normalises and scales
   ``q``/``k`` once, loads the key head's live log ``K_i`` once and forms the replay coefficients
   ``w_i (k̂·K_i)``, ``w_i (q̂·K_i)`` and ``w_i = exp(ℓ̄' − Λ_i) = exp(g_t + Σ_{j>i} λ_j)`` (the entries' own
   log-decays summed from the newest backwards, as ``kernels.common.later_decay_sums``) for the ``G = HV // Hk`` value
   heads of its GQA group, advances their ``log_decay`` (``ℓ̄'`` on append rows, 0 on merge rows) and, on append rows,
   writes ``k̂`` and the step's log-decay ``g_t`` into slot ``L``. Everything the second kernel needs goes to a small per-row fp32 workspace
   (``[B, 2·Hk·K + HV·(3C + 2) + 1]``, see :func:`deltalog_gdn_workspace`), including the phase ``L``.
2. ``_deltalog_gdn_decode_kernel``, grid ``B · (HV / HPP) · NV`` flattened on axis 0 (one program per row, group of
   ``HPP`` value heads (default 1) and ``BV``-wide value tile, the tile fastest): normalises the raw ``q``/``k`` of
   its key head (``raw_qk``, the default; otherwise it re-reads the fp32 ``q̂``/``k̂`` the prepare kernel stored),
   reads its base tile once, replays the live ``U_i`` columns with the prepared coefficients, writes ``o``, then appends ``u`` into slot ``L`` or, on merge rows, writes the merged tile
   (``a·base + Σ_i w_i K_i U_iᵀ + k̂ uᵀ``, ``C`` exact fp32 rank-1 updates in a loop whose loads run one entry
   ahead). The program of value head 0 and tile 0 writes the row's new ``length`` (the decode kernel reads the
   phase from the workspace, never from ``length``). With a log (``C > 0``), one warp and a tile of at most 1,024
   elements the kernel is launched under a 64-register cap, so that 32 programs fit an SM
   (:func:`hf_deltalog.kernels._op.decode_register_cap`).
   The program shape is that of a dense decode kernel (a ``[BV, BK]`` tile, one warp), so the replay adds only a few
   coefficient loads and the ``[L, BV]`` slice of the log per program.

Why two launches: a single fused kernel that normalises, loads the key log and forms the coefficients in every
program needs wide tiles to amortise that work, and wide tiles with one warp exhaust the 255 registers (the pointer
tile alone is 2 registers per element) and spill; measured on an H200 it reached 55–66 % of DRAM bandwidth.

Races: within each launch every buffer element is written by one program and read by no other program of that
launch (``length`` and ``log_decay`` are read by the prepare kernel and ``length`` written by the decode kernel;
slot ``L`` is written while readers only load slots ``< L``). Program ids are int64 before any offset is formed, so
``B · HV · K · V`` may exceed 2³¹ and the grid may exceed 65,535 programs.

All products are fp32 elementwise products reduced with ``tl.sum`` (no ``tl.dot``, so never TF32). Stale log slots
(``i ≥ L``) never reach an output, whatever they hold (NaN included): the decode kernel does not load them (masked
loads), and the prepare kernel, which issues all its loads before the phase is known, zeroes them with ``tl.where``
before any product. Layouts:
``state_v_first=False`` keeps ``base`` as ``[B, HV, K, V]`` (transformers' layout), ``True`` as ``[B, HV, V, K]``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from hf_deltalog.kernels._op import (
    OP_KIND, check_kernel_device, check_launch_options, check_launcher_arguments, check_tile_elements,
    decode_register_cap, launch_device, register_decode_op,
)
from hf_deltalog.kernels._op import _is_int
from hf_deltalog.kernels.common import (
    check_dims, check_disjoint, check_flags, check_log_ranks, check_one_device, check_scale, check_workspace_sizes,
)

__all__ = [
    "LaunchConfig", "OP_KIND", "OP_NAME", "deltalog_gdn_workspace", "default_launch_config", "fused_deltalog_gdn_decode",
]

OP_NAME = "hf_deltalog::fused_deltalog_gdn_decode"

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_PDL_NEEDS = "_pdl (experimental programmatic dependent launch) needs use_custom_op=False and a CUDA device"
_GATE_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


@triton.jit
def _deltalog_gdn_prepare_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    log_decay_ptr,
    k_log_ptr,
    decay_log_ptr,
    length_ptr,
    ws_ptr,
    scale,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_gb,
    stride_gh,
    HK: tl.constexpr,
    HV: tl.constexpr,
    G: tl.constexpr,
    K: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BC: tl.constexpr,
    BG: tl.constexpr,
    WS: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr,
    STORE_QK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Per (row, key head): normalise q and k, form the replay coefficients of the key head's log, advance the
    cumulative log-decay of its G value heads and append k̂ and the step's log-decay (append rows). Writes the row's
    workspace.

    Every load is issued before the first store and none waits for another: the live-slot masks are applied to the
    loaded tiles (``tl.where``), not to the loads, so a program costs one memory round trip instead of one per
    dependent load (the kernel is latency-bound: one short program per row and key head)."""
    if USE_PDL:  # let the decode kernel start its base loads now (it waits for this grid before reading the workspace)
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0).to(tl.int64)
    i_hk = pid % HK
    i_b = pid // HK
    ws = ws_ptr + i_b * WS
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    offs_g = tl.arange(0, BG)
    mask_g = offs_g < G
    i_hv = i_hk * G + offs_g  # [BG] the value heads of this key head's GQA group
    # --- loads (independent of one another) ---
    b_q = tl.load(q_ptr + i_b * stride_qb + i_hk * stride_qh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + i_b * stride_kb + i_hk * stride_kh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    # A length above C merges and a negative one appends nothing, as in the reference; it is clamped before the
    # int32 cast, so that an int64 length of 2**32 (or an int32 one of 2**31 - 1) still merges
    L = tl.maximum(tl.minimum(tl.load(length_ptr + i_b), C + 1), -2147483648).to(tl.int32)
    g_t = tl.load(g_ptr + i_b * stride_gb + i_hv * stride_gh, mask=mask_g, other=0.0).to(tl.float32)
    ell = tl.load(log_decay_ptr + i_b * HV + i_hv, mask=mask_g, other=0.0)
    if C > 0:
        offs_c = tl.arange(0, BC)
        mask_c = offs_c < C
        # all C slots are read (in bounds), and stale ones (i ≥ L) are zeroed by tl.where before any product, so
        # whatever they hold (NaN included) cannot reach an output
        b_kl = tl.load(k_log_ptr + (i_b * HK + i_hk) * (C * K) + offs_c[:, None] * K + offs_k[None, :],
                       mask=mask_c[:, None] & mask_k[None, :], other=0.0)  # [BC, BK]
        p_dl = decay_log_ptr + (i_b * HV + i_hv)[:, None] * C + offs_c[None, :]  # [BG, BC]
        lam_next = tl.load(p_dl + 1, mask=mask_g[:, None] & (offs_c[None, :] + 1 < C), other=0.0)  # λ_{i+1}
    # --- compute ---
    if USE_QK_L2NORM:
        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
    b_q = b_q * scale
    qk = tl.sum(b_q * b_k, axis=0)
    is_merge = L >= C
    g_t = tl.maximum(g_t, -104.0, propagate_nan=tl.PropagateNan.ALL)  # common.LOG_DECAY_FLOOR; NaN stays NaN
    ell = ell + g_t
    in_range = (L >= 0) & (L < C)  # a length outside [0, C] appends nothing
    # --- stores ---
    if STORE_QK:  # the decode kernel re-reads q̂, k̂ from here (raw_qk=False) instead of normalising itself
        tl.store(ws + i_hk * K + offs_k, b_q, mask=mask_k)
        tl.store(ws + (HK + i_hk) * K + offs_k, b_k, mask=mask_k)
    if i_hk == 0:
        # the phase, as int32 bits (exact for any length), for the decode kernel (which must not read `length`)
        tl.store(ws + WS - 1, L.to(tl.float32, bitcast=True))
    p_ws = ws + 2 * HK * K + i_hv * (3 * C + 2)  # [BG] coefficient block of each value head
    tl.store(p_ws, tl.exp(ell), mask=mask_g)
    tl.store(p_ws + 1, tl.zeros([BG], dtype=tl.float32) + qk, mask=mask_g)
    if C > 0:
        live = (offs_c < L) & mask_c
        b_kl = tl.where(live[:, None], b_kl, 0.0)
        qK = tl.sum(b_kl * b_q[None, :], axis=1)  # [BC]  q̂·K_i
        kK = tl.sum(b_kl * b_k[None, :], axis=1)  # [BC]  k̂·K_i
        # ℓ̄' − Λ_i = g_t + Σ_{j>i} λ_j (kernels.common.later_decay_sums): the entries' own log-decays, one slot
        # shifted, summed from the newest backwards; exponents ≤ 0
        lam_next = tl.where((offs_c[None, :] + 1 < L) & live[None, :], lam_next, 0.0)
        w = tl.where(live[None, :], tl.exp(tl.cumsum(lam_next, axis=1, reverse=True) + g_t[:, None]), 0.0)  # [BG, BC]
        mask_gc = mask_g[:, None] & mask_c[None, :]
        p_wc = p_ws[:, None] + 2 + offs_c[None, :]
        tl.store(p_wc, w * kK[None, :], mask=mask_gc)
        tl.store(p_wc + C, w * qK[None, :], mask=mask_gc)
        tl.store(p_wc + 2 * C, w, mask=mask_gc)
        if in_range:
            tl.store(k_log_ptr + (i_b * HK + i_hk) * (C * K) + L * K + offs_k, b_k, mask=mask_k)
            tl.store(decay_log_ptr + (i_b * HV + i_hv) * C + L, g_t, mask=mask_g)  # the entries' own log-decays
    tl.store(log_decay_ptr + i_b * HV + i_hv, tl.where(is_merge, 0.0, ell), mask=mask_g)


@triton.jit
def _deltalog_gdn_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    beta_ptr,
    o_ptr,
    base_ptr,
    k_log_ptr,
    u_log_ptr,
    length_ptr,
    ws_ptr,
    scale,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_vb,
    stride_vh,
    stride_betab,
    stride_betah,
    HK: tl.constexpr,
    HV: tl.constexpr,
    G: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BC: tl.constexpr,
    NV: tl.constexpr,
    WS: tl.constexpr,
    HPP: tl.constexpr,
    STATE_V_FIRST: tl.constexpr,
    RAW_QK: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Per (row, group of HPP value heads of one key head, value tile): read the HPP base tiles, replay the live log
    with the prepared coefficients, write o, then append u (append rows) or write the merged tiles (merge rows).

    The program's tile has R = HPP·BV rows (value channels; row r belongs to value head i_hv0 + r // BV): the value
    heads of a GQA group share the key-side loads (q̂, k̂ and, on merge rows, the key log)."""
    pid = tl.program_id(0).to(tl.int64)
    i_v = pid % NV
    i_bg = pid // NV
    i_g = i_bg % (HV // HPP)
    i_b = i_bg // (HV // HPP)
    i_hv0 = i_g * HPP
    i_hk = i_hv0 // G  # HPP divides G: every head of the program reads key head i_hk
    ws = ws_ptr + i_b * WS
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < K
    offs_r = tl.arange(0, HPP * BV)
    v_r = i_v * BV + offs_r % BV  # value channel of row r
    hv_r = i_hv0 + offs_r // BV  # value head of row r
    bh_r = i_b * HV + hv_r
    mask_r = v_r < V

    # Loads that do not depend on the prepare kernel first (with USE_PDL they overlap it): q, k, the base tile.
    if RAW_QK:  # normalise the raw activations here (as the prepare kernel does) instead of re-reading fp32 q̂, k̂
        b_q = tl.load(q_ptr + i_b * stride_qb + i_hk * stride_qh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        b_k = tl.load(k_ptr + i_b * stride_kb + i_hk * stride_kh + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        if USE_QK_L2NORM:
            b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
            b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
        b_q = b_q * scale
    if STATE_V_FIRST:
        p_h = base_ptr + (bh_r * V + v_r)[:, None] * K + offs_k[None, :]  # [R, BK]
        mask_h = mask_r[:, None] & mask_k[None, :]
    else:
        p_h = base_ptr + bh_r[None, :] * (K * V) + offs_k[:, None] * V + v_r[None, :]  # [BK, R]
        mask_h = mask_k[:, None] & mask_r[None, :]
    b_h = tl.load(p_h, mask=mask_h, other=0.0)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # the prepare kernel's workspace (phase, coefficients) is complete from here on
    if not RAW_QK:
        b_q = tl.load(ws + i_hk * K + offs_k, mask=mask_k, other=0.0)
        b_k = tl.load(ws + (HK + i_hk) * K + offs_k, mask=mask_k, other=0.0)
    L = tl.load(ws + WS - 1).to(tl.int32, bitcast=True)
    is_merge = L >= C
    p_ws = ws + 2 * HK * K + hv_r * (3 * C + 2)  # [R] coefficient block of each row's value head
    a = tl.load(p_ws)
    qk = tl.load(ws + 2 * HK * K + i_hv0 * (3 * C + 2) + 1)  # q̂·k̂: one value per key head
    if STATE_V_FIRST:
        s_k = a * tl.sum(b_h * b_k[None, :], axis=1)
        s_q = a * tl.sum(b_h * b_q[None, :], axis=1)
    else:
        s_k = a * tl.sum(b_h * b_k[:, None], axis=0)
        s_q = a * tl.sum(b_h * b_q[:, None], axis=0)
    if C > 0:
        offs_c = tl.arange(0, BC)
        live = (offs_c < L) & (offs_c < C)
        mask_cr = live[:, None] & mask_r[None, :]
        wk = tl.load(p_ws[None, :] + 2 + offs_c[:, None], mask=mask_cr, other=0.0)  # [BC, R]
        wq = tl.load(p_ws[None, :] + 2 + C + offs_c[:, None], mask=mask_cr, other=0.0)
        p_u = u_log_ptr + (bh_r[None, :] * C + offs_c[:, None]) * V + v_r[None, :]
        b_u = tl.load(p_u, mask=mask_cr, other=0.0)  # [BC, R], live entries only
        s_k += tl.sum(wk * b_u, axis=0)
        s_q += tl.sum(wq * b_u, axis=0)

    b_v = tl.load(v_ptr + i_b * stride_vb + hv_r * stride_vh + v_r, mask=mask_r, other=0.0).to(tl.float32)
    b_beta = tl.load(beta_ptr + i_b * stride_betab + hv_r * stride_betah).to(tl.float32)
    b_u_new = b_beta * (b_v - s_k)  # u = β (v − S'ᵀk̂)
    tl.store(o_ptr + bh_r * V + v_r, (s_q + qk * b_u_new).to(o_ptr.dtype.element_ty), mask=mask_r)

    if is_merge:
        if STATE_V_FIRST:
            b_s = a[:, None] * b_h + b_u_new[:, None] * b_k[None, :]
        else:
            b_s = a[None, :] * b_h + b_k[:, None] * b_u_new[None, :]
        if C > 0:
            # Merge rows have every slot live (L = C): C exact fp32 rank-1 updates (no tl.dot: never TF32). A loop
            # (unrolled, the hoisted loads double the registers at C = 7) whose loads run one entry ahead, so that each
            # entry's round trip overlaps the previous entry's products instead of following them.
            p_kl = k_log_ptr + (i_b * HK + i_hk) * (C * K) + offs_k
            p_ul = u_log_ptr + bh_r * (C * V) + v_r
            w_n = tl.load(p_ws + 2 + 2 * C)
            k_n = tl.load(p_kl, mask=mask_k, other=0.0)
            u_n = tl.load(p_ul, mask=mask_r, other=0.0)
            for i in range(C):
                w_i = w_n
                k_i = k_n
                u_i = w_i * u_n
                j = tl.minimum(i + 1, C - 1)  # the last pass reloads entry C - 1 (in bounds, unused)
                w_n = tl.load(p_ws + 2 + 2 * C + j)
                k_n = tl.load(p_kl + j * K, mask=mask_k, other=0.0)
                u_n = tl.load(p_ul + j * V, mask=mask_r, other=0.0)
                if STATE_V_FIRST:
                    b_s += u_i[:, None] * k_i[None, :]
                else:
                    b_s += k_i[:, None] * u_i[None, :]
        tl.store(p_h, b_s, mask=mask_h)
    else:
        if C > 0:
            if L >= 0:  # a length outside [0, C] writes nothing
                tl.store(u_log_ptr + (bh_r * C + L) * V + v_r, b_u_new, mask=mask_r)
    if (i_hv0 == 0) & (i_v == 0):
        tl.store(length_ptr + i_b, tl.where(is_merge, 0, L + 1).to(length_ptr.dtype.element_ty))


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def workspace_size(Hk: int, HV: int, K: int, C: int) -> int:
    """fp32 elements of one row's workspace: q̂ and k̂ per key head, ``(a, q̂·k̂, w·k̂K, w·q̂K, w)`` per value head,
    and the phase."""
    return 2 * Hk * K + HV * (3 * C + 2) + 1


def deltalog_gdn_workspace(B: int, Hk: int, HV: int, K: int, C: int, device: torch.device | str) -> torch.Tensor:
    """The scratch buffer :func:`fused_deltalog_gdn_decode` needs: fp32 ``[B, 2·Hk·K + HV·(3C + 2) + 1]``.

    Its content between calls does not matter; allocate it once per cache layer (a stable address for CUDA graphs).
    Raises TypeError / ValueError on sizes that are not ints or are negative.
    """
    check_workspace_sizes(B=B, Hk=Hk, HV=HV, K=K, C=C)
    return torch.zeros(B, workspace_size(Hk, HV, K, C), dtype=torch.float32, device=device)


class LaunchConfig(NamedTuple):
    """Launch options of :func:`fused_deltalog_gdn_decode` (all change speed only, never results beyond rounding).

    Attributes:
        block_v: value channels per value head in a decode program (a power of two).
        num_warps: warps per decode program.
        heads_per_program: value heads of one GQA group a decode program covers (a power of two dividing
            ``G = HV // Hk``); they share the key-side loads (q̂, k̂, and the key log on merge steps).
        raw_qk: the decode kernel loads the raw q, k activations and normalises them itself instead of re-reading
            the fp32 q̂, k̂ the prepare kernel wrote (half the bytes in bf16).
        prepare_warps: warps per prepare program (one per row and key head).
    """

    block_v: int
    num_warps: int
    heads_per_program: int
    raw_qk: bool
    prepare_warps: int


def default_launch_config(B: int, Hk: int, HV: int, K: int, V: int, C: int) -> LaunchConfig:
    """Default launch options: a decode program of the shape of a dense decode program (an ``[8, next_pow2(K)]`` tile,
    one warp, one value head; FLA's ``fused_recurrent`` uses the same tile) that normalises the raw q, k itself, and
    a prepare program of one warp up to ``[8, K]`` log tiles, four beyond.

    Chosen from an H200 sweep (``bench_gdn_decode.py --tune``; eval/results/h200/bench_gdn_decode.json, HV = 32,
    Hk = 16, K = V = 128, B in {64, 256}, M in {8, 16}): ``raw_qk`` is as fast at M = 8 and 2-5 % faster at M = 16;
    two value heads per program, wider tiles or more warps were 10-60 % slower; more prepare warps changed nothing.
    """
    prep = 1 if _next_pow2(K) * _next_pow2(max(C, 1)) <= 1024 else 4
    return LaunchConfig(min(8, _next_pow2(V)), 1, 1, True, prep)


def _resolve_launch(B: int, Hk: int, HV: int, K: int, V: int, C: int, block_v: int, num_warps: int,
                    heads_per_program: int, raw_qk: int, prepare_warps: int) -> LaunchConfig:
    """The defaults with the caller's overrides (0 or -1 = keep the default) applied."""
    d = default_launch_config(B, Hk, HV, K, V, C)
    return LaunchConfig(
        min(block_v if block_v > 0 else d.block_v, _next_pow2(V)),
        num_warps if num_warps > 0 else d.num_warps,
        heads_per_program if heads_per_program > 0 else d.heads_per_program,
        bool(raw_qk) if raw_qk >= 0 else d.raw_qk,
        prepare_warps if prepare_warps > 0 else d.prepare_warps,
    )


def _validate(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, state_v_first, block_v,
              num_warps, heads_per_program, prepare_warps):
    named = dict(
        q=q, k=k, v=v, g=g, beta=beta, base=base, log_decay=log_decay, k_log=k_log, u_log=u_log,
        decay_log=decay_log, length=length, workspace=workspace,
    )
    # (every argument is a tensor here: the launcher checked, and the op's schema admits nothing else)
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be [B, 1, Hk, K]; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    B, T, Hk, K = q.shape
    if T != 1:
        raise ValueError(f"DeltaLog decode takes one token per row (T = 1); got T = {T}")
    if v.dim() != 4 or v.shape[:2] != (B, 1):
        raise ValueError(f"v must be [B, 1, HV, V] with B = {B}; got {tuple(v.shape)}")
    HV, V = v.shape[2], v.shape[3]
    if Hk == 0 or HV % Hk != 0:
        raise ValueError(f"the value heads HV = {HV} must be a positive multiple of the key heads Hk = {Hk} (GQA)")
    check_dims(Hk=Hk, HV=HV, K=K, V=V)
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape) != (B, 1, HV):
            raise ValueError(f"{name} must be [B, 1, HV] = {(B, 1, HV)}; got {tuple(t.shape)}")
    expect_base = (B, HV, V, K) if state_v_first else (B, HV, K, V)
    if tuple(base.shape) != expect_base:
        layout = "[B, HV, V, K]" if state_v_first else "[B, HV, K, V]"
        raise ValueError(f"base must be {layout} = {expect_base} (state_v_first={state_v_first}); got {tuple(base.shape)}")
    check_log_ranks(k_log, u_log, "u_log")
    C = k_log.shape[2]
    for name, t, shape in (
        ("log_decay", log_decay, (B, HV)),
        ("k_log", k_log, (B, Hk, C, K)),
        ("u_log", u_log, (B, HV, C, V)),
        ("decay_log", decay_log, (B, HV, C)),
        ("length", length, (B,)),
        ("workspace", workspace, (B, workspace_size(Hk, HV, K, max(C, 0)))),
    ):
        if tuple(t.shape) != shape:
            raise ValueError(
                f"{name} must have shape {shape} (B, Hk, HV, K, V from q/v, C = k_log.shape[2]); got {tuple(t.shape)}"
            )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in _ACT_DTYPES:
            raise TypeError(f"{name} must be bfloat16, float16 or float32; got {t.dtype}")
    if k.dtype != q.dtype:
        raise TypeError(f"q and k must have the same dtype; got q {q.dtype} and k {k.dtype}")
    for name, t in (("g", g), ("beta", beta)):
        if t.dtype not in _GATE_DTYPES:
            raise TypeError(f"{name} must be a floating dtype (bfloat16, float16, float32, float64); got {t.dtype}")
    for name in ("base", "log_decay", "k_log", "u_log", "decay_log"):
        if named[name].dtype != torch.float32:
            raise TypeError(f"{name} must be float32 (the kernel keeps the state in fp32); got {named[name].dtype}")
    if length.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"length must be int32 or int64; got {length.dtype}")
    if workspace.dtype != torch.float32:
        raise TypeError(f"workspace must be float32 (see deltalog_gdn_workspace); got {workspace.dtype}")
    check_one_device(named)
    check_kernel_device(q.device)
    for name in ("base", "log_decay", "k_log", "u_log", "decay_log", "length", "workspace"):
        if not named[name].is_contiguous():
            raise ValueError(f"{name} must be contiguous (it is updated in place, so it cannot be copied); got strides "
                             f"{named[name].stride()} for shape {tuple(named[name].shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride on its last dim (other strides are free); got strides {t.stride()}")
    check_launch_options(block_v, num_warps)
    check_launch_options(None, prepare_warps, "prepare_warps")
    G = HV // Hk
    if heads_per_program is not None and not _is_int(heads_per_program):
        raise TypeError(f"heads_per_program must be an int (or None for the default); got {heads_per_program!r}")
    if heads_per_program is not None and (
        heads_per_program < 1
        or G % heads_per_program
        or heads_per_program & (heads_per_program - 1)
    ):
        raise ValueError(
            f"heads_per_program must be a power of two dividing HV // Hk = {G} (or None for the default); "
            f"got {heads_per_program!r}"
        )
    return B, Hk, HV, K, V, C


def _validate_op_args(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale,
                      use_qk_l2norm, state_v_first, block_v, num_warps, heads_per_program, raw_qk, prepare_warps):
    """:func:`_validate` on the custom op's arguments (its int launch options: 0 keeps the default; ``raw_qk`` −1
    keeps it, 0 / 1 set it)."""
    if raw_qk not in (-1, 0, 1):
        raise ValueError(f"the op's raw_qk must be -1 (the default), 0 or 1; got {raw_qk!r}")
    return _validate(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, state_v_first,
                     block_v or None, num_warps or None, heads_per_program or None, prepare_warps or None)


def _launch(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale, use_qk_l2norm,
            state_v_first, block_v, num_warps, heads_per_program, raw_qk, prepare_warps, wrap, pdl=False):
    # Every check here, in the body: the registered op can be called directly (torch.ops.hf_deltalog...), and its
    # opaque form runs this body with real tensors inside a compiled graph too (check_disjoint skips traced and fake
    # tensors). Nothing is written before all of them pass.
    _validate_op_args(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale,
                      use_qk_l2norm, state_v_first, block_v, num_warps, heads_per_program, raw_qk, prepare_warps)
    if pdl and q.device.type != "cuda":
        raise ValueError(_PDL_NEEDS)
    check_disjoint(dict(q=q, k=k, v=v, g=g, beta=beta, base=base,
                        log_decay=log_decay, k_log=k_log, u_log=u_log, decay_log=decay_log, length=length,
                        workspace=workspace),
                   ("base", "log_decay", "k_log", "u_log", "decay_log", "length", "workspace"))
    B, _, Hk, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    C = k_log.shape[2]
    scale = float(K**-0.5 if scale is None else scale)
    cfg = _resolve_launch(B, Hk, HV, K, V, C, block_v, num_warps, heads_per_program, raw_qk, prepare_warps)
    BK, BC, BV = _next_pow2(K), _next_pow2(max(C, 1)), cfg.block_v
    R = BV * cfg.heads_per_program  # rows (value channels) of a decode program's tile
    # the decode launch runs after the prepare launch has written the log: its tiles are checked before either
    check_tile_elements("decode", base_tile=R * BK, log_tile=BC * R)
    o = torch.empty((B, 1, HV, V), dtype=q.dtype, device=q.device)
    if B == 0:
        return o
    NV = triton.cdiv(V, BV)
    WS = workspace_size(Hk, HV, K, C)
    # Without a log the log pointers are never dereferenced; pass the base so the kernels see valid pointers.
    kl, ul, dl = (k_log, u_log, decay_log) if C > 0 else (base, base, base)
    with launch_device(q):  # Triton launches on the current device: make it q's (a model on several GPUs)
        wrap(_deltalog_gdn_prepare_kernel)[(B * Hk,)](
            q, k, g, log_decay, kl, dl, length, workspace, scale,
            q.stride(0), q.stride(2), k.stride(0), k.stride(2), g.stride(0), g.stride(2),
            HK=Hk, HV=HV, G=HV // Hk, K=K, C=C, BK=BK, BC=BC, BG=_next_pow2(HV // Hk), WS=WS,
            USE_QK_L2NORM=use_qk_l2norm, STORE_QK=not cfg.raw_qk, USE_PDL=pdl, num_warps=cfg.prepare_warps,
        )
        wrap(_deltalog_gdn_decode_kernel)[(B * (HV // cfg.heads_per_program) * NV,)](
            q, k, v, beta, o, base, kl, ul, length, workspace, scale,
            q.stride(0), q.stride(2), k.stride(0), k.stride(2), v.stride(0), v.stride(2),
            beta.stride(0), beta.stride(2),
            HK=Hk, HV=HV, G=HV // Hk, K=K, V=V, C=C, BK=BK, BV=BV, BC=BC, NV=NV, WS=WS, HPP=cfg.heads_per_program,
            STATE_V_FIRST=state_v_first, RAW_QK=cfg.raw_qk, USE_QK_L2NORM=use_qk_l2norm, USE_PDL=pdl,
            num_warps=cfg.num_warps, **decode_register_cap(C, cfg.num_warps, BK * R),
            **({"launch_pdl": True} if pdl else {}),
        )
    return o


_MUTATED = ("base", "log_decay", "k_log", "u_log", "decay_log", "length", "workspace")


def _op_body(
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
    scale: float | None,
    use_qk_l2norm_in_kernel: bool,
    state_v_first: bool,
    block_v: int,
    num_warps: int,
    heads_per_program: int,
    raw_qk: int,
    prepare_warps: int,
) -> torch.Tensor:
    return _launch(q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace, scale,
                   use_qk_l2norm_in_kernel, state_v_first, block_v, num_warps, heads_per_program, raw_qk,
                   prepare_warps, wrap_triton)


def _op_fake(q, k, v, *rest):
    _validate_op_args(q, k, v, *rest)  # while torch.compile traces the opaque op: the launcher's errors, at once
    return q.new_empty((q.shape[0], 1, v.shape[2], v.shape[3]))


_fused_deltalog_gdn_decode_op = register_decode_op(OP_NAME, _op_body, _MUTATED, _op_fake)


def fused_deltalog_gdn_decode(
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
    block_v: int | None = None,
    num_warps: int | None = None,
    heads_per_program: int | None = None,
    raw_qk: bool | None = None,
    prepare_warps: int | None = None,
    use_custom_op: bool = True,
    _pdl: bool = False,
) -> torch.Tensor:
    """One DeltaLog GDN decode step for every row (two kernel launches, no host sync; buffers updated in place).

    Same semantics as :func:`hf_deltalog.kernels.gdn.naive.naive_deltalog_gdn_decode` (seed paper Eq. 7; output as
    transformers' ``torch_recurrent_gated_delta_rule`` for one token). Each row replays its live log, writes ``o``,
    then appends (``length[b] < C``) or merges (``length[b] ≥ C``; ``C = M − 1``); the phase is read on the device,
    so rows in different phases share a launch and the call never synchronises with the host.

    Dims: ``B`` rows, ``Hk`` key heads, ``HV`` value heads (a multiple of ``Hk``; key head ``h`` serves value heads
    ``h·G … h·G+G−1``, ``G = HV // Hk``), ``K`` key dim, ``V`` value dim, ``C`` log capacity (may be 0: dense).

    Args:
        q, k: ``[B, 1, Hk, K]`` raw queries/keys, bfloat16/float16/float32 (same dtype), unit last-dim stride.
        v: ``[B, 1, HV, V]`` bfloat16/float16/float32, unit last-dim stride.
        g: ``[B, 1, HV]`` log-decay, any float dtype (computed in fp32).
        beta: ``[B, 1, HV]`` delta-rule step size, any float dtype.
        base: fp32 ``[B, HV, K, V]`` (``[B, HV, V, K]`` when ``state_v_first``), contiguous; mutated on merge rows.
        log_decay: fp32 ``[B, HV]`` cumulative log-decay ``ℓ̄`` since the last merge; mutated.
        k_log: fp32 ``[B, Hk, C, K]`` normalised keys of the live updates; slot ``L`` written on append rows.
        u_log: fp32 ``[B, HV, C, V]`` value-side factors ``u_i``; slot ``L`` written on append rows.
        decay_log: fp32 ``[B, HV, C]`` own log-decays ``λ_i`` of the entries' steps; slot ``L`` written on append
            rows.
        length: int32/int64 ``[B]`` live entries ``L`` per row; set to ``L + 1`` (append) or 0 (merge). Outside
            ``[0, C]`` (a caller's bug) the row does what the reference does, for any value: above C it merges,
            below 0 it appends nothing (and ``length`` becomes ``L + 1``, except that the kernel counts an int64
            length below ``−2³¹`` as ``−2³¹``, so that one becomes ``−2³¹ + 1``).
        workspace: fp32 ``[B, 2·Hk·K + HV·(3C + 2) + 1]`` scratch (:func:`deltalog_gdn_workspace`); overwritten.
        scale: query scale; default ``K ** -0.5``.
        use_qk_l2norm_in_kernel: l2-normalise q and k (``x · rsqrt(Σx² + 1e-6)``) as transformers does.
        state_v_first: layout of ``base`` (see above).
        block_v, num_warps, heads_per_program, raw_qk, prepare_warps: launch-option overrides (see
            :class:`LaunchConfig`); None keeps :func:`default_launch_config`'s choice.
        _pdl: experimental: launch the decode kernel with programmatic dependent launch (Hopper and newer) so its
            base loads overlap the prepare kernel; only with ``use_custom_op=False`` on CUDA (benchmarks).
        use_custom_op: dispatch through ``torch.ops.hf_deltalog.fused_deltalog_gdn_decode`` (a ``triton_op`` that
            declares its mutations, so ``torch.compile`` traces it without a graph break). ``False`` launches the
            kernel directly.

    Returns:
        ``o`` ``[B, 1, HV, V]`` in ``q.dtype`` (a new tensor).

    Raises:
        TypeError: a wrong dtype (activations must be bf16/fp16/fp32, state buffers fp32, ``length`` int32/int64,
            ``workspace`` fp32), a non-tensor argument, or a launch option of the wrong type (``block_v``,
            ``num_warps``, ``prepare_warps``, ``heads_per_program`` not None or an int; ``raw_qk`` not None or a bool),
            a flag (``use_qk_l2norm_in_kernel``, ``state_v_first``, ``use_custom_op``) that is not a bool, or a
            ``scale`` that is not None or a real number.
        ValueError: inconsistent shapes, ``T ≠ 1``, ``HV`` not a multiple of ``Hk``, a zero head size or head count,
            a buffer the step writes sharing memory with another argument, tensors on different devices or
            not on CUDA (CPU is accepted only under ``TRITON_INTERPRET=1``), non-contiguous state buffers, a
            non-unit last-dim stride on q/k/v, or a launch option's bad value (``block_v`` not a power of two,
            ``num_warps`` / ``prepare_warps`` not in 1, 2, 4, 8, 16, ``heads_per_program`` not a power of two
            dividing ``HV // Hk``), a decode tile over Triton's 2**20 elements (``block_v · heads_per_program``
            value rows × ``next_pow2(K)``, or × ``next_pow2(C)`` log slots), ``TRITON_INTERPRET=1`` set only after
            this module was imported, or ``_pdl`` without a CUDA device and ``use_custom_op=False``.

    Every check runs before anything is written, also when ``torch.ops.hf_deltalog.fused_deltalog_gdn_decode`` is
    called directly (its launch options are ints there: 0 keeps the default, and ``raw_qk`` −1). The shared-memory
    check needs the tensors' addresses: it runs on every eager call and, inside a graph compiled with
    ``torch.compile``, only through the opaque form of the custom op (``TRITON_INTERPRET=1`` or
    ``HF_DELTALOG_OPAQUE_OP=1``); a graph compiled from the ``triton_op`` form (a GPU's default) launches the
    kernels unchecked, so aliased buffers there are the caller's error (:func:`hf_deltalog.kernels.common.check_disjoint`
    says what functionalization does to them). Inference only: the op has no autograd formula (a backward through
    its output raises torch's error).
    """
    check_flags(use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first,
                use_custom_op=use_custom_op)
    # the values, shapes and devices: in _launch
    check_launcher_arguments(dict(q=q, k=k, v=v, g=g, beta=beta, base=base, log_decay=log_decay, k_log=k_log,
                                  u_log=u_log, decay_log=decay_log, length=length, workspace=workspace),
                             block_v, num_warps, prepare_warps)
    if heads_per_program is not None and not _is_int(heads_per_program):
        raise TypeError(f"heads_per_program must be an int (or None for the default); got {heads_per_program!r}")
    if raw_qk is not None and not isinstance(raw_qk, bool):
        raise TypeError(f"raw_qk must be True, False or None (the default); got {raw_qk!r}")
    if _pdl and use_custom_op:
        raise ValueError(_PDL_NEEDS)
    check_scale(scale)
    args = (q, k, v, g, beta, base, log_decay, k_log, u_log, decay_log, length, workspace,
            None if scale is None else float(scale), bool(use_qk_l2norm_in_kernel), bool(state_v_first),
            int(block_v or 0), int(num_warps or 0), int(heads_per_program or 0),
            -1 if raw_qk is None else int(bool(raw_qk)), int(prepare_warps or 0))
    if use_custom_op:
        return torch.ops.hf_deltalog.fused_deltalog_gdn_decode(*args)
    return _launch(*args, lambda kernel: kernel, pdl=_pdl)
