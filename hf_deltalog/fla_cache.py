"""DeltaLog for flash-linear-attention's model classes (``fla.models``: RWKV6, GatedDeltaNet, KDA).

FLA's causal LMs keep their own cache class, ``fla.models.utils.Cache`` (one state dict per layer:
``recurrent_state``, ``attn_state``, ``conv_state``, ``ffn_state``), and their models wrap any other cache object with
``Cache.from_legacy_cache``. :class:`FLADeltaLogCache` therefore *is* an FLA ``Cache``;
``DeltaLogCache(fla_model)`` returns one, so the user call stays
``model.generate(**inputs, past_key_values=DeltaLogCache(model))``.

Per recurrent layer the dict's ``recurrent_state`` is a :class:`FLADeltaLogState` handle; the buffers behind it
(``C = M − 1`` log slots)::

    base       [B, HV, K, V] fp32 (torch backend) or [B, HV, V, K] (Triton backend: V-first, FLA's GDN/KDA layout)
    log_decay  [B, HV] (GDN) or [B, HV, K] (KDA, RWKV6: one log-decay per key channel) fp32
    k_log      [B, Hk, C, K] fp32   key-side factors (GDN/KDA: l2-normalised keys; RWKV6: raw keys)
    u_log      [B, HV, C, V] fp32   value-side factors (GDN/KDA: u_t = β_t (v_t − S'ᵀk̂_t); RWKV6: raw values v_t)
    decay_log  [B, HV, C] or [B, HV, C, K] fp32   each entry's own log-decay λ_i (ℓ̄ − Λ_i = Σ_{j>i} λ_j)
    length     [B] int32             live entries per row

Only the live slots (``i < length``) of the logs are state; the slots past them are scratch (the Triton kernels leave
a merge's decayed keys in the stale KDA / RWKV6 decay slots) and nothing reads them.

The math of each operator is in :mod:`hf_deltalog.kernels.gdn.naive`, :mod:`hf_deltalog.kernels.kda.naive` and
:mod:`hf_deltalog.kernels.rwkv6.naive`. Token-shift states (RWKV6 ``conv_state``/``ffn_state``, ``[B, hidden]``) and
short-convolution states (GDN/KDA ``conv_state``, three ``[B, D, W]``) stay dense in the dict, as FLA keeps them.

A forward that feeds one token per sequence runs the DeltaLog step (FLA's gates ``-exp(A_log)·softplus(g + dt_bias)``,
KDA's ``lower_bound·sigmoid(exp(A_log)·(g + dt_bias))``, ``sigmoid(β)`` (×2 with ``allow_neg_eigval``) are computed in
fp32 exactly as FLA's kernels do, then the DeltaLog decode of the operator). Anything else (prefill, multi-token
continuation, ``use_cache=False``, rows without a token) runs FLA's own kernel on the materialised dense state; a
dense final state it returns restarts the log.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import sys
import threading
import warnings
import weakref
from typing import Any, Callable

import torch
import torch.nn.functional as F
from fla.models.cache_utils import FLALayer
from fla.models.utils import Cache as FLACache

from hf_deltalog.cache import (
    BACKENDS,
    DENSE_BELOW_STATE_BYTES,
    StepOrder,
    _check_continuation,
    _check_held_rows_continue,
    _check_merge_interval,
    _Status,
    buffer_bytes,
    check_beam_idx,
    check_kernel_dtype,
    check_layer_index,
    check_layers_agree,
    check_plan_arguments,
    check_repeats,
    check_row_indices,
    check_rows_match,
    check_stagger_merges,
    consumed_ledger,
    copy_state,
    memory_breakdown_of,
    note_change_during_generate,
    restart_log,
    restore_state,
    settle_change_during_generate,
)
from hf_deltalog.kernels._op import interpreting
from hf_deltalog.kernels.gdn.naive import naive_deltalog_gdn_decode, naive_deltalog_gdn_materialize
from hf_deltalog.kernels.kda.naive import naive_deltalog_kda_decode, naive_deltalog_kda_materialize
from hf_deltalog.kernels.rwkv6.naive import naive_deltalog_rwkv6_decode, naive_deltalog_rwkv6_materialize
from hf_deltalog.patches.fla import FLA_FAMILIES, FLAFamilySpec, fla_family_of, patch_fla, supported_fla_model_types

__all__ = ["FLADeltaLogCache", "FLADeltaLogLayer", "FLADeltaLogState", "fla_generate_handover"]

# Attributes an FLA kernel reads from a tensor ``initial_state``: reaching one on the handle means the handle got to a
# kernel hf_deltalog has not bound.
_TENSOR_ATTRIBUTES = frozenset({"shape", "dtype", "stride", "contiguous", "is_contiguous", "data_ptr", "size", "dim",
                                "to", "float", "clone", "numel", "element_size", "new_empty", "new_zeros", "ndim"})


def _triton_decoder(operator: str) -> tuple[Callable, Callable] | None:
    """``(decode, workspace(B, Hk, HV, K, C, device))`` of the operator's Triton kernels, or None without triton."""
    try:
        if operator == "rwkv6":
            from hf_deltalog.kernels.rwkv6.fused_deltalog import deltalog_rwkv6_workspace, fused_deltalog_rwkv6_decode

            return fused_deltalog_rwkv6_decode, (lambda B, Hk, HV, K, C, device:
                                                 deltalog_rwkv6_workspace(B, HV, K, C, device))
        if operator == "kda":
            from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace, fused_deltalog_kda_decode

            return fused_deltalog_kda_decode, deltalog_kda_workspace
        from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode

        return fused_deltalog_gdn_decode, deltalog_gdn_workspace
    except Exception:  # noqa: BLE001 - triton missing or unusable here: the torch backend serves
        return None



# FLA's layer module of each family -> its model type (the caller of a layer's step read or store)
_LAYER_MODULE_FAMILY = {spec.module: spec.model_type for spec in FLA_FAMILIES.values()}

class _Shared:
    """State shared by a cache and its layers: the failure status and the last ``cu_seqlens`` checked."""

    __slots__ = ("status", "cu_seqlens", "cu_version", "one_each")

    def __init__(self) -> None:
        self.status = _Status()
        self.cu_seqlens: torch.Tensor | None = None
        self.cu_version = -1
        self.one_each = False

    def one_token_each(self, cu_seqlens: torch.Tensor, rows: int) -> bool:
        """Whether ``cu_seqlens`` is ``[0, 1, …, rows]`` (every sequence holds one token). FLA's unpadding hands every
        layer of a forward the same tensor, so this reads the device once per forward (FLA's own unpadding
        synchronises there already, through ``torch.nonzero``). The answer is kept for that tensor at its version: a
        caller's own ``cu_seqlens`` buffer refilled in place is read again."""
        if cu_seqlens is not self.cu_seqlens or cu_seqlens._version != self.cu_version:
            self.one_each = cu_seqlens.numel() == rows + 1 and bool(torch.equal(
                cu_seqlens, torch.arange(rows + 1, device=cu_seqlens.device, dtype=cu_seqlens.dtype)))
            self.cu_seqlens, self.cu_version = cu_seqlens, cu_seqlens._version
        return self.one_each


