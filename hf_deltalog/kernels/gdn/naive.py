"""Pure-PyTorch references for Gated DeltaNet (GDN) decoding: eager dense and DeltaLog.

Notation (per value head; the state is key-major, ``S ∈ R^{K×V}``, as transformers keeps it):

* eager recurrence (transformers' ``torch_recurrent_gated_delta_rule``, FLA's
  ``naive_recurrent_gated_delta_rule``; Yang et al., *Gated Delta Networks*, Eq. 10)::

      q̂ = l2norm(q) · K^-1/2,  k̂ = l2norm(k)              (l2norm(x) = x · rsqrt(Σx² + 1e-6))
      S' = exp(g_t) · S_{t-1}                               (decay first)
      u_t = β_t (v_t − S'ᵀ k̂_t)                            (delta-rule correction)
      S_t = S' + k̂_t u_tᵀ                                  (rank-1 update)
      o_t = S_tᵀ q̂_t                                       (read the updated state)

* DeltaLog (the seed paper's Eq. 7): the logical state is a dense ``base`` plus the ``L ≤ C = M − 1``
  most recent rank-1 updates; ``ℓ̄`` is the cumulative log-decay since the last merge and ``Λ_i`` its value when
  entry ``i`` was written::

      S = exp(ℓ̄) · base + Σ_{i<L} exp(ℓ̄ − Λ_i) K_i U_iᵀ

  A decode step sets ``ℓ̄ ← ℓ̄ + g_t``, computes ``S'ᵀk̂`` and ``S'ᵀq̂`` from the base and the log without
  materialising ``S'``, then *appends* ``(k̂_t, u_t, g_t)`` when ``L < C`` or *merges* (writes ``S_t``
  into the base, ``ℓ̄ ← 0``, ``L ← 0``) when ``L = C``. Each entry keeps its own step's log-decay ``λ_i = g_i``,
  and ``ℓ̄ − Λ_i = Σ_{j>i} λ_j`` is summed from the newest entry backwards
  (:func:`hf_deltalog.kernels.common.later_decay_sums`) rather than taken as a difference of two fp32 running sums,
  which a strong decay before entry ``i`` would leave with its rounding error. Every exponent is ≤ 0 (for
  ``g ≤ 0``): it can underflow to 0 but never overflow.
  ``M = 1`` (``C = 0``) merges on every step and is eager dense decoding.

Contract: ``g ≤ 0`` (a decay, as every supported model's gate is). A growth ``g > 0`` is not checked (a check would
read the device on every step) and is outside the contract: ``ℓ̄`` sums it over the window, so ``exp(ℓ̄)`` overflows
once the window's growth passes ~88.7 in fp32 and the step gives inf or NaN where the dense recurrence, growing one
step at a time, can stay finite. Precision: the fp32 output error against an fp64 reference is the dense fp32
recurrence's (median ratio 0.92–1.13) up to M = 16; beyond, with no decay at all (``g = 0``), the replay's sums of up
to ``C`` nearly cancelling terms add rounding of their own: median ratio 1.6 at M = 64 and 2.4 at M = 1024 (KDA
alike; with a weak decay, g in [−0.05, 0], GDN 1.03 and KDA 1.25 at M = 1024;
``eval/merge_interval_precision.py``, ``eval/results/cpu/merge_interval_precision/``).

GQA: key head ``h`` serves the ``G = HV // Hk`` consecutive value heads ``h·G … h·G + G − 1``
(``repeat_interleave`` on the head dim, as transformers and FLA map them).
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

__all__ = [
    "l2norm",
    "naive_recurrent_gated_delta_rule",
    "naive_deltalog_gdn_decode",
    "naive_deltalog_gdn_materialize",
]


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x · rsqrt(Σ x² + eps)`` over the last dim, as transformers' ``l2norm``: ``x`` ``[..., K]`` (q or k,
    ``[B, T, Hk, K]`` here), any float dtype; returns the same shape and dtype."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _check_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> None:
    check_tensors(q=q, k=k, v=v, g=g, beta=beta)
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be [B, T, Hk, K]; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    B, T, Hk, _ = q.shape
    if v.dim() != 4 or v.shape[:2] != (B, T):
        raise ValueError(f"v must be [B, T, HV, V] with B={B}, T={T}; got {tuple(v.shape)}")
    HV = v.shape[2]
    if Hk == 0 or HV % Hk != 0:
        raise ValueError(f"the value heads HV={HV} must be a positive multiple of the key heads Hk={Hk} (GQA)")
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != (B, T, HV):
            raise ValueError(f"{name} must be [B, T, HV] = {(B, T, HV)}; got {tuple(t.shape)}")
    check_floating(q=q, k=k, v=v, g=g, beta=beta)
    check_dims(K=q.shape[3])  # a zero key size would fail inside the default scale K ** -0.5


@reference_math
def naive_recurrent_gated_delta_rule(
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
    """Eager dense GDN recurrence, token by token, vectorised over batch and heads.

    Args:
        q, k: ``[B, T, Hk, K]`` raw queries/keys, any float dtype.
        v: ``[B, T, HV, V]``; ``HV`` a multiple of ``Hk``.
        g: ``[B, T, HV]`` log-decay (≤ 0 for GDN), any float dtype.
        beta: ``[B, T, HV]`` delta-rule step size.
        scale: query scale. Default: ``K ** -0.5``.
        initial_state: ``[B, HV, K, V]`` or None (zeros).
        output_final_state: return the final state too.
        use_qk_l2norm_in_kernel: l2-normalise q and k first. Default False, as FLA's
            ``naive_recurrent_gated_delta_rule``; transformers always passes True, which is the DeltaLog references'
            and launchers' default.

    Returns:
        ``o`` ``[B, T, HV, V]`` in ``q.dtype`` and the final state ``[B, HV, K, V]`` (or None). Arithmetic is fp32,
        or fp64 when any input is fp64 (use that as the high-precision reference).

    Raises:
        ValueError: on inconsistent shapes or a zero key head size ``K``.
        TypeError: a non-tensor or non-floating activation or ``initial_state``, or a flag
            (``output_final_state``, ``use_qk_l2norm_in_kernel``) that is not a bool, or a ``scale`` that is not None
            or a real number (:func:`check_scale`).
    """
    _check_heads(q, k, v, g, beta)
    check_flags(output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    if initial_state is not None:
        check_floating(initial_state=initial_state)
    B, T, Hk, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // Hk
    dt = _compute_dtype(q, k, v, g, beta, *(() if initial_state is None else (initial_state,)))
    check_scale(scale)
    scale = K**-0.5 if scale is None else scale
    qf, kf = q.to(dt), k.to(dt)
    if use_qk_l2norm_in_kernel:
        qf, kf = l2norm(qf), l2norm(kf)
    qf = (qf * scale).repeat_interleave(G, dim=2)
    kf = kf.repeat_interleave(G, dim=2)
    vf, gf, bf = v.to(dt), g.to(dt), beta.to(dt)
    if initial_state is None:
        S = torch.zeros(B, HV, K, V, dtype=dt, device=q.device)
    else:
        if initial_state.shape != (B, HV, K, V):
            raise ValueError(f"initial_state must be [B, HV, K, V] = {(B, HV, K, V)}; got {tuple(initial_state.shape)}")
        S = initial_state.to(dt).clone()
    o = torch.empty(B, T, HV, V, dtype=dt, device=q.device)
    for t in range(T):
        S = S * gf[:, t].exp()[..., None, None]
        u = bf[:, t, :, None] * (vf[:, t] - torch.einsum("bhkv,bhk->bhv", S, kf[:, t]))
        S = S + kf[:, t, :, :, None] * u[:, :, None, :]
        o[:, t] = torch.einsum("bhkv,bhk->bhv", S, qf[:, t])
    return o.to(q.dtype), (S if output_final_state else None)


def _check_log(base, log_decay, k_log, u_log, decay_log, length, B, Hk, HV, K, V, state_v_first):
    check_tensors(base=base, log_decay=log_decay, decay_log=decay_log, length=length)
    if Hk == 0 or HV % Hk != 0:
        raise ValueError(f"the value heads HV={HV} (u_log) must be a positive multiple of the key heads Hk={Hk} "
                         "(k_log)")
    expect_base = (B, HV, V, K) if state_v_first else (B, HV, K, V)
    if tuple(base.shape) != expect_base:
        layout = "[B, HV, V, K]" if state_v_first else "[B, HV, K, V]"
        raise ValueError(f"base must be {layout} = {expect_base}; got {tuple(base.shape)}")
    C = k_log.shape[2] if k_log.dim() == 4 else -1
    checks = (
        ("log_decay", log_decay, (B, HV)),
        ("k_log", k_log, (B, Hk, C, K)),
        ("u_log", u_log, (B, HV, C, V)),
        ("decay_log", decay_log, (B, HV, C)),
        ("length", length, (B,)),
    )
    for name, t, shape in checks:
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape} (B, Hk, HV, C, K, V from q/v/k_log); got {tuple(t.shape)}")
    for name, t in (("base", base), ("log_decay", log_decay), ("k_log", k_log), ("u_log", u_log), ("decay_log", decay_log)):
        if t.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 (or float64 for references); got {t.dtype}")
    if length.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"length must be int32 or int64; got {length.dtype}")
    return C


def _replay_weights(
    extra: torch.Tensor | None, decay_log: torch.Tensor, k_log: torch.Tensor, u_log: torch.Tensor, length: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``w[b, h, i] = exp(ℓ̄ − Λ_i + extra)`` for live entries ``i < L[b]``, else 0 (``[B, HV, C]``), with
    ``ℓ̄ − Λ_i`` from :func:`later_decay_sums` and ``extra`` ``[B, HV]`` this step's log-decay (None: 0), and
    ``k_log``/``u_log`` with the stale entries replaced by zeros, so that whatever a stale slot holds (even NaN) never
    reaches the output."""
    C = decay_log.shape[-1]
    live = (torch.arange(C, device=length.device)[None, :] < length[:, None].to(torch.int64))[:, None, :]  # [B, 1, C]
    diff = later_decay_sums(decay_log, length)
    if extra is not None:
        diff = diff + extra[..., None]
    w = torch.where(live, diff.exp(), torch.zeros_like(decay_log))
    k_live = torch.where(live[..., None], k_log, torch.zeros_like(k_log))
    return w, k_live, torch.where(live[..., None], u_log, torch.zeros_like(u_log))


