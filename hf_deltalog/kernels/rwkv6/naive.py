"""Pure-PyTorch references for RWKV6 decoding: eager dense and DeltaLog.

RWKV6 (Peng et al., *Eagle and Finch*, Eq. 13–15; FLA's ``naive_recurrent_rwkv6``) has no delta-rule correction: the
output reads the *pre-update* state plus a per-key bonus ``u``, and the update adds the raw ``k_t v_tᵀ`` after a
per-key decay. Per head, state key-major ``S ∈ R^{K×V}``, ``w_t ∈ R^K`` a log-decay (≤ 0)::

    o_t = (scale·r_t)ᵀ (S_{t-1} + diag(u) k_t v_tᵀ)
    S_t = diag(exp(w_t)) S_{t-1} + k_t v_tᵀ

DeltaLog keeps a dense ``base``, the cumulative log-decay per key ``ℓ̄`` since the last merge, and for each of the
``L ≤ C = M − 1`` entries the raw factors ``(k_i, v_i)`` with its step's own log-decay ``λ_i = w_i``; ``Λ_i`` (the
value of ``ℓ̄`` after entry ``i``'s step) is never stored: ``ℓ̄ − Λ_i = Σ_{j>i} λ_j`` is summed from the newest entry
backwards (:func:`hf_deltalog.kernels.common.later_decay_sums`), which keeps the precision a difference of two fp32
running sums would lose after a strong decay::

    S = diag(exp(ℓ̄)) · base + Σ_{i<L} diag(exp(ℓ̄ − Λ_i)) k_i v_iᵀ

A step reads ``S_{t-1}`` (the state as it is, before this step's decay)::

    o = baseᵀ(exp(ℓ̄) ⊙ r̃) + Σ_i ((exp(ℓ̄ − Λ_i) ⊙ k_i)·r̃) v_i + (r̃·(u ⊙ k_t)) v_t        (r̃ = scale·r_t)

then sets ``ℓ̄ ← ℓ̄ + w_t`` and appends ``(k_t, v_t, w_t)``, or merges ``S_t`` into the base (``L = C``). The log factors
are the model's own inputs, so storing them in the activation dtype loses nothing; the references compute in fp32.
Every exponent is ≤ 0 (for ``w ≤ 0``, the contract: a growth ``w > 0`` is not checked and can overflow over a window
where the dense recurrence stays finite, as for GDN).
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
    reference_math,
)

__all__ = ["naive_deltalog_rwkv6_decode", "naive_deltalog_rwkv6_materialize", "naive_recurrent_rwkv6"]


def _check(r, k, v, w, u):
    check_tensors(r=r, k=k, v=v, w=w, u=u)
    if r.dim() != 4 or k.shape != r.shape or w.shape != r.shape:
        raise ValueError(f"r, k and w must all be [B, T, H, K]; got r {tuple(r.shape)}, k {tuple(k.shape)}, "
                         f"w {tuple(w.shape)}")
    B, T, H, K = r.shape
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] with B={B}, T={T}, H={H}; got {tuple(v.shape)}")
    if tuple(u.shape) != (H, K):
        raise ValueError(f"u (the bonus) must be [H, K] = {(H, K)}; got {tuple(u.shape)}")
    check_floating(r=r, k=k, v=v, w=w, u=u)
    check_dims(K=K)  # a zero key size would fail inside the default scale K ** -0.5
    return B, T, H, K, v.shape[3]


@reference_math
def naive_recurrent_rwkv6(
    r: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eager dense RWKV6 recurrence, token by token, vectorised over batch and heads.

    Args:
        r, k: ``[B, T, H, K]`` receptance and key; v: ``[B, T, H, V]``; w: ``[B, T, H, K]`` log-decay (≤ 0);
        u: ``[H, K]`` bonus. scale: default ``K ** -0.5`` (FLA's default; FLA's RWKV6 layer passes 1.0).
        initial_state: ``[B, H, K, V]`` or None.

    Returns:
        ``o`` ``[B, T, H, V]`` in ``r.dtype`` and the final state ``[B, H, K, V]`` (or None); fp32 arithmetic, fp64
        when any input is fp64. Raises ValueError on inconsistent shapes or a zero key head size ``K``, TypeError on
        a non-tensor or non-floating input, an ``output_final_state`` that is not a bool, or a ``scale`` that is not
        None or a real number.
    """
    B, T, H, K, V = _check(r, k, v, w, u)
    check_flags(output_final_state=output_final_state)
    if initial_state is not None:
        check_floating(initial_state=initial_state)
    tensors = (r, k, v, w, u) + (() if initial_state is None else (initial_state,))
    dt = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    check_scale(scale)
    scale = K**-0.5 if scale is None else scale
    rf, kf, vf, wf, uf = (x.to(dt) for x in (r, k, v, w, u))
    rf = rf * scale
    if initial_state is None:
        S = torch.zeros(B, H, K, V, dtype=dt, device=r.device)
    else:
        if tuple(initial_state.shape) != (B, H, K, V):
            raise ValueError(f"initial_state must be [B, H, K, V] = {(B, H, K, V)}; got {tuple(initial_state.shape)}")
        S = initial_state.to(dt).clone()
    o = torch.empty(B, T, H, V, dtype=dt, device=r.device)
    for t in range(T):
        kv = kf[:, t, :, :, None] * vf[:, t, :, None, :]  # [B, H, K, V]
        o[:, t] = torch.einsum("bhkv,bhk->bhv", S + uf[None, :, :, None] * kv, rf[:, t])
        S = S * wf[:, t].exp()[..., None] + kv
    return o.to(r.dtype), (S if output_final_state else None)


