"""Registering a decode launcher as a torch custom op, the same way for every operator.

On a GPU the op is a ``triton_op``: ``torch.compile`` traces through ``wrap_triton`` and Inductor sees the kernels and
their declared mutations. Under ``TRITON_INTERPRET=1`` ``wrap_triton`` hands back the interpreted function, which
cannot run on FakeTensors, so there the op is an opaque ``custom_op`` with a fake (same schema, same declared
mutations, still no graph break). ``HF_DELTALOG_OPAQUE_OP=1`` forces the opaque form on a GPU too.
"""

from __future__ import annotations

import contextlib
import numbers
import os
from typing import Callable

import torch
from torch.library import triton_op

__all__ = [
    "KERNELS_INTERPRETED", "OP_KIND", "check_kernel_device", "check_launch_options", "check_launcher_arguments",
    "check_tile_elements", "decode_register_cap", "interpreting", "launch_device", "register_decode_op",
]


_TRITON_TRUE = ("1", "true", "on", "yes", "y")  # what Triton's getenv_bool reads as true, in any case, unstripped


def interpreting() -> bool:
    """Whether Triton runs under its CPU interpreter: ``TRITON_INTERPRET`` read as Triton reads it (its
    ``knobs.runtime.interpret``: ``1``, ``true``, ``on``, ``yes`` or ``y`` in any case; anything else, ``0``,
    ``false``, ``off`` or ``2`` included, is not), without importing triton."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in _TRITON_TRUE


# How Triton defined this package's kernels: it reads TRITON_INTERPRET when a kernel is defined (at this package's
# import), not when it is launched
KERNELS_INTERPRETED = interpreting()


def check_kernel_device(device: torch.device) -> None:
    """Refuse a device the kernels cannot run on: they need a CUDA device, or the CPU when they were defined under
    Triton's interpreter (``TRITON_INTERPRET=1`` set before this package was imported).

    Raises:
        ValueError: another device, or the CPU with ``TRITON_INTERPRET`` set only after the import (Triton would fail
            with "0 active drivers")."""
    if device.type == "cuda" or (device.type == "cpu" and KERNELS_INTERPRETED):
        return
    if device.type == "cpu" and interpreting():
        raise ValueError("TRITON_INTERPRET=1 was set after hf_deltalog's kernels were imported: Triton reads it when a "
                         "kernel is defined, so set it before importing hf_deltalog (and triton)")
    raise ValueError(f"tensors must be on a CUDA device (or on the CPU with TRITON_INTERPRET=1 set before importing "
                     f"hf_deltalog and triton); got {device}")


OP_KIND = "custom_op" if (KERNELS_INTERPRETED or os.environ.get("HF_DELTALOG_OPAQUE_OP", "0") == "1") else "triton_op"


def register_decode_op(name: str, body: Callable, mutates: tuple[str, ...], fake: Callable) -> Callable:
    """Register ``body`` (fully type-annotated; it checks its arguments, then launches its kernels through the
    ``wrap_triton`` it is written with) as the custom op ``name`` mutating ``mutates``. ``fake(*args)`` is the opaque
    op's fake: it checks the arguments as the body does and builds the output's fake tensor (a ``triton_op`` traces
    ``body`` itself)."""
    if OP_KIND == "triton_op":
        return triton_op(name, mutates_args=mutates)(body)
    op = torch.library.custom_op(name, mutates_args=mutates)(body)
    op.register_fake(fake)
    return op


def _is_int(x) -> bool:
    """An integer that is not a bool (``True`` would pass as 1): a Python or a numpy integer, or a ``torch.SymInt``
    (an int argument that ``torch.compile`` made symbolic, e.g. a launch option that changed between two calls)."""
    return (isinstance(x, numbers.Integral) and not isinstance(x, bool)) or isinstance(x, torch.SymInt)


def check_launcher_arguments(tensors: dict, block_v, num_warps, prepare_warps) -> None:
    """What a launcher checks before its arguments become the registered op's (whose body checks values, shapes and
    devices): every tensor argument a ``torch.Tensor`` (the op's schema would raise the dispatcher's RuntimeError) and
    the launch options' types (they become the op's ints).

    Raises:
        TypeError: a non-tensor argument, or a launch option neither None nor an int (:func:`check_launch_options`).
        ValueError: a launch option's bad value."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    check_launch_options(block_v, num_warps)
    check_launch_options(None, prepare_warps, "prepare_warps")


