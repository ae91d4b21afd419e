"""Pure-PyTorch references for Kimi Delta Attention (KDA) decoding: eager dense and DeltaLog.

KDA is the delta rule of Gated DeltaNet with a per-key decay vector instead of a scalar (Kimi Linear, Eq. 1;
transformers' ``recurrent_kimi_delta_attention``, FLA's ``naive_recurrent_kda``). Per value head, with the state
key-major ``S ∈ R^{K×V}`` and ``g_t ∈ R^K`` a log-decay per key channel::

    q̂ = l2norm(q) · K^-1/2,  k̂ = l2norm(k)              (l2norm(x) = x / sqrt(Σx² + 1e-6), FLA's form)
    S' = diag(exp(g_t)) · S_{t-1}
    u_t = β_t (v_t − S'ᵀ k̂_t)
    S_t = S' + k̂_t u_tᵀ
    o_t = S_tᵀ q̂_t

DeltaLog keeps a dense ``base``, the cumulative log-decay per key ``ℓ̄ ∈ R^K`` since the last merge and, for each of the
``L ≤ C = M − 1`` log entries, ``(k̂_i, u_i, Λ_i ∈ R^K)``::

    S = diag(exp(ℓ̄)) · base + Σ_{i<L} diag(exp(ℓ̄ − Λ_i)) k̂_i u_iᵀ

so a decode step needs ``S'ᵀx = baseᵀ(exp(ℓ̄') ⊙ x) + Σ_i ((exp(ℓ̄' − Λ_i) ⊙ k̂_i) · x) u_i`` for ``x ∈ {k̂, q̂}`` with
``ℓ̄' = ℓ̄ + g_t``. Each deferred key factor is rescaled elementwise (heavier replay than GDN's scalar decay). The log
stores each entry's own log-decay ``λ_i = g_i`` (clamped), and ``ℓ̄ − Λ_i = Σ_{j>i} λ_j`` is summed from the newest
entry backwards (:func:`hf_deltalog.kernels.common.later_decay_sums`), so a strong decay before entry ``i`` does not
cost the later, small decays their precision. Every exponent is ≤ 0 (for ``g ≤ 0``, the contract: a growth ``g > 0``
is not checked and can overflow over a window where the dense recurrence stays finite, as for GDN; precision at
large M without decay: see :mod:`hf_deltalog.kernels.gdn.naive`): long decays underflow to 0,
never overflow.

Heads: ``Hk`` key heads and ``HV`` value heads with ``HV`` a multiple of ``Hk`` (key head ``h`` serves value heads
``h·G … h·G + G − 1``); transformers' KDA models have ``Hk = HV``. Decays and their snapshots are per value head.
"""

from __future__ import annotations

import torch

from hf_deltalog.kernels.common import (
    LOG_DECAY_FLOOR,
    check_dims,
    check_flags,
    check_floating,
    check_log_ranks,
    check_same_dtype,
    check_scale,
    check_step_buffers,
    check_tensors,
    later_decay_sums,
    promoted_dtype,
    reference_math,
)

__all__ = ["kda_l2norm", "naive_deltalog_kda_decode", "naive_deltalog_kda_materialize", "naive_recurrent_kda"]


def kda_l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(Σ x² + eps)`` over the last dim (transformers' KDA ``l2norm``, FLA's form): ``x`` ``[..., K]`` (q or
    k, ``[B, T, H, K]`` here), any float dtype; returns the same shape and dtype."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _check(q, k, v, g, beta):
    check_tensors(q=q, k=k, v=v, g=g, beta=beta)
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be [B, T, Hk, K]; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    B, T, Hk, K = q.shape
    if v.dim() != 4 or v.shape[:2] != (B, T):
        raise ValueError(f"v must be [B, T, HV, V] with B={B}, T={T}; got {tuple(v.shape)}")
    HV = v.shape[2]
    if Hk == 0 or HV % Hk != 0:
        raise ValueError(f"the value heads HV={HV} must be a positive multiple of the key heads Hk={Hk}")
    if tuple(g.shape) != (B, T, HV, K):
        raise ValueError(f"g must be [B, T, HV, K] = {(B, T, HV, K)} (a log-decay per key channel); got {tuple(g.shape)}")
    if tuple(beta.shape) != (B, T, HV):
        raise ValueError(f"beta must be [B, T, HV] = {(B, T, HV)}; got {tuple(beta.shape)}")
    check_floating(q=q, k=k, v=v, g=g, beta=beta)
    check_dims(K=K)  # a zero key size would fail inside the default scale K ** -0.5
    return B, T, Hk, HV, K, v.shape[3]