def _check_log(base, log_decay, k_log, v_log, decay_log, length, B, H, K, V, state_v_first):
    check_tensors(base=base, log_decay=log_decay, decay_log=decay_log, length=length)
    C = k_log.shape[2] if k_log.dim() == 4 else -1
    for name, t, shape in (("base", base, (B, H, V, K) if state_v_first else (B, H, K, V)), ("log_decay", log_decay, (B, H, K)),
                           ("k_log", k_log, (B, H, C, K)), ("v_log", v_log, (B, H, C, V)),
                           ("decay_log", decay_log, (B, H, C, K)), ("length", length, (B,))):
        if tuple(t.shape) != shape:
            layout = " ([B, H, V, K]: state_v_first)" if name == "base" and state_v_first else ""
            raise ValueError(f"{name} must have shape {shape}{layout} (B, H, C, K, V from r/v/k_log); got "
                             f"{tuple(t.shape)}")
    for name, t in (("base", base), ("log_decay", log_decay), ("decay_log", decay_log)):
        if t.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 (or float64 for references); got {t.dtype}")
    for name, t in (("k_log", k_log), ("v_log", v_log)):
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating dtype (the activation dtype is lossless); got {t.dtype}")
    if length.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"length must be int32 or int64; got {length.dtype}")
    return C


def check_log_dtypes(k: torch.Tensor, v: torch.Tensor, k_log: torch.Tensor, v_log: torch.Tensor) -> None:
    """The key and value logs store ``k`` and ``v`` as they arrive: a log must be their own dtype, float32 or float64
    (the references). A bf16 log for fp32 activations would round every entry and is refused; a float32 log for
    float64 activations is taken (the caches keep fp32 state, and so fp32 logs, for a float64 model).
    Raises ``TypeError``."""
    for name, log, x in (("k_log", k_log, k), ("v_log", v_log, v)):
        if log.dtype not in (x.dtype, torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 or the dtype of its activation ({x.dtype}), which it stores "
                            f"losslessly; got {log.dtype}")