class FLADeltaLogState:
    """What ``cache[layer_idx]['recurrent_state']`` holds instead of a dense tensor.

    The patched FLA kernels (:mod:`hf_deltalog.patches.fla`) recognise it and run :meth:`FLADeltaLogLayer.run`;
    :meth:`FLADeltaLogLayer.materialize` gives the dense state it stands for.
    """

    __slots__ = ("layer",)

    def __init__(self, layer: FLADeltaLogLayer):
        self.layer = layer

    @property
    def device(self) -> torch.device:
        """The device of the layer's base (the CPU before its first prefill)."""
        return self.layer.base.device if self.layer.base is not None else torch.device("cpu")

    def run(self, upstream: Callable, spec: FLAFamilySpec, arguments: dict[str, Any], multi_token: bool):
        """Called by the patched FLA recurrences: the layer's step (:meth:`FLADeltaLogLayer.run`)."""
        return self.layer.run(upstream, spec, arguments, multi_token)

    def __getattr__(self, name: str):
        if name in _TENSOR_ATTRIBUTES:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            # an FLA kernel took the handle for a tensor: FLA's code read it, or Triton's, called by FLA's unbound
            # kernel (its interpreter reads the arguments first for some families); a user's read changes nothing
            if caller.split(".")[0] in ("fla", "triton"):
                self.layer.shared.status.broken = ("was left inconsistent by a forward that stopped part-way: its "
                                                   "state reached an FLA kernel that hf_deltalog has not bound")
                if type(self) is not globals()["FLADeltaLogState"]:  # this module was reloaded since (autoreload)
                    raise RuntimeError(
                        "this DeltaLogCache was built before hf_deltalog.fla_cache was reloaded (importlib.reload, "
                        "IPython's autoreload): the reloaded bindings do not know its state objects; build a new "
                        "DeltaLogCache")
                raise RuntimeError(
                    "a DeltaLog state reached an FLA kernel that hf_deltalog has not bound (was "
                    "hf_deltalog.unpatch() called, or is the layer of a family DeltaLogCache does not serve?); call "
                    "hf_deltalog.patch(), then cache.reset() (this forward stopped part-way and left the cache "
                    "inconsistent: it refuses further use until reset), or use FLA's own cache"
                )
            raise AttributeError(  # a read from user code: nothing changes
                f"{name!r}: cache[{self.layer.layer_idx}]['recurrent_state'] is a DeltaLog handle, not a tensor; "
                f"cache.materialize({self.layer.layer_idx}) gives the dense state it stands for")
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"FLADeltaLogState(layer={self.layer.layer_idx}, M={self.layer.merge_interval})"