@reference_math
def naive_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eager dense KDA recurrence, token by token, vectorised over batch and heads.

    Args:
        q, k: ``[B, T, Hk, K]``; v: ``[B, T, HV, V]``; g: ``[B, T, HV, K]`` log-decay per key channel (any float
            dtype; bailing_hybrid hands it in bf16); beta: ``[B, T, HV]``.
        scale: default ``K ** -0.5``. initial_state: ``[B, HV, K, V]`` or None.
        use_qk_l2norm_in_kernel: l2-normalise q and k first. Default False, as FLA's ``naive_recurrent_kda``;
            transformers passes True, which is the DeltaLog reference's and launcher's default.

    Returns:
        ``o`` ``[B, T, HV, V]`` in ``q.dtype``, and the final state ``[B, HV, K, V]`` (or None). Arithmetic in fp32,
        or fp64 when any input is fp64.

    Raises:
        ValueError: on inconsistent shapes or a zero key head size ``K``.
        TypeError: a non-tensor or non-floating activation or ``initial_state``, or a flag
            (``output_final_state``, ``use_qk_l2norm_in_kernel``) that is not a bool, or a ``scale`` that is not None
            or a real number.
    """
    B, T, Hk, HV, K, V = _check(q, k, v, g, beta)
    check_flags(output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    if initial_state is not None:
        check_floating(initial_state=initial_state)
    G = HV // Hk
    tensors = (q, k, v, g, beta) + (() if initial_state is None else (initial_state,))
    dt = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    check_scale(scale)
    scale = K**-0.5 if scale is None else scale
    qf, kf = q.to(dt), k.to(dt)
    if use_qk_l2norm_in_kernel:
        qf, kf = kda_l2norm(qf), kda_l2norm(kf)
    qf, kf = (qf * scale).repeat_interleave(G, dim=2), kf.repeat_interleave(G, dim=2)
    vf, gf, bf = v.to(dt), g.to(dt), beta.to(dt)
    if initial_state is None:
        S = torch.zeros(B, HV, K, V, dtype=dt, device=q.device)
    else:
        if tuple(initial_state.shape) != (B, HV, K, V):
            raise ValueError(f"initial_state must be [B, HV, K, V] = {(B, HV, K, V)}; got {tuple(initial_state.shape)}")
        S = initial_state.to(dt).clone()
    o = torch.empty(B, T, HV, V, dtype=dt, device=q.device)
    for t in range(T):
        S = S * gf[:, t].exp()[..., None]
        u = bf[:, t, :, None] * (vf[:, t] - torch.einsum("bhkv,bhk->bhv", S, kf[:, t]))
        S = S + kf[:, t, :, :, None] * u[:, :, None, :]
        o[:, t] = torch.einsum("bhkv,bhk->bhv", S, qf[:, t])
    return o.to(q.dtype), (S if output_final_state else None)


def _check_log(base, log_decay, k_log, u_log, decay_log, length, B, Hk, HV, K, V, state_v_first):
    check_tensors(base=base, log_decay=log_decay, decay_log=decay_log, length=length)
    if Hk == 0 or HV % Hk != 0:
        raise ValueError(f"the value heads HV={HV} (u_log) must be a positive multiple of the key heads Hk={Hk} "
                         "(k_log)")
    C = k_log.shape[2] if k_log.dim() == 4 else -1
    for name, t, shape in (
        ("base", base, (B, HV, V, K) if state_v_first else (B, HV, K, V)),
        ("log_decay", log_decay, (B, HV, K)),
        ("k_log", k_log, (B, Hk, C, K)),
        ("u_log", u_log, (B, HV, C, V)),
        ("decay_log", decay_log, (B, HV, C, K)),
        ("length", length, (B,)),
    ):
        if tuple(t.shape) != shape:
            layout = " ([B, HV, V, K]: state_v_first)" if name == "base" and state_v_first else ""
            raise ValueError(f"{name} must have shape {shape}{layout} (B, Hk, HV, C, K, V from q/v/k_log); got "
                             f"{tuple(t.shape)}")
    for name, t in (("base", base), ("log_decay", log_decay), ("k_log", k_log), ("u_log", u_log), ("decay_log", decay_log)):
        if t.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 (or float64 for references); got {t.dtype}")
    if length.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"length must be int32 or int64; got {length.dtype}")
    return C


def _live(length: torch.Tensor, C: int) -> torch.Tensor:
    """``[B, 1, C]`` mask of the live log entries ``i < L[b]``."""
    return (torch.arange(C, device=length.device)[None, :] < length[:, None].to(torch.int64))[:, None, :]


def _replay(extra: torch.Tensor | None, k_log, u_log, decay_log, length, live, G: int):
    """Per-entry decayed keys ``exp(ℓ̄ − Λ_i + extra) ⊙ K_i`` ``[B, HV, C, K]`` (0 for stale entries; ``ℓ̄ − Λ_i``
    from :func:`later_decay_sums`, ``extra`` ``[B, HV, K]`` this step's log-decay or None) and the live ``U_i``."""
    diff = later_decay_sums(decay_log, length)
    if extra is not None:
        diff = diff + extra[:, :, None, :]
    k_hv = torch.where(live[..., None], k_log, torch.zeros_like(k_log)).repeat_interleave(G, dim=1)
    decayed = torch.where(live[..., None], diff.exp() * k_hv, torch.zeros_like(decay_log))
    return decayed, torch.where(live[..., None], u_log, torch.zeros_like(u_log))


@reference_math
def naive_deltalog_kda_materialize(
    base: torch.Tensor,
    log_decay: torch.Tensor,
    k_log: torch.Tensor,
    u_log: torch.Tensor,
    decay_log: torch.Tensor,
    length: torch.Tensor,
    state_v_first: bool = False,
) -> torch.Tensor:
    """Dense logical state ``S = diag(exp(ℓ̄))·base + Σ_{i<L} diag(exp(ℓ̄ − Λ_i)) K_i U_iᵀ``.

    Args:
        base: ``[B, HV, K, V]`` fp32 (``[B, HV, V, K]`` when ``state_v_first``).
        log_decay: ``[B, HV, K]`` fp32 cumulative log-decay ``ℓ̄`` per key channel since the last merge.
        k_log: ``[B, Hk, C, K]`` fp32 normalised keys, one per key head.
        u_log: ``[B, HV, C, V]`` fp32 value-side factors ``u_i = β_i (v_i − S'ᵀ k̂_i)``.
        decay_log: ``[B, HV, C, K]`` fp32 own log-decays ``λ_i`` of the step that wrote entry ``i``.
        length: ``[B]`` int32/int64 live entries (``0 ≤ L ≤ C``; a length above ``C`` reads all ``C`` entries and a
            negative one none, as the decode kernels read them).
        state_v_first: layout of ``base``.

    Returns:
        ``[B, HV, K, V]`` (transformers' layout, whatever ``state_v_first``; a new tensor) in the promoted dtype of
        the buffers (fp32, or fp64 if any is).

    Raises:
        ValueError, TypeError: on inconsistent shapes or dtypes, a non-tensor buffer, or a ``state_v_first`` that is
            not a bool.
    """
    check_flags(state_v_first=state_v_first)
    check_log_ranks(k_log, u_log, "u_log")
    B, Hk, _, K = k_log.shape
    HV, V = u_log.shape[1], u_log.shape[3]
    C = _check_log(base, log_decay, k_log, u_log, decay_log, length, B, Hk, HV, K, V, state_v_first)
    dt = promoted_dtype(base, log_decay, k_log, u_log, decay_log)
    base, log_decay, k_log, u_log, decay_log = (t.to(dt) for t in (base, log_decay, k_log, u_log, decay_log))
    base_kv = base.transpose(-1, -2) if state_v_first else base
    decayed, u_live = _replay(None, k_log, u_log, decay_log, length, _live(length, C), HV // Hk)
    return log_decay.exp()[..., None] * base_kv + torch.einsum("bhck,bhcv->bhkv", decayed, u_live)


@reference_math
def naive_deltalog_kda_decode(
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
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = True,
    state_v_first: bool = False,
) -> torch.Tensor:
    """One DeltaLog KDA decode step for every row: replay, output, then append (``L < C``) or merge (in place).

    Computes what :func:`naive_recurrent_kda` computes for ``T = 1`` from the logical state of
    :func:`naive_deltalog_kda_materialize`, without materialising it. Append rows write entry ``L`` (``k̂``, ``u``,
    the step's own log-decay ``λ_t = g_t``), set ``ℓ̄ ← ℓ̄'`` and ``L ← L + 1``; merge rows (``L = C``) write ``S_t``
    into the base, ``ℓ̄ ← 0``, ``L ← 0``.

    Args:
        q, k: ``[B, 1, Hk, K]`` raw queries/keys (bf16, fp16, fp32 or fp64); v: ``[B, 1, HV, V]``;
            g: ``[B, 1, HV, K]`` log-decay per key channel (any float dtype); beta: ``[B, 1, HV]``.
        base, log_decay, k_log, u_log, decay_log, length: as in :func:`naive_deltalog_kda_materialize`; mutated.
            ``C = k_log.shape[2]`` (``M = C + 1``).
        scale: query scale. Default: ``K ** -0.5``.
        use_qk_l2norm_in_kernel: l2-normalise q and k (eps 1e-6). Default True (what transformers passes), unlike
            the dense :func:`naive_recurrent_kda`'s False (FLA's default): compare the two with the flag given.
        state_v_first: ``base`` is ``[B, HV, V, K]``.

    Returns:
        ``o`` ``[B, 1, HV, V]`` in ``q.dtype``.

    Raises:
        ValueError, TypeError: on inconsistent shapes or dtypes, a zero head size, tensors on more than one device,
            or an in-place buffer that is not contiguous or shares memory with another argument (checked before
            anything is written; the shared-memory check is skipped when ``torch.compile`` traces the call, whose
            tensors have no addresses).
        TypeError: a non-tensor argument, or a flag (``use_qk_l2norm_in_kernel``, ``state_v_first``) that is not a
            bool (a string such as ``"False"`` is truthy), or a ``scale`` that is not None or a real number.
    """
    B, T, Hk, HV, K, V = _check(q, k, v, g, beta)
    check_flags(use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first)
    if T != 1:
        raise ValueError(f"DeltaLog decode takes one token per row (T = 1); got T = {T}")
    check_dims(Hk=Hk, HV=HV, K=K, V=V)
    check_log_ranks(k_log, u_log, "u_log")  # before _check_log reads their sizes
    C = _check_log(base, log_decay, k_log, u_log, decay_log, length, B, Hk, HV, K, V, state_v_first)
    check_same_dtype(base=base, log_decay=log_decay, k_log=k_log, u_log=u_log, decay_log=decay_log)
    check_step_buffers(dict(q=q, k=k, v=v, g=g, beta=beta, base=base, log_decay=log_decay, k_log=k_log, u_log=u_log,
                            decay_log=decay_log, length=length),
                       ("base", "log_decay", "k_log", "u_log", "decay_log", "length"))
    G = HV // Hk
    dt = base.dtype
    check_scale(scale)
    scale = K**-0.5 if scale is None else scale
    qf, kf = q[:, 0].to(dt), k[:, 0].to(dt)
    if use_qk_l2norm_in_kernel:
        qf, kf = kda_l2norm(qf), kda_l2norm(kf)
    qf = qf * scale
    q_hv, k_hv = qf.repeat_interleave(G, dim=1), kf.repeat_interleave(G, dim=1)  # [B, HV, K]
    vf, bf = v[:, 0].to(dt), beta[:, 0].to(dt)

    base_kv = base.transpose(-1, -2) if state_v_first else base  # a view: writes reach `base`
    g_now = g[:, 0].to(dt).clamp(min=LOG_DECAY_FLOOR)  # this step's log-decay [B, HV, K] (floor: no change in fp32)
    ell = log_decay + g_now  # ℓ̄'
    a = ell.exp()
    live = _live(length, C)
    decayed, u_live = _replay(g_now, k_log, u_log, decay_log, length, live, G)  # [B, HV, C, K], [B, HV, C, V]
    Sk = torch.einsum("bhkv,bhk->bhv", base_kv, a * k_hv) + torch.einsum(
        "bhc,bhcv->bhv", torch.einsum("bhck,bhk->bhc", decayed, k_hv), u_live)
    u = bf[..., None] * (vf - Sk)
    Sq = torch.einsum("bhkv,bhk->bhv", base_kv, a * q_hv) + torch.einsum(
        "bhc,bhcv->bhv", torch.einsum("bhck,bhk->bhc", decayed, q_hv), u_live)
    o = Sq + (q_hv * k_hv).sum(-1, keepdim=True) * u

    merge = length.to(torch.int64) >= C
    S_t = a[..., None] * base_kv + torch.einsum("bhck,bhcv->bhkv", decayed, u_live) + k_hv[..., None] * u[..., None, :]
    base_kv.copy_(torch.where(merge[:, None, None, None], S_t, base_kv))
    if C > 0:
        slot = (torch.arange(C, device=length.device)[None, :] == length[:, None].to(torch.int64)) & ~merge[:, None]
        k_log.copy_(torch.where(slot[:, None, :, None], kf[:, :, None, :], k_log))
        u_log.copy_(torch.where(slot[:, None, :, None], u[:, :, None, :], u_log))
        decay_log.copy_(torch.where(slot[:, None, :, None], g_now[:, :, None, :], decay_log))  # own log-decay
    log_decay.copy_(torch.where(merge[:, None, None], torch.zeros_like(ell), ell))
    length.copy_(torch.where(merge, torch.zeros_like(length), length + 1))
    return o[:, None].to(q.dtype)