def _replay(extra, k_log, v_log, decay_log, length, dt):
    """``exp(ℓ̄ − Λ_i + extra) ⊙ k_i`` ``[B, H, C, K]`` and ``v_i`` ``[B, H, C, V]`` in ``dt``, zero for stale entries
    (``ℓ̄ − Λ_i`` from :func:`later_decay_sums`; ``extra`` ``[B, H, K]`` or None)."""
    C = k_log.shape[2]
    live = (torch.arange(C, device=length.device)[None, :] < length[:, None].to(torch.int64))[:, None, :, None]
    zero = torch.zeros((), dtype=dt, device=k_log.device)
    diff = later_decay_sums(decay_log.to(dt), length)
    if extra is not None:
        diff = diff + extra[:, :, None, :]
    decayed = torch.where(live, diff.exp() * k_log.to(dt), zero)
    return decayed, torch.where(live, v_log.to(dt), zero)


@reference_math
def naive_deltalog_rwkv6_materialize(
    base: torch.Tensor,
    log_decay: torch.Tensor,
    k_log: torch.Tensor,
    v_log: torch.Tensor,
    decay_log: torch.Tensor,
    length: torch.Tensor,
    state_v_first: bool = False,
) -> torch.Tensor:
    """Dense logical state ``S = diag(exp(ℓ̄))·base + Σ_{i<L} diag(exp(ℓ̄ − Λ_i)) k_i v_iᵀ`` ``[B, H, K, V]``.

    Args:
        base: ``[B, H, K, V]`` fp32 (``[B, H, V, K]`` when ``state_v_first``).
        log_decay: ``[B, H, K]`` fp32 cumulative log-decay ``ℓ̄`` per key channel since the last merge.
        k_log, v_log: ``[B, H, C, K]`` and ``[B, H, C, V]`` raw factors ``k_i``, ``v_i`` (any float dtype).
        decay_log: ``[B, H, C, K]`` fp32 own log-decays ``λ_i``.
        length: ``[B]`` int32/int64 (``0 ≤ L ≤ C``; a length above ``C`` reads all ``C`` entries and a negative one
            none, as the decode kernels read them).
        state_v_first: layout of ``base``.

    Returns:
        ``[B, H, K, V]`` (FLA's RWKV6 layout, whatever ``state_v_first``; a new tensor) in the promoted dtype of
        ``base`` and ``log_decay`` (the log is replayed in ``base.dtype``; fp32 for the caches' buffers).

    Raises:
        ValueError, TypeError: on inconsistent shapes or dtypes, a non-tensor buffer, or a ``state_v_first`` that is
            not a bool.
    """
    check_flags(state_v_first=state_v_first)
    check_log_ranks(k_log, v_log, "v_log", "H", "H")
    B, H, _, K = k_log.shape
    V = v_log.shape[3]
    _check_log(base, log_decay, k_log, v_log, decay_log, length, B, H, K, V, state_v_first)
    base_kv = base.transpose(-1, -2) if state_v_first else base
    decayed, v_live = _replay(None, k_log, v_log, decay_log, length, base.dtype)
    return log_decay.exp()[..., None] * base_kv + torch.einsum("bhck,bhcv->bhkv", decayed, v_live)