class FLADeltaLogLayer(FLALayer):
    """FLA cache layer of one recurrent layer: FLA's state dict, with DeltaLog buffers behind ``recurrent_state``.

    Args:
        spec: the FLA family (:data:`hf_deltalog.patches.fla.FLA_FAMILIES`).
        dims: ``(Hk, HV, K, V)``.
        merge_interval: ``M ≥ 1`` (``M = 1``: eager dense decoding).
        backend: ``"auto"``, ``"torch"`` or ``"triton"`` (resolved when the buffers are allocated).
        layer_idx: the model layer served.
        auto_merge_interval: ``merge_interval`` is the family default, so the Triton backend may pick ``M = 1`` for
            small states (:data:`hf_deltalog.cache.DENSE_BELOW_STATE_BYTES`).
        stagger_merges: start row ``r``'s log at ``r mod M`` zero entries after each prefill
            (:func:`hf_deltalog.cache.restart_log`).
    """

    is_compileable = False

    def __init__(self, spec: FLAFamilySpec, dims: tuple[int, int, int, int], merge_interval: int, backend: str,
                 layer_idx: int, shared: _Shared | None = None, auto_merge_interval: bool = False,
                 stagger_merges: bool = False):
        super().__init__()
        self.spec = spec
        self.stagger_merges = check_stagger_merges(stagger_merges)
        self.staggered = False  # whether the log's last restart staggered the rows (restart_log's answer)
        self.num_k_heads, self.num_v_heads, self.k_head_dim, self.v_head_dim = dims
        self.merge_interval = self.default_merge_interval = merge_interval
        self.auto_merge_interval = auto_merge_interval
        self.requested_backend = backend
        self.backend: str | None = None
        self.state_v_first = False  # layout of our base (FLA's layout is spec.state_v_first)
        self.dense_fla = False  # M = 1 on the GPU with FLA's layout: FLA's own kernel decodes
        self.layer_idx = layer_idx
        self.shared = shared if shared is not None else _Shared()
        self.handle = FLADeltaLogState(self)
        self._names: tuple[str, ...] = ()
        self.base = self.log_decay = self.k_log = self.u_log = self.decay_log = self.length = self.workspace = None

    # ------------------------------------------------------------------ buffers
    def _tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self._names}

    def _resolve_backend(self, device: torch.device) -> str:
        if self.requested_backend == "torch":
            return "torch"
        if self.requested_backend == "triton":
            if device.type != "cuda" and not interpreting():
                raise ValueError(
                    f"backend='triton' needs CUDA tensors (the state is on {device}) or TRITON_INTERPRET=1 set before "
                    "triton is imported; build a new DeltaLogCache(model, backend='torch') for the CPU (reset() keeps "
                    "the backend)"
                )
            return "triton"
        return "triton" if (device.type == "cuda" and _triton_decoder(self.spec.operator) is not None) else "torch"

    def plan(self, batch: int, device: torch.device) -> dict[str, Any]:
        """How this layer decodes ``batch`` rows on ``device``: ``backend``, ``merge_interval``, ``state_v_first`` (the
        Triton kernels keep the base V-first, FLA's own GDN/KDA layout) and ``dense_fla`` (M = 1 on the GPU, the base
        in FLA's layout - V-first for GDN/KDA, ``[K, V]`` for RWKV6: FLA's fused-recurrent kernel decodes, as FLA's
        cache would). A query: it changes nothing, also when it raises.

        Raises:
            ValueError: ``backend="triton"`` off CUDA without ``TRITON_INTERPRET=1``; a negative ``batch``.
            TypeError: ``batch`` not an int. (``device`` may be a string.)
        """
        device = check_plan_arguments(batch, device)
        backend = self._resolve_backend(device)
        HV, K, V = self.num_v_heads, self.k_head_dim, self.v_head_dim
        merge_interval = self.default_merge_interval
        threshold = DENSE_BELOW_STATE_BYTES.get(self.spec.operator, 0)
        if self.auto_merge_interval and backend == "triton" and batch * HV * K * V * 4 < threshold:
            merge_interval = 1
        state_v_first = backend == "triton"
        if merge_interval == 1 and device.type == "cuda" and backend == "triton":
            state_v_first = self.spec.state_v_first  # dense on the GPU: FLA's own kernel decodes, in FLA's layout
        dense_fla = merge_interval == 1 and device.type == "cuda" and state_v_first == self.spec.state_v_first
        return dict(backend=backend, merge_interval=merge_interval, state_v_first=state_v_first, dense_fla=dense_fla)

    def _allocate(self, batch: int, device: torch.device) -> None:
        try:
            plan = self.plan(batch, device)
        except ValueError as err:  # inside a forward: earlier layers may have advanced, so the cache is locked
            raise self.shared.status.reject(str(err)) from None
        self.backend, self.merge_interval = plan["backend"], plan["merge_interval"]
        self.state_v_first, self.dense_fla = plan["state_v_first"], plan["dense_fla"]
        Hk, HV, K, V = self.num_k_heads, self.num_v_heads, self.k_head_dim, self.v_head_dim
        C = self.merge_interval - 1
        f32 = dict(dtype=torch.float32, device=device)
        per_key = () if self.spec.operator == "gdn" else (K,)  # KDA and RWKV6 decay each key channel
        self.base = torch.zeros((batch, HV, V, K) if self.state_v_first else (batch, HV, K, V), **f32)
        self.log_decay = torch.zeros(batch, HV, *per_key, **f32)
        self.k_log = torch.zeros(batch, Hk, C, K, **f32)
        self.u_log = torch.zeros(batch, HV, C, V, **f32)
        self.decay_log = torch.zeros(batch, HV, C, *per_key, **f32)
        self.length = torch.zeros(batch, dtype=torch.int32, device=device)
        self._names = ("base", "log_decay", "k_log", "u_log", "decay_log", "length")
        if self.backend == "triton":
            self.workspace = _triton_decoder(self.spec.operator)[1](batch, Hk, HV, K, C, device)
            self._names += ("workspace",)
        self.device = device

    @property
    def batch_size(self) -> int:
        """Rows the layer holds (``B`` of its base), -1 before its first prefill."""
        return -1 if self.base is None else self.base.shape[0]

    def _fla_shape(self, rows: int) -> tuple[int, int, int, int]:
        HV, K, V = self.num_v_heads, self.k_head_dim, self.v_head_dim
        return (rows, HV, V, K) if self.spec.state_v_first else (rows, HV, K, V)

    def _leave_inference_tensors(self) -> None:
        """Buffers allocated under ``torch.inference_mode()`` are inference tensors, which cannot be updated in place
        outside it: there they are replaced by ordinary copies (the same values), so a later turn under ``no_grad``
        goes on as with FLA's own cache (which reassigns its states). A host check per call."""
        if self.base is not None and self.base.is_inference() and not torch.is_inference_mode_enabled():
            for name in self._names:
                setattr(self, name, getattr(self, name).clone())

    def check_recurrent_state(self, state: torch.Tensor, conv_state: Any = None, forward: bool = True) -> None:
        """Refuse, before anything changes, a dense recurrent state this layer cannot take: not a floating tensor, not
        FLA's ``[N, HV, V, K]`` (GDN/KDA) / ``[N, H, K, V]`` (RWKV6) shape of this model, or on another device than the
        layer's conv / token-shift state (``conv_state``: the one stored with it, else the one the layer holds).

        Raises:
            TypeError: not a floating tensor.
            ValueError: the rest; it locks the cache until ``reset()`` when ``forward`` (a store by FLA's model code:
                the layers before this one in that forward have advanced), not for a store by other code.
        """
        refuse = functools.partial(self.shared.status.refuse, in_forward=forward)
        if not state.is_floating_point():
            raise TypeError(f"layer {self.layer_idx}: a recurrent state must be a floating tensor; got {state.dtype}")
        rows = state.shape[0] if state.dim() == 4 else -1
        if state.dim() != 4 or tuple(state.shape) != self._fla_shape(rows):
            layout = "[N, HV, V, K]" if self.spec.state_v_first else "[N, H, K, V]"
            raise refuse(
                f"layer {self.layer_idx}: the model produced a recurrent state of shape {tuple(state.shape)}, but this "
                f"DeltaLogCache was built for FLA's {self.spec.model_type!r} layout {layout} = "
                f"{list(self._fla_shape(rows))[1:]}: it belongs to a model with another configuration"
            )
        if conv_state is None and self.state is not None:
            conv_state = self.state.get("conv_state")
        conv = conv_state if isinstance(conv_state, (tuple, list)) else (conv_state,)
        elsewhere = sorted({str(t.device) for t in conv if isinstance(t, torch.Tensor) and t.device != state.device})
        if elsewhere:
            raise refuse(f"layer {self.layer_idx}: a recurrent state on {state.device}, but the layer's conv state is "
                         f"on {', '.join(elsewhere)}: the state must be on the device of the layer that produced it")

    def _absorb(self, state: torch.Tensor) -> None:
        """Take the dense final state FLA's kernel returned (FLA's layout, checked by :meth:`check_recurrent_state`):
        it becomes the base, the log restarts."""
        rows = state.shape[0]
        if self.base is None or self.base.shape[0] != rows or self.base.device != state.device:
            self._allocate(rows, state.device)
        self._leave_inference_tensors()
        if self.dense_fla:
            self.base = state  # FLA's fresh final state in the base's layout; nothing else refers to it
        else:
            self.base.copy_(state if self.state_v_first == self.spec.state_v_first else state.transpose(-1, -2))
        self.staggered = restart_log(self.log_decay, self.k_log, self.u_log, self.decay_log, self.length,
                                     self.stagger_merges)

    # ------------------------------------------------------------------ FLA's layer API
    def update(self, *, recurrent_state=None, attn_state=None, conv_state=None, ffn_state=None, offset: int = 1,
               cache_kwargs=None, forward: bool = True, **kwargs) -> dict[str, Any]:
        """FLA's layer ``update``: store the layer's new states; a dense ``recurrent_state`` restarts the log, this
        layer's handle (what a DeltaLog step returned) is kept as it is. ``forward``: the store is a step of a model's
        forward (a refusal then locks the cache; see :meth:`FLADeltaLogCache.update`).

        Raises:
            TypeError: a recurrent state that is not a floating tensor (:meth:`check_recurrent_state`).
            ValueError: a dense state this layer cannot take, another layer's or cache's handle, something else than
                a tensor or handle, or ``offset`` tokens consumed without a recurrent state.
        """
        if isinstance(recurrent_state, torch.Tensor):
            self.check_recurrent_state(recurrent_state, conv_state, forward)
            self._absorb(recurrent_state)
            recurrent_state = self.handle
        elif isinstance(recurrent_state, FLADeltaLogState):
            if recurrent_state is not self.handle:
                raise self.shared.status.refuse(
                    f"layer {self.layer_idx} was handed the DeltaLog state of another layer or cache", forward)
        elif recurrent_state is not None:
            raise self.shared.status.refuse(
                f"layer {self.layer_idx}: a recurrent state must be a tensor; got {type(recurrent_state).__name__}",
                forward)
        elif offset is not None and offset > 0:
            # FLA's layers store their states with use_cache=False too, without a recurrent state: the conv or
            # token-shift window has moved by `offset` tokens that the recurrent state never saw
            raise self.shared.status.refuse(
                f"layer {self.layer_idx} consumed {offset} token(s) without storing a recurrent state (a forward with "
                "use_cache=False and this cache passed?): its conv / token-shift window moved past its state. Pass "
                "use_cache=True with a cache, or no cache with use_cache=False", forward)
        return super().update(recurrent_state=recurrent_state, attn_state=attn_state, conv_state=conv_state,
                              ffn_state=ffn_state, offset=offset, cache_kwargs=cache_kwargs, **kwargs)

    def materialize(self, state_v_first: bool | None = None) -> torch.Tensor:
        """The dense logical state, fp32, a new contiguous tensor in FLA's layout of this layer (``[B, HV, V, K]`` for
        GDN/KDA, ``[B, H, K, V]`` for RWKV6: what FLA's own cache would hold), or the layout ``state_v_first`` asks.

        Raises:
            ValueError: the layer holds no state yet.
            TypeError: a ``state_v_first`` other than None, True or False.
        """
        if state_v_first is not None and not isinstance(state_v_first, bool):
            raise TypeError(f"state_v_first must be None, True or False; got {state_v_first!r}")
        if self.base is None or self.state is None or self.state.get("recurrent_state") is None:
            raise ValueError(f"layer {self.layer_idx} holds no state yet: run a prefill first")
        want_v_first = self.spec.state_v_first if state_v_first is None else state_v_first
        log = (self.log_decay, self.k_log, self.u_log, self.decay_log, self.length)
        fn = {"gdn": naive_deltalog_gdn_materialize, "kda": naive_deltalog_kda_materialize,
              "rwkv6": naive_deltalog_rwkv6_materialize}[self.spec.operator]
        dense = fn(self.base, *log, state_v_first=self.state_v_first)  # [B, HV, K, V]
        return (dense.transpose(-1, -2) if want_v_first else dense).contiguous()

    # ------------------------------------------------------------------ the kernel call
    def _check_call(self, spec: FLAFamilySpec, x: torch.Tensor, v: torch.Tensor, rows: int) -> None:
        if spec.model_type != self.spec.model_type:
            raise self.shared.status.reject(
                f"this DeltaLogCache was built for FLA's {self.spec.model_type!r} models but is used by a "
                f"{spec.model_type!r} layer; build the cache from the model that uses it"
            )
        if (x.shape[2], x.shape[3], v.shape[2], v.shape[3]) != (self.num_k_heads, self.k_head_dim, self.num_v_heads,
                                                                 self.v_head_dim):
            raise self.shared.status.reject(
                f"layer {self.layer_idx}: inputs {tuple(x.shape)} / v {tuple(v.shape)} do not match the cache's "
                f"Hk={self.num_k_heads}, K={self.k_head_dim}, HV={self.num_v_heads}, V={self.v_head_dim}: the cache "
                "belongs to a model with another configuration"
            )
        if rows != self.base.shape[0]:
            raise self.shared.status.reject(
                f"layer {self.layer_idx}: the cache holds {self.base.shape[0]} rows but the model passed {rows}; call "
                "cache.reset() (or build a new DeltaLogCache) before a batch of another size"
            )

    def run(self, upstream: Callable, spec: FLAFamilySpec, a: dict[str, Any], multi_token: bool):
        """Serve one call of FLA's kernel whose ``initial_state`` is this layer's handle (``a``: its bound arguments).

        Returns what FLA's kernel returns: ``(o, final_state)``, with this layer's handle as the final state when the
        DeltaLog step ran (the buffers then hold the new state).

        Raises:
            ValueError: the cache is locked, the layer holds no state yet, the kernel was called with another
                ``state_v_first`` than FLA's layer uses, by a layer of another family, with other head counts or sizes
                or another number of rows than the cache holds. Each but the first locks the cache until ``reset()``
                (inside a forward, the layers before this one have advanced).
        """
        self.shared.status.check()
        if self.base is None:
            raise self.shared.status.reject(f"layer {self.layer_idx} has no recurrent state yet (prefill did not "
                                            "complete)")
        self._leave_inference_tensors()
        x_name = "r" if spec.operator == "rwkv6" else "q"
        x, v, cu = a[x_name], a["v"], a.get("cu_seqlens")
        if spec.operator != "rwkv6" and bool(a.get("state_v_first", False)) != spec.state_v_first:
            raise self.shared.status.reject(
                f"layer {self.layer_idx}: the kernel was called with state_v_first={a.get('state_v_first')}, but FLA's "
                f"{spec.model_type!r} layers keep state_v_first={spec.state_v_first}; hf_deltalog serves that layout "
                "only"
            )
        rows = x.shape[0] if cu is None else cu.numel() - 1
        self._check_call(spec, x, v, rows)
        one_step = (not multi_token and bool(a.get("output_final_state")) and self._decodable(spec, a)
                    and (x.shape[1] == 1 if cu is None else
                         (x.shape[:2] == (1, rows) and self.shared.one_token_each(cu, rows))))
        if not one_step:
            # Several tokens, packed sequences with a row without a token, use_cache=False, or an option the DeltaLog
            # step does not cover: FLA's own kernel on the dense logical state. A final state it returns comes back
            # through update() and restarts the log; the buffers are not touched here.
            a["initial_state"] = self.materialize()
            return upstream(**a)
        if self.dense_fla:
            a["initial_state"] = self.base
            try:
                o, self.base = upstream(**a)
                return o, self.handle
            except Exception as err:  # noqa: BLE001 - any failure of FLA's dense kernel: ours takes over
                warnings.warn(f"layer {self.layer_idx}: FLA's dense decode kernel failed ({err!r:.200}); decoding "
                              "with hf_deltalog's own kernel (M = 1) from now on", RuntimeWarning, stacklevel=2)
                self.dense_fla = False
        # Packed sequences of one token each ([1, N, H, D]) are N rows of one token ([N, 1, H, D]).
        step = {name: a[name] if cu is None else a[name].transpose(0, 1) for name in (x_name, "k", "v")}
        o = self._step(spec, a, step, cu is not None)
        return (o.transpose(0, 1) if cu is not None else o), self.handle

    @staticmethod
    def _decodable(spec: FLAFamilySpec, a: dict[str, Any]) -> bool:
        """Whether the call uses only options the DeltaLog step implements (everything FLA's layers pass does)."""
        if spec.operator == "rwkv6":
            return not a.get("reverse", False)
        if any(a.get(name) is not None for name in ("gk", "gv", "ssm_state_indices", "num_accepted_tokens")):
            return False
        beta = a.get("beta")
        return beta is None or beta.dim() == 3  # one β per head (per-V β: FLA's kernel serves it)

    def _step(self, spec: FLAFamilySpec, a: dict[str, Any], x: dict[str, torch.Tensor], packed: bool) -> torch.Tensor:
        buffers = (self.base, self.log_decay, self.k_log, self.u_log, self.decay_log, self.length)

        def per_row(t: torch.Tensor) -> torch.Tensor:  # gates come packed [1, N, ...] like q when cu_seqlens is set
            return t.transpose(0, 1) if packed else t

        if spec.operator == "rwkv6":
            r, k, v = x["r"], x["k"], x["v"]
            w, u = per_row(a["w"]), a["u"]
            if self.backend == "triton":
                return _triton_decoder("rwkv6")[0](r, k, v, w.contiguous(), u.contiguous(), *buffers, self.workspace,
                                                   scale=a.get("scale"), state_v_first=self.state_v_first)
            return naive_deltalog_rwkv6_decode(r, k, v, w, u, *buffers, scale=a.get("scale"),
                                               state_v_first=self.state_v_first)
        q, k, v = x["q"], x["k"], x["v"]
        g, beta = _gates(spec.operator, a, per_row(a["g"]) if a.get("g") is not None else None,
                         per_row(a["beta"]) if a.get("beta") is not None else None, v)
        l2 = bool(a.get("use_qk_l2norm_in_kernel", False))
        if self.backend == "triton":
            return _triton_decoder(spec.operator)[0](q, k, v, g, beta, *buffers, self.workspace, scale=a.get("scale"),
                                                     use_qk_l2norm_in_kernel=l2, state_v_first=self.state_v_first)
        if spec.operator == "kda":
            return naive_deltalog_kda_decode(q, k, v, g, beta, *buffers, scale=a.get("scale"),
                                             use_qk_l2norm_in_kernel=l2, state_v_first=self.state_v_first)
        return naive_deltalog_gdn_decode(q, k, v, g, beta, *buffers, scale=a.get("scale"), use_qk_l2norm_in_kernel=l2,
                                         state_v_first=self.state_v_first)

    # ------------------------------------------------------------------ batch-dim operations
    def _map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor], dense: Callable[[], None]) -> None:
        for name, t in self._tensors().items():
            setattr(self, name, fn(t))
        handle = None if self.state is None else self.state.get("recurrent_state")
        if handle is not None:
            self.state["recurrent_state"] = None  # FLA maps every other entry of the dict
        try:
            dense()
        finally:
            if handle is not None:
                self.state["recurrent_state"] = handle

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Gather every per-row tensor (base, log, counters, FLA's dense states) by ``beam_idx`` ``[B]``."""
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)), lambda: super(
            FLADeltaLogLayer, self).reorder_cache(beam_idx))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times (``[B, ...]`` → ``[B·repeats, ...]``)."""
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0),
                        lambda: super(FLADeltaLogLayer, self).batch_repeat_interleave(repeats))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices``."""
        self.reorder_cache(indices)

    def offload(self) -> None:
        """Move the layer's DeltaLog buffers and FLA's own states to the CPU (transformers' offloading)."""
        self._map_batch(lambda t: t.to("cpu", non_blocking=True), lambda: super(FLADeltaLogLayer, self).offload())

    def prefetch(self) -> None:
        """Bring the offloaded buffers back to the layer's device."""
        device = self.device
        self._map_batch(lambda t: t.to(device, non_blocking=True), lambda: super(FLADeltaLogLayer, self).prefetch())

    def reset(self) -> None:
        """Forget every token (buffers kept, zeroed); the next forward is a prefill."""
        super().reset()
        self._leave_inference_tensors()
        for t in self._tensors().values():
            t.zero_()
        self.staggered = False


