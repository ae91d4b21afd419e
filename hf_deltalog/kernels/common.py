"""Constants and helpers shared by every DeltaLog operator."""

import functools
import numbers

import torch
from torch._subclasses.fake_tensor import is_fake

# Floor applied to every step's log-decay before it is stored or summed. exp(-104) rounds to 0 in fp32 (the smallest
# subnormal is exp(-103.3)), so the step decays exactly as the eager recurrence does, while a -inf or -1e4 gate
# cannot make a sum of log-decays NaN. In fp64 (the PyTorch references take fp64 buffers) exp(-104) = 6.8e-46 is not
# 0: a -inf gate there leaves 6.8e-46 of the state instead of wiping it.
LOG_DECAY_FLOOR = -104.0


def reference_math(fn):
    """Decorator of the PyTorch references: no autograd, and autocast off (CPU and CUDA), so that their fp32 math stays
    fp32 inside ``torch.autocast`` regions (autocast would run ``einsum`` in bf16 / fp16 and round the replay and the
    merged base). transformers' recurrences are elementwise and keep fp32 under autocast; so do the Triton kernels."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.no_grad(), torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
            return fn(*args, **kwargs)

    return wrapper


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


def check_dims(**sizes: int) -> None:
    """Raise ``ValueError`` unless every given head size or head count is ≥ 1.

    A zero ``K`` fails inside ``K ** -0.5`` and a zero ``V`` or head count launches an empty decode grid that never
    advances ``length`` while the prepare step advances the rest; both are refused up front instead."""
    bad = {name: n for name, n in sizes.items() if n < 1}
    if bad:
        raise ValueError(f"head sizes and head counts must be ≥ 1; got {bad}")


def check_workspace_sizes(**sizes) -> None:
    """Check a workspace helper's sizes (``B``, head counts, ``K``, ``C = M − 1`` log slots): ints ≥ 0. (A zero
    head size is refused by the launchers, :func:`check_dims`.)

    Raises:
        TypeError: a size that is not an int (a bool or a float is not one; a numpy integer is).
        ValueError: a negative size.
    """
    for name, n in sizes.items():
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"{name} must be an int; got {n!r}")
        if n < 0:
            raise ValueError(f"{name} must be ≥ 0 (C = M − 1 log slots); got {n}")


def check_log_ranks(k_log, value_log, value_name: str, key_heads: str = "Hk", value_heads: str = "HV") -> None:
    """Raise before a reference reads its log's sizes: ``TypeError`` unless ``k_log`` and ``value_log`` are tensors,
    ``ValueError`` unless both are 4-D (``[B, Hk, C, K]`` and ``[B, HV, C, V]``; the messages name the heads
    ``key_heads`` / ``value_heads``, e.g. ``H`` for RWKV6, and the value log ``value_name``: ``u_log`` or ``v_log``).
    The full shape checks follow in each reference."""
    for name, t in (("k_log", k_log), (value_name, value_log)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if k_log.dim() != 4 or value_log.dim() != 4:
        raise ValueError(f"k_log must be [B, {key_heads}, C, K] and {value_name} [B, {value_heads}, C, V] (4-D); got "
                         f"k_log {tuple(k_log.shape)} and {value_name} {tuple(value_log.shape)}")


def check_flags(**flags) -> None:
    """Raise ``TypeError`` unless every given flag is a Python ``bool``: a string such as ``"False"`` is truthy and
    would silently pick the other layout or normalisation."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False; got {value!r}")


def check_scale(scale) -> None:
    """Raise ``TypeError`` unless the query scale ``scale`` is None (``K ** -0.5``, FLA's and transformers' default) or
    a real number: a Python or NumPy int or float (``torch.compile``'s symbolic numbers pass); not a bool, a str (which
    ``float("0.5")`` would have parsed), a complex number or, in eager mode, a tensor (``torch.compile`` hands a NumPy
    scalar over as a tensor, so there a tensor passes)."""
    if scale is None or type(scale) is float:  # what the models pass: one type check on the decode path
        return
    # torch.compile hands a NumPy scalar over as a tensor: there only the types it keeps as constants are checked
    if isinstance(scale, (bool, str, bytes, complex)) or not (
            torch.compiler.is_compiling() or isinstance(scale, (numbers.Real, torch.SymInt, torch.SymFloat))):
        raise TypeError(f"scale must be None (K ** -0.5) or a real number (a Python or NumPy int or float); got "
                        f"{scale!r}")