@reference_math
def naive_deltalog_gdn_materialize(
    base: torch.Tensor,
    log_decay: torch.Tensor,
    k_log: torch.Tensor,
    u_log: torch.Tensor,
    decay_log: torch.Tensor,
    length: torch.Tensor,
    state_v_first: bool = False,
) -> torch.Tensor:
    """Dense logical state ``S = exp(ℓ̄)·base + Σ_{i<L} exp(ℓ̄ − Λ_i) K_i U_iᵀ`` (seed paper, Eq. 7).

    Args:
        base: ``[B, HV, K, V]`` fp32 (``[B, HV, V, K]`` when ``state_v_first``).
        log_decay: ``[B, HV]`` fp32 cumulative log-decay ``ℓ̄`` since the last merge.
        k_log: ``[B, Hk, C, K]`` fp32 key-side factors (l2-normalised keys), one per key head.
        u_log: ``[B, HV, C, V]`` fp32 value-side factors ``u_i = β_i (v_i − S'ᵀ k̂_i)``.
        decay_log: ``[B, HV, C]`` fp32 log-decay ``λ_i`` of the step that wrote entry ``i`` (so
            ``ℓ̄ − Λ_i = Σ_{j>i} λ_j``: :func:`hf_deltalog.kernels.common.later_decay_sums`).
        length: ``[B]`` int32/int64 live entries ``L`` per row (``0 ≤ L ≤ C``; a length above ``C`` reads all ``C``
            entries and a negative one none, as the decode kernels read them).
        state_v_first: layout of ``base``.

    Returns:
        ``[B, HV, K, V]`` (transformers' layout, whatever ``state_v_first``) in the promoted dtype of ``base`` and
        the log buffers (fp32 when all are fp32, fp64 if any is); a new tensor.

    Raises:
        ValueError, TypeError: on inconsistent shapes or dtypes, a non-tensor buffer, or a ``state_v_first`` that is
            not a bool.
    """
    check_flags(state_v_first=state_v_first)
    check_log_ranks(k_log, u_log, "u_log")
    B, Hk, _, K = k_log.shape
    HV, V = u_log.shape[1], u_log.shape[3]
    _check_log(base, log_decay, k_log, u_log, decay_log, length, B, Hk, HV, K, V, state_v_first)
    G = HV // Hk
    dt = promoted_dtype(base, log_decay, k_log, u_log, decay_log)
    base, log_decay, k_log, u_log, decay_log = (t.to(dt) for t in (base, log_decay, k_log, u_log, decay_log))
    base_kv = base.transpose(-1, -2) if state_v_first else base
    w, k_live, u_live = _replay_weights(None, decay_log, k_log, u_log, length)
    k_hv = k_live.repeat_interleave(G, dim=1)  # [B, HV, C, K]
    return log_decay.exp()[..., None, None] * base_kv + torch.einsum("bhc,bhck,bhcv->bhkv", w, k_hv, u_live)