def _gates(operator: str, a: dict[str, Any], g: torch.Tensor | None, beta: torch.Tensor | None, v: torch.Tensor):
    """FLA's in-kernel gate and β arithmetic, in fp32 (``fused_recurrent_gated_delta_rule`` / ``fused_recurrent_kda``).

    GDN: ``g ← -exp(A_log)·softplus(g + dt_bias)`` ``[B, 1, HV]``. KDA: ``g ← -exp(A_log)·softplus(g + dt_bias)`` or,
    with ``lower_bound``, ``lower_bound·sigmoid(exp(A_log)·(g + dt_bias))`` ``[B, 1, HV, K]``. β ← ``sigmoid(β)``
    (×2 with ``allow_neg_eigval``) when ``use_beta_sigmoid_in_kernel``.
    """
    B, _, HV, _ = v.shape
    per_key = operator == "kda"
    if g is None:
        g = v.new_zeros((B, 1, HV, a["k"].shape[-1]) if per_key else (B, 1, HV), dtype=torch.float32)
    g = g.float()
    if a.get("use_gate_in_kernel", False):
        A_log, dt_bias = a.get("A_log"), a.get("dt_bias")
        if dt_bias is not None:
            g = g + (dt_bias.float().view(HV, -1) if per_key else dt_bias.float())
        A = A_log.float() if A_log is not None else None
        if per_key:
            A = A.view(HV, 1) if A is not None else None
            if a.get("lower_bound") is not None:
                g = a["lower_bound"] * torch.sigmoid((A.exp() if A is not None else 1.0) * g)
            else:
                g = -(A.exp() if A is not None else torch.tensor(1.0).exp()) * F.softplus(g)
        else:
            g = -A.exp() * F.softplus(g)
    beta = torch.ones(B, 1, HV, dtype=torch.float32, device=v.device) if beta is None else beta.float()
    if a.get("use_beta_sigmoid_in_kernel", False):
        beta = torch.sigmoid(beta)
        if a.get("allow_neg_eigval", False):
            beta = beta * 2
    return g.contiguous(), beta.contiguous()


