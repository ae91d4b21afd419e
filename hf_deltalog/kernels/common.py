"""Constants and helpers shared by every DeltaLog operator."""

import torch

# Floor applied to every step's log-decay before it is stored or summed. exp(-104) rounds to 0 in fp32 (the smallest
# subnormal is exp(-103.3)), so the step decays exactly as the eager recurrence does, while a -inf or -1e4 gate
# cannot make a sum of log-decays NaN.
LOG_DECAY_FLOOR = -104.0


def later_decay_sums(decay_log: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """``Σ_{j=i+1}^{L-1} λ_j`` for every slot ``i`` of a log whose slot ``j`` holds entry ``j``'s own log-decay
    ``λ_j``: the log-decay the state went through after entry ``i`` was written, i.e. ``ℓ̄ − Λ_i`` in the notation
    of the cumulative log-decay ``ℓ̄`` and its value ``Λ_i`` at entry ``i``.

    Summed from the newest entry backwards, so a sum never contains a decay older than its entry: a strong decay
    before entry ``i`` cannot cost the small later decays their precision, as the difference of two fp32 running sums
    ``ℓ̄ − Λ_i`` would (``eval/decay_spike_precision.py``). Stale slots (``i ≥ L``, any content, NaN included) count as
    0 and their own result is meaningless (callers mask them).

    Args:
        decay_log: ``[B, H, C]`` or ``[B, H, C, K]`` (a decay per key channel) float log-decays.
        length: ``[B]`` int32/int64 live entries per row.

    Returns a tensor of ``decay_log``'s shape and dtype.
    """
    C = decay_log.shape[2]
    live = torch.arange(C, device=length.device)[None, :] < length[:, None].to(torch.int64)  # [B, C]
    live = live.view(live.shape[0], 1, C, *([1] * (decay_log.dim() - 3)))
    lam = torch.where(live, decay_log, torch.zeros((), dtype=decay_log.dtype, device=decay_log.device))
    later = torch.cat([lam[:, :, 1:], torch.zeros_like(lam[:, :, :1])], dim=2)  # slot i holds λ_{i+1}
    return later.flip(2).cumsum(2).flip(2)