def check_launch_options(block_v, num_warps, warps_name: str = "num_warps") -> None:
    """Check a launcher's tile and warp options; None keeps the launcher's default.

    Raises:
        TypeError: ``block_v`` or ``num_warps`` is neither None nor an integer (a bool or a float is not one; a numpy
            integer is taken).
        ValueError: ``block_v`` is not a power of two ≥ 1, or ``num_warps`` not one of 1, 2, 4, 8, 16.
            ``warps_name`` names the warps option in the messages.
    """
    for name, value in (("block_v", block_v), (warps_name, num_warps)):
        if value is not None and not _is_int(value):
            raise TypeError(f"{name} must be an int (or None for the default); got {value!r}")
    if block_v is not None and (block_v < 1 or block_v & (block_v - 1)):
        raise ValueError(f"block_v must be a power of two >= 1 (or None for the default); got {block_v!r}")
    if num_warps is not None and num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"{warps_name} must be one of 1, 2, 4, 8, 16 (or None for the default); got {num_warps!r}")


MAX_TILE_ELEMENTS = 1 << 20  # Triton's limit on the elements of one block (TRITON_MAX_TENSOR_NUMEL), checked at compile


def check_tile_elements(kernel: str, **tiles: int) -> None:
    """Refuse a launch whose ``kernel`` would hold a block of more than 2**20 elements (Triton's limit, which it raises
    only when it compiles that kernel): the decode launch of a step runs after the prepare launch has advanced the log,
    so its tiles are checked before either launch.

    Args:
        kernel: the kernel's name in the message. tiles: each tile's element count, by name.

    Raises:
        ValueError: a tile over the limit, naming it, its size and the options that shrink it."""
    for name, n in tiles.items():
        if n > MAX_TILE_ELEMENTS:
            raise ValueError(
                f"the {kernel} kernel's {name} would hold {n:,} elements, over Triton's limit of {MAX_TILE_ELEMENTS:,} "
                "per block: use a smaller block_v (value channels per program; heads_per_program for GDN) or a "
                "smaller merge interval")


def default_prepare_warps(BK: int, BC: int) -> int:
    """Warps of an RWKV6 prepare program (one per row and head) over ``[BC, BK]`` key and decay tiles: 1 up to
    2,048 elements, 4 beyond. (The KDA prepare program holds no such tiles and takes 1 warp.)"""
    return 1 if BK * BC <= 2048 else 4


def decode_register_cap(C: int, num_warps: int, tile_elements: int) -> dict:
    """Launch options capping a one-warp DeltaLog decode program at 64 registers per thread.

    ``{"maxnreg": 64}`` when the launch has a log (``C > 0``), one warp, and a base tile of at most 1,024 fp32
    elements (``tile_elements``: e.g. the default ``[8, 128]`` tile; 32 registers of tile per thread) on a build
    that is not ROCm (``maxnreg`` is an NVIDIA option; Triton's interpreter ignores it); ``{}`` otherwise.

    64 registers × 32 threads × 32 programs fill an SM's 65,536 registers at the hardware's limit of 32 resident
    blocks, so under the cap one-warp programs never lose residency to registers. Uncapped, the GDN decode kernel
    took 71 registers at B = 128, M = 8 on an H200 (28 programs per SM); capped 64 (32 per SM), and an append step
    went from 75 % to 84 % of peak DRAM throughput (Nsight Compute, eval/results/h200/round19/). Timed
    (eval/results/h200/round17/, V-first, B = 128 / 512, µs per token): GDN M = 8 90.9 / 341.3 → 86.9 / 324.0,
    M = 16 unchanged (90.4 / 338.6); KDA mixed (M = 4 +1 %, M = 8 −2 %), so its launcher does not use it; the dense
    kernels (C = 0) 1 % slower with it, so no launcher applies it there. Larger tiles (K = 256, or ``block_v`` 16
    and 32 at K = 128) spill under the cap in an sm_90 compile (``eval/kernel_resources.py``) and were never timed
    with it, so they are left uncapped.

    The option reaches eager launches (and CUDA graphs captured from them). Under ``torch.compile`` with Inductor,
    torch's user-kernel wrapper forwards ``num_warps``/``num_stages`` to the compiled kernel but, by a reading of
    its source (torch 2.11–2.13), not ``maxnreg``: compiled graphs then run the uncapped kernel (same results;
    not measured on a GPU).

    Returns:
        The extra keyword arguments of the decode kernel's launch (``{}`` or ``{"maxnreg": 64}``)."""
    if C > 0 and num_warps == 1 and tile_elements <= 1024 and torch.version.hip is None:
        return {"maxnreg": 64}
    return {}


def launch_device(t: torch.Tensor) -> contextlib.AbstractContextManager:
    """A context in which ``t``'s CUDA device is the current one.

    Triton launches a kernel on the *current* CUDA device and its current stream, not on the device of the tensors
    it is given. With a model spread over several GPUs (``device_map="auto"``) a layer on ``cuda:1`` runs while
    ``cuda:0`` is current: unguarded, its kernel would run on the other device's stream, unordered with the work that
    produced its inputs (seen on two H200s as wrong tokens: eval/results/h200/multi_gpu/). A no-op context when the
    device already is the current one, for CPU tensors (the interpreter), and while ``torch.compile`` traces (the
    code Inductor generates sets the device of every kernel it launches)."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    if t.device.type == "cuda" and t.device.index is not None and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()