def check_tensors(**tensors) -> None:
    """Raise ``TypeError`` unless every given argument is a ``torch.Tensor`` (a list or None would otherwise fail later
    with an ``AttributeError`` that does not name the argument)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")


def check_floating(**tensors: torch.Tensor) -> None:
    """Raise ``TypeError`` unless every given argument is a tensor of a floating dtype (an integer activation would be
    truncated)."""
    check_tensors(**tensors)
    for name, t in tensors.items():
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype (bfloat16, float16, float32 or float64); got {t.dtype}")


def check_same_dtype(**tensors: torch.Tensor) -> None:
    """Raise ``TypeError`` unless the given state buffers share one dtype: a decode step computes in the base's dtype
    and writes each buffer in place."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        raise TypeError(f"the DeltaLog state buffers must share one dtype (float32, or float64 for references); got "
                        f"{', '.join(f'{n} {d}' for n, d in dtypes.items())}")


def promoted_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype ``torch`` promotes ``tensors`` to (float64 if any is, for the float32 / float64 buffers here)."""
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return dt


def _spans(tensors: dict[str, torch.Tensor]) -> list[tuple[int, int, str, torch.device]]:
    """``(first byte, one past the last byte, name, device)`` that each non-empty tensor can touch, sorted. Meta
    tensors hold no memory (their addresses all read 0): they touch none."""
    out = []
    for name, t in tensors.items():
        device = t.device
        if t.numel() == 0 or device.type == "meta":
            continue
        start = t.data_ptr()
        if t.is_contiguous():
            end = start + t.nbytes
        else:
            end = start + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
        out.append((start, end, name, device))
    return sorted(out)


def check_disjoint(tensors: dict[str, torch.Tensor], written: tuple[str, ...]) -> None:
    """Raise ``ValueError`` when a buffer that a decode step writes in place shares memory with another argument.

    A step reads every buffer before it writes them, per program; two arguments that alias (the same tensor passed as
    ``k_log`` and ``decay_log``, say, whose shapes match whenever ``Hk = HV``) would make one buffer's writes land in
    the other and corrupt the state without an error. The test compares byte ranges (a strided view's whole range),
    so it may refuse two interleaved views that never touch the same element; the cache's own buffers are separate
    allocations. Host-side only (pointers and strides, no device sync; a few µs per call); skipped while
    ``torch.compile`` traces the call and for fake and meta tensors, which have no addresses. So a compiled call of a
    reference step is not checked; the Triton launchers check again inside their custom op, whose opaque form
    (``custom_op``: under ``TRITON_INTERPRET=1`` or ``HF_DELTALOG_OPAQUE_OP=1``) runs with real tensors inside a
    compiled graph too, while a graph compiled from the ``triton_op`` form (a GPU's default) launches the kernels
    without it. Inside a compiled graph the op may not see the caller's buffers: a functionalizing backend that does
    not write in place again (``aot_eager``) hands it copies of the buffers it writes, so an argument aliasing one of
    them is read as it was before the step (the result of an eager call with a copy of it: no race, nothing refused;
    checked on the CPU), while Inductor writes into the buffers themselves, and there the opaque op refuses the alias.

    Args:
        tensors: every tensor argument of the step, by name.
        written: the names of those the step updates in place.
    """
    if torch.compiler.is_compiling() or any(is_fake(t) for t in tensors.values()):
        return  # traced or fake tensors have no addresses (a fake tensor's data_ptr() reads 0; meta ones: _spans)
    spans = _spans(tensors)
    for i, (start, end, name, dev) in enumerate(spans):
        for start2, _, name2, dev2 in spans[i + 1:]:
            if start2 >= end:
                break  # sorted by start: no later range reaches into this one
            if dev2 == dev and (name in written or name2 in written):
                raise ValueError(
                    f"{name} and {name2} share memory: each buffer the step writes in place ({', '.join(written)}) "
                    "must be a tensor of its own, apart from every other argument")


def check_one_device(tensors: dict[str, torch.Tensor]) -> None:
    """Raise ``ValueError`` unless every given tensor is on one device (a decode step reads and writes them all)."""
    devices = {t.device for t in tensors.values()}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device; got {sorted(str(d) for d in devices)}")


def check_step_buffers(tensors: dict[str, torch.Tensor], written: tuple[str, ...]) -> None:
    """The reference decode steps' check of their arguments before anything is written: all on one device
    (:func:`check_one_device`), and each in-place buffer contiguous (an expanded or strided view would fail half-way
    through the step, after the base was merged) and sharing no memory with another argument
    (:func:`check_disjoint`). Raises ``ValueError``."""
    check_one_device(tensors)
    for name in written:
        if not tensors[name].is_contiguous():
            raise ValueError(f"{name} must be contiguous (it is updated in place); got strides {tensors[name].stride()}")
    check_disjoint(tensors, written)