def _layer_geometry(config: Any, with_hidden_size: bool = True) -> str:
    """What else sizes the states FLA's layers keep: the hidden size (RWKV6's token-shift states are ``[B,
    hidden_size]``, and the attention layers' heads divide it), the short convolutions (``use_short_conv``,
    ``conv_size``) and the attention specs of a hybrid (``config.attn``), as a string to compare.
    ``with_hidden_size=False`` leaves the hidden size out (null), to compare with a cache pickled before it was
    recorded."""
    return json.dumps(dict(hidden_size=getattr(config, "hidden_size", None) if with_hidden_size else None,
                           use_short_conv=getattr(config, "use_short_conv", None),
                           conv_size=getattr(config, "conv_size", None), attn=getattr(config, "attn", None)),
                      sort_keys=True, default=str)


def _linear_layers(config: Any) -> list[bool]:
    """Per layer: True for a recurrent layer, False for the softmax-attention layers of FLA's hybrid configs
    (``config.attn``: one spec ``{'layers': [...], ...}`` or a list of them, as FLA's ``parse_attention_config``
    takes it)."""
    attn = getattr(config, "attn", None) or {}
    specs = attn if isinstance(attn, (list, tuple)) else [attn]
    attention = {i for spec in specs
                 for i in (spec.get("layers", ()) if isinstance(spec, dict) else getattr(spec, "layers", ()) or ())}
    return [i not in attention for i in range(int(config.num_hidden_layers))]