@reference_math
def naive_deltalog_rwkv6_decode(
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
    scale: float | None = None,
    state_v_first: bool = False,
) -> torch.Tensor:
    """One DeltaLog RWKV6 decode step for every row: read ``S_{t-1}``, output, then append or merge (in place).

    Args:
        r, k, w: ``[B, 1, H, K]``; v: ``[B, 1, H, V]``; u: ``[H, K]``; the buffers as in
        :func:`naive_deltalog_rwkv6_materialize` (mutated). scale: default ``K ** -0.5``. state_v_first: ``base``
        is ``[B, H, V, K]``.

    Returns ``o`` ``[B, 1, H, V]`` in ``r.dtype``. Raises ValueError/TypeError on inconsistent shapes or
    dtypes, a key or value log in a dtype that would round its activation's values (:func:`check_log_dtypes`:
    it must be the activation's dtype, float32 or float64; a float32 log is taken for float64 activations, as
    the caches keep fp32 state for a float64 model), a zero head size, tensors on more than one device, or an
    in-place buffer that is not contiguous or shares memory with another argument (checked before anything is
    written; the shared-memory check is skipped when ``torch.compile`` traces the call, whose tensors have no
    addresses); TypeError on a non-tensor argument, a
    ``state_v_first`` that is not a bool, or a ``scale`` that is not None or a real number.
    """
    B, T, H, K, V = _check(r, k, v, w, u)
    check_flags(state_v_first=state_v_first)
    if T != 1:
        raise ValueError(f"DeltaLog decode takes one token per row (T = 1); got T = {T}")
    check_dims(H=H, K=K, V=V)
    check_log_ranks(k_log, v_log, "v_log", "H", "H")  # before _check_log reads their sizes
    C = _check_log(base, log_decay, k_log, v_log, decay_log, length, B, H, K, V, state_v_first)
    check_log_dtypes(k, v, k_log, v_log)
    check_same_dtype(base=base, log_decay=log_decay, decay_log=decay_log)
    check_step_buffers(dict(r=r, k=k, v=v, w=w, u=u, base=base, log_decay=log_decay, k_log=k_log, v_log=v_log,
                            decay_log=decay_log, length=length),
                       ("base", "log_decay", "k_log", "v_log", "decay_log", "length"))
    dt = base.dtype
    check_scale(scale)
    scale = K**-0.5 if scale is None else scale
    rf, kf, vf, wf = (x[:, 0].to(dt) for x in (r, k, v, w))
    rf = rf * scale
    base_kv = base.transpose(-1, -2) if state_v_first else base  # a view: writes reach `base`
    decayed, v_live = _replay(None, k_log, v_log, decay_log, length, dt)
    o = (torch.einsum("bhkv,bhk->bhv", base_kv, log_decay.exp() * rf)
         + torch.einsum("bhc,bhcv->bhv", torch.einsum("bhck,bhk->bhc", decayed, rf), v_live)
         + (rf * u.to(dt)[None] * kf).sum(-1, keepdim=True) * vf)

    w_now = wf.clamp(min=LOG_DECAY_FLOOR)  # this step's log-decay (floor: no change in fp32)
    ell = log_decay + w_now  # ℓ̄ after this step's decay
    merge = length.to(torch.int64) >= C
    # S_t = diag(exp(w)) S_{t-1} + k vᵀ = diag(exp(ℓ̄')) base + Σ_i diag(exp(ℓ̄' − Λ_i)) k_i v_iᵀ + k vᵀ
    decayed_now, _ = _replay(w_now, k_log, v_log, decay_log, length, dt)
    S_t = (ell.exp()[..., None] * base_kv + torch.einsum("bhck,bhcv->bhkv", decayed_now, v_live)
           + kf[..., None] * vf[..., None, :])
    base_kv.copy_(torch.where(merge[:, None, None, None], S_t, base_kv))
    if C > 0:
        slot = (torch.arange(C, device=length.device)[None, :] == length[:, None].to(torch.int64)) & ~merge[:, None]
        k_log.copy_(torch.where(slot[:, None, :, None], k[:, 0, :, None, :].to(k_log.dtype), k_log))
        v_log.copy_(torch.where(slot[:, None, :, None], v[:, 0, :, None, :].to(v_log.dtype), v_log))
        decay_log.copy_(torch.where(slot[:, None, :, None], w_now[:, :, None, :], decay_log))  # own log-decay
    log_decay.copy_(torch.where(merge[:, None, None], torch.zeros_like(ell), ell))
    length.copy_(torch.where(merge, torch.zeros_like(length), length + 1))
    return o[:, None].to(r.dtype)