@reference_math
def naive_deltalog_gdn_decode(
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
    """One DeltaLog decode step for every row: replay, output, then append or merge (in place).

    Computes exactly what :func:`naive_recurrent_gated_delta_rule` computes for ``T = 1`` from the logical state
    of :func:`naive_deltalog_gdn_materialize`, without materialising it: ``S'ᵀk̂ = exp(ℓ̄')·baseᵀk̂ +
    Σ_i exp(ℓ̄' − Λ_i)(K_i·k̂) U_i`` and likewise for ``q̂``, with ``ℓ̄' = ℓ̄ + g_t``. Then, per row: if ``L < C``
    it writes entry ``L`` (``k̂``, ``u`` and the step's own log-decay ``λ_t = g_t``) and sets ``L ← L + 1``,
    ``ℓ̄ ← ℓ̄'``; if ``L = C`` (merge) it writes ``S_t`` into the base, ``ℓ̄ ← 0`` and ``L ← 0``. Rows in different phases share a call; nothing is read
    back to the host.

    Args:
        q, k: ``[B, 1, Hk, K]`` raw queries/keys (bf16, fp16, fp32 or fp64).
        v: ``[B, 1, HV, V]``.
        g: ``[B, 1, HV]`` log-decay (any float dtype; cast to the state dtype).
        beta: ``[B, 1, HV]``.
        base, log_decay, k_log, u_log, decay_log, length: the DeltaLog buffers, as in
            :func:`naive_deltalog_gdn_materialize`; mutated in place. ``C = k_log.shape[2]`` (``M = C + 1``).
        scale: query scale. Default: ``K ** -0.5``.
        use_qk_l2norm_in_kernel: l2-normalise q and k (eps 1e-6) as transformers does. Default True (what
            transformers passes), unlike the dense :func:`naive_recurrent_gated_delta_rule`'s False (FLA's default):
            compare the two with the flag given explicitly.
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
    _check_heads(q, k, v, g, beta)
    check_flags(use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_v_first=state_v_first)
    B, T, Hk, K = q.shape
    HV, V = v.shape[2], v.shape[3]
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

    qf, kf = q[:, 0].to(dt), k[:, 0].to(dt)  # [B, Hk, K]
    if use_qk_l2norm_in_kernel:
        qf, kf = l2norm(qf), l2norm(kf)
    qf = qf * scale
    vf, gf, bf = v[:, 0].to(dt), g[:, 0].to(dt), beta[:, 0].to(dt)  # [B, HV, V], [B, HV], [B, HV]

    base_kv = base.transpose(-1, -2) if state_v_first else base  # a view: writes reach `base`
    g_now = gf.clamp(min=LOG_DECAY_FLOOR)  # this step's log-decay (the floor changes no decay factor in fp32)
    ell = log_decay + g_now  # ℓ̄' [B, HV]
    a = ell.exp()
    w, k_live, u_live = _replay_weights(g_now, decay_log, k_log, u_log, length)  # [B, HV, C], ..., [B, HV, C, V]
    # Replay coefficients per key head, shared by the G value heads of its group.
    qK = torch.einsum("bhck,bhk->bhc", k_live, qf).repeat_interleave(G, dim=1)  # [B, HV, C]
    kK = torch.einsum("bhck,bhk->bhc", k_live, kf).repeat_interleave(G, dim=1)
    q_hv, k_hv = qf.repeat_interleave(G, dim=1), kf.repeat_interleave(G, dim=1)  # [B, HV, K]

    Sk = a[..., None] * torch.einsum("bhkv,bhk->bhv", base_kv, k_hv) + torch.einsum("bhc,bhcv->bhv", w * kK, u_live)
    u = bf[..., None] * (vf - Sk)  # [B, HV, V]
    Sq = a[..., None] * torch.einsum("bhkv,bhk->bhv", base_kv, q_hv) + torch.einsum("bhc,bhcv->bhv", w * qK, u_live)
    o = Sq + (q_hv * k_hv).sum(-1, keepdim=True) * u

    merge = length.to(torch.int64) >= C  # [B]
    # Merge rows: S_t = exp(ℓ̄')·base + Σ_i w_i K_i U_iᵀ + k̂ uᵀ becomes the new base.
    k_log_hv = k_live.repeat_interleave(G, dim=1)
    S_t = a[..., None, None] * base_kv + torch.einsum("bhc,bhck,bhcv->bhkv", w, k_log_hv, u_live)
    S_t = S_t + k_hv[..., None] * u[..., None, :]
    base_kv.copy_(torch.where(merge[:, None, None, None], S_t, base_kv))
    if C > 0:
        # Append rows: write entry L (a one-hot over the C slots; merge rows write nothing).
        slot = (torch.arange(C, device=length.device)[None, :] == length[:, None].to(torch.int64)) & ~merge[:, None]
        k_log.copy_(torch.where(slot[:, None, :, None], kf[:, :, None, :], k_log))
        u_log.copy_(torch.where(slot[:, None, :, None], u[:, :, None, :], u_log))
        decay_log.copy_(torch.where(slot[:, None, :], g_now[..., None], decay_log))  # the entry's own log-decay
    log_decay.copy_(torch.where(merge[:, None], torch.zeros_like(ell), ell))
    length.copy_(torch.where(merge, torch.zeros_like(length), length + 1))
    return o[:, None].to(q.dtype)