class FLADeltaLogCache(FLACache):
    """FLA's ``Cache`` with DeltaLog recurrent states: what ``DeltaLogCache(model)`` builds for FLA's models.

    Drop-in for FLA's ``generate``: ``model.generate(**inputs, past_key_values=DeltaLogCache(model))`` gives the
    tokens FLA's own cache gives. ``cache[layer_idx]`` is FLA's state dict; its ``recurrent_state`` is a
    :class:`FLADeltaLogState`. Building the cache applies :func:`hf_deltalog.patches.fla.patch_fla`.

    Args:
        model_or_config: an FLA ``RWKV6ForCausalLM`` / ``GatedDeltaNetForCausalLM`` / ``KDAForCausalLM`` (or their
            base models), or their config.
        merge_interval: ``M ≥ 1`` (``M = 1``: eager dense decoding). Default: 8 for RWKV6 and GatedDeltaNet, 4 for
            KDA; on the Triton backend a layer with less fp32 state than
            :data:`hf_deltalog.cache.DENSE_BELOW_STATE_BYTES` (GDN 64 MiB, KDA and RWKV6 16 MiB: B < 8 at
            H = 32, K = V = 128) decodes densely through FLA's own kernel, where DeltaLog measured slower.
        backend: ``"auto"`` (Triton on CUDA when available, else PyTorch), ``"torch"`` or ``"triton"``.
        stagger_merges: True: after each prefill row ``r``'s log starts with ``r mod M`` zero entries, so about
            ``1/M`` of the rows merge at each decode step (:func:`hf_deltalog.cache.restart_log`, which gives the
            H200 measurements: faster kernels, slower whole-model graph decoding); False (default): every row merges
            at the same step.

    Raises:
        TypeError: a non-integer ``merge_interval``, a ``stagger_merges`` other than True or False.
        ValueError: not a model/config of a supported FLA model type, ``merge_interval`` out of range, an unknown
            backend.
    """

    is_compileable = False
    _deltalog_generate_checks = True  # the generate patch calls _check_model/_before_generate/_after_generate

    def __init__(self, model_or_config: Any, merge_interval: int | None = None, backend: str = "auto", *,
                 stagger_merges: bool = False):
        config = getattr(model_or_config, "config", model_or_config)
        spec = fla_family_of(model_or_config)
        if spec is None:
            raise ValueError(
                f"FLADeltaLogCache serves flash-linear-attention's {', '.join(supported_fla_model_types())} models; "
                "got "
                f"a {type(config).__name__} (model_type {getattr(config, 'model_type', None)!r})"
            )
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
        if backend == "triton" and _triton_decoder(spec.operator) is None:
            raise ValueError("backend='triton' needs triton installed (pip install 'hf-deltalog[triton]'); "
                             "use backend='auto' or 'torch'")
        check_stagger_merges(stagger_merges)
        self.merge_interval = _check_merge_interval(merge_interval, spec.default_merge_interval)
        self.backend = backend
        self.model_type = spec.model_type
        self.spec = spec
        self.stagger_merges = stagger_merges
        super().__init__()
        self._dims = spec.dims(config)
        self._linear = _linear_layers(config)
        self._auto_merge = merge_interval is None
        self._shared = _Shared()
        self._fingerprint = (spec.model_type, tuple(self._linear), self._dims, _layer_geometry(config))
        self._hidden_size = getattr(config, "hidden_size", None)
        self._ledger: torch.Tensor | None = None
        self._after_beams = False  # the last generate ran a beam search: the rows are beams, in the search's order
        self._stopped_generate: str | None = None  # see hf_deltalog.cache.note_stopped_generate
        self._generate_running = False  # a generate call on it is running (set and cleared by the generate patch)
        self._copied_mid_generate = False  # see hf_deltalog.cache.copy_state
        self._changed_during_generate: str | None = None  # see hf_deltalog.cache.note_change_during_generate
        # Layers a forward entered and did not finish: entered at FLA's step read of their state dict (a decode step:
        # FLA's layers then move their conv window in place) or at their first store, finished at their last store of
        # the step (the recurrent or attention state; RWKV6: the FFN's token-shift state after it).
        self._inside: set[int] = set()
        self._order = StepOrder()
        patch_fla()  # every FLA family: a cache used by another family's layer meets a dispatcher that says so
        from hf_deltalog.patches.registry import _patch_generation

        _patch_generation()

    def __getstate__(self) -> dict:
        """What pickle and ``copy`` take: the instance's attributes, a copy taken during generate marked as such
        (:func:`hf_deltalog.cache.copy_state`)."""
        return copy_state(self.__dict__)

    def __setstate__(self, state: dict) -> None:
        """Unpickling (and ``copy.deepcopy``) binds FLA's layers and generate's hand-over as the constructor does (a
        cache loaded in a process that built none); not after a deliberate ``unpatch_fla()`` / ``hf_deltalog.unpatch()``."""
        restore_state(self, state)
        if "_hidden_size" not in state:  # pickled before the hidden size was recorded: compared without it
            self._hidden_size = None
            geometry = json.loads(self._fingerprint[3])
            geometry["hidden_size"] = None
            self._fingerprint = (*self._fingerprint[:3], json.dumps(geometry, sort_keys=True, default=str))
        from hf_deltalog.patches.fla import _UNPATCHED
        from hf_deltalog.patches.registry import _patch_generation

        if not _UNPATCHED["by_user"]:
            patch_fla()
            _patch_generation()

    # ------------------------------------------------------------------ layers
    def _new_layer(self, layer_idx: int) -> FLALayer:
        if not self._linear[layer_idx]:
            return FLALayer()
        return FLADeltaLogLayer(self.spec, self._dims, self.merge_interval, self.backend, layer_idx, self._shared,
                                auto_merge_interval=self._auto_merge, stagger_merges=self.stagger_merges)

    @property
    def deltalog_layers(self) -> list[FLADeltaLogLayer]:
        """The cache's :class:`FLADeltaLogLayer` s (its recurrent layers), in layer order."""
        return [layer for layer in self.layers if isinstance(layer, FLADeltaLogLayer)]

    @property
    def batch_size(self) -> int:
        """Rows the cache holds (its first filled recurrent layer's), -1 before the first prefill."""
        return next((layer.batch_size for layer in self.deltalog_layers if layer.base is not None), -1)

    def update(self, recurrent_state=None, attn_state=None, conv_state=None, ffn_state=None, layer_idx: int = 0,
               offset: int | None = 1, cache_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """FLA's ``Cache.update``: store a layer's new states (a dense recurrent state, FLA's ``[N, HV, V, K]`` for
        GDN/KDA or ``[N, H, K, V]`` for RWKV6 in any float dtype, becomes that layer's fp32 base and restarts its log;
        the layer's handle, what a DeltaLog step returned, is kept). A store by FLA's model code is a step of a
        forward; one by other code (driving the cache layer by layer) only stores. Returns the layer's state dict.

        Raises:
            TypeError: a recurrent state that is not a floating tensor.
            ValueError: the cache is locked; no such layer; a recurrent state for an attention layer, of another shape
                than this model's, or on another device than the layer's conv state; another layer's or cache's
                handle; ``offset`` tokens stored without a recurrent state. Checked before anything changes: a
                refusal inside a forward locks the cache until ``reset()`` (the layers before it have advanced), one
                from other code leaves it as it was.
        """
        self._shared.status.check()
        # A store by FLA's model code (its layers, RWKV6's FFN) is a step of a forward; one from elsewhere (code that
        # drives the cache layer by layer) only stores
        caller = sys._getframe(1)
        forward = caller.f_globals.get("__name__", "").startswith("fla.")
        refuse = functools.partial(self._shared.status.refuse, in_forward=forward)  # nothing changed yet
        if not 0 <= layer_idx < len(self._linear):
            raise refuse(
                f"layer {layer_idx} does not exist: this DeltaLogCache was built for a {self.model_type!r} config with "
                f"{len(self._linear)} layers; build the cache from the model that uses it"
            )
        while len(self.layers) <= layer_idx:
            self.layers.append(self._new_layer(len(self.layers)))
        layer = self.layers[layer_idx]
        if recurrent_state is not None and not isinstance(layer, FLADeltaLogLayer):
            raise refuse(
                f"the model passed a recurrent state for layer {layer_idx}, but this DeltaLogCache was built for a "
                f"config whose layer {layer_idx} is softmax attention; build the cache from the model that uses it"
            )
        if forward and caller.f_code.co_name == "update_layer_cache" and caller.f_back is not None:
            # the layer that stores: one of another served family, or a recurrent layer of a family DeltaLogCache does
            # not serve (DeltaNet, GLA, ...: FLA's layer modules share these helpers)
            self._refuse_other_family(caller.f_back.f_globals.get("__name__", ""), recurrent_state is not None)
        ffn_only = ffn_state is not None and recurrent_state is None and attn_state is None
        if forward and self._begin_step(layer_idx, "ffn" if ffn_only else "store",
                                        ("read", "store") if ffn_only else ("read",)):
            # a forward that begins with a store (an attention layer first: FLA's attention reads its state dict
            # directly, not through get_layer_cache) is checked for rows here, before the store
            first = attn_state[0] if isinstance(attn_state, (tuple, list)) and attn_state else \
                recurrent_state if isinstance(recurrent_state, torch.Tensor) else ffn_state
            self._refuse_other_rows(first.shape[0] if isinstance(first, torch.Tensor) else None, layer_idx)
        out = layer.update(recurrent_state=recurrent_state, attn_state=attn_state, conv_state=conv_state,
                           ffn_state=ffn_state, offset=offset if offset is not None else 1, cache_kwargs=cache_kwargs,
                           **({"forward": forward} if isinstance(layer, FLADeltaLogLayer) else {}))
        if forward and self.spec.ffn_state and not ffn_only:
            self._inside.add(layer_idx)  # the FFN's store ends this layer's step
        else:
            self._inside.discard(layer_idx)
        return out

    def _begin_step(self, layer_idx: int, call: str, calls_before: tuple[str, ...] = ()) -> bool:
        """At a layer's step call (FLA's step read, a store, RWKV6's FFN store): when it begins a new forward
        (:class:`hf_deltalog.cache.StepOrder`), every layer must hold what the last forward left. A manual decode loop
        that goes on after a forward stopped between or inside layers is refused here, as ``generate`` refuses it when
        it starts. Host counts only. Returns whether the call begins a new forward.

        Raises:
            ValueError: the layers disagree (the cache is locked until ``reset()``).
        """
        if not self._order.begins_forward(layer_idx, call, calls_before):
            return False
        self._shared.status.check()  # a refusal already recorded says why first
        if self._inside or not self._layers_agree_on_host():
            try:
                self._check_layers_agree(self.get_seq_length())
            except ValueError as error:
                raise self._shared.status.reject(str(error)) from None
        return True

    def _layers_agree_on_host(self) -> bool:
        """The common case of :meth:`_check_layers_agree`, which says what differs: one token count (a layer not
        created yet holds none) and one number of rows. Host ints only."""
        counts = {layer.get_seq_length() for layer in self.layers}
        if len(self.layers) < len(self._linear):
            counts.add(0)
        rows = {base.shape[0] for base in (getattr(layer, "base", None) for layer in self.layers) if base is not None}
        return len(counts) <= 1 and len(rows) <= 1

    def _check_layers_agree(self, held: int) -> None:
        """Raise ValueError unless every layer of the model (attention ones too; a layer not created yet holds no
        token) holds ``held`` tokens in one number of rows and none is inside a step (:func:`check_layers_agree`)."""
        check_layers_agree(held, {i: self.layers[i].get_seq_length() if i < len(self.layers) else 0
                                  for i in range(len(self._linear))},
                           {layer.batch_size for layer in self.deltalog_layers if layer.base is not None},
                           sorted(self._inside))

    def __getitem__(self, layer_idx: int) -> dict[str, Any]:
        """FLA's state dict of layer ``layer_idx``. Read by FLA's recurrent layers at the start of a step (through
        ``fla.layers.utils.get_layer_cache``, called from FLA's layer code), the layer then counts as inside a forward
        until it stores its new states (they update their conv state in place in between); a read from anywhere else
        (``cache[i]``, or that helper called from user code) is only a read."""
        state = super().__getitem__(layer_idx)
        caller = sys._getframe(1)  # this runs every decode step
        if caller.f_code.co_name == "get_layer_cache" and caller.f_globals.get("__name__", "").startswith("fla.") \
                and caller.f_back is not None and caller.f_back.f_globals.get("__name__", "").startswith("fla."):
            self._refuse_other_family(caller.f_back.f_globals["__name__"])
            if self._begin_step(layer_idx, "read"):
                self._check_rows(caller.f_back, layer_idx)
            self._inside.add(layer_idx)
        return state

    def _check_rows(self, layer_frame: Any, layer_idx: int) -> None:
        """At a forward's first step read: the rows the layer is about to run (its ``hidden_states`` ``[B, T, D]``, or
        ``len(cu_seqlens) − 1`` sequences when packed) must be the rows the cache holds. FLA's layers move their conv
        window in place right after this read, and FLA's conv kernel writes out of bounds when the input has more rows
        than the state, before any later check could run. Reads the layer frame's locals once per forward (a few µs).

        The layer's input must also have the hidden size of the model the cache was built for: RWKV6's token-shift
        states are ``[B, hidden_size]``, and another size failed inside FLA's layer with a raw ``RuntimeError``.

        Raises:
            ValueError: another number of rows, or another hidden size, while the cache holds tokens (nothing has
                changed yet).
        """
        if self.get_seq_length() == 0 or self.batch_size < 0:
            return  # (before reading the frame's locals)
        local = layer_frame.f_locals
        extra = local.get("kwargs")
        cu_seqlens = local.get("cu_seqlens")
        if cu_seqlens is None and isinstance(extra, dict):
            cu_seqlens = extra.get("cu_seqlens")
        x = local.get("hidden_states")
        hidden = self._hidden_size  # None on a cache pickled before it was recorded (__setstate__)
        if isinstance(x, torch.Tensor) and x.dim() == 3 and isinstance(hidden, int) and x.shape[-1] != hidden:
            raise ValueError(
                f"layer {layer_idx}: this DeltaLogCache was built for an FLA {self.model_type!r} model of hidden size "
                f"{hidden}, but the layer's input has {x.shape[-1]}: the cache belongs to a model with another "
                "configuration; build the cache from the model that uses it")
        self._refuse_other_rows(cu_seqlens.shape[0] - 1 if isinstance(cu_seqlens, torch.Tensor) else
                                x.shape[0] if isinstance(x, torch.Tensor) and x.dim() == 3 else None, layer_idx)

    def _refuse_other_family(self, module: str, stores_a_recurrent_state: bool = False) -> None:
        """Raise ValueError (and lock the cache) when FLA's layer module ``module`` (the caller of a step read or a
        store) is another family's: a model of another family with the same head sizes would otherwise prefill an
        empty cache (its states pass the shape checks), or fail inside FLA's code on a cache that holds tokens with
        an error that does not name the cause. Modules that are no family's layer module (FLA's model code, which
        stores RWKV6's FFN state) are not checked, nor are FLA's other layer modules, except when they store a
        recurrent state (``stores_a_recurrent_state``): that is a recurrent layer of a family DeltaLogCache does not
        serve (an attention layer stores none)."""
        family = _LAYER_MODULE_FAMILY.get(module)
        if family is None and stores_a_recurrent_state and module.startswith("fla.layers.") \
                and module != self.spec.module:
            family = module.rsplit(".", 1)[-1]
        if family is not None and family != self.spec.model_type:
            raise self._shared.status.reject(
                f"this DeltaLogCache was built for FLA's {self.spec.model_type!r} models but is used by a {family!r} "
                f"layer ({module}); build the cache from the model that uses it")

    def _refuse_other_rows(self, rows: int | None, layer_idx: int) -> None:
        """Raise ValueError when ``rows`` (None: unknown) differs from the rows of a cache that holds tokens."""
        if rows is not None and self.get_seq_length() > 0 and self.batch_size >= 0:
            check_rows_match(layer_idx, self.batch_size, rows)

    def __iter__(self):
        for layer in self.layers:  # not through __getitem__: iterating is not a forward's read
            yield layer.state

    def to_legacy_cache(self) -> tuple:
        """FLA's legacy form: one state dict per layer. A recurrent layer's ``recurrent_state`` is its dense logical
        state (:meth:`materialize`: FLA's layout, fp32, a new tensor), so a cache built from the tuple (FLA's
        ``Cache.from_legacy_cache``, or the tuple passed as ``past_key_values``) decodes with FLA's kernels and leaves
        this cache's recurrent states as they were; the other entries are the layer's own tensors, as FLA's cache hands
        them out: FLA's GDN and KDA layers update the conv window in place, so a step through the tuple moves this
        cache's conv windows, as it moves FLA's own cache's."""
        legacy = []
        for layer in self.layers:
            state = layer.state
            if isinstance(layer, FLADeltaLogLayer) and isinstance(state, dict) and \
                    isinstance(state.get("recurrent_state"), FLADeltaLogState) and layer.base is not None:
                state = {**state, "recurrent_state": layer.materialize()}
            legacy.append(state)
        return tuple(legacy)

    @classmethod
    def from_legacy_cache(cls, past_key_values: Any = None, seen_tokens: int = 0, **kwargs: Any) -> FLACache:
        """Not available: a DeltaLog cache is built from the model (``DeltaLogCache(model)``), which a legacy tuple
        does not name. Raises TypeError saying so; FLA's ``Cache.from_legacy_cache`` takes the tuple."""
        raise TypeError("FLADeltaLogCache cannot be built from a legacy tuple (it needs the model's configuration): "
                        "build DeltaLogCache(model) and prefill it, or use fla.models.utils.Cache.from_legacy_cache")

    def materialize(self, layer_idx: int) -> torch.Tensor:
        """Dense logical state of recurrent layer ``layer_idx`` in FLA's layout of the layer (``[B, HV, V, K]`` for
        GDN/KDA, ``[B, H, K, V]`` for RWKV6), fp32, a new tensor: what FLA's own cache would hold.

        Raises:
            TypeError: ``layer_idx`` is not an int. ValueError: not a recurrent layer, or no state yet.
        """
        check_layer_index(layer_idx)
        layer_idx = int(layer_idx)
        layer = self.layers[layer_idx] if 0 <= layer_idx < len(self.layers) else None
        if not isinstance(layer, FLADeltaLogLayer):
            raise ValueError(f"layer {layer_idx} holds no DeltaLog state (not a recurrent layer, or not reached yet)")
        return layer.materialize()

    def memory_breakdown(self) -> dict[str, int]:
        """Bytes of the recurrent layers' DeltaLog buffers by role, summed over layers (0 before the first prefill):
        see :func:`hf_deltalog.cache.memory_breakdown_of` (``crop_ring`` is always 0 here: FLA's cache has no
        ``crop``)."""
        return memory_breakdown_of(self.deltalog_layers)

    def memory_footprint(self) -> int:
        """Bytes of memory the cache's tensors keep alive: FLA's dense states (conv, token shift, attention) and the
        DeltaLog buffers, each buffer once and whole (a view keeps its whole buffer alive; see
        :func:`hf_deltalog.cache.buffer_bytes`), not the ids generate's continuation check keeps."""
        return buffer_bytes([[list((layer.state or {}).values()),
                              list(layer._tensors().values()) if isinstance(layer, FLADeltaLogLayer) else []]
                             for layer in self.layers])

    # ------------------------------------------------------------------ batch and lifecycle
    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Gather the rows of every layer by ``beam_idx`` (``[B]`` integer tensor, values in ``[0, B)``).

        Raises:
            TypeError: not a 1-D int64 / int32 tensor (or a list of ints).
            ValueError: not ``B`` entries, or (``beam_idx`` on the CPU) an entry outside ``[0, B)``. On a GPU the
                values are not checked here (beam search calls this every step, and a check would wait for the
                device): an entry outside ``[0, B)`` fails in torch's gather (a device-side assert).
        """
        beam_idx = check_beam_idx(beam_idx, self.batch_size)
        for layer in self.layers:
            layer.reorder_cache(beam_idx)
        if self._ledger is not None:
            self._ledger = self._ledger.index_select(0, beam_idx.to(self._ledger.device))
        note_change_during_generate(self, "reorder_cache")

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times (an int ≥ 1) in every layer.

        Raises:
            TypeError: ``repeats`` is not an int (a numpy integer is). ValueError: ``repeats`` below 1.
        """
        check_repeats(repeats)
        repeats = int(repeats)
        for layer in self.layers:
            layer.batch_repeat_interleave(repeats)
        if self._ledger is not None:
            self._ledger = self._ledger.repeat_interleave(repeats, dim=0)
        note_change_during_generate(self, "batch_repeat_interleave")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (``[B']`` integer tensor or list, or a ``[B]`` boolean mask) in every layer.

        Raises:
            TypeError: neither row numbers nor a boolean mask (a float tensor, a list mixing bools and ints).
            ValueError: an empty selection, a row outside ``[-B, B)``, or a mask of another length than ``B``; before
                anything changes.
        """
        indices = check_row_indices(indices, self.batch_size)
        for layer in self.layers:
            layer.batch_select_indices(indices)
        if self._ledger is not None:
            self._ledger = self._ledger[indices.to(self._ledger.device)]
        note_change_during_generate(self, "batch_select_indices")

    def reset(self) -> None:
        """Forget every token (a batch of another size may follow)."""
        super().reset()
        self._ledger = None
        self._after_beams = False
        self._stopped_generate = None
        self._copied_mid_generate = False
        self._changed_during_generate = None
        self._shared.status.broken = None
        self._shared.cu_seqlens = None
        self._inside.clear()
        self._order = StepOrder()
        note_change_during_generate(self, "reset")

    # ------------------------------------------------------------------ generate checks (through the patch)
    def _check_model(self, model: Any) -> None:
        """Raise ValueError (changing nothing) unless ``model`` has the configuration this cache was built for."""
        config = getattr(model, "config", None)
        if config is None:
            return
        spec = fla_family_of(model)
        theirs = (spec.model_type, tuple(_linear_layers(config)), spec.dims(config),
                  _layer_geometry(config, with_hidden_size=self._hidden_size is not None)) \
            if spec is not None else (getattr(config, "model_type", None),)
        if theirs != self._fingerprint:
            raise ValueError(
                f"this DeltaLogCache was built for an FLA {self.model_type!r} model with recurrent layers "
                f"{self._fingerprint[1]}, (Hk, HV, K, V) = {self._dims} and hidden-size / short-conv / attention settings "
                f"{self._fingerprint[3]}, but generate was called on a "
                f"{getattr(config, 'model_type', None)!r} model with another configuration; build the cache from the "
                "model that uses it"
            )
        check_kernel_dtype(self.backend, model, "backend='torch'")

    def _before_generate(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                         expand: int = 1) -> int:
        """A cache that holds tokens can only be continued: the same rows, one sequence per row, not after a beam
        search, and either the whole conversation (ids that start with the tokens the cache consumed) or only the new
        tokens with a mask over cached and new ones (as :meth:`DeltaLogCache._before_generate`). Returns the number of
        tokens held."""
        self._shared.status.check()
        held = self.get_seq_length()
        self._check_layers_agree(held)
        if held == 0:
            return held
        _check_held_rows_continue(held, self._after_beams, expand, self._stopped_generate,
                                  getattr(self, "_changed_during_generate", None))
        if input_ids is None:
            return held
        _check_continuation(held, self.batch_size, self._ledger, input_ids, attention_mask,
                            getattr(self, "_copied_mid_generate", False))
        return held

    def _generate_through(self, upstream: Callable, model: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``GenerationMixin.generate`` (``upstream``) on an FLA model with this cache, inside
        :func:`fla_generate_handover` (see there why FLA 0.6.0's models need it under transformers 5.24)."""
        with fla_generate_handover(model, self):
            return upstream(model, *args, **kwargs)

    def _after_generate(self, output: Any, beams: bool = False) -> None:
        """Remember which tokens the cache consumed: every token of the returned sequences but the last one (after a
        beam search nothing, and the cache is marked as not continuable until ``reset()``)."""
        self._after_beams = bool(beams)
        self._stopped_generate = None
        sequences = output if isinstance(output, torch.Tensor) else getattr(output, "sequences", None)
        held = self.get_seq_length()
        # Every token of the returned sequences but the last went through the cache (more when the call passed only
        # the new tokens of a continuation); fewer: some steps did not reach it (or a reset() during the call forgot
        # them: see hf_deltalog.cache.note_change_during_generate)
        if sequences is not None and not beams and held < sequences.shape[-1] - 1 and \
                getattr(self, "_changed_during_generate", None) is None:
            self._ledger = None
            message = (
                f"generate returned {sequences.shape[-1]} tokens per row, but only {held} went through this "
                "DeltaLogCache: from some step on the model did not receive it as past_key_values, so FLA decoded "
                "without a cache and the returned tokens are not cached decoding's. Something replaced the model's "
                "prepare_inputs_for_generation (an instance attribute, or a rebinding of its class's method during "
                "generate) and bypassed hf_deltalog's hand-over. Call cache.reset() and generate again without it")
            # locked until reset(): its layers miss the steps that bypassed it
            self._shared.status.broken = (
                f"is locked: an earlier generate returned {sequences.shape[-1]} tokens per row, but only {held} went "
                "through this cache (something bypassed hf_deltalog's hand-over to the model; that call raised a "
                "RuntimeError saying what)")
            raise RuntimeError(message)
        self._ledger = consumed_ledger(self._ledger, None if beams else sequences, self.batch_size, held)
        settle_change_during_generate(self, beams)


# The caches handed over to each model (while a handover is open), and the class hooks that hand them over. The hooks
# are installed on a model's class while some handover of a model of that class is open, and removed by the last.
# Kept through an importlib.reload of this module (as the patches' state is).
_HANDOVER_LOCK = globals().get("_HANDOVER_LOCK") or threading.Lock()
# id(model) -> (model, its handed caches): by identity, so a model class that is not hashable works too
_HANDED: dict[int, tuple[Any, tuple[Any, ...]]] = globals().get("_HANDED", {})
_CLASS_HOOKS: dict[type, tuple[int, dict[str, tuple[bool, Any]]]] = globals().get("_CLASS_HOOKS", {})
_HOOK_NAMES = ("_validate_model_kwargs", "prepare_inputs_for_generation")
_HOOKS: weakref.WeakSet = globals().get("_HOOKS") or weakref.WeakSet()  # the hooks, by identity


def _handed_caches(model: Any) -> tuple[Any, ...]:
    entry = _HANDED.get(id(model))
    return entry[1] if entry is not None and entry[0] is model else ()


def _handed_to(model: Any, value: Any) -> bool:
    """Whether ``value`` is a cache handed over to ``model`` by an open :func:`fla_generate_handover`."""
    return value is not None and any(value is cache for cache in _handed_caches(model))


def _hook(name: str, upstream: Callable) -> Callable:
    """The hand-over hook for the class method ``name``, wrapping ``upstream`` (what the class resolved it to)."""
    if name == "_validate_model_kwargs":
        @functools.wraps(upstream)
        def hook(self, model_kwargs: dict[str, Any]) -> None:
            if _handed_caches(self):
                model_kwargs = {k: v for k, v in model_kwargs.items() if not (k == "cache" and _handed_to(self, v))}
            return upstream(self, model_kwargs)
    else:
        @functools.wraps(upstream)  # the kwarg check reads this signature
        def hook(self, *a: Any, **kw: Any) -> dict[str, Any]:
            model_inputs = upstream(self, *a, **kw)
            if _handed_to(self, model_inputs.get("cache")) and model_inputs.get("past_key_values") is None:
                model_inputs["past_key_values"] = model_inputs.pop("cache")
            return model_inputs
    _HOOKS.add(hook)
    return hook


def _hook_class(cls: type) -> None:
    """Count one more open handover on ``cls`` and make sure both hooks are bound there: the first one installs them,
    remembering what the class itself held; a later one re-hooks a name someone rebound in between (remembering the
    rebinding, which the last close puts back). Under ``_HANDOVER_LOCK``."""
    opened, saved = _CLASS_HOOKS.get(cls, (0, {}))
    saved = dict(saved)
    for name in _HOOK_NAMES:
        if cls.__dict__.get(name) in _HOOKS:
            continue
        saved[name] = (name in cls.__dict__, cls.__dict__.get(name))
        setattr(cls, name, _hook(name, getattr(cls, name)))
    _CLASS_HOOKS[cls] = (opened + 1, saved)


def _unhook_class(cls: type) -> None:
    """Count one open handover less on ``cls``; the last one restores what the class held (only where the hooks are
    still bound: a later rebinding stays). Under ``_HANDOVER_LOCK``."""
    opened, saved = _CLASS_HOOKS.get(cls, (1, {}))
    if opened > 1:
        _CLASS_HOOKS[cls] = (opened - 1, saved)
        return
    _CLASS_HOOKS.pop(cls, None)
    for name, (had, own) in saved.items():
        if cls.__dict__.get(name) in _HOOKS:
            if had:
                setattr(cls, name, own)
            else:
                delattr(cls, name)


@contextlib.contextmanager
def fla_generate_handover(model: Any, cache: FLACache):
    """Within this context, ``model.generate(..., past_key_values=cache)`` really decodes through ``cache``.

    transformers 5.24 carries the cache between steps under the name ``cache``, while FLA 0.6.0's models read
    ``past_key_values`` (their ``forward`` swallows ``cache`` in ``**kwargs``). Two consequences, measured on tiny FLA
    models: a cache passed to ``generate`` is rejected by ``_validate_model_kwargs`` (FLA's own ``Cache`` too), and
    FLA's default generate builds a fresh empty cache at every step, so from the second new token its logits differ
    from a full forward. For the duration, this (1) skips ``cache``'s ``cache`` entry in that check, every other
    argument still being checked, and (2) hands ``cache`` to the model as ``past_key_values``, the name its ``forward``
    reads. Used by :class:`FLADeltaLogCache` (through the generate patch) and, with FLA's own ``Cache``, by the
    default-cache baseline of :class:`hf_deltalog.harness.CachedHFLM`.

    How: the model's class gets two hooks (``_validate_model_kwargs``, ``prepare_inputs_for_generation``) while some
    handover of a model of that class is open; the last one to close restores the class. They act only on the
    caches handed over to that model (by identity), so calls with any other cache, other models of the class, and
    instance attributes a user set on the model (they take precedence) are handed to the original methods unchanged.
    Several handovers may be open at once, on one model or several, in one thread or several (a ``generate`` run in
    another thread inside the context, as with a ``TextIteratorStreamer``, is covered too). Nothing is set on the model
    itself, so copies of it (``copy.deepcopy``, pickling) carry nothing of this.

    Args:
        model: an FLA causal LM (``fla.models``). cache: the FLA ``Cache`` (or :class:`FLADeltaLogCache`) it decodes
            through.
    """
    names = set(inspect.signature(model.prepare_inputs_for_generation).parameters) | set(
        inspect.signature(model.forward).parameters)
    if "cache" in names:
        yield
        return
    cls = type(model)
    with _HANDOVER_LOCK:
        _HANDED[id(model)] = (model, _handed_caches(model) + (cache,))
        try:
            _hook_class(cls)
        except BaseException:
            _release(model, cache, cls, hooked=False)
            raise
    try:
        yield
    finally:
        with _HANDOVER_LOCK:
            _release(model, cache, cls, hooked=True)


def _release(model: Any, cache: Any, cls: type, hooked: bool) -> None:
    """Take ``cache`` off ``model``'s handed caches (and one open handover off ``cls``). Under ``_HANDOVER_LOCK``."""
    held = list(_handed_caches(model))
    for i, handed in enumerate(held):
        if handed is cache:
            del held[i]
            break
    if held:
        _HANDED[id(model)] = (model, tuple(held))
    else:
        _HANDED.pop(id(model), None)
    if hooked:
        _unhook_class(cls)
