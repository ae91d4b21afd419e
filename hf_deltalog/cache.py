"""``DeltaLogCache``: a transformers ``Cache`` that keeps each linear-attention state as a dense base plus a log.

Per linear-attention layer (shapes with named dims; ``C = M − 1`` log slots, ``M`` the merge interval)::

    base       [B, HV, K, V] fp32   dense state at the last merge ([B, HV, V, K] when the backend stores it V-first)
    log_decay  [B, HV]       fp32   cumulative log-decay ℓ̄ since that merge ([B, HV, K] for KDA: one per key channel)
    k_log      [B, Hk, C, K] fp32   key-side factors (l2-normalised keys), one per key head (a GQA group shares them)
    u_log      [B, HV, C, V] fp32   value-side factors u_t = β_t (v_t − S'ᵀ k̂_t)
    decay_log  [B, HV, C]    fp32   each entry's own log-decay λ_i ([B, HV, C, K] for KDA); ℓ̄ − Λ_i = Σ_{j>i} λ_j
    length     [B]           int32  live entries L per row (a device tensor; never read on the decode path)

Only the live slots (``i < L``) of the three logs are state; the slots at or past ``L`` are scratch (the Triton
kernels leave a merge's decayed keys in the stale KDA decay slots) and nothing reads them.

The logical state is ``S = exp(ℓ̄)·base + Σ_{i<L} exp(ℓ̄ − Λ_i) K_i U_iᵀ`` (seed paper, Eq. 7; see
:mod:`hf_deltalog.kernels.gdn.naive`). One-token decode steps append an entry, or merge the log into the base when
it is full; prefill, chunked prefill and multi-token continuation run transformers' own recurrence on the
materialised state and restart the log from the dense state it returns. Attention layers keep transformers'
``DynamicLayer`` s.

Static mode (``DeltaLogCache(model, static=True, max_cache_len=N)``) is the graph-safe form: attention layers are
transformers' ``StaticLayer`` s, every buffer keeps its address from prefill to prefill (of one batch size), decode
steps change no host state (the decoded-token count is a device tensor too) and the append/merge phase is read on the
device, so one captured CUDA graph (:mod:`hf_deltalog.graph`) serves every step.
"""

from __future__ import annotations

import contextlib
import inspect
import numbers
import operator
import sys
import warnings
from typing import Any, Callable

import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import (
    CacheLayerMixin,
    DynamicCache,
    DynamicIndexedLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionLayer,
    StaticCache,
    StaticIndexedLayer,
    StaticLayer,
    StaticSlidingWindowLayer,
)

from hf_deltalog.kernels._op import interpreting
from hf_deltalog.kernels.gdn.naive import naive_deltalog_gdn_decode, naive_deltalog_gdn_materialize
from hf_deltalog.kernels.kda.naive import naive_deltalog_kda_decode, naive_deltalog_kda_materialize
from hf_deltalog.patches.registry import (
    FamilySpec,
    _resolve,
    install_generate_checks,
    patch,
    patch_after_unpickling,
    runs_fla_kernels,
)

__all__ = ["BACKENDS", "DeltaLogCache", "DeltaLogLayer", "DeltaLogState"]

BACKENDS = ("auto", "torch", "triton")
MAX_MERGE_INTERVAL = 1024  # the log is replayed every step: far beyond a few dozen entries it only slows decoding
# Merge-interval policy of the Triton backend when the user gives none, per operator (measured on an H200,
# eval/results/h200/): below this many bytes of fp32 state per layer DeltaLog did not beat FLA's dense kernel, so
# such layers decode densely (M = 1). GDN (HV = 32, K = V = 128): B = 8 (16 MiB) lost, B = 32 (64 MiB) won 1.23x.
# KDA (H = 32, K = V = 128): B = 1 (2 MiB) lost, B = 8 (16 MiB) won 1.02x. RWKV6 (FLA's models only; H = 32,
# K = V = 128): B = 1 (2 MiB) lost on 2026-11-30 (FLA 5.8 us against DeltaLog's best 6.4 us; FLA's RWKV6 kernel varies
# from run to run: 7.6 us the day before), B = 8 (16 MiB) won 1.23x; its dense decoding runs FLA's kernel in FLA's
# [K, V] layout (hf_deltalog.fla_cache).
DENSE_BELOW_STATE_BYTES = {"gdn": 64 << 20, "kda": 16 << 20, "rwkv6": 16 << 20}
# activation dtypes the Triton decode kernels take (their launchers raise TypeError for others)
KERNEL_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_stagger_merges(value: Any) -> bool:
    """``stagger_merges`` as given, or TypeError naming what is accepted (True or False; not None, 0/1, strings,
    numpy or torch booleans)."""
    if not isinstance(value, bool):
        former = " (None chose staggering by state size until 2026-12-02; that rule was removed)" if value is None else ""
        raise TypeError(f"stagger_merges must be True or False (False, the default: every row merges at the same "
                        f"step; see hf_deltalog.cache.restart_log); got {value!r}{former}")
    return value


def restart_log(log_decay: torch.Tensor, k_log: torch.Tensor, u_log: torch.Tensor, decay_log: torch.Tensor,
                length: torch.Tensor, stagger: bool) -> bool:
    """Restart a layer's log after a new dense base (prefill, multi-token forward), in place.

    ``stagger=False``: every row starts empty (``length = 0``), so all rows append together and merge together, every
    ``M``-th step. ``stagger=True``: row ``r`` starts at ``length = r mod M`` with that many zero entries (``K_i = 0``,
    ``U_i = 0``, ``λ_i = 0``). A zero entry adds ``exp(ℓ̄ − Λ_i) K_i U_iᵀ = 0`` to the logical state, exactly, and
    leaves ``ℓ̄`` at 0, so the state is the base's either way; but then about ``1/M`` of the rows (exactly ``B/M`` when
    ``B`` is a multiple of ``M``) merge at each step, and every step of a launch does the same work. Each row still
    merges every ``M`` steps, its first merge after ``M − (r mod M)`` steps.

    Measured on an H200 (eval/results/h200/NOTES.md): the decode kernels alone, launched back to back, take 0.2-2.3 %
    less time per token staggered at B = 64-512 and M = 4, 8 (rounds 47 and 49), and no step is twice as slow as the
    others; but whole-model decoding in a CUDA graph is 0.4-1.2 % slower per token staggered (rounds 51-53: Qwen3.5-35B-
    A3B and Kimi-Linear-48B-A3B architectures, B = 64 and 256), so the caches keep aligned phases unless asked.

    Shapes as in the module docstring (``C = M − 1`` slots; ``C = 0`` has no log and nothing to stagger). Allocates
    one ``[B]`` int32 tensor when staggering: not for a captured decode step (prefill runs eagerly).

    Returns:
        Whether some row now starts at another phase than row 0: ``stagger`` with a log (``M ≥ 2``) and ``B ≥ 2``.
    """
    log_decay.zero_()
    C = k_log.shape[2]
    if not stagger or C == 0 or length.shape[0] < 2:
        length.zero_()
        return False
    for t in (k_log, u_log, decay_log):
        t.zero_()  # every slot a zero entry: the slots below each row's start length are its live zero entries
    length.copy_(torch.arange(length.shape[0], device=length.device, dtype=length.dtype) % (C + 1))
    return True


def _fla_dense_decode(operator: str) -> Callable | None:
    """FLA's dense decode kernel of ``operator`` (``fused_recurrent_gated_delta_rule`` / ``fused_recurrent_kda``,
    the fastest dense kernels we know), or None where FLA is missing or unusable."""
    try:
        if operator == "kda":
            from fla.ops.kda import fused_recurrent_kda as kernel
        else:
            from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as kernel
    except Exception:  # noqa: BLE001 - FLA missing or unusable here
        return None
    return kernel


def _ordinary_allocation() -> contextlib.AbstractContextManager:
    """Where the cache allocates a buffer that later steps update in place: outside ``torch.inference_mode()``
    (``inference_mode(False)``), so a buffer filled by an inference-mode prefill is an ordinary tensor, which later
    steps outside inference mode (a compiled static decode step included, where no Python check runs) may update.
    Inference mode allows in-place updates of ordinary tensors. Not while ``torch.compile`` traces (it allocates
    nothing then that outlives the graph)."""
    if torch.is_inference_mode_enabled() and not torch.compiler.is_compiling():
        return torch.inference_mode(False)
    return contextlib.nullcontext()


class _Status:
    """State shared by a cache and its layers: why the cache is unusable until ``reset()``, if something left it so.

    ``broken`` completes the sentence "this DeltaLogCache ..." (e.g. "was left inconsistent by ..."), so the message
    of every later call names the actual cause."""

    __slots__ = ("broken", "recording", "step_counters")

    def __init__(self) -> None:
        self.broken: str | None = None
        self.recording = False  # some layer's past recording is on (activate_past_recording; never switched off)
        # Static mode: one decode-step counter per device ([] int64 device tensor, owner layer index). Only the owner,
        # the first DeltaLog layer allocated on that device, advances it: one tiny kernel per step in the captured
        # graph instead of one per layer.
        self.step_counters: dict[torch.device, tuple[torch.Tensor, int]] = {}

    def step_counter(self, device: torch.device, layer_idx: int) -> tuple[torch.Tensor, bool]:
        """The decode-step counter of ``device`` (created at 0 on first use) and whether ``layer_idx`` advances it."""
        if device not in self.step_counters:
            with _ordinary_allocation():
                counter = torch.zeros((), dtype=torch.int64, device=device)
            if not torch.compiler.is_compiling():  # dynamo refuses the call inside a traced forward (a compiled prefill)
                torch._dynamo.mark_static_address(counter)
            self.step_counters[device] = (counter, layer_idx)
        counter, owner = self.step_counters[device]
        return counter, owner == layer_idx

    def reject(self, message: str) -> ValueError:
        """Record that a forward was refused part-way (earlier layers may already have advanced) and build the error."""
        self.broken = ("was locked by a call it refused inside a forward (the layers that ran before it in that "
                       f"forward may have advanced): {message}")
        return ValueError(message)

    def refuse(self, message: str, in_forward: bool) -> ValueError:
        """The ValueError of a call refused before it changed anything: locking the cache (:meth:`reject`) when a
        model's forward made it (the layers before the refusing one have advanced), not when other code did."""
        return self.reject(message) if in_forward else ValueError(message)

    def check(self) -> None:
        """Raise ValueError naming the cause if the cache is locked (until ``reset()``)."""
        if self.broken is not None:
            raise ValueError(f"this DeltaLogCache {self.broken}. Call cache.reset() to start over")


def _triton_kernels(operator: str) -> tuple[Callable, Callable] | None:
    """``(decode, workspace)`` of the operator's Triton kernels, or None where triton (or the kernel) is unavailable."""
    try:
        if operator == "kda":
            from hf_deltalog.kernels.kda.fused_deltalog import deltalog_kda_workspace as workspace
            from hf_deltalog.kernels.kda.fused_deltalog import fused_deltalog_kda_decode as decode
        else:
            from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace as workspace
            from hf_deltalog.kernels.gdn.fused_deltalog import fused_deltalog_gdn_decode as decode
    except Exception:  # noqa: BLE001 - triton missing or unusable here: the torch backend serves
        return None
    return decode, workspace


NO_BACKWARD_MESSAGE = (
    "backpropagation through a DeltaLogCache is not supported: its recurrent state lives outside autograd (the decode "
    "step updates it in place), so gradients through cached decoding would miss the path through the state. Decode "
    "under torch.no_grad() or "
    "torch.inference_mode() (generate does); to train, run the model on whole sequences without a cache"
)


class _NoBackwardThroughState(torch.autograd.Function):
    """Identity on the output of a step that read the cached state; its backward raises (see
    :func:`no_backward_through_state`)."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        return out.clone()

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        raise RuntimeError(NO_BACKWARD_MESSAGE)


def no_backward_through_state(out: Any, *inputs: Any) -> Any:
    """The output of a recurrence that read a DeltaLog state, unchanged; but when grad mode is on and one of ``inputs``
    requires grad, a backward pass into it raises RuntimeError (:data:`NO_BACKWARD_MESSAGE`) instead of returning
    gradients that miss the path through the recurrent state (the state is read without autograd). transformers'
    default cache fails such a backward too (an in-place modification error). ``out``: a tensor, or a tuple whose
    first element is the output tensor. Shared by :class:`DeltaLogCache` and the FLA cache's bindings."""
    if not torch.is_grad_enabled():
        return out
    needs = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    if not needs:
        return out
    if isinstance(out, tuple):
        return (_NoBackwardThroughState.apply(out[0], *needs), *out[1:])
    return _NoBackwardThroughState.apply(out, *needs)


class DeltaLogState:
    """What :meth:`DeltaLogCache.get_recurrent_state` hands the model instead of a dense tensor.

    The patched recurrences (:mod:`hf_deltalog.patches`) recognise it and run the decode step on the layer's
    DeltaLog buffers; :meth:`DeltaLogLayer.materialize` gives the dense state it stands for.
    """

    __slots__ = ("layer",)

    def __init__(self, layer: DeltaLogLayer):
        self.layer = layer

    def __getattr__(self, name: str):
        """A missing attribute (``.shape``, ``.clone``, ...): the handle was taken for a tensor. Reading it changes
        nothing; the error says how to get the tensor."""
        if name.startswith("__") or name == "layer":
            raise AttributeError(name)
        try:
            idx = object.__getattribute__(self, "layer").layer_idx
        except AttributeError:
            idx = "layer_idx"
        raise AttributeError(
            f"DeltaLogState has no attribute {name!r}: the recurrent state a DeltaLogCache hands out is a handle, not "
            f"a tensor; cache.materialize({idx}) gives the dense [B, HV, K, V] fp32 state it stands for")

    def recurrent(self, upstream, spec, query, key, value, g, beta, output_final_state, use_qk_l2norm, kwargs):
        """Called by the patched recurrences: one decode step on the layer's buffers, or ``upstream`` on the dense
        state for several tokens (:meth:`DeltaLogLayer._recurrent`). Returns ``(o, state)`` as the upstream function."""
        return self.layer._recurrent(upstream, spec, query, key, value, g, beta, output_final_state, use_qk_l2norm,
                                     kwargs)

    def dense_for(self, spec: FamilySpec, query: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The dense ``[B, HV, K, V]`` fp32 state for an upstream function that needs one (after checking that the
        call belongs to this layer: ValueError otherwise)."""
        self.layer._check_call(spec, query, value)
        return self.layer.materialize()

    def to(self, *args: Any, **kwargs: Any) -> DeltaLogState:
        """``.to(dtype)`` is the identity (KDA layers call ``.to(torch.float32)`` on the state the kernel returns; ours
        is fp32). ``.to(tensor)`` is what an upstream recurrence does with its initial state: it means the state
        reached a recurrence hf_deltalog has not bound, which is an error that locks the cache until ``reset()`` (that
        forward stopped part-way). Anything else (a device: user code taking the handle for a tensor) raises
        TypeError and changes nothing.

        Raises:
            RuntimeError: ``.to(tensor)``, as above.
            TypeError: ``.to(device)`` and other calls without a tensor; the message names ``cache.materialize``.
        """
        if not kwargs and len(args) == 1 and isinstance(args[0], torch.dtype):
            return self  # the KDA layers' call, at every decode step: no list building on that path
        tensor = any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values()))
        dtypes = [a for a in (*args, kwargs.get("dtype")) if isinstance(a, torch.dtype)]
        devices = [a for a in (*args, kwargs.get("device")) if isinstance(a, (str, torch.device, int))
                   and not isinstance(a, bool)]
        if not tensor:
            if dtypes and not devices:
                return self
            raise TypeError(
                f"a DeltaLogState is a handle, not a tensor: "
                f".to({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])}) cannot move it; "
                f"cache.materialize({self.layer.layer_idx}) gives the dense [B, HV, K, V] fp32 state it stands for "
                "(a new tensor, which .to() moves)")
        self.layer.status.broken = ("was left inconsistent by a forward that stopped part-way: its state reached a "
                                    "recurrence that hf_deltalog has not bound")
        if type(self) is not globals()["DeltaLogState"]:  # this module was reloaded since (autoreload)
            raise RuntimeError(
                "this DeltaLogCache was built before hf_deltalog.cache was reloaded (importlib.reload, IPython's "
                "autoreload): the reloaded bindings do not know its state objects; build a new DeltaLogCache")
        raise RuntimeError(
            "a DeltaLogState reached a recurrence that hf_deltalog has not bound (was hf_deltalog.unpatch() called, or "
            "is the model of a family DeltaLogCache does not support?); call hf_deltalog.patch(), then cache.reset() "
            "(this forward stopped part-way and left the cache inconsistent: it refuses further use until reset), or "
            "use another cache"
        )

    def __repr__(self) -> str:
        return f"DeltaLogState(layer={self.layer.layer_idx}, M={self.layer.merge_interval})"


class DeltaLogLayer(LinearAttentionLayer):
    """Cache layer of one linear-attention layer: transformers' conv state(s) plus the DeltaLog buffers.

    Args:
        spec: the model family (:data:`hf_deltalog.patches.FAMILIES`).
        dims: ``(Hk, HV, K, V)``: key heads, value heads, key and value head dims.
        merge_interval: ``M ≥ 1``; the log holds ``C = M − 1`` entries, ``M = 1`` is eager dense decoding.
        auto_merge_interval: ``merge_interval`` is the family default, not the user's: the Triton backend may pick
            ``M = 1`` for small states (:data:`DENSE_BELOW_STATE_BYTES`).
        backend: ``"auto"``, ``"torch"`` or ``"triton"`` (resolved when the buffers are allocated).
        layer_idx: the model layer this cache layer serves.
        number_of_states: conv states of the layer (transformers' ``number_of_conv_states``).
        stagger_merges: True: start row ``r``'s log at ``r mod M`` zero entries after each prefill, so that the rows
            merge at different steps (:func:`restart_log`); False (default): every row merges at the same step.

    Raises:
        TypeError: a non-integer ``merge_interval``, a ``stagger_merges`` other than True or False.
        ValueError: ``merge_interval`` outside ``[1, MAX_MERGE_INTERVAL]``, an unknown backend, ``dims`` that are not
            four positive ints with ``HV`` a multiple of ``Hk``.
    """

    @property
    def is_compileable(self) -> bool:
        """Whether the layer is safe for torch.compile / CUDA graphs: static mode without past recording. Dynamic mode
        is not (the small-batch dense path rebinds the base to the tensor FLA returns, and decode steps advance host
        counters); nor is past recording (``activate_past_recording()``: the conv states grow and are assigned anew at
        every step, as in transformers' linear-attention layer, so a captured graph would read a stale window)."""
        return self.static and not self.record_past

    def __init__(self, spec: FamilySpec, dims: tuple[int, int, int, int], merge_interval: int, backend: str,
                 layer_idx: int, number_of_states: int = 1, status: _Status | None = None,
                 auto_merge_interval: bool = False, static: bool = False, crop_ring: bool = False,
                 stagger_merges: bool = False):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
        if merge_interval is None:
            raise TypeError(f"merge_interval must be an integer in [1, {MAX_MERGE_INTERVAL}]; got None")
        merge_interval = _check_merge_interval(merge_interval, None)
        if len(dims) != 4 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims) \
                or dims[1] % dims[0]:
            raise ValueError(f"dims must be (Hk, HV, K, V), positive ints with HV a multiple of Hk; got {dims!r}")
        super().__init__(number_of_states=number_of_states)
        self.static = static
        self.crop_ring = crop_ring
        self.stagger_merges = check_stagger_merges(stagger_merges)
        self.staggered = False  # whether the log's last restart staggered the rows (restart_log's answer)
        # Static mode: decode steps are counted on the device by a counter shared by the cache's layers on that device
        # (`_Status.step_counter`); this layer's count is the counter minus `_counter_mark`, its value at the last fold.
        self.step_counter: torch.Tensor | None = None
        self.owns_step_counter = False
        self._counter_mark = 0
        self.status = status if status is not None else _Status()
        self.spec = spec
        self.num_k_heads, self.num_v_heads, self.k_head_dim, self.v_head_dim = dims
        self.merge_interval = self.default_merge_interval = merge_interval
        self.capacity = merge_interval - 1
        self.auto_merge_interval = auto_merge_interval
        self.dense_kernel: Callable | None = None  # FLA's kernel when this layer decodes densely on the GPU
        self.requested_backend = backend
        self.backend: str | None = None
        self.state_v_first = False
        self.layer_idx = layer_idx
        self.handle = DeltaLogState(self)
        self._names: tuple[str, ...] = ()
        self.base = self.log_decay = self.k_log = self.u_log = self.decay_log = self.length = None
        self.workspace = self.conv_ring = self.conv_pos = None
        self._seen = 0  # tokens consumed (host count; static mode: decode steps are on the device step counter)
        self._log_start = 0  # `_seen` when the log last restarted: no row's log holds more decoded tokens than this
        self._pending = 0  # tokens of the current forward seen by update_conv_state
        # A forward is inside this layer: set when the model reads its recurrent state or updates the conv window
        # (before it moves the window), cleared when the layer stores its recurrent state. `_moved`: since the layer's
        # last completed step, something may have changed its buffers: a conv window handed out (the model updates it
        # in place) or stored, or the recurrence run. Both still set at the next generate or forward mean a forward
        # stopped inside the layer after changing part of it (the cache is locked); `_in_step` alone means it stopped
        # before anything changed (transformers 5.25 reads the recurrent state first, then projects the input, which
        # can fail on bad input): the layer is as the last step left it.
        self._in_step = False
        self._moved = False
        self._act_dtype: torch.dtype | None = None  # dtype of the last conv columns the model passed
        # Past recording with kept recurrent states (transformers >= 5.25's assisted generation): the model hands a
        # multi-token forward's last states to update_recurrent_state; `_history[-n]` is the dense state before the
        # forward's last n tokens, valid while the layer holds `_history_seen` tokens (any later step drops it).
        # `recurrent_states_to_keep` (read by the model) is one more than `states_to_crop`, the tokens asked for.
        self.recurrent_states_to_keep = 0
        self.states_to_crop = 0
        self._history: list[torch.Tensor] = []
        self._history_seen = -1

    # ------------------------------------------------------------------ buffers
    def _tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self._names}

    def _resolve_backend(self, device: torch.device, act_dtype: torch.dtype | None = None) -> str:
        kernel = _triton_kernels(self.spec.operator)
        on_gpu = device.type == "cuda"
        if self.requested_backend == "torch":
            return "torch"
        if self.requested_backend == "triton":
            if not on_gpu and not interpreting():
                raise ValueError(
                    f"backend='triton' needs CUDA tensors (the state is on {device}) or TRITON_INTERPRET=1 set before "
                    "triton is imported; build a new DeltaLogCache(model, backend='torch') for the CPU (reset() keeps "
                    "the backend)"
                )
            if act_dtype not in (None, *KERNEL_ACT_DTYPES):
                raise ValueError(
                    f"backend='triton': the Triton kernels take bfloat16, float16 or float32 activations, but layer "
                    f"{self.layer_idx} runs in {act_dtype}; use backend='torch' (or 'auto', which picks it) for this "
                    "model"
                )
            return "triton"
        if act_dtype not in (None, *KERNEL_ACT_DTYPES):
            return "torch"  # e.g. a float64 model: the PyTorch reference takes any float dtype
        return "triton" if (kernel is not None and on_gpu) else "torch"

    def plan(self, batch: int, device: torch.device, act_dtype: torch.dtype | None = None) -> dict[str, Any]:
        """How this layer decodes a batch of ``batch`` rows on ``device`` (decided when its buffers are allocated).

        Returns ``backend``, ``merge_interval``, ``state_v_first`` (the Triton kernels keep the base V-first,
        ``[B, HV, V, K]``: 1.3x faster than ``[B, HV, K, V]`` on an H200, eval/results/; converted once at prefill and
        in ``materialize()``, never per step) and ``dense_fla`` (M = 1 decoding on the GPU runs FLA's dense kernel when
        FLA is installed). ``act_dtype``: the layer's activation dtype when known (a float64 model decodes on the
        PyTorch backend under ``"auto"``; ``backend="triton"`` refuses it with ValueError).

        A query: it changes nothing, also when it raises.

        Raises:
            ValueError: ``backend="triton"`` off CUDA without ``TRITON_INTERPRET=1``, or for an activation dtype the
                Triton kernels do not take (float64); a negative ``batch``.
            TypeError: ``batch`` not an int. (``device`` may be a string.)
        """
        device = check_plan_arguments(batch, device)
        backend = self._resolve_backend(device, act_dtype)
        HV, K, V = self.num_v_heads, self.k_head_dim, self.v_head_dim
        merge_interval = self.default_merge_interval
        threshold = DENSE_BELOW_STATE_BYTES.get(self.spec.operator, 0)
        if self.auto_merge_interval and backend == "triton" and batch * HV * K * V * 4 < threshold:
            merge_interval = 1
        state_v_first = backend == "triton"
        dense_fla = merge_interval == 1 and device.type == "cuda" and state_v_first
        return dict(backend=backend, merge_interval=merge_interval, state_v_first=state_v_first, dense_fla=dense_fla)

    def _activation_dtype(self) -> torch.dtype | None:
        """The model's activation dtype: that of the conv columns it last passed (a held conv buffer keeps its own
        dtype when the model's changes between turns: transformers copies the new columns into it)."""
        conv = self.conv_states[0]
        return self._act_dtype or (None if conv is None else conv.dtype)

    def _allocate(self, batch: int, device: torch.device) -> None:
        try:
            plan = self.plan(batch, device, self._activation_dtype())
        except ValueError as err:  # inside a forward: earlier layers may have advanced, so the cache is locked
            raise self.status.reject(str(err)) from None
        self.backend, self.merge_interval, self.state_v_first = plan["backend"], plan["merge_interval"], \
            plan["state_v_first"]
        self.capacity = self.merge_interval - 1
        self.dense_kernel = _fla_dense_decode(self.spec.operator) if plan["dense_fla"] else None
        with _ordinary_allocation():
            self._allocate_buffers(batch, device)
        if not torch.compiler.is_compiling():  # as transformers' layers: dynamo refuses it inside a traced forward
            for t in self._tensors().values():
                torch._dynamo.mark_static_address(t)
        self.is_recurrent_states_initialized[0] = True
        self.device = device

    def lazy_initialization(self, *args: Any, **kwargs: Any) -> None:
        """transformers' allocation of the conv states, outside inference mode (:func:`_ordinary_allocation`)."""
        with _ordinary_allocation():
            super().lazy_initialization(*args, **kwargs)

    def _allocate_buffers(self, batch: int, device: torch.device) -> None:
        Hk, HV, K, V = self.num_k_heads, self.num_v_heads, self.k_head_dim, self.v_head_dim
        C = self.capacity
        f32 = dict(dtype=torch.float32, device=device)
        self.base = torch.zeros((batch, HV, V, K) if self.state_v_first else (batch, HV, K, V), **f32)
        per_key = (K,) if self.spec.operator == "kda" else ()  # KDA decays each key channel
        self.log_decay = torch.zeros(batch, HV, *per_key, **f32)
        self.k_log = torch.zeros(batch, Hk, C, K, **f32)
        self.u_log = torch.zeros(batch, HV, C, V, **f32)
        self.decay_log = torch.zeros(batch, HV, C, *per_key, **f32)
        self.length = torch.zeros(batch, dtype=torch.int32, device=device)
        self._names = ("base", "log_decay", "k_log", "u_log", "decay_log", "length")
        if self.crop_ring:
            # The last C + W pre-conv columns, so that `crop` can rebuild the conv window of any point inside the log.
            conv = self.conv_states[0]
            self.conv_ring = torch.zeros(batch, C + self.conv_kernel_size[0], conv.shape[1], dtype=conv.dtype,
                                         device=device)
            self.conv_pos = torch.zeros(batch, dtype=torch.int64, device=device)
            self._names += ("conv_ring", "conv_pos")
        if self.static:
            self.step_counter, self.owns_step_counter = self.status.step_counter(device, self.layer_idx)
            self._counter_mark = int(self.step_counter)  # allocation happens on a prefill, never on the decode path
        if self.backend == "triton":
            self.workspace = _triton_kernels(self.spec.operator)[1](batch, Hk, HV, K, C, device)  # kernel scratch
            self._names += ("workspace",)

    @property
    def batch_size(self) -> int:
        """Rows the layer holds (``B`` of its base), -1 before its first prefill."""
        return -1 if self.base is None else self.base.shape[0]

    @property
    def is_croppable(self) -> bool:
        """Whether ``crop`` can put this layer back as it was (transformers' question): True once the layer holds a
        state, if ``crop(-1)`` would be exact now (the last token is still in the log and the conv window can be
        rebuilt: ``crop_ring`` or past recording), or if past recording keeps the states of multi-token forwards
        (``activate_past_recording(recurrent_states_to_keep=n ≥ 1)``). transformers >= 5.25 asks once, right after
        assisted generation's first forward, and then crops only tokens of a multi-token forward just run: a first
        forward of one token (a one-token prompt, or a continuation given its new token only) or one that merged
        cannot be cropped itself, but every later crop is exact. False on an empty layer, and otherwise right after a
        merge or prefill, or without a source of conv columns. ``crop`` itself is exact for any count it takes and
        raises ``ValueError`` (changing nothing) beyond it."""
        if self.base is None:
            return False
        if self.record_past and self.recurrent_states_to_keep:
            return True
        try:
            self.check_crop(1)
        except ValueError:
            return False
        return True

    def check_caller_conv(self, frame: Any) -> None:
        """At a model's one-token step, before it updates the conv window in place (it has read the window with
        ``get_conv_state``, and then reads the recurrent state): the calling layer module's ``conv1d`` must have this
        window's channels and width. Another model's layer failed in ``torch.cat`` inside transformers' conv update
        (raw ``RuntimeError``), or with another width decoded on with the wrong kernel. ``frame``: the caller's frame
        (its ``self``; a few tenths of a µs). Raises ``ValueError`` (locks the cache: earlier layers have advanced)."""
        window = self.conv_states[0] if self.has_previous_state[0] else None
        owner = frame.f_locals.get("self") if frame is not None else None
        weight = getattr(getattr(owner, "conv1d", None), "weight", None)
        if window is None or window.dim() != 3 or not isinstance(weight, torch.Tensor) or weight.dim() != 3:
            return
        width = self.conv_kernel_size.get(0)
        if weight.shape[0] != window.shape[1] or (width is not None and weight.shape[-1] != width):
            raise self.status.reject(
                f"layer {self.layer_idx}: the model's conv1d has {weight.shape[0]} channels of width {weight.shape[-1]}, "
                f"but this cache's conv window holds {window.shape[1]} channels of width {width}: the cache belongs to "
                "a model with another configuration; build the cache from the model that uses it")

    # ------------------------------------------------------------------ transformers' layer API
    def activate_past_recording(self, recurrent_states_to_keep: int | None = None, **kwargs: Any) -> None:
        """transformers' past recording (the conv states keep their columns until a crop); also tells the cache, whose
        static attention layers then return only their filled slots (see ``DeltaLogCache._unmasked_static_slots``).

        ``recurrent_states_to_keep`` (transformers >= 5.25: assisted generation passes its draft length): make a
        multi-token forward's last ``n`` tokens croppable, ``n`` up to that number. The model then computes the
        states after each of those tokens (``cache.get_recurrent_states_to_keep``: one more than asked, so that the
        state before the ``n``-th last token is among them) and hands them to :meth:`update_recurrent_state`, which
        keeps them until the next step. Tokens of one-token steps are croppable from the log, as without it. Other
        keyword arguments are ignored (transformers' attention layers take none).

        Raises:
            TypeError / ValueError: ``recurrent_states_to_keep`` not None or an int ``≥ 0``.
        """
        keep = _states_to_crop(recurrent_states_to_keep)
        super().activate_past_recording()
        self.states_to_crop = keep
        self.recurrent_states_to_keep = keep + 1 if keep else 0
        self.status.recording = True

    def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size: int | None = None,
                          **kwargs) -> torch.Tensor:
        """Store conv window ``state_idx`` as transformers' ``LinearAttentionLayer.update_conv_state`` does (the model's
        ``[B, D, W]`` pre-conv columns, time last; a ``[B, W]`` token history for qwen4_exp's state 2) and mark the
        layer as inside a step until it stores its recurrent state. Returns the stored window (upstream's return).

        Raises:
            ValueError: (locking the cache when raised inside a forward) the layer holds another number of rows, or a
                window of another channel shape (the cache belongs to a model of another configuration).
        """
        current = self.conv_states[state_idx]
        if self.has_previous_state[state_idx] and current is not None:
            if current.shape[0] != conv_states.shape[0]:
                raise self.status.reject(
                    f"layer {self.layer_idx} holds {current.shape[0]} rows but the model passed {conv_states.shape[0]}; "
                    "call cache.reset() (or build a new DeltaLogCache) before a batch of another size"
                )
            # [B, D, W] windows: D channels; a [B, W] state (qwen4_exp's PLE keeps its token history as conv state 2)
            # has none. The last axis is time.
            if current.shape[1:-1] != conv_states.shape[1:-1]:
                raise self.status.reject(
                    f"layer {self.layer_idx} holds conv state {state_idx} of shape {tuple(current.shape)} ([B, D, W]) but "
                    f"the model passed {tuple(conv_states.shape)}: the cache belongs to a model with another "
                    "configuration"
                )
        elif current is not None and self.is_conv_states_initialized[state_idx] and (
                current.shape[:-1] != conv_states.shape[:-1] or current.dtype != conv_states.dtype
                or current.device != conv_states.device
                or conv_kernel_size not in (None, self.conv_kernel_size.get(state_idx))):
            # after reset(): a batch of another size, or a model of another dtype, device or conv width, reallocates
            # (transformers would keep the old buffer: the new model's conv windows rounded to its dtype, or kept
            # at the old width)
            self.is_conv_states_initialized[state_idx] = False
        self._in_step = True  # any conv state (qwen4_exp's PLE moves states 2 and 1 before the recurrent state's read)
        self._moved = True
        if state_idx == 0:
            self._pending += conv_states.shape[-1]
            self._act_dtype = conv_states.dtype  # the backend is planned from it (_activation_dtype)
        prefill = not self.has_previous_state[state_idx]
        full = super().update_conv_state(conv_states, state_idx=state_idx, conv_kernel_size=conv_kernel_size,
                                         **kwargs)
        width = self.conv_kernel_size.get(state_idx)
        if (self.record_past and prefill and width is not None and self.conv_states[state_idx].dim() == 3
                and self.conv_states[state_idx].shape[-1] < width):
            # Past recording keeps a prompt shorter than the window unpadded, and the KDA families' decode step
            # (causal_conv1d_update on the stored state) then fails on it, with transformers' caches too: store it
            # zero-padded to the window, as transformers does without recording (the zeros are the empty history).
            # [B, D, W] pre-conv columns only: a [B, W] token history (qwen4_exp's state 2) is padded by the model
            # with its eos token, never with zeros (token 0 is a real token).
            self.conv_states[state_idx] = torch.nn.functional.pad(
                self.conv_states[state_idx], (width - self.conv_states[state_idx].shape[-1], 0))
        return full

    def update_recurrent_state(self, recurrent_states: Any, state_idx: int = 0, **kwargs) -> Any:
        """Take the dense state a prefill/continuation produced (restarting the log), or our own handle (no-op).

        Everything is checked before anything changes; a refusal locks the cache only when a model's forward made
        the call (:meth:`_refuse`). See :meth:`DeltaLogCache.update_recurrent_state` for the arguments and errors."""
        check_recurrent_state_index(state_idx)
        states: list[torch.Tensor] = []
        if isinstance(recurrent_states, (list, tuple)):
            # transformers >= 5.25 with kept recurrent states: the states after each of the forward's last tokens
            if not recurrent_states or not all(isinstance(t, torch.Tensor) for t in recurrent_states):
                raise TypeError("recurrent states handed as a list must be a non-empty list of tensors (the states "
                                "after each of a forward's last tokens); got "
                                f"{[type(t).__name__ for t in recurrent_states]}")
            states, recurrent_states = list(recurrent_states[:-1]), recurrent_states[-1]
        if isinstance(recurrent_states, DeltaLogState):
            if recurrent_states is not self.handle:
                raise self._refuse(f"layer {self.layer_idx} was handed the DeltaLog state of another layer or cache")
            self._history, self._history_seen = [], -1  # a step since the history was kept: its tokens are not the last
            if self.static:
                # No host state changes on the decode path: a captured graph replays only device work.
                if self.owns_step_counter:
                    self.step_counter.add_(1)
            else:
                self._seen += self._pending or 1
            self._pending = 0
            self._in_step = self._moved = False
            return self.handle
        self._check_dense_state(recurrent_states, states)
        act_dtype = self._activation_dtype()
        try:
            replan = self.base is not None and act_dtype is not None and \
                self._resolve_backend(recurrent_states.device, act_dtype) != self.backend
        except ValueError as err:  # inside a forward: earlier layers may have advanced, so the cache is locked
            raise self._refuse(str(err)) from None
        self._moved = True  # until the store completes
        self._history, self._history_seen = [], -1
        batch = recurrent_states.shape[0]
        if self.base is None or self.base.shape[0] != batch or self.base.device != recurrent_states.device or replan:
            # on the device of the layer that produced the state; planned again when the backend would change (a
            # float64 model, which the Triton kernels do not take, before or after one they do, across reset())
            self._allocate(batch, recurrent_states.device)
        self._restart_from(recurrent_states)
        if self.crop_ring:
            self._seed_conv_ring()
        if self.static:
            self._fold_decoded()  # outside the decode path
        self._seen += self._pending
        self._log_start = self._seen
        self._pending = 0
        self._in_step = self._moved = False
        if states and self.record_past and self.recurrent_states_to_keep:
            self._history, self._history_seen = [t.to(torch.float32) for t in states], self._seen
        return self.handle

    def _check_dense_state(self, state: Any, kept: list[torch.Tensor]) -> None:
        """Refuse a dense state (and the states kept before it) that this layer cannot take, before anything changes:
        not a floating tensor, another ``[B, HV, K, V]`` shape than the cache's, other rows or another device than the
        conv window the model stored in the same forward.

        Raises:
            TypeError: not a floating tensor (never locks). ValueError: the rest (:meth:`_refuse`).
        """
        for t in (state, *kept):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                got = t.dtype if isinstance(t, torch.Tensor) else type(t)
                raise TypeError(f"recurrent state must be a floating tensor or a DeltaLogState; got {got}")
        conv = self.conv_states[0]
        if self.has_previous_state[0] and conv is not None and state.dim() == 4 and conv.shape[0] != state.shape[0]:
            # the model stores the conv window first, with the forward's rows: a state of other rows is not its own
            raise self._refuse(f"layer {self.layer_idx} holds {conv.shape[0]} rows but was handed a recurrent state "
                               f"of {state.shape[0]}; call cache.reset() before a batch of another size")
        expected = (self.num_v_heads, self.k_head_dim, self.v_head_dim)
        if state.dim() != 4 or tuple(state.shape[1:]) != expected:
            raise self._refuse(
                f"layer {self.layer_idx}: the model produced a recurrent state of shape {tuple(state.shape)}, "
                f"but this DeltaLogCache was built for [B, HV, K, V] = [B, {', '.join(map(str, expected))}]: it "
                "belongs to a model with another configuration"
            )
        if self.has_previous_state[0] and conv is not None and conv.device != state.device:
            # a layer's conv window and recurrent state come from one module on one device
            raise self._refuse(
                f"layer {self.layer_idx} holds its conv window on {conv.device} but was handed a recurrent state on "
                f"{state.device}: the state must be on the device of the layer that produced it")
        if kept and self.record_past and self.recurrent_states_to_keep \
                and any(tuple(t.shape) != tuple(state.shape) or t.device != state.device for t in kept):
            raise self._refuse(
                f"layer {self.layer_idx}: the kept recurrent states have shapes "
                f"{sorted({tuple(t.shape) for t in kept})} on {sorted({str(t.device) for t in kept})}, the last one "
                f"{tuple(state.shape)} on {state.device}: they must all be alike")

    def _refuse(self, message: str) -> ValueError:
        """The ValueError of a store refused before it changed anything (:meth:`_Status.refuse`): locking the cache
        when a model's forward made the call, not from user code (a frame walk, on refusals only)."""
        return self.status.refuse(message, _called_by_a_module())

    def seen_tokens(self) -> int:
        """Tokens this layer consumed (reads the device counter in static mode: not for the decode path)."""
        return self._seen + self.decoded_steps()

    def get_seq_length(self) -> int:
        """Tokens this layer consumed (:meth:`seen_tokens`). transformers 5.25's linear-attention layers count them in a
        tensor (``cumulative_length_linear``), which this layer holds because upstream's methods update it, but does
        not read: it misses the steps this layer counts itself (:meth:`increase_count`)."""
        return self.seen_tokens()

    def increase_count(self, state_idx: int = 0) -> None:
        """transformers 5.25's hook for a one-token step that updates the conv window in place: a no-op here, as the
        layer counts a step's tokens when the step stores its recurrent state (:meth:`update_recurrent_state`)."""

    def decoded_steps(self) -> int:
        """Static mode: decode steps since the last prefill, crop or reset (a host read of the device counter);
        0 otherwise."""
        if not self.static or self.step_counter is None:
            return 0
        return int(self.step_counter) - self._counter_mark

    def _fold_decoded(self) -> None:
        """Move the decoded steps into the host count (static mode; reads the device counter: not on the decode path)."""
        if self.step_counter is not None:
            counter = int(self.step_counter)
            self._seen += counter - self._counter_mark
            self._counter_mark = counter

    def _ring_takes(self, dtype: torch.dtype) -> None:
        """Widen the ring to hold columns of ``dtype`` exactly: with past recording the conv window takes the model's
        dtype, which may change between turns (a narrower column is widened exactly into the ring instead)."""
        wide = torch.promote_types(self.conv_ring.dtype, dtype)
        if wide != self.conv_ring.dtype:
            self.conv_ring = self.conv_ring.to(wide)

    def _seed_conv_ring(self) -> None:
        """Put the current conv window (its last W columns) at ring positions 0..W−1."""
        W = self.conv_kernel_size[0]
        window = self.conv_states[0][..., -W:]  # [B, D, W]; fewer columns when past recording holds a short prompt
        self._ring_takes(window.dtype)
        self.conv_ring[:, :W].zero_()  # the causal conv's left zero padding
        self.conv_ring[:, W - window.shape[-1]:W].copy_(window.transpose(1, 2))
        self.conv_pos.fill_(W - 1)

    def _record_conv_column(self) -> None:
        """Store the newest pre-conv column (the conv window's last) at ring position ``conv_pos + 1``."""
        column = self.conv_states[0][..., -1]  # [B, D]
        self._ring_takes(column.dtype)
        self.conv_pos.add_(1)
        slot = (self.conv_pos % self.conv_ring.shape[1])[:, None, None].expand(-1, 1, column.shape[1])
        self.conv_ring.scatter_(1, slot, column[:, None, :].to(self.conv_ring.dtype))

    def _check_call(self, spec: FamilySpec, query: torch.Tensor, value: torch.Tensor) -> None:
        if spec.model_type != self.spec.model_type:
            raise self.status.reject(
                f"this DeltaLogCache was built for model_type {self.spec.model_type!r} but is used by a "
                f"{spec.model_type!r} model; build the cache from the model that uses it"
            )
        if self.base is None:
            raise self.status.reject(f"layer {self.layer_idx} has no recurrent state yet (prefill did not complete)")
        if (query.shape[2], query.shape[3], value.shape[2], value.shape[3]) != (
            self.num_k_heads, self.k_head_dim, self.num_v_heads, self.v_head_dim
        ):
            raise self.status.reject(
                f"layer {self.layer_idx}: q {tuple(query.shape)} / v {tuple(value.shape)} do not match the cache's "
                f"Hk={self.num_k_heads}, K={self.k_head_dim}, HV={self.num_v_heads}, V={self.v_head_dim}: the cache "
                "belongs to a model with another configuration"
            )
        if query.shape[0] != self.base.shape[0]:
            raise self.status.reject(
                f"layer {self.layer_idx}: the cache holds {self.base.shape[0]} rows but the model passed "
                f"{query.shape[0]}; call cache.reset() (or build a new DeltaLogCache) before a batch of another size"
            )

    def _recurrent(self, upstream, spec, query, key, value, g, beta, output_final_state, use_qk_l2norm, kwargs):
        self._check_call(spec, query, value)
        self._moved = True  # a decode step updates the buffers in place
        if query.shape[1] != 1 or kwargs.get("cu_seqlens") is not None:
            # Several tokens (or packed sequences): upstream's own recurrence on the logical state; the dense final
            # state it returns comes back through update_recurrent_state and restarts the log.
            return upstream(query, key, value, g=g, beta=beta, initial_state=self.materialize(),
                            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm, **kwargs)
        if self.crop_ring:
            self._record_conv_column()
        buffers = (self.base, self.log_decay, self.k_log, self.u_log, self.decay_log, self.length)
        if self.dense_kernel is not None:
            # M = 1 on the GPU: FLA's dense kernel on the V-first base; it returns a new state tensor, which becomes
            # the base (no copy; this dynamic cache does not promise stable addresses). The base is untouched until
            # then, so if FLA fails our own kernel (M = 1, same layout) takes over, with a warning.
            try:
                o, state = self.dense_kernel(query, key, value, g=g, beta=beta, initial_state=self.base,
                                             output_final_state=True, use_qk_l2norm_in_kernel=use_qk_l2norm,
                                             state_v_first=self.state_v_first)
                if self.static:
                    self.base.copy_(state)  # keep the base's address (what transformers' static layers do too)
                else:
                    self.base = state
                return o, self.handle
            except Exception as err:  # noqa: BLE001 - any failure of the optional dense kernel
                warnings.warn(f"layer {self.layer_idx}: FLA's dense decode kernel failed ({err!r:.200}); decoding with "
                              "hf_deltalog's own kernel (M = 1) from now on", RuntimeWarning, stacklevel=2)
                self.dense_kernel = None
        if self.backend == "triton":
            kernel = _triton_kernels(self.spec.operator)[0]
            # The kernels read rows of unit stride; with past recording transformers' GDN layers pass q, k, v as
            # strided views of the conv output (a copy only then)
            query, key, value, g, beta = (t if t is None or t.stride(-1) == 1 else t.contiguous()
                                          for t in (query, key, value, g, beta))
            # bool(): the launchers take only bools; the model's own kernels read the flag by truth value
            o = kernel(query, key, value, g, beta, *buffers, self.workspace,
                       use_qk_l2norm_in_kernel=bool(use_qk_l2norm), state_v_first=self.state_v_first)
        else:
            # bool(): the references, like the launchers, take only bools
            reference = naive_deltalog_kda_decode if self.spec.operator == "kda" else naive_deltalog_gdn_decode
            o = reference(query, key, value, g, beta, *buffers, use_qk_l2norm_in_kernel=bool(use_qk_l2norm),
                          state_v_first=self.state_v_first)
        return o, self.handle

    def materialize(self) -> torch.Tensor:
        """The dense logical state ``[B, HV, K, V]`` fp32 (a new contiguous tensor, transformers' layout, whatever the
        base's layout).

        Raises:
            ValueError: the layer holds no state yet.
        """
        if self.base is None or not self.has_previous_state[0]:
            raise ValueError(f"layer {self.layer_idx} holds no state yet: run a prefill first")
        reference = naive_deltalog_kda_materialize if self.spec.operator == "kda" else naive_deltalog_gdn_materialize
        # contiguous: from a V-first base (the Triton backend) the references return a transposed view's layout
        return reference(self.base, self.log_decay, self.k_log, self.u_log, self.decay_log, self.length,
                         state_v_first=self.state_v_first).contiguous()

    # ------------------------------------------------------------------ batch-dim operations
    def _map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor], in_place: bool) -> None:
        for name, t in self._tensors().items():
            if in_place:
                t.copy_(fn(t))
            else:
                setattr(self, name, fn(t))
        for i in range(self.number_of_states):
            if self.is_conv_states_initialized[i]:
                if in_place and not self.record_past:
                    self.conv_states[i].copy_(fn(self.conv_states[i]))
                else:
                    self.conv_states[i] = fn(self.conv_states[i])
        self._history = [fn(t) for t in self._history]  # kept recurrent states (past recording): rows too

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Gather every per-row tensor (base, log, counters, conv states) by ``beam_idx`` ``[B]``, in place."""
        idx = beam_idx.to(self.device) if self.device is not None else beam_idx
        self._map_batch(lambda t: t.index_select(0, idx.to(t.device)), in_place=True)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times (``[B, ...]`` → ``[B·repeats, ...]``)."""
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0), in_place=False)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (``[B']`` integer tensor, already checked by
        :meth:`DeltaLogCache.batch_select_indices`) of every per-row tensor (base, log, counters, conv states); the
        buffers are replaced by new ones of ``B'`` rows."""
        self._map_batch(lambda t: t[indices.to(t.device)], in_place=False)

    def reset(self) -> None:
        """Zero every buffer (addresses kept) and forget the tokens; the next forward is a prefill."""
        for i in range(self.number_of_states):
            if self.is_conv_states_initialized[i]:
                self.conv_states[i].zero_()
            self.has_previous_state[i] = False
        for t in self._tensors().values():
            t.zero_()
        if self.step_counter is not None:
            self._counter_mark = int(self.step_counter)  # the shared counter runs on; this layer starts from here
        self._seen = 0
        self._log_start = 0
        self._pending = 0
        self._in_step = self._moved = False
        self.staggered = False
        self._history, self._history_seen = [], -1

    def offload(self) -> None:
        """Move conv states and DeltaLog buffers to the CPU (transformers' offloading)."""
        for i in range(self.number_of_states):
            if self.is_conv_states_initialized[i]:
                self.conv_states[i] = self.conv_states[i].to("cpu", non_blocking=True)
        for name, t in self._tensors().items():
            setattr(self, name, t.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        """Bring offloaded tensors back to the layer's device."""
        for i in range(self.number_of_states):
            if self.is_conv_states_initialized[i] and self.conv_states[i].device != self.device:
                self.conv_states[i] = self.conv_states[i].to(self.device, non_blocking=True)
        for name, t in self._tensors().items():
            if t.device != self.device:
                setattr(self, name, t.to(self.device, non_blocking=True))

    # ------------------------------------------------------------------ crop
    def check_crop(self, tokens: int) -> None:
        """Raise ValueError unless the last ``tokens`` tokens of every row are still in the log, or are the last tokens
        of a multi-token forward whose states before them past recording kept (``recurrent_states_to_keep``)."""
        if tokens == 0:
            return
        crop = _count(tokens, "token")
        if self.base is None:
            raise ValueError(f"cannot crop {crop}: layer {self.layer_idx} holds none")
        seen = self.seen_tokens()
        if tokens > seen:
            raise ValueError(f"cannot crop {crop}: layer {self.layer_idx} holds {seen}")
        if not self.crop_ring and not self.record_past:
            raise ValueError(
                f"cannot crop {crop}: rebuilding layer {self.layer_idx}'s conv window needs the pre-conv "
                "columns of the cropped steps, which this cache does not keep. Build it with "
                "DeltaLogCache(..., crop_ring=True) (about the log's memory again), or call "
                "cache.activate_past_recording() before decoding the tokens you may crop"
            )
        # A row's log holds its decoded tokens since its last merge, after its leading zero entries when its phase
        # is staggered (restart_log) and it has not merged since the restart: no more than the decoded tokens since
        # the restart, nor than its length.
        live = min(int(self.length.min()), seen - self._log_start)
        from_history = self._history_seen == seen and tokens > live
        if from_history:
            # the last forward fed several tokens and the model handed the states after its last ones (transformers
            # >= 5.25 with kept recurrent states): the dense state before its last len(history) tokens is kept
            if tokens > len(self._history):
                raise ValueError(
                    f"cannot crop {crop} exactly: layer {self.layer_idx}'s last forward fed several tokens, and past "
                    f"recording kept the states before its last {_count(len(self._history), 'token')} only "
                    f"(activate_past_recording(recurrent_states_to_keep=...) sets how many; the state before a "
                    "forward's first token is not kept)")
            live = tokens
        if tokens > live:
            # Blame the staggered phases only where rows merging together would have kept the tokens: an aligned
            # row holds the (seen - _log_start) mod M tokens decoded since its last merge.
            staggered = ""
            if self.staggered and tokens <= (seen - self._log_start) % self.merge_interval:
                staggered = (" Its rows merge at different steps (staggered merge phases), so some row has merged "
                             "since; a cache built with stagger_merges=False (the default) would keep these tokens in "
                             "every row's log.")
            raise ValueError(
                f"cannot crop {crop} exactly: layer {self.layer_idx} keeps only its last "
                f"{_count(live, 'decoded token')} in the log (merge interval M={self.merge_interval}; the log "
                "restarts after every merge, prefill and multi-token forward); older tokens are merged into the dense "
                f"base.{staggered}"
            )
        if any(self.is_conv_states_initialized[i] for i in range(1, self.number_of_states)) and not self.record_past:
            raise ValueError(
                f"layer {self.layer_idx} has {self.number_of_states - 1} extra conv state(s) that only transformers' "
                "past recording can roll back: call cache.activate_past_recording() before the tokens you may crop"
            )
        # Windows rebuilt from past recording (all of them without crop_ring, the extra ones with it) are slices of
        # the recorded columns: they must hold the cropped tokens and a whole window before them. Families whose
        # decode step updates the conv state in place (KDA's with transformers 5.24) keep a fixed width, rolled by
        # each step: this can fail.
        for i in range(0 if not self.crop_ring or from_history else 1, self.number_of_states):
            if self.is_conv_states_initialized[i]:
                have, need = self.conv_states[i].shape[-1], tokens + self.conv_kernel_size[i]
                # A history holding every token the layer saw is complete: the window before the cropped tokens is
                # what it holds, as a fresh cache fed the kept tokens would. A [B, D, W] history may hold more
                # columns than tokens: the zeros a short prompt (or a crop into one) was padded with, the empty
                # history. A [B, W] token history (qwen4_exp's) is padded by the model itself, with its eos token,
                # which _recorded_window cannot reproduce: only a history of exactly the tokens seen is complete.
                complete = have >= seen if self.conv_states[i].dim() == 3 else have == seen
                if have < need and not complete:
                    raise ValueError(
                        f"cannot crop {crop}: layer {self.layer_idx}'s recorded conv state {i} holds "
                        f"{have} columns, and rebuilding its window needs {need} (the cropped tokens and a window of "
                        f"{self.conv_kernel_size[i]} before them). Past recording keeps the columns since the last "
                        "prefill, multi-token forward or crop (a crop keeps only the window, as transformers' does; a "
                        "prompt shorter than the window is padded to it), and a model whose decode step updates the "
                        "conv state in place, as the KDA families do with transformers 5.24, keeps a fixed number of "
                        "columns (that width), "
                        "rolling with each decoded token. Build the cache with DeltaLogCache(..., crop_ring=True) to "
                        "crop any token still in the log"
                    )

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` tokens (transformers' negative-count convention), exactly.

        Raises:
            ValueError: a positive count, or tokens that are no longer in the log (see :meth:`check_crop`).
        """
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of tokens to remove; got {tokens_to_remove}")
        n = -tokens_to_remove
        self.check_crop(n)
        if self.base is None or n == 0:
            return  # crop(0) changes nothing (past recording's history included)
        W = self.conv_kernel_size[0]
        if n > 0 and self.static:
            self._fold_decoded()
        if self._history_seen == self.seen_tokens() and n > min(int(self.length.min()), self._seen - self._log_start):
            self._crop_to_kept_state(n)
            return
        if n > 0:
            self.length.sub_(n)
            # ℓ̄ of the kept log: the sum of its entries' own log-decays, oldest first (as the steps added them)
            C = self.decay_log.shape[2]
            kept = torch.arange(C, device=self.length.device)[None, :] < self.length[:, None].to(torch.int64)
            kept = kept.view(kept.shape[0], 1, C, *([1] * (self.decay_log.dim() - 3)))
            lam = torch.where(kept, self.decay_log, torch.zeros_like(self.decay_log))
            self.log_decay.copy_(lam.sum(2))  # (C = 0: an empty sum, 0)
            self._seen -= n
            if self.crop_ring:
                self.conv_pos.sub_(n)
        if not self.crop_ring:
            # Past recording is on (check_crop made sure): every conv state holds its full history.
            for i in range(self.number_of_states):
                if self.is_conv_states_initialized[i]:
                    self.conv_states[i] = self._recorded_window(i, n)
            return
        # Rebuild the conv window (its last W columns) from the ring.
        R = self.conv_ring.shape[1]
        pos = (self.conv_pos[:, None] - (W - 1) + torch.arange(W, device=self.conv_pos.device)[None, :]) % R  # [B, W]
        window = self.conv_ring.gather(1, pos[..., None].expand(-1, -1, self.conv_ring.shape[2])).transpose(1, 2)
        if self.record_past:
            self.conv_states[0] = window.to(self.conv_states[0].dtype).contiguous()
            for i in range(1, self.number_of_states):
                if self.is_conv_states_initialized[i]:
                    self.conv_states[i] = self._recorded_window(i, n)
        else:
            self.conv_states[0][..., -W:].copy_(window)

    def _restart_from(self, state: torch.Tensor) -> None:
        """Make the dense ``[B, HV, K, V]`` ``state`` the base (in its layout) and restart the log
        (:func:`restart_log`)."""
        self.base.copy_(state.transpose(-1, -2) if self.state_v_first else state)
        self.staggered = restart_log(self.log_decay, self.k_log, self.u_log, self.decay_log, self.length,
                                     self.stagger_merges)

    def _crop_to_kept_state(self, n: int) -> None:
        """``crop`` of ``n`` tokens of a multi-token forward (checked by :meth:`check_crop`): the base becomes the kept
        dense state before them and the log restarts; the conv windows come from the recorded columns (past
        recording is on whenever states are kept), and ``crop_ring``'s ring is seeded from them."""
        self._restart_from(self._history[-n])
        for i in range(self.number_of_states):
            if self.is_conv_states_initialized[i]:
                self.conv_states[i] = self._recorded_window(i, n)
        if self.crop_ring:
            self._seed_conv_ring()
        self._seen -= n
        self._log_start = self._seen
        self._history, self._history_seen = [], -1

    def _recorded_window(self, i: int, n: int) -> torch.Tensor:
        """Conv state ``i``'s window before its last ``n`` recorded columns: the last ``w_i`` of them. A ``[B, D, W]``
        window is zero-padded on the left to ``w_i`` when the history is shorter (a short prompt: the zeros are the
        empty history, as transformers pads a prefill; the KDA families' decode step needs the full width); a
        ``[B, W]`` token history (qwen4_exp's state 2, whose model pads with its eos token, not zeros) stays short,
        as transformers' recording keeps it, and the model reads the missing positions as empty."""
        hist = self.conv_states[i]
        window = hist[..., :hist.shape[-1] - n][..., -self.conv_kernel_size[i]:]
        short = self.conv_kernel_size[i] - window.shape[-1]
        return torch.nn.functional.pad(window, (short, 0)) if short > 0 and hist.dim() == 3 else window


def check_sliding_window_crop(layer_idx: int, layer: Any, tokens: int) -> None:
    """Raise ValueError when cropping the last ``tokens`` tokens would leave sliding-window attention layer
    ``layer_idx`` without the keys its window needs (transformers' own crop would raise after earlier layers had
    changed, or silently keep fewer keys); TypeError for a sliding-window layer of another class than the two below.
    Other layers pass.

    - ``DynamicSlidingWindowLayer`` (window ``W``): once it has seen ``W`` tokens it keeps only the last ``W − 1``
      keys, unless past recording is on (``cache.activate_past_recording()``), which keeps every key since the last
      crop; a crop then needs the cropped keys and ``min(W − 1, kept tokens)`` keys before them.
    - ``StaticSlidingWindowLayer`` (``S = min(W, max_cache_len)`` slots): exact only while it has never held more than
      ``S`` tokens (it rolls its slots after that).
    """
    if tokens == 0 or not getattr(layer, "is_sliding", False):
        return
    crop = _count(tokens, "token")
    held = int(layer.get_seq_length())
    if isinstance(layer, StaticSlidingWindowLayer):
        if held > layer.max_cache_len:
            raise ValueError(
                f"cannot crop {crop}: layer {layer_idx} is a static sliding-window attention layer of "
                f"{layer.max_cache_len} slots that has taken {held} tokens, so the keys before its window are gone "
                "(it rolls its slots); nothing was changed. Crop before the window fills, or decode with a dynamic "
                "DeltaLogCache and cache.activate_past_recording()")
        return
    if not isinstance(layer, DynamicSlidingWindowLayer):
        raise TypeError(f"cannot crop {crop}: layer {layer_idx} is a sliding-window layer of a kind this "
                        f"cache does not know how to check ({type(layer).__name__}); nothing was changed")
    window = layer.sliding_window
    if held < window:
        return  # it still holds every token, as a full-attention layer does
    if not layer.record_past:
        raise ValueError(
            f"cannot crop {crop}: layer {layer_idx} is a sliding-window attention layer (window {window}) "
            f"that has seen {held} tokens and keeps only its last {_count(window - 1, 'key')}; nothing was changed. "
            "Call cache.activate_past_recording() before decoding the tokens you may crop")
    kept = 0 if layer.keys is None else int(layer.keys.shape[-2])
    need = tokens + min(window - 1, held - tokens)
    if kept < need:
        raise ValueError(
            f"cannot crop {crop}: layer {layer_idx}'s recorded keys (sliding window {window}) cover its last "
            f"{_count(kept, 'token')}, and the crop needs {need} (the cropped tokens and the window before them); past "
            "recording keeps the keys since the last crop. Nothing was changed")


def _count(n: int, noun: str) -> str:
    """``"1 token"``, ``"3 tokens"``: messages name counts in the singular or plural as English does."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _config_of(model_or_config: Any) -> PretrainedConfig:
    """The config of a model, of a module wrapping one that forwards ``.config`` (PEFT's ``PeftModel``,
    ``torch.compile``'s ``OptimizedModule``), or the config itself."""
    if isinstance(model_or_config, PreTrainedModel):
        return model_or_config.config
    if isinstance(model_or_config, PretrainedConfig):
        return model_or_config
    if isinstance(model_or_config, torch.nn.Module):
        with contextlib.suppress(Exception):  # a wrapper's __getattr__ may raise anything
            config = model_or_config.config
            if isinstance(config, PretrainedConfig):
                return config
    raise TypeError(
        f"DeltaLogCache takes a transformers PreTrainedModel (or a module wrapping one that exposes its .config, such "
        f"as a PeftModel or torch.compile's module) or a PretrainedConfig; got {type(model_or_config).__name__}"
    )


def _check_merge_interval(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.is_floating_point()):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(
            f"merge_interval must be an integer in [1, {MAX_MERGE_INTERVAL}] (or None for "
            f"{'the family default' if default is None else f'the default {default}'}); got {value!r}"
        ) from None
    if not 1 <= value <= MAX_MERGE_INTERVAL:
        raise ValueError(
            f"merge_interval must be an integer in [1, {MAX_MERGE_INTERVAL}] (1 = eager dense decoding); got {value}"
        )
    return value


# Config fields that size the attention layers' cache tensors (softmax attention and Kimi-Linear's MLA): a model that
# differs from the cache's only there passes the linear-attention checks but fails part-way through a forward.
_ATTENTION_FIELDS = ("num_attention_heads", "num_key_value_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
                     "qk_nope_head_dim", "v_head_dim", "index_head_dim", "index_n_heads", "indexer_head_dim",
                     "indexer_n_heads", "indexer_kv_heads")


def _attention_geometry(config: Any) -> tuple:
    """``((field, value), ...)`` of the :data:`_ATTENTION_FIELDS` that ``config`` (a text config) has, and its
    ``sliding_window`` when a layer slides (the window sizes those layers' caches: a cache built for another window
    keeps other keys)."""
    fields = _ATTENTION_FIELDS
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        fields += ("sliding_window",)
    return tuple((name, getattr(config, name)) for name in fields if getattr(config, name, None) is not None)


def _caller_outside_this_file():
    """The frame of the first caller outside this file (None at the stack's bottom)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame


def _called_by_a_module(layer_idx: int | None = None, conv_of: DeltaLogLayer | None = None) -> bool:
    """Whether the first caller outside this file is a method of a ``torch.nn.Module`` (a model's forward calling the
    cache), not user code reading it; with ``layer_idx``, a module of that layer (its ``layer_idx`` attribute), so
    that a wrapper's forward or a probe module's hook that reads a layer's state is not taken for the layer's own step.
    Code of transformers' models (``transformers.models.*``, and ``transformers_modules.*`` for remote code) answers
    from the module name, about 0.2 µs; other callers from the frame's ``self``, a few µs.

    With ``conv_of`` (the layer a model's step is about to run), a module caller's ``conv1d`` is also checked against
    that layer's conv window (:meth:`DeltaLogLayer.check_caller_conv`, which raises): here, because this function
    reads frames and so runs eagerly even inside a forward compiled without ``fullgraph`` (dynamo breaks the graph
    on it), where a check after it would be traced and pruned."""
    frame = _caller_outside_this_file()
    if frame is None:
        return False
    name = frame.f_globals.get("__name__", "")
    if name.startswith(("transformers.models.", "transformers_modules.")):
        if conv_of is not None:
            conv_of.check_caller_conv(frame)
        return True
    owner = frame.f_locals.get("self")
    called = isinstance(owner, torch.nn.Module) and (layer_idx is None or getattr(owner, "layer_idx", None) == layer_idx)
    if called and conv_of is not None:
        conv_of.check_caller_conv(frame)
    return called


def check_kernel_dtype(backend: str, model: Any, remedy: str) -> None:
    """Raise ValueError (before anything changes) when ``backend`` is ``"triton"`` and ``model`` (its ``dtype``) runs in
    a floating dtype the Triton kernels do not take (:data:`KERNEL_ACT_DTYPES`: e.g. float64), or its parameters are
    off CUDA (a CPU model) while the Triton interpreter is off (the first forward would refuse it, after the layers
    before the first linear-attention layer had run). ``remedy``: what the dtype refusal offers instead."""
    param = next(iter(model.parameters()), None) if backend == "triton" and hasattr(model, "parameters") else None
    # (a device_map may keep some modules, e.g. the embeddings, off CUDA: only a model with no CUDA parameter at all)
    if param is not None and param.device.type not in ("cuda", "meta") and not interpreting() \
            and not any(p.device.type in ("cuda", "meta") for p in model.parameters()):
        raise ValueError(
            f"backend='triton': the Triton kernels need a CUDA model (or TRITON_INTERPRET=1 set before triton is "
            f"imported), but the model's parameters are on {param.device}: build a new DeltaLogCache(model, "
            "backend='torch') for the CPU (reset() keeps the backend), or move the model to a GPU. Nothing was changed")
    dtype = getattr(model, "dtype", None)
    if backend == "triton" and isinstance(dtype, torch.dtype) and dtype.is_floating_point \
            and dtype not in KERNEL_ACT_DTYPES:
        raise ValueError(
            f"backend='triton': the Triton kernels take bfloat16, float16 or float32 activations, but the model runs "
            f"in {dtype}; use {remedy} for this model. Nothing was changed")


def check_beam_idx(beam_idx: Any, rows: int) -> torch.Tensor:
    """``beam_idx`` as a 1-D integer tensor (lists and tuples are converted) for a cache of ``rows`` rows (-1: not
    allocated yet, any length).

    Raises:
        TypeError: not a 1-D int64 / int32 tensor (or a sequence of ints) of row indices.
        ValueError: its length is not ``rows``, or (on the CPU only: elsewhere reading the values would wait for the
            device) an entry outside ``[0, rows)``.
    """
    if isinstance(beam_idx, (list, tuple)):
        beam_idx = torch.tensor(beam_idx)
    if not isinstance(beam_idx, torch.Tensor) or beam_idx.dim() != 1 or beam_idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"beam_idx must be a 1-D int64 or int32 tensor (or list) of row indices; got {beam_idx!r}")
    if rows != -1 and beam_idx.shape[0] != rows:
        raise ValueError(f"beam_idx has {beam_idx.shape[0]} entries but the cache holds {rows} rows")
    # on the CPU the range check costs no device wait (on a GPU it would, every beam-search step)
    if rows != -1 and beam_idx.device.type == "cpu" and beam_idx.numel() and not torch.compiler.is_compiling() \
            and (int(beam_idx.min()) < 0 or int(beam_idx.max()) >= rows):
        raise ValueError(f"beam_idx entries must be row numbers in [0, {rows}); got {beam_idx.tolist()}")
    return beam_idx


def check_row_indices(indices: Any, rows: int = -1) -> torch.Tensor:
    """``indices`` for ``batch_select_indices`` as a 1-D integer tensor: lists and tuples of ints are converted, and a
    boolean mask over the ``rows`` rows (-1: not allocated yet; a tensor, list or tuple of bools) becomes the indices
    of its true entries. Indices follow torch's indexing: ``-rows ≤ i < rows``, repeats allowed; with ``rows`` known, a
    negative one is returned as ``i + rows`` (``index_select``, which FLA's layers use, takes no negative index).

    Raises:
        TypeError: anything else (a float tensor, an integer tensor other than int64 / int32, e.g. uint8, which
            torch's indexing reads as a mask, a 2-D tensor, a scalar, a list mixing bools and ints).
        ValueError: a boolean mask whose length is not ``rows``, no row to keep (an empty list or an all-False
            mask: every layer would be left empty), or an index outside ``[-rows, rows)``.
    """
    if isinstance(indices, (list, tuple)):
        bools = [isinstance(i, bool) for i in indices]
        if any(bools) and not all(bools):
            raise TypeError(f"batch_select_indices takes row numbers or a boolean mask, not a mix; got {indices!r}")
        if not all(bools):
            for i in indices:  # ints, numpy ints, 0-dim integer tensors (torch.tensor would truncate 1.9 to 1)
                try:
                    operator.index(i)
                except TypeError:
                    raise TypeError(f"batch_select_indices takes a list of ints (row numbers) or of bools (a mask); "
                                    f"got {indices!r}, with the entry {i!r}") from None
        indices = torch.tensor(indices, dtype=torch.bool if indices and all(bools) else torch.long)
    if not isinstance(indices, torch.Tensor) or indices.dim() != 1 or \
            indices.dtype not in (torch.int64, torch.int32, torch.bool):
        raise TypeError(f"batch_select_indices takes a 1-D int64 or int32 tensor (or list) of rows to keep, or a "
                        f"boolean mask over the rows (a uint8 tensor is neither: torch's indexing reads it as a mask); "
                        f"got {indices!r}")
    if indices.dtype == torch.bool:
        if rows != -1 and indices.shape[0] != rows:
            raise ValueError(f"a boolean mask for batch_select_indices needs one entry per row ({rows}); got "
                             f"{indices.shape[0]}")
        indices = indices.nonzero().squeeze(1)
    if indices.numel() == 0:
        raise ValueError("batch_select_indices needs at least one row to keep; got none (an empty selection or an "
                         "all-False mask would leave every layer empty: call cache.reset() to empty the cache)")
    if rows != -1:
        low, high = int(indices.min()), int(indices.max())
        if low < -rows or high >= rows:
            raise ValueError(f"batch_select_indices got row {low if low < -rows else high}, but the cache holds "
                             f"{rows} rows (indices in [-{rows}, {rows}))")
        if low < 0:
            indices = torch.where(indices < 0, indices + rows, indices)
    return indices


class DeltaLogCache(DynamicCache):
    """A transformers cache whose linear-attention layers keep a dense base plus a log of recent rank-1 updates.

    Drop-in for ``generate``: ``model.generate(**inputs, cache=DeltaLogCache(model))`` gives the tokens
    the default cache gives. Attention layers are transformers' ``DynamicLayer`` s; each linear-attention layer is a
    :class:`DeltaLogLayer`. Building the cache applies :func:`hf_deltalog.patch` (every supported family). For
    flash-linear-attention's model classes (``fla.models``) ``DeltaLogCache(model)`` builds an
    :class:`hf_deltalog.fla_cache.FLADeltaLogCache` instead, which takes ``merge_interval``, ``backend`` and
    ``stagger_merges`` only.

    Args:
        model_or_config: the model (or a module wrapping it that exposes ``.config``: a PEFT ``PeftModel``,
            ``torch.compile(model)``), or its config (a wrapper config resolves to its text config).
        config: the config, as a keyword (transformers' ``DynamicCache(config=model.config)`` spelling); give it or
            ``model_or_config``, not both.
        merge_interval: ``M ≥ 1``. ``M = 1`` is eager dense decoding. Default (None): the family's (8 for GDN, 4 for
            KDA), except
            that on the Triton backend a layer whose fp32 state is under :data:`DENSE_BELOW_STATE_BYTES` (GDN 64 MiB:
            B < 32 at HV = 32, K = V = 128; KDA 16 MiB: B < 8 at H = 32) decodes densely, where DeltaLog measured
            slower than a dense kernel; dense decoding on the GPU runs FLA's ``fused_recurrent_*`` when FLA is
            installed.
        backend: ``"auto"`` (Triton on CUDA when triton is installed, else PyTorch; a float64 model always PyTorch),
            ``"torch"`` or ``"triton"``. The model's device and dtype are checked at the first ``generate`` (or
            forward), not here: ``"triton"`` with a model on the CPU (without ``TRITON_INTERPRET=1``) or in float64
            raises ``ValueError`` there, before anything is decoded.
        static: the graph-safe mode. Attention layers become transformers' ``StaticLayer`` s of ``max_cache_len``
            slots; every buffer keeps its address across decode steps and across prefills of the same batch size
            (a batch of another size reallocates, so a captured graph must be captured again); a decode step changes
            no host state and reads no device value on the host; ``is_compileable`` is True. Decode it with
            :func:`hf_deltalog.graph.graph_generate` (a captured CUDA graph). Needs a config with attention layers
            (every supported family has them).
        max_cache_len: attention slots per row in static mode (prompt + new tokens); required there, refused otherwise.
        crop_ring: keep the pre-conv columns of the steps in the log, so that ``crop`` can rebuild the conv window
            without transformers' past recording (default off). It costs about the log's memory again: 5-9 % of the
            fp32 state for Qwen3.5's and Kimi-Linear's layers in bf16 at M = 4-8 (``memory_breakdown()``). Without it,
            ``crop(-n)`` with ``n > 0`` raises ValueError unless ``activate_past_recording()`` was called.
        stagger_merges: True: after each prefill, row ``r``'s log starts with ``r mod M`` zero entries (exact
            no-ops), so about ``1/M`` of the rows merge at each decode step instead of all of them every ``M``-th
            step: the same work per token, spread evenly over the steps, and no step twice as slow as the others.
            False (default): every row merges at the same step. On an H200 the decode kernels alone ran 0.2-2.3 %
            faster staggered at B ≥ 64 and M = 4, 8 (mixed below, slower at M = 16), but whole-model graph decoding
            0.4-1.2 % slower (:func:`hf_deltalog.cache.restart_log`).
            It also limits ``crop(-n)``, which needs the last ``n`` tokens in every row's log: a staggered batch of
            ``B ≥ M`` rows always holds a row that has just merged.

    Raises:
        TypeError: not a model/config (or neither or both of ``model_or_config`` and ``config``), a non-integer
            ``merge_interval``, a non-bool ``static`` or ``crop_ring``, a
            ``stagger_merges`` other than True or False, in static mode a ``max_cache_len`` that is neither None nor an
            integer (a bool or a float is not; a numpy integer is).
        ValueError: a model without a supported linear-attention layer, ``merge_interval`` outside [1, 1024], an
            unknown backend, ``backend="triton"`` without triton installed, static mode without a ``max_cache_len`` or with one below 1, or on
            a config without attention layers, ``max_cache_len`` without static mode, ``static``, ``max_cache_len``
            or ``crop_ring`` for an FLA model.
    """

    def __new__(cls, model_or_config: Any = None, *args: Any, **kwargs: Any):
        # flash-linear-attention's own model classes (fla.models) only take a cache of FLA's Cache class: for them
        # DeltaLogCache(model) builds hf_deltalog.fla_cache.FLADeltaLogCache (same arguments, same user call).
        if cls is DeltaLogCache and (model_or_config is not None or kwargs.get("config") is not None):
            from hf_deltalog.patches.fla import fla_family_of

            model_or_config = _model_or_config(model_or_config, kwargs.pop("config", None))
            if fla_family_of(model_or_config) is not None:
                from hf_deltalog.fla_cache import FLADeltaLogCache

                defaults = {"static": False, "max_cache_len": None, "crop_ring": False}
                transformers_only = sorted(name for name, value in defaults.items()
                                           if name in kwargs and kwargs[name] is not value)
                if transformers_only:
                    raise ValueError(
                        f"{', '.join(transformers_only)}: options of DeltaLogCache for transformers' models; for "
                        "flash-linear-attention's model classes it takes merge_interval, backend and stagger_merges "
                        "only (FLA's generate has no static cache, and crop is not supported there)")
                # at their defaults (generic code spelling them out) they ask nothing of FLA's cache
                kwargs = {name: value for name, value in kwargs.items() if name not in defaults}
                return FLADeltaLogCache(model_or_config, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, model_or_config: Any = None, merge_interval: int | None = None, backend: str = "auto", *,
                 config: Any = None, static: bool = False, max_cache_len: int | None = None, crop_ring: bool = False,
                 stagger_merges: bool = False):
        given = _model_or_config(model_or_config, config)
        config = _config_of(given).get_text_config(decoder=True)
        model_type = getattr(config, "model_type", None)
        try:
            spec = _resolve(model_type)
        except (ValueError, TypeError):
            from hf_deltalog.patches.fla import FLA_FAMILIES
            from hf_deltalog.patches.registry import supported_description

            if isinstance(model_type, str) and model_type in FLA_FAMILIES:
                model = "" if given is config or not hasattr(given, "config") else \
                    f" nor the model's, {type(given).__module__}.{type(given).__qualname__},"
                raise ValueError(
                    f"DeltaLogCache serves {model_type!r} models of flash-linear-attention's classes "
                    f"(fla.models.{model_type}): neither this config's class, "
                    f"{type(config).__module__}.{type(config).__qualname__},{model} is FLA's or derived from it; build "
                    "the model and its config with FLA's classes (or subclasses of them)") from None
            raise ValueError(
                f"DeltaLogCache does not support {model_type!r} models (it serves the Gated DeltaNet, Kimi Delta "
                f"Attention and RWKV6 layers of {supported_description()})"
            ) from None
        layer_types = list(getattr(config, "layer_types", None) or [])
        if "linear_attention" not in layer_types:
            raise ValueError(
                f"this {model_type!r} config has no 'linear_attention' layer (layer_types={layer_types}); "
                "DeltaLogCache has nothing to serve"
            )
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
        if backend == "triton" and _triton_kernels(spec.operator) is None:
            raise ValueError("backend='triton' needs triton installed (pip install 'hf-deltalog[triton]'); "
                             "use backend='auto' or 'torch'")
        for name, flag in (("static", static), ("crop_ring", crop_ring)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False; got {flag!r}")
        check_stagger_merges(stagger_merges)
        self.merge_interval = _check_merge_interval(merge_interval, spec.default_merge_interval)
        self.backend = backend
        self.model_type = spec.model_type
        self.static = static
        if self.static:
            if max_cache_len is not None and (isinstance(max_cache_len, bool)
                                              or not isinstance(max_cache_len, numbers.Integral)):
                raise TypeError(f"static=True needs max_cache_len, a positive int (prompt + new tokens); got "
                                f"{max_cache_len!r}")
            if max_cache_len is None or max_cache_len < 1:
                raise ValueError(f"static=True needs max_cache_len, a positive int (prompt + new tokens); got "
                                 f"{max_cache_len!r}")
            max_cache_len = int(max_cache_len)  # a numpy integer too, as merge_interval takes
            if all(kind == "linear_attention" for kind in layer_types):
                raise ValueError("static=True needs a config with attention layers (their static KV cache sets the "
                                 "positions); this config has only linear-attention layers")
        elif max_cache_len is not None:
            raise ValueError(f"max_cache_len={max_cache_len!r} sizes the attention slots of static mode; pass "
                             "static=True with it (a dynamic DeltaLogCache grows as generate needs)")
        self.max_cache_len = max_cache_len if self.static else None
        self.crop_ring, self.stagger_merges = crop_ring, stagger_merges
        super().__init__(config=config)
        if self.static:
            # transformers' own static layers for everything that is not linear attention (StaticLayer for full
            # attention, ...): preallocated, updated in place, device-side lengths.
            static_layers = StaticCache(config=config, max_cache_len=max_cache_len).layers
            self._window = getattr(config, "sliding_window", None)
            for i, kind in enumerate(layer_types):
                if kind != "linear_attention":
                    self.layers[i] = static_layers[i]
        dims = spec.dims(config)
        self._status = _Status()
        for i, (layer, kind) in enumerate(zip(self.layers, layer_types)):
            if kind == "linear_attention" and isinstance(layer, LinearAttentionLayer):
                self.layers[i] = DeltaLogLayer(spec, dims, self.merge_interval, backend, layer_idx=i,
                                               number_of_states=layer.number_of_states, status=self._status,
                                               auto_merge_interval=merge_interval is None, static=self.static,
                                               crop_ring=crop_ring, stagger_merges=stagger_merges)
        self._fingerprint = (spec.model_type, tuple(layer_types), dims, _attention_geometry(config))
        self._ledger: torch.Tensor | None = None
        self._after_beams = False  # the last generate ran a beam search: the rows are beams, in the search's order
        self._stopped_generate: str | None = None  # see note_stopped_generate
        self._generate_running = False  # a generate call on it is running (set and cleared by the generate patch)
        self._copied_mid_generate = False  # a copy taken while one ran: see copy_state and _check_continuation
        self._changed_during_generate: str | None = None  # see note_change_during_generate
        self._order = StepOrder()  # dynamic mode: where the model's forward is (see _begin_layer_step)
        # The layers' kinds, fixed from here on: the per-forward check walks these lists
        self._linear_layers = [layer for layer in self.layers if isinstance(layer, DeltaLogLayer)]
        self._counted_layers = [(i, layer) for i, layer in enumerate(self.layers)
                                if not isinstance(layer, DeltaLogLayer) and isinstance(layer, CacheLayerMixin)]
        # DSA layers that store indexer keys at every step (GLM-5's "shared" layers reuse another layer's selection
        # and store none): keys without indexer keys there mean a forward stopped between the two stores
        indexer_types = getattr(config, "indexer_types", None)
        self._indexing_layers = {
            i for i, layer in enumerate(self.layers) if isinstance(layer, DynamicIndexedLayer)
            and not (isinstance(indexer_types, (list, tuple)) and i < len(indexer_types) and indexer_types[i] == "shared")
        }
        # Every family, not only this one: a cache used by a model of another family must meet a dispatcher that
        # recognises it and says so, not an upstream kernel.
        patch()

    def __getstate__(self) -> dict:
        """What pickle and ``copy`` take: the instance's attributes, a copy taken during generate marked as such
        (:func:`copy_state`)."""
        return copy_state(self.__dict__)

    def __setstate__(self, state: dict) -> None:
        """Unpickling (``pickle`` / ``torch.load``, and ``copy.deepcopy``) binds the families' recurrences as the
        constructor does: a cache loaded in a process that built none would otherwise reach transformers' unbound
        recurrences. Not after a deliberate :func:`hf_deltalog.unpatch` (only :func:`hf_deltalog.patch` undoes it)."""
        restore_state(self, state)
        patch_after_unpickling()

    # ------------------------------------------------------------------ helpers
    @property
    def deltalog_layers(self) -> list[DeltaLogLayer]:
        """The cache's :class:`DeltaLogLayer` s (its linear-attention layers), in layer order."""
        return [layer for layer in self.layers if isinstance(layer, DeltaLogLayer)]

    def _layer(self, layer_idx: int, in_forward: bool = True):
        if in_forward:
            self._status.check()
        if type(layer_idx) is not int:  # (the model's own calls pass ints: one type check on their path)
            check_layer_index(layer_idx)
            layer_idx = int(layer_idx)
        if not 0 <= layer_idx < len(self.layers):
            message = (f"layer {layer_idx} does not exist: this DeltaLogCache was built for a {self.model_type!r} "
                       f"config with {len(self.layers)} layers (indices 0 to {len(self.layers) - 1}); build the cache "
                       "from the model that uses it")
            raise self._refusal(message) if in_forward else ValueError(message)
        return self.layers[layer_idx]

    def _refusal(self, message: str) -> ValueError:
        """The ValueError of a call refused for naming a layer this cache does not have (or not of that kind). It
        locks the cache until ``reset()`` when the call came from a model's forward (a module's method called the
        cache: the earlier layers of that forward have advanced, possibly every layer of the cache, when the model
        has more layers than the cache) or when the layers already disagree; a refused read between two calls
        (``get_conv_state`` of an attention layer, say) changed nothing and leaves the cache usable."""
        if _called_by_a_module():
            return self._status.reject(message)
        try:
            self._check_consistent(int(self.get_seq_length()))
        except ValueError:
            return self._status.reject(message)
        return ValueError(message)

    def _begin_layer_step(self, layer_idx: int, call: str, rows: int | None = None) -> None:
        """Dynamic mode, at a layer's step call ``call`` (a linear layer's ``get_recurrent_state`` or
        ``update_conv_state`` of a conv state, an attention layer's ``update`` / ``update_indexer``). When the call begins a new forward (:class:`StepOrder`) and comes from
        a model's forward, every layer must hold what the last forward left: a manual decode loop that goes on after a
        forward stopped between or inside layers is refused here, as ``generate`` refuses it when it starts. The forward
        must also bring the rows the cache holds (``rows``: of the call's input; else the ``hidden_states`` of the
        calling layer), checked before anything moves: the GPU conv kernels update a conv window in place right after
        this call and do not check rows. Host counts and shapes only: no device read.

        Raises:
            ValueError: the layers disagree (the cache is locked until ``reset()``), or another number of rows than
                the cache holds (nothing changed).
        """
        if self.static:  # one device step counter: generate checks the logs (_check_consistent)
            return
        repeat = layer_idx == self._order.layer and call in self._order.calls  # as the layer's own step just was
        if not (self._order.begins_forward(layer_idx, call) and _called_by_a_module(layer_idx)):
            return
        if not self._layers_agree_on_host():
            try:
                self._check_consistent(int(self.get_seq_length()), host_only=True)
            except ValueError as error:
                hint = (f" If no forward stopped: a module of layer {layer_idx} called cache.{call}({layer_idx}) a "
                        "second time in one forward (a layer subclass or hook reading the state after the layer's "
                        "step), and a step call made twice begins a new forward; read the state with "
                        f"cache.materialize({layer_idx}) instead, which is not a step call") if repeat else ""
                raise self._status.reject(f"{error}{hint}") from None
        held = next((layer.base.shape[0] for layer in self._linear_layers if layer.base is not None and layer._seen),
                    None)
        if held is None:
            return
        if rows is None:
            frame = _caller_outside_this_file()
            x = frame.f_locals.get("hidden_states") if frame is not None else None  # once per forward: a few µs
            rows = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() == 3 else None
        check_rows_match(layer_idx, held, rows)

    def _layers_agree_on_host(self) -> bool:
        """Dynamic mode's per-forward check, the common case: every layer holds one token count in one number of rows,
        none is inside a step, and indexer keys are as long as their keys (:meth:`_check_consistent` says what
        differs). Host ints only, a few µs at 48 layers."""
        counts: set[int] = set()
        rows: set[int] = set()
        for layer in self._linear_layers:
            if layer._in_step and layer._moved:
                return False
            counts.add(layer._seen if layer.base is not None else 0)
            if layer.base is not None:
                rows.add(layer.base.shape[0])
        for i, layer in self._counted_layers:
            tokens = int(layer.get_seq_length())
            counts.add(tokens)
            if self._indexer_incomplete(i, layer, tokens):
                return False
        return len(counts) <= 1 and len(rows) <= 1

    def _indexer_incomplete(self, layer_idx: int, layer: Any, tokens: int) -> bool:
        """Dynamic mode: whether DSA layer ``layer_idx`` holds ``tokens`` keys but another number of indexer keys (none
        at all, where the layer stores them every step): a forward stopped between its two stores."""
        if self.static:
            return False
        indexer = getattr(layer, "indexer_keys", None)
        if getattr(layer, "is_indexer_initialized", False) and isinstance(indexer, torch.Tensor) and indexer.dim() == 3:
            return indexer.shape[1] != tokens
        return tokens > 0 and layer_idx in self._indexing_layers

    def _check_model(self, model: Any) -> None:
        """Raise ValueError (changing nothing) unless ``model`` has the configuration this cache was built for and can
        run where it is (not on a CPU with its layers bound to FLA's Triton kernels)."""
        config = getattr(model, "config", None)
        if config is None:
            return
        text = config.get_text_config(decoder=True)
        try:
            spec = _resolve(getattr(text, "model_type", None))
            theirs = (spec.model_type, tuple(getattr(text, "layer_types", None) or ()), spec.dims(text),
                      _attention_geometry(text))
        except (ValueError, TypeError, AttributeError):  # (TypeError: a model_type that is not a str, e.g. None)
            theirs = (getattr(text, "model_type", None),)
        if theirs != self._fingerprint:
            names = ("layer_types", "(Hk, HV, K, V)", "attention geometry")
            differ = [f"{name} {a} here" for name, a, b in zip(names, theirs[1:], self._fingerprint[1:]) if a != b] \
                if len(theirs) == len(self._fingerprint) else []
            raise ValueError(
                f"this DeltaLogCache was built for a {self.model_type!r} model with layer_types "
                f"{list(self._fingerprint[1])}, (Hk, HV, K, V) = {self._fingerprint[2]} and attention geometry "
                f"{self._fingerprint[3]}, but generate was called "
                f"on a {getattr(text, 'model_type', None)!r} model with another configuration"
                + (f" ({'; '.join(differ)})" if differ else "") + "; build the cache from the model that uses it"
            )
        param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
        # accelerate's offloading (device_map with "cpu" / "disk", cpu_offload) keeps parameters on the meta device and
        # loads them in its hooks at each module's forward: such a model decodes
        if param is not None and param.device.type == "meta" and \
                not any(hasattr(m, "_hf_hook") for m in model.modules()):
            raise ValueError("the model's parameters are on the meta device (shapes without data), where it cannot "
                             "decode; load or materialise its weights (e.g. model.to_empty(...) and load a state dict) "
                             "before generating with a DeltaLogCache")
        check_kernel_dtype(self.backend, model, "backend='torch' (or 'auto', which picks it)")
        on_cpu = param is not None and param.device.type == "cpu"
        if on_cpu and runs_fla_kernels(self.model_type, "cpu"):
            raise ValueError(
                "this model runs on the CPU, but transformers bound its linear-attention layers to flash-linear-"
                "attention's Triton kernels (FLA is installed), which need a GPU and fail here with any cache ("
                + ("under TRITON_INTERPRET=1 FLA's chunked prefill kernels do not run in Triton's interpreter" if
                   interpreting() else "'0 active drivers'")
                + "). Call hf_deltalog.interpreter.hide_fla_on_cpu('cpu') before transformers imports the "
                "model's modeling module (i.e. before loading the model) to use transformers' PyTorch paths, or "
                "uninstall flash-linear-attention, or run on a GPU"
            )
        # The conv window's width is not in the fingerprint: a model whose short convolutions are wider or narrower
        # than the ones that filled this cache would decode from a window of the wrong width without any error.
        kernels = {m.layer_idx: m.conv_kernel_size for m in model.modules()
                   if isinstance(getattr(m, "conv_kernel_size", None), int)
                   and isinstance(getattr(m, "layer_idx", None), int)}
        for layer in self.deltalog_layers:
            width = layer.conv_kernel_size.get(0) if layer.has_previous_state[0] else None
            if width is not None and kernels.get(layer.layer_idx, width) != width:
                raise ValueError(
                    f"this DeltaLogCache holds conv windows of width {width} in layer {layer.layer_idx}, but the "
                    f"model's short convolution there has width {kernels[layer.layer_idx]}: the cache was filled by a "
                    "model with another configuration; call cache.reset() or build the cache from the model that "
                    "uses it"
                )

    def _has_attention(self) -> bool:
        return any(isinstance(layer, CacheLayerMixin) for layer in self.layers)

    # ------------------------------------------------------------------ state access (what the models call)
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """transformers' ``Cache.update`` for an attention layer (keys and values ``[B, H, T, D]``; returns the layer's
        keys and values). Raises ValueError (locking the cache) for a linear-attention layer's index or a step out of
        order (see :meth:`update_conv_state`)."""
        layer = self._layer(layer_idx)
        if isinstance(layer, DeltaLogLayer):
            raise self._status.reject(
                f"the model treats layer {layer_idx} as an attention layer, but this DeltaLogCache was built for a "
                f"config whose layer {layer_idx} is linear attention; build the cache from the model that uses it"
            )
        if layer_idx == 0:
            self._track_inference_mode()
        self._begin_layer_step(layer_idx, "update", key_states.shape[0])
        if self.static and not layer.is_initialized and torch.is_inference_mode_enabled():
            with _ordinary_allocation():  # transformers' static keys and values, updated in place by later steps
                layer.lazy_initialization(key_states, value_states)
        if self.static:
            # a static sliding-window layer stops advancing its device length once its window is full: read its host one
            length = ("cumulative_length_int" if isinstance(self.layers[layer_idx], StaticSlidingWindowLayer)
                      else "cumulative_length")
            self._fit_static_rows(layer_idx, "keys", "is_initialized", length, key_states.shape[0])
            layer = self.layers[layer_idx]
            window = getattr(self, "_window", None)
            if (isinstance(layer, StaticSlidingWindowLayer) and window and layer.max_cache_len < window
                    and layer.cumulative_length_int + key_states.shape[-2] > layer.max_cache_len):
                # Its slots (max_cache_len, below the window) would roll and drop keys the window still attends
                # (transformers' StaticCache does so silently in a manual loop: |Δlogit| ~0.26 on a tiny model).
                # generate refuses such a call up front; a full-attention layer's overflow is caught below.
                raise self._status.reject(
                    f"this static DeltaLogCache has room for {layer.max_cache_len} tokens per row (max_cache_len), "
                    f"but layer {layer_idx} (a sliding window of {window}) would hold "
                    f"{layer.cumulative_length_int + key_states.shape[-2]}; build it with a larger max_cache_len "
                    "(prompt + new tokens)")
        try:
            out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        except IndexError as e:
            if not self.static:
                raise
            # A full-attention StaticLayer past its max_cache_len slots (a manual loop: generate refuses the call up
            # front). On the CPU index_copy_ raises after the layer counted the tokens (on CUDA the bounds are
            # checked on the device, not raised here; not tested). Lock the cache rather than leave it miscounted.
            raise self._status.reject(
                f"this static DeltaLogCache has room for {self.max_cache_len} tokens per row (max_cache_len), and "
                f"layer {layer_idx} was given more ({e}); build it with a larger max_cache_len (prompt + new "
                "tokens)") from e
        held = self._unmasked_static_slots(layer_idx)
        if held is not None and out[0].shape[-2] > held:
            return out[0][:, :, :held], out[1][:, :, :held]
        return out

    def _unmasked_static_slots(self, layer_idx: int) -> int | None:
        """The filled slots of static attention layer ``layer_idx`` where transformers' mask may leave its empty ones
        unmasked, else None. Past recording makes the cache not compileable, and transformers' ``create_causal_mask``
        then skips the mask of a one-token step whose ``attention_mask`` is None or all ones (``generate`` with an
        unpadded batch): SDPA attends every key it is given, the empty static slots included (transformers'
        ``StaticCache`` does so: |Δlogit| 0.1–0.7 on the tiny models). Such a layer — a full-attention
        ``StaticLayer``, or a ``StaticSlidingWindowLayer`` whose slots (``min(window, max_cache_len)``) are not all
        filled — returns only its filled slots and sizes the mask to them (:meth:`get_mask_sizes`), as a dynamic
        layer does. A full-attention layer's device length is read on the host once per step (recording is not
        graph-safe anyway); a sliding-window layer keeps a host count."""
        if not self.static:
            return None
        layer = self.layers[layer_idx]
        if type(layer) is StaticLayer:
            held = None  # read below, only when recording
        elif isinstance(layer, StaticSlidingWindowLayer):
            held = layer.cumulative_length_int
            if held >= layer.max_cache_len:
                return None  # every slot filled (or rolled): nothing empty to attend
        else:
            return None
        # (the shared flag first: the layer walk of is_compileable, transformers' own test, only while recording)
        if not getattr(self._status, "recording", True) or self.is_compileable:
            return None
        if held is None:
            held = int(layer.cumulative_length) if layer.is_initialized else 0
        return held

    def update_indexer(self, indexer_key_states: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """transformers' store of a DSA attention layer's indexer keys (GLM-5 families); returns the layer's indexer
        keys. Raises ValueError (locking the cache) for a linear-attention layer's index."""
        layer = self._layer(layer_idx)
        if isinstance(layer, DeltaLogLayer):
            raise self._status.reject(
                f"the model treats layer {layer_idx} as an indexed attention layer, but this DeltaLogCache was built "
                f"for a config whose layer {layer_idx} is linear attention; build the cache from the model that uses it"
            )
        if layer_idx == 0:
            self._track_inference_mode()
        self._begin_layer_step(layer_idx, "update_indexer", indexer_key_states.shape[0])
        if self.static and not getattr(layer, "is_indexer_initialized", True) and torch.is_inference_mode_enabled():
            with _ordinary_allocation():
                layer.lazy_initialization_indexer(indexer_key_states)
        if self.static:
            self._fit_static_rows(layer_idx, "indexer_keys", "is_indexer_initialized", "indexer_cumulative_length",
                                  indexer_key_states.shape[0])
        return super().update_indexer(indexer_key_states, layer_idx)

    def _fit_static_rows(self, layer_idx: int, buffer: str, flag: str, length: str, rows: int) -> None:
        """Static mode, before static attention layer ``layer_idx`` writes ``rows`` rows into its preallocated
        ``buffer`` (``[B, ...]``; ``flag``: whether it is allocated, ``length``: its token count, a device tensor or a
        host int): a buffer of another batch size is reallocated when it holds no token (after ``reset()``, as the
        DeltaLog layers do) and refused, before anything changes, when it holds tokens. Compares host shapes; reads the device length only
        where the sizes differ (never on a valid decode step).

        Raises:
            ValueError: another batch size while the layer holds tokens.
        """
        layer = self.layers[layer_idx]
        held = getattr(layer, buffer, None)
        if not getattr(layer, flag, False) or held is None or held.shape[0] == rows:
            return
        if int(getattr(layer, length)) != 0:
            raise self._status.reject(
                f"layer {layer_idx} holds {held.shape[0]} rows but the model passed {rows}; call cache.reset() (or "
                "build a new DeltaLogCache) before a batch of another size"
            )
        setattr(layer, flag, False)  # transformers' lazy initialisation allocates it again for the new batch

    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        """transformers' read of a linear-attention layer's conv window ``state_idx`` (None before prefill).

        Raises:
            TypeError: ``layer_idx`` or ``state_idx`` is not an int.
            ValueError: no such layer, not a linear-attention layer, or a ``state_idx`` the layer does not keep.
        """
        check_layer_index(layer_idx)
        if isinstance(state_idx, bool) or not isinstance(state_idx, numbers.Integral):
            raise TypeError(f"state_idx must be an int; got {state_idx!r}")
        layer_idx, state_idx = int(layer_idx), int(state_idx)
        layer = self._require_linear(layer_idx)
        if layer_idx == 0:  # the model updates the window it gets here in place
            self._track_inference_mode()
        layer._moved = True  # (transformers' one-token step: causal_conv1d_update on it, in place)
        if state_idx not in layer.has_previous_state:
            raise ValueError(f"layer {layer_idx} keeps conv states {sorted(layer.has_previous_state)}; got state_idx "
                             f"{state_idx}")
        return super().get_conv_state(layer_idx, state_idx)

    def update_conv_state(self, conv_states: torch.Tensor, layer_idx: int, state_idx: int = 0, **kwargs):
        """The model's store of layer ``layer_idx``'s conv window ``state_idx`` (``[B, D, W]``, the model's dtype; see
        :meth:`DeltaLogLayer.update_conv_state`). It opens the layer's step: the layers must run in ``layer_idx``
        order, once per forward, with the rows of the tokens the cache holds.

        Raises:
            TypeError / ValueError: no such layer, not a linear-attention layer, a step out of order or another
                number of rows (locking the cache until ``reset()``), or a locked cache.
        """
        self._require_linear(layer_idx)
        if not isinstance(conv_states, torch.Tensor):
            raise TypeError(f"conv_states must be a tensor [B, D, W]; got {type(conv_states).__name__}")
        if layer_idx == 0:
            self._track_inference_mode()
        self._begin_layer_step(layer_idx, f"update_conv_state:{state_idx}", conv_states.shape[0])
        return super().update_conv_state(conv_states, layer_idx, state_idx, **kwargs)

    def _require_linear(self, layer_idx: int) -> DeltaLogLayer:
        layer = self._layer(layer_idx)
        if not isinstance(layer, DeltaLogLayer):
            if not _called_by_a_module():  # user code reading the cache: name the layers it may read
                linear = [i for i, x in enumerate(self.layers) if isinstance(x, DeltaLogLayer)]
                raise self._refusal(f"layer {layer_idx} is a {type(layer).__name__} (attention), not a "
                                    f"linear-attention layer; the linear-attention layers are {linear}")
            raise self._refusal(
                f"the model treats layer {layer_idx} as linear attention, but this DeltaLogCache was built for a "
                f"config whose layer {layer_idx} is a {type(layer).__name__}; build the cache from the model that uses it"
            )
        return layer

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> DeltaLogState | torch.Tensor | None:
        """The layer's :class:`DeltaLogState` once it holds a state (None before prefill).

        This is the model's call at the start of a layer's step (every supported family reads its conv window and
        then this, before it updates the window in place): the layer counts as inside a forward until it stores its
        recurrent state, and a forward stopped in between is refused at the next ``generate`` or forward. A call from
        user code (not from a module's forward) is only a read, except in static mode inside a function compiled by
        ``torch.compile``, where it counts as a model's call. To inspect the state use :meth:`materialize`.

        Raises:
            TypeError: ``layer_idx`` or ``state_idx`` is not an int (a numpy integer is).
            ValueError: no such layer, not a linear-attention layer, ``state_idx`` other than 0, or the cache is locked
                (a forward it refused part-way left it inconsistent: ``reset()`` first). A refusal inside a model's
                forward locks the cache; one from user code changes nothing.
        """
        check_layer_index(layer_idx)
        layer_idx = int(layer_idx)
        layer = self._require_linear(layer_idx)
        if layer_idx == 0:
            self._track_inference_mode()
        check_recurrent_state_index(state_idx)
        # A read from user code (not a module's forward) is only a read. Static mode under torch.compile does not
        # inspect the caller's frame (dynamo cannot trace it; a graph break would split a captured step): a traced
        # call counts as the model's step. Dynamic mode inspects it (dynamo breaks the graph there).
        if (self.static and torch.compiler.is_compiling()) or _called_by_a_module(layer_idx, conv_of=layer):
            self._begin_layer_step(layer_idx, "get_recurrent_state")
            layer._in_step = True
        return layer.handle if (layer.has_previous_state[0] and layer.base is not None) else None

    def update_recurrent_state(self, recurrent_states: Any, layer_idx: int, state_idx: int = 0, **kwargs) -> Any:
        """The model's store of layer ``layer_idx``'s recurrent state, which closes the layer's step: a dense
        ``[B, HV, K, V]`` tensor (any float dtype, converted to the fp32 base) from a prefill or multi-token forward
        restarts the log from it; the layer's own :class:`DeltaLogState` (what a decode step returns) is a no-op
        beyond counting the step. Returns what the model keeps (the handle).

        Raises:
            TypeError: a ``layer_idx`` or ``state_idx`` that is not an int; neither a floating tensor nor a
                DeltaLogState (for the list form of kept states: each of them).
            ValueError: no such layer, not a linear-attention layer, ``state_idx`` other than 0, a state of another
                shape, or of other rows or on another device than the layer's conv window, kept states of unlike
                shapes or devices, or another layer's or cache's handle. Everything is checked before anything
                changes: such a ValueError inside a model's forward locks the cache until ``reset()`` (the layers
                before it in that forward have advanced); one from user code, and any TypeError, leaves it as it was.
        """
        return self._require_linear(layer_idx).update_recurrent_state(recurrent_states, state_idx, **kwargs)

    def materialize(self, layer_idx: int) -> torch.Tensor:
        """Dense logical state of linear-attention layer ``layer_idx``: ``[B, HV, K, V]`` fp32 (a new tensor).

        Raises:
            TypeError: ``layer_idx`` is not an int. ValueError: no such layer, not a DeltaLog layer, or no state yet.
        """
        check_layer_index(layer_idx)
        layer_idx = int(layer_idx)
        layer = self._layer(layer_idx, in_forward=False)
        if not isinstance(layer, DeltaLogLayer):
            raise ValueError(f"layer {layer_idx} is a {type(layer).__name__}, not a linear-attention layer")
        return layer.materialize()

    def memory_footprint(self) -> int:
        """Bytes of memory the cache's layers keep alive in tensors: KV of attention layers, conv states, bases,
        logs, workspaces and counters (static mode's step counter, attention layers' lengths), each buffer once and
        whole (a view keeps its whole buffer alive: transformers' sliding-window keys right after a prefill, conv
        windows under past recording after a crop); not the ids generate's continuation check keeps (``[B, T]``
        int64 on the ids' device)."""
        return buffer_bytes([list(vars(layer).values()) for layer in self.layers])

    def memory_breakdown(self) -> dict[str, int]:
        """Bytes of the linear-attention layers' buffers by role, summed over layers (0 before the first prefill): see
        :func:`memory_breakdown_of`."""
        return memory_breakdown_of(self.deltalog_layers)

    # ------------------------------------------------------------------ lengths
    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens held. Hybrid configs ask an attention layer (``layer_idx``'s, or the first one when ``layer_idx`` is a
        linear-attention layer: a device tensor for static layers, no host read); pure linear-attention configs
        count tokens."""
        if layer_idx >= len(self.layers):
            return 0
        if not self._has_attention():
            return self.deltalog_layers[0].seen_tokens()
        if isinstance(self.layers[layer_idx], DeltaLogLayer):
            return self._counted_layers[0][1].get_seq_length()  # the first attention layer
        return self.layers[layer_idx].get_seq_length()

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        """``(kv_length, kv_offset)`` for building the attention mask of a forward of ``query_length`` tokens:
        transformers' answer for hybrid configs (their attention layers hold the keys); for configs with no attention
        layer, the tokens held plus ``query_length``, offset 0 (what ``DynamicCache`` returns there). A static cache
        with past recording sizes a static attention layer's mask to its filled slots plus ``query_length`` (the keys
        its ``update`` returns then, see ``_unmasked_static_slots``), not to all its slots."""
        held = self._unmasked_static_slots(layer_idx) if 0 <= layer_idx < len(self.layers) else None
        if held is not None:
            return held + query_length, 0
        if self._has_attention() or layer_idx >= len(self.layers):
            return super().get_mask_sizes(query_length, layer_idx)
        return self.get_seq_length() + query_length, 0

    # ------------------------------------------------------------------ batch and lifecycle
    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` tokens from every layer, exactly, or raise before changing anything.
        ``crop(0)`` changes nothing (transformers' own ``crop(0)`` trims recorded sliding-window keys).

        Raises:
            ValueError: a positive count (transformers' convention is a negative number of tokens to remove), a cache
                with neither ``crop_ring=True`` nor past recording (nothing to rebuild the conv windows from), tokens
                older than some layer's log window, or tokens a sliding-window attention layer can no longer restore
                (see :func:`check_sliding_window_crop`).
            TypeError: a non-integer count, or a sliding-window layer of a class the check does not know.
        """
        if isinstance(tokens_to_remove, bool) or not isinstance(tokens_to_remove, numbers.Integral):
            raise TypeError(f"crop takes an int (a negative number of tokens to remove); got {tokens_to_remove!r}")
        tokens_to_remove = int(tokens_to_remove)  # a numpy integer too
        if tokens_to_remove > 0:
            raise ValueError(
                f"crop takes a negative number of tokens to remove (transformers' convention); got {tokens_to_remove}"
            )
        if tokens_to_remove == 0:
            # Changes nothing: transformers' sliding-window layers would drop their recorded keys here (and raise
            # past their window without recording), the DeltaLog layers keep their recorded conv columns.
            return
        for layer in self.deltalog_layers:
            layer.check_crop(-tokens_to_remove)
        for i, layer in enumerate(self.layers):
            check_sliding_window_crop(i, layer, -tokens_to_remove)
        self._track_inference_mode()  # (the layers' crop updates buffers in place)
        super().crop(tokens_to_remove)
        for layer in self.layers:
            # transformers' StaticIndexedLayer.crop leaves the indexer's position record (qwen4_exp) at the old length
            # (its dynamic layer cuts it): the next steps' indexer positions then shifted, and logits moved by ~3e-2
            if isinstance(layer, StaticIndexedLayer) and getattr(layer, "indexer_position_ids", None) is not None:
                layer.indexer_position_ids = layer.indexer_position_ids[..., :tokens_to_remove]
        if self._ledger is not None:
            # The record is a prefix of what the cache consumed (shorter after direct forwards): keep what the cache
            # still holds of it, cut to the cache's new length, not from the record's end
            self._ledger = self._ledger[:, :int(self.get_seq_length())]
        note_change_during_generate(self, "crop")

    @property
    def is_croppable(self) -> bool:
        """Whether ``crop`` can put the cache back as it was (transformers' question): every linear-attention layer
        says so (:attr:`DeltaLogLayer.is_croppable`: ``crop(-1)`` would be exact now, or past recording keeps the
        states of multi-token forwards), and every sliding-window attention layer still holds the keys its window
        needs for ``crop(-1)`` (:func:`check_sliding_window_crop`)."""
        if not all(layer.is_croppable for layer in self.deltalog_layers):
            return False
        try:
            for i, layer in enumerate(self.layers):
                check_sliding_window_crop(i, layer, 1)
        except (ValueError, TypeError):
            return False
        return all(layer.is_croppable for layer in self.layers
                   if not isinstance(layer, (DeltaLogLayer, DynamicSlidingWindowLayer, StaticSlidingWindowLayer)))

    def activate_past_recording(self, recurrent_states_to_keep: int | None = None, **kwargs: Any) -> None:
        """transformers' past recording on every layer (see :meth:`DeltaLogLayer.activate_past_recording`), with
        ``recurrent_states_to_keep`` checked before any layer changes.

        Raises:
            TypeError / ValueError: ``recurrent_states_to_keep`` not None or an int ``≥ 0`` (nothing changed).
        """
        _states_to_crop(recurrent_states_to_keep)
        if recurrent_states_to_keep is None and not kwargs:
            super().activate_past_recording()  # transformers 5.24's signature takes no argument
        else:
            super().activate_past_recording(recurrent_states_to_keep=recurrent_states_to_keep, **kwargs)

    def get_recurrent_states_to_keep(self, layer_idx: int | None = None) -> int:
        """transformers' count of recurrent states a recording layer keeps. For a layer (``layer_idx``, what the
        model reads to decide how many states of a multi-token forward to compute), a DeltaLog layer's answer is one
        more than the tokens it was asked to make croppable (see :meth:`DeltaLogLayer.activate_past_recording`). For
        the whole cache (``layer_idx=None``, what ``generate`` reads to activate recording again with no fewer) it
        is the largest ``recurrent_states_to_keep`` that :meth:`activate_past_recording` was given, so that passing it
        back does not grow it."""
        if layer_idx is not None:
            return super().get_recurrent_states_to_keep(layer_idx)
        return max((getattr(layer, "states_to_crop", getattr(layer, "recurrent_states_to_keep", 0)) or 0
                    for i, layer in enumerate(self.layers) if self.is_recording_past(i)), default=0)

    # whether a call that may allocate or replace buffers ran under torch.inference_mode() since the last
    # _leave_inference_tensors (set by layer 0's first call of a forward, batch operations and crop)
    _inference_filled = False

    def _track_inference_mode(self) -> None:
        """At layer 0's calls of a forward (a few per step: two flag reads), at batch operations and at ``crop``:
        note a call under ``torch.inference_mode()``; outside it, after such a call, replace the inference tensors
        first (:meth:`_leave_inference_tensors`), before anything updates a buffer in place."""
        if torch.compiler.is_compiling():
            return
        if torch.is_inference_mode_enabled():
            self._inference_filled = True
        elif self._inference_filled:
            self._leave_inference_tensors()

    def _holds_inference_tensors(self) -> bool:
        """Whether some layer holds an inference tensor (a flag read per tensor, with the step counters')."""
        return any(t.is_inference() for layer in self.layers for t in _layer_tensors(layer)) or any(
            counter.is_inference() for counter, _ in self._status.step_counters.values())

    def _leave_inference_tensors(self) -> None:
        """Buffers filled under ``torch.inference_mode()`` are inference tensors, which cannot be updated in place
        outside it (torch raises "Inplace update to inference tensor outside InferenceMode"): outside inference mode
        every such tensor of every layer (conv states, DeltaLog buffers, attention keys and values, static mode's
        step counter) is replaced by an ordinary copy with the same values, each buffer once (a tensor shared by
        several layers stays shared), so a later turn under ``no_grad`` (or a ``reset()``) goes on as after a
        ``no_grad`` turn. transformers' ``DynamicCache`` and ``StaticCache`` refuse that second turn. Addresses
        change where copies are made (a CUDA graph captured on the old buffers must be captured again). Called when
        ``generate`` starts (a flag read per tensor: tens of µs for a large model) and through
        :meth:`_track_inference_mode` at the first forward, batch operation or ``crop`` outside inference mode after
        one inside it, in dynamic and static mode; never per decode step otherwise."""
        if torch.is_inference_mode_enabled() or torch.compiler.is_compiling():
            return
        self._inference_filled = False
        if not self._holds_inference_tensors():
            return
        copies: dict[int, torch.Tensor] = {}

        def ordinary(t: Any) -> Any:
            if not isinstance(t, torch.Tensor) or not t.is_inference():
                return t
            if id(t) not in copies:
                copies[id(t)] = t.clone()
            return copies[id(t)]

        for layer in self.layers:
            for name, value in list(vars(layer).items()):
                if isinstance(value, torch.Tensor):
                    setattr(layer, name, ordinary(value))
                elif isinstance(value, list) and any(isinstance(t, torch.Tensor) for t in value):
                    setattr(layer, name, [ordinary(t) for t in value])
                elif isinstance(value, dict) and any(isinstance(t, torch.Tensor) for t in value.values()):
                    setattr(layer, name, {key: ordinary(t) for key, t in value.items()})
        for device, (counter, owner) in list(self._status.step_counters.items()):
            self._status.step_counters[device] = (ordinary(counter), owner)

    def reset(self) -> None:
        """Forget every token (a batch of another size may follow); buffers of an unchanged batch keep their addresses
        (also those filled under ``torch.inference_mode()``: outside it they are zeroed inside it, which torch allows,
        so a CUDA graph captured on them stays valid; the next use outside inference mode then copies them,
        :meth:`_leave_inference_tensors`)."""
        if not torch.is_inference_mode_enabled() and self._inference_filled and self._holds_inference_tensors():
            with torch.inference_mode():
                super().reset()
        else:
            super().reset()
        self._ledger = None
        self._after_beams = False
        self._stopped_generate = None
        self._copied_mid_generate = False
        self._changed_during_generate = None
        self._status.broken = None
        self._order = StepOrder()
        note_change_during_generate(self, "reset")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Gather the rows of every layer by ``beam_idx`` (``[B]`` integer tensor, values in ``[0, B)``).

        Raises:
            TypeError: not a 1-D int64 / int32 tensor (or a list of ints).
            ValueError: not ``B`` entries, or (``beam_idx`` on the CPU) an entry outside ``[0, B)``. On a GPU the
                values are not checked here (beam search calls this every step, and a check would wait for the
                device): an entry outside ``[0, B)`` fails in torch's gather (a device-side assert).
        """
        beam_idx = check_beam_idx(beam_idx, self.batch_size)
        self._track_inference_mode()  # (updates the buffers in place)
        super().reorder_cache(beam_idx)
        if self._ledger is not None:
            self._ledger = self._ledger.index_select(0, beam_idx.to(self._ledger.device))
        note_change_during_generate(self, "reorder_cache")

    def _check_layers_support(self, method: str) -> None:
        """Raise NotImplementedError, before any layer changes, when some layer has no ``method`` (transformers'
        static attention layers have no batch_select_indices / batch_repeat_interleave): the layers before it would
        change and the rest not."""
        missing = sorted({type(layer).__name__ for layer in self.layers if not hasattr(layer, method)})
        if missing:
            raise NotImplementedError(
                f"{method} is not available on this cache: its {', '.join(missing)} layers have none (static mode "
                "keeps transformers' StaticLayer for attention); nothing was changed")

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times (an int ≥ 1) in every layer.

        Raises:
            TypeError / ValueError: a bad ``repeats``. NotImplementedError: a layer without the operation (static
            mode), before anything changes."""
        check_repeats(repeats)
        repeats = int(repeats)
        self._check_layers_support("batch_repeat_interleave")
        self._track_inference_mode()
        super().batch_repeat_interleave(repeats)
        if self._ledger is not None:
            self._ledger = self._ledger.repeat_interleave(repeats, dim=0)
        note_change_during_generate(self, "batch_repeat_interleave")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (``[B']`` integer tensor or list, or a ``[B]`` boolean mask) in every layer.

        Raises:
            TypeError / ValueError: bad indices. NotImplementedError: a layer without the operation (static mode),
            before anything changes."""
        indices = check_row_indices(indices, self.batch_size)
        self._check_layers_support("batch_select_indices")
        self._track_inference_mode()
        super().batch_select_indices(indices)
        if self._ledger is not None:
            self._ledger = self._ledger[indices.to(self._ledger.device)]
        note_change_during_generate(self, "batch_select_indices")

    def _before_generate(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                         expand: int = 1) -> int:
        """Called (through the patch) when ``generate`` starts on this cache with the ids it was given.

        A cache that already holds tokens can only be continued: the same rows, one sequence per row (``expand``, the
        call's larger of ``num_beams`` and ``num_return_sequences``, must be 1), not after a beam search, and either
        the whole conversation (ids that start with the tokens the cache consumed, checked when the cache last
        advanced through ``generate``) or only the new tokens with an attention mask over cached and new ones.
        Otherwise: ValueError, before anything changes. Returns the number of tokens held (read once per call: the
        generate wrapper passes it on to :meth:`_check_room` and :func:`note_stopped_generate`).
        """
        self._status.check()
        if torch.is_inference_mode_enabled():
            self._inference_filled = True
        else:
            self._leave_inference_tensors()  # a turn after one under torch.inference_mode() (full scan: copies too)
        held = int(self.get_seq_length())  # a device tensor for static attention layers (read before generate runs)
        self._check_consistent(held)
        if held == 0:
            return held
        _check_held_rows_continue(held, self._after_beams, expand, self._stopped_generate,
                                  getattr(self, "_changed_during_generate", None), all(hasattr(layer, "batch_repeat_interleave") for layer in self.layers))
        if input_ids is None:
            return held
        only_new = attention_mask is not None and attention_mask.shape[1] == held + input_ids.shape[1]
        if not self._has_attention() and not only_new:
            raise ValueError(
                f"this DeltaLogCache holds {held} tokens of a model with no attention layers: transformers' generate "
                "then feeds every id it is given into the cache (it cuts the cached prefix off only when some layer is "
                "an attention layer), so the whole conversation would be consumed twice. Pass only the new tokens, "
                f"with an attention mask over the {held} cached and the new ones"
            )
        _check_continuation(held, self.batch_size, self._ledger, input_ids, attention_mask,
                            getattr(self, "_copied_mid_generate", False))
        return held

    def _check_consistent(self, held: int, host_only: bool = False) -> None:
        """Raise ValueError when the layers disagree with one another or with ``held`` (what the cache reports, and
        what generate cuts off the ids) on the tokens or rows they hold: a forward stopped part-way (an exception or
        an interrupt inside the model) left the first layers advanced and the others not. ``host_only``: dynamic
        mode's per-forward check, without the device reads of the static-mode log comparison."""
        tokens = {layer.layer_idx: layer.seen_tokens() if layer.base is not None else 0
                  for layer in self.deltalog_layers}
        interrupted = [layer.layer_idx for layer in self.deltalog_layers if layer._in_step and layer._moved]
        for i, layer in enumerate(self.layers):  # the attention layers count their tokens too
            if not isinstance(layer, DeltaLogLayer) and isinstance(layer, CacheLayerMixin):
                tokens[i] = int(layer.get_seq_length())
                if self._indexer_incomplete(i, layer, tokens[i]):  # DSA layers: keys and indexer keys, two stores
                    interrupted.append(i)
        # Layers with one merge interval hold logs of one length (row by row); in static mode, where the layers share
        # one step counter, a decode step that stopped between two layers shows only there
        lengths: dict[int, tuple[int, torch.Tensor]] = {}
        for layer in self.deltalog_layers:
            if host_only or layer.base is None or layer.capacity == 0:
                continue
            first = lengths.setdefault(layer.merge_interval, (layer.layer_idx, layer.length))
            if first[1].shape == layer.length.shape and not torch.equal(first[1].cpu(), layer.length.cpu()):
                interrupted.append(layer.layer_idx)
        check_layers_agree(held, dict(sorted(tokens.items())),
                           {layer.batch_size for layer in self.deltalog_layers if layer.base is not None},
                           interrupted)

    def _check_room(self, held: int, tokens: int | None, attention_mask: torch.Tensor | None,
                    max_new_tokens: int | None, drafts_past_the_end: int = 0) -> None:
        """Called (through the patch) when ``generate`` starts: in static mode, raise ValueError when the attention
        slots (``max_cache_len`` per row) cannot hold the tokens this call feeds the cache: the ``held`` ones (as
        :meth:`_before_generate` read them), ``tokens`` new prompt tokens (ids or ``inputs_embeds``) and
        ``max_new_tokens − 1`` generated ones (the last generated token is never fed). ``max_new_tokens`` is what generate resolves (an explicit ``max_length`` or the capped default
        counted in; see ``hf_deltalog.patches.registry._new_tokens``; a call without ids or embeddings starts from one
        BOS token, ``tokens`` = 1). ``drafts_past_the_end``: draft tokens that assisted generation's last forward may
        feed beyond those (transformers' prompt lookup: ``prompt_lookup_num_tokens − 1``; the crop then removes them).
        Nothing to check outside static mode, when ``tokens`` is None, or when the call generates nothing (generate
        says so itself)."""
        if not self.static or tokens is None or max_new_tokens is None or max_new_tokens < 1:
            return
        only_new = held > 0 and attention_mask is not None and attention_mask.shape[1] != tokens
        prompt = held + tokens if only_new else tokens
        need = prompt + int(max_new_tokens) - 1 + drafts_past_the_end
        if need > self.max_cache_len:
            drafts = (f" and up to {drafts_past_the_end} draft tokens past them (prompt lookup drafts up to "
                      "prompt_lookup_num_tokens tokens, without a cap at the end)" if drafts_past_the_end else "")
            raise ValueError(
                f"this static DeltaLogCache has room for {self.max_cache_len} tokens per row (max_cache_len), but this "
                f"generate call feeds it up to {need} (a prompt of {prompt} and {max_new_tokens} new tokens, the last "
                f"one never fed{drafts}); build it with a larger max_cache_len"
            )

    def _after_generate(self, output: Any, beams: bool = False) -> None:
        """Remember which tokens the cache consumed: every token of the returned sequences but the last one. After a
        beam search (``beams``) the rows are the beams in the search's last order, not the returned sequences: the
        cache is then marked as not continuable (until ``reset()``)."""
        self._after_beams = bool(beams)
        self._stopped_generate = None
        sequences = None if beams else output if isinstance(output, torch.Tensor) else getattr(output, "sequences", None)
        # None after a beam search, whose rows are not the returned sequences: nothing to check later
        self._ledger = consumed_ledger(self._ledger, sequences, self.batch_size, int(self.get_seq_length()))
        settle_change_during_generate(self, beams)


def _model_or_config(model_or_config: Any, config: Any) -> Any:
    """The one source a DeltaLogCache is built from: ``model_or_config`` (positional) or ``config=`` (keyword, as
    transformers' caches take it). Raises TypeError for neither or both."""
    if config is None:
        if model_or_config is None:
            raise TypeError("DeltaLogCache needs the model or its config: DeltaLogCache(model), "
                            "DeltaLogCache(model.config) or DeltaLogCache(config=model.config)")
        return model_or_config
    if model_or_config is not None:
        raise TypeError("DeltaLogCache got both a model_or_config and config=; pass one of them (the model or its "
                        "config)")
    return config


class _InitSignature:
    """``DeltaLogCache.__signature__``: ``__init__``'s parameters, for ``help()`` and ``inspect.signature`` (they showed
    ``__new__``'s ``(model_or_config=None, *args, **kwargs)``). None, so that inspect looks as usual, for an instance
    and for a subclass that defines its own ``__new__`` or ``__init__``."""

    def __get__(self, obj: Any, cls: type) -> inspect.Signature | None:
        if obj is not None:
            return None
        for base in cls.__mro__:
            if base is DeltaLogCache:
                init = inspect.signature(DeltaLogCache.__init__)
                return init.replace(parameters=list(init.parameters.values())[1:])
            if "__new__" in base.__dict__ or "__init__" in base.__dict__:
                return None
        return None


DeltaLogCache.__signature__ = _InitSignature()


def _layer_tensors(layer: Any) -> list[torch.Tensor]:
    """The tensors a cache layer holds in its attributes (directly, or in a list or a dict, such as conv states)."""
    found = []
    for value in vars(layer).values():
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, dict)):
            found.extend(t for t in (value.values() if isinstance(value, dict) else value) if isinstance(t, torch.Tensor))
    return found


def check_layer_index(layer_idx: Any) -> None:
    """Raise TypeError unless ``layer_idx`` is an int (a numpy integer too; a bool or a string is not a layer index)."""
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, numbers.Integral):
        raise TypeError(f"layer_idx must be an int; got {layer_idx!r}")


def check_plan_arguments(batch: Any, device: Any) -> torch.device:
    """A layer's ``plan`` arguments: ``batch`` an int ≥ 0, ``device`` a ``torch.device`` or its string (``"cuda:0"``).
    Returns the device.

    Raises:
        TypeError: ``batch`` not an int (a numpy integer is). ValueError: a negative ``batch``. RuntimeError: not a
            device string (torch's message)."""
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
        raise TypeError(f"batch must be an int; got {batch!r}")
    if batch < 0:
        raise ValueError(f"batch must be ≥ 0; got {batch}")
    return torch.device(device)


def check_recurrent_state_index(state_idx: Any) -> None:
    """Raise TypeError unless ``state_idx`` is an int (as ``get_conv_state`` asks), ValueError unless it is 0: a
    linear-attention layer keeps one recurrent state."""
    if type(state_idx) is not int and (isinstance(state_idx, bool) or not isinstance(state_idx, numbers.Integral)):
        raise TypeError(f"state_idx must be an int; got {state_idx!r}")  # (one type check on the models' path)
    if state_idx != 0:
        raise ValueError(f"linear-attention layers keep one recurrent state (state_idx 0); got {state_idx}")


def check_repeats(repeats: Any) -> None:
    """Raise TypeError / ValueError unless ``repeats`` is an int (a numpy integer too) of at least 1 (0 would leave
    every layer empty)."""
    if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral):
        raise TypeError(f"repeats must be an int; got {repeats!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")


def memory_breakdown_of(layers: list) -> dict[str, int]:
    """Bytes of the given DeltaLog layers' buffers by role, summed: ``state`` (the dense fp32 bases: what the default
    cache keeps as recurrent states), ``log`` (log factors, per-entry decays, cumulative decays, lengths),
    ``workspace`` (Triton kernel scratch), ``crop_ring`` (pre-conv columns kept for ``crop``; 0 unless
    ``crop_ring=True``). The log's memory overhead is ``(log + workspace) / state``: 8–11 % at head size 128 and the
    default merge intervals (GDN M = 8, KDA M = 4; README), and inversely proportional to the head size (about twice
    that at 64). Shared by :class:`DeltaLogCache` and the FLA cache."""
    roles = dict(base="state", workspace="workspace", conv_ring="crop_ring", conv_pos="crop_ring")
    out = dict(state=0, log=0, workspace=0, crop_ring=0)
    for layer in layers:
        for name, t in layer._tensors().items():
            out[roles.get(name, "log")] += t.numel() * t.element_size()
    return out


class StepOrder:
    """Where a model's forward is in a cache, from the calls its layers make: layers call in index order, and each
    layer makes each of its step calls once per forward (``calls_before``: the calls that come earlier in a layer,
    when the order is fixed). A call for a layer before the last one that called, or a call this layer already made,
    begins a new forward. Host bookkeeping, a set operation per call. Used by :class:`DeltaLogCache` (dynamic mode)
    and the FLA cache."""

    __slots__ = ("calls", "layer")

    def __init__(self) -> None:
        self.layer = -1
        self.calls: set[str] = set()

    def begins_forward(self, layer_idx: int, call: str, calls_before: tuple[str, ...] = ()) -> bool:
        """Record ``call`` by layer ``layer_idx``; True when it begins a new forward."""
        new = layer_idx < self.layer or (layer_idx == self.layer and call in self.calls)
        if new or layer_idx != self.layer:
            self.layer = layer_idx
            self.calls.clear()
        self.calls.update(calls_before)
        self.calls.add(call)
        return new


def check_rows_match(layer_idx: int, held: int, rows: int | None) -> None:
    """Raise ValueError when a forward brings ``rows`` rows (None: not known) to a cache whose layers hold ``held``
    rows of tokens. Shared by :class:`DeltaLogCache` and the FLA cache."""
    if rows is not None and rows != held:
        raise ValueError(f"layer {layer_idx}: the cache holds {held} rows but the model passed {rows}; call "
                         "cache.reset() (or build a new DeltaLogCache) before a batch of another size")


def check_layers_agree(held: int, tokens: dict[int, int], rows: set[int], interrupted: list[int] = ()) -> None:
    """Raise ValueError unless every layer in ``tokens`` (layer index → tokens it holds) holds ``held`` tokens, the
    allocated layers hold one number of ``rows`` and no layer is listed in ``interrupted`` (layers that did not
    complete the last step: entered and not finished, with a log of another length than the other layers', or with
    indexer keys of another length than its keys):
    otherwise a forward stopped part-way through the model (an exception or an interrupt) and the layers that ran
    hold more than the others. Shared by :class:`DeltaLogCache` and the FLA cache."""
    if interrupted:
        raise ValueError(
            f"this DeltaLogCache is inconsistent: a forward stopped part-way, and layer(s) {sorted(set(interrupted))} "
            "did not complete the last step (it kept part of the step: a conv window moved without its recurrent "
            "state, a recurrent state stored without RWKV6's FFN token-shift state, a log of another number of entries "
            "than the other layers', or attention indexer keys of another length than the keys). Call cache.reset() "
            "(or build a new DeltaLogCache) and run the prompt again"
        )
    if len(set(tokens.values()) | {held}) > 1 or len(rows) > 1:
        detail = ", ".join(f"layer {i}: {n}" for i, n in tokens.items())
        order = sorted(tokens)
        reached = [i for i in order if tokens[i] > 0]
        # Layers 0..j-1 hold the tokens and every later layer none: also what a model with only j layers leaves in
        # a cache built for more (a manual forward does not show the model to the cache; generate checks it)
        fewer = len(rows) <= 1 and 0 < len(reached) < len(order) and reached == order[:len(reached)] \
            and len({tokens[i] for i in reached}) == 1
        cause = (f"Either the model that ran it has only {len(reached)} layers while this cache was built for a "
                 f"config with {len(order)} (build the cache from a config that lists the layers the model runs: "
                 "after removing layers from a model, set its config's num_hidden_layers, and layer_types where it "
                 "has them, to match), "
                 "or an earlier forward stopped part-way through the model (call cache.reset() and run the prompt "
                 "again)"
                 if fewer else "An earlier forward stopped part-way through the model (call cache.reset(), or build "
                 "a new DeltaLogCache, and run the prompt again), or the model runs other layers than its config "
                 "lists: the cache expects layer 0, 1, 2, ... of the config, once each per forward, in that order "
                 "(after removing or reordering layers, renumber their layer_idx and set the config's "
                 "num_hidden_layers, and layer_types where it has them, to match, then build a new cache)")
        raise ValueError(
            f"this DeltaLogCache is inconsistent: it reports {held} tokens, its layers hold {detail} (rows: "
            f"{sorted(rows)}). {cause}"
        )


def copy_state(state: dict) -> dict:
    """``__getstate__`` of both caches (pickle, ``copy.deepcopy``, ``copy.copy``, ``torch.save``): a copy taken while a
    generate call runs on the cache (``_generate_running``, set by the generate patch) holds tokens its record of
    consumed ids may not cover, and is marked so (``_copied_mid_generate``, see :func:`_check_continuation`); the
    original is not marked."""
    if not state.get("_generate_running"):
        return state
    return {**state, "_generate_running": False, "_copied_mid_generate": True}


def restore_state(cache: Any, state: dict) -> None:
    """``__setstate__`` of both caches: the attributes, where a state that still says a generate call is running (a
    pickle of a cache taken during generate by an earlier version, which did not mark copies) loads as a copy taken
    during generate (:func:`copy_state`); a loaded cache is never running a call."""
    cache.__dict__.update(state)
    cache.__dict__.setdefault("_changed_during_generate", None)  # (a pickle of an earlier version)
    if state.get("_generate_running"):
        cache._copied_mid_generate = True
    cache._generate_running = False


def note_stopped_generate(cache: Any, error: BaseException, held_before: int) -> None:
    """Called (through the patch) when ``generate`` on ``cache`` raised ``error`` (an interrupt, or an exception from a
    streamer, a stopping criterion or the model). When the cache holds another number of tokens than the
    ``held_before`` it held when the call started, it consumed tokens whose ids never came back to the caller: its
    record of consumed tokens is dropped and the next ``generate`` on it is refused until ``reset()``
    (:func:`_check_held_rows_continue`). A call stopped before the cache changed (e.g. an invalid argument) leaves it
    as it was. Shared by :class:`DeltaLogCache` and the FLA cache."""
    try:
        held = int(cache.get_seq_length())
    except Exception:  # noqa: BLE001 - a cache left in a state it cannot report counts as changed
        held = -1
    if held != held_before:
        cache._ledger = None
        cache._stopped_generate = type(error).__name__


def note_change_during_generate(cache: Any, operation: str) -> None:
    """Called by both caches' ``crop``, ``reset``, ``reorder_cache``, ``batch_select_indices`` and
    ``batch_repeat_interleave`` (``operation``) once they changed the cache: while a generate call runs on it (the
    method called from a streamer, a stopping criterion or a logits processor), the cache may end the call holding
    other tokens or rows than the sequences the call returns. Marked here, settled when the call ends
    (:func:`settle_change_during_generate`); a row operation's mark is kept over a later ``crop`` / ``reset`` one."""
    if getattr(cache, "_generate_running", False) and \
            getattr(cache, "_changed_during_generate", None) not in _ROW_OPERATIONS:
        cache._changed_during_generate = operation


_ROW_OPERATIONS = ("reorder_cache", "batch_select_indices", "batch_repeat_interleave")


def settle_change_during_generate(cache: Any, beams: bool) -> None:
    """At the end of a generate call on ``cache``, once its record of consumed tokens is updated: a ``crop`` or a
    ``reset`` during the call is harmless when that record is known again (the cache holds the returned sequences but
    their last token: transformers' own deferred stop check crops one extra step this way); a row operation during a
    call is harmless only in a beam search (which reorders the rows at every step, and whose end marks the cache as not
    continuable anyway). Otherwise the mark stays, and the next ``generate`` on the cache is refused until ``reset()``
    (:func:`_check_held_rows_continue`). Shared by both caches."""
    changed = getattr(cache, "_changed_during_generate", None)
    if changed is not None and (beams or (changed not in _ROW_OPERATIONS and cache._ledger is not None)):
        cache._changed_during_generate = None


def _check_held_rows_continue(held: int, after_beams: bool, expand: int, stopped: str | None = None,
                              changed: str | None = None, can_repeat: bool = True) -> None:
    """Raise ValueError when a cache holding ``held`` tokens cannot be continued by this generate call: the last
    generate call on it stopped with the exception named ``stopped`` after the cache consumed tokens
    (:func:`note_stopped_generate`), the cache's method ``changed`` ran during the last generate call and left it
    holding other tokens or rows than that call returned (:func:`settle_change_during_generate`), its rows are the beams of an earlier beam search (``after_beams``), or the call
    would expand every row into ``expand`` > 1 (``num_beams`` / ``num_return_sequences``; the message offers
    ``batch_repeat_interleave`` where every layer has it, ``can_repeat``). Shared by :class:`DeltaLogCache` and the
    FLA cache."""
    if stopped is not None:
        raise ValueError(
            f"the last generate call on this cache stopped with {stopped} after the cache had consumed tokens, so it "
            f"holds {held} tokens per row whose ids never came back from that call and cannot be compared with the "
            "ids given now. Call cache.reset() (or build a new cache) and generate again from the whole conversation"
        )
    if changed is not None:
        raise ValueError(
            f"cache.{changed}() was called while a generate call was running on this cache (in a streamer, a stopping "
            f"criterion or a logits processor), so the {held} tokens per row it holds are not the sequences that call "
            "returned (a token dropped or rows rearranged in the middle of decoding) and cannot be compared with the "
            "ids given now. Call cache.reset() (or build a new cache) and generate again from the whole conversation"
        )
    if after_beams:
        raise ValueError(
            f"this cache holds {held} tokens from a beam search: its rows are the beams in the search's own order, "
            "not the sequences generate returned, so no conversation can continue them. Call cache.reset() or build "
            "a new cache (to continue a beam-search result, feed the chosen sequence to a fresh cache)"
        )
    if expand > 1:
        raise ValueError(
            f"this cache holds {held} tokens per row; continuing it with num_beams / num_return_sequences = {expand} "
            "would expand its rows in the middle of the call. Continue it with one sequence per row"
            + (" (for n sampled continuations of each row: cache.batch_repeat_interleave(n) first, then the ids and "
               "the attention mask repeated the same way, .repeat_interleave(n, dim=0), with num_return_sequences=1)"
               if can_repeat else "")
            + ", or call cache.reset() (or use a new cache) for a new beam search"
        )


def buffer_bytes(objs: Any) -> int:
    """Bytes of the distinct buffers (storages) the tensors in ``objs`` keep alive, each counted once and whole (a
    view keeps its whole buffer alive); ``objs``: tensors, and dicts, lists and tuples of them, nested. Other objects
    count 0. Shared by both caches' ``memory_footprint``."""
    seen: set[tuple[torch.device, int]] = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        if isinstance(t, (dict, list, tuple)):
            for item in t.values() if isinstance(t, dict) else t:
                add(item)
        elif isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            # meta storages have no addresses (all read 0): tell them apart by their storage object instead
            key = (t.device, storage._cdata if t.device.type == "meta" else storage.data_ptr())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()

    add(objs)
    return total


def consumed_ledger(ledger: torch.Tensor | None, sequences: torch.Tensor | None, rows: int,
                    held: int) -> torch.Tensor | None:
    """The ids a cache holding ``held`` tokens of ``rows`` rows consumed, ``[rows, held]``, after a ``generate`` call
    returned ``sequences`` ``[rows, T]`` (None: unknown). Every returned token but the last went through the cache.
    A call given the whole conversation returns all of it (``T − 1 = held``); a call given only the new tokens (with a
    mask over cached and new ones) returns those and the generated ones, which continue the ``ledger`` the cache held
    before the call (``ledger`` ``[rows, held − T + 1]``). Anything else (tokens fed by direct forwards in between, an
    unknown earlier part): None, and the next continuation's ids are not compared. Shared by both caches."""
    if sequences is None or sequences.dim() != 2 or sequences.shape[0] != rows:
        return None
    consumed = sequences[:, :-1]
    if consumed.shape[1] == held:
        return consumed.clone()  # not a view: the caller may edit the returned ids in place
    if ledger is not None and ledger.shape == (rows, held - consumed.shape[1]) and ledger.shape[1] > 0:
        return torch.cat([ledger, consumed.to(ledger.device)], dim=1)
    return None


def _states_to_crop(recurrent_states_to_keep: Any) -> int:
    """``activate_past_recording``'s ``recurrent_states_to_keep`` (None or an int ≥ 0) as an int (None: 0).

    Raises:
        TypeError / ValueError: another type, or a negative int.
    """
    keep = 0 if recurrent_states_to_keep is None else recurrent_states_to_keep
    if isinstance(keep, bool) or not isinstance(keep, numbers.Integral):
        raise TypeError(f"recurrent_states_to_keep must be None or an int >= 0; got {recurrent_states_to_keep!r}")
    if keep < 0:
        raise ValueError(f"recurrent_states_to_keep must be None or an int >= 0; got {recurrent_states_to_keep}")
    return int(keep)


def _check_continuation(held: int, rows: int, ledger: torch.Tensor | None, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor | None, copied_mid_generate: bool = False) -> None:
    """Raise ValueError unless ``input_ids`` ``[B, T]`` (with ``attention_mask``) continue a cache holding ``held``
    tokens of ``rows`` rows (-1: unknown) whose consumed tokens are ``ledger`` ``[rows, held]`` (None: unknown): the
    same rows, and either the whole conversation (ids starting with the consumed tokens) or only the new tokens with a
    mask over cached and new ones. ``copied_mid_generate``: the cache is a copy (``copy.deepcopy``, pickle,
    ``torch.save``) taken while a generate call ran on the original (in a stopping criterion, a streamer, a logits
    processor; :func:`copy_state`): unless its record of consumed tokens covers every token it holds (a copy taken
    before that call fed it anything), the whole conversation cannot be checked, and only the new-tokens form is taken,
    until ``reset()``. Shared by :class:`DeltaLogCache` and the FLA cache."""
    if rows not in (-1, input_ids.shape[0]):
        raise ValueError(
            f"this DeltaLogCache holds {rows} rows but generate was given {input_ids.shape[0]}: it cannot continue "
            "them. For a new batch call cache.reset() or build a new DeltaLogCache"
        )
    if attention_mask is not None and attention_mask.shape[1] != input_ids.shape[1]:
        if attention_mask.shape[1] != held + input_ids.shape[1]:
            raise ValueError(
                f"the cache holds {held} tokens and generate was given {input_ids.shape[1]} ids with an attention mask "
                f"over {attention_mask.shape[1]} tokens; the mask must cover the ids when they are the whole "
                f"conversation ({input_ids.shape[1]} columns), or the cached and the new tokens when the ids are only "
                f"the new ones ({held} + {input_ids.shape[1]} = {held + input_ids.shape[1]} columns)"
            )
        return  # only the new tokens were passed (transformers' convention)
    if copied_mid_generate and (ledger is None or ledger.shape != (input_ids.shape[0], held)):
        raise ValueError(
            f"this cache was copied (copy.deepcopy, pickle or torch.save) while a generate call was running on it, and "
            f"holds {held} tokens per row, some of them fed by that call and never returned to this copy, so the "
            "conversation given now cannot be checked against them. Continue it with only the new tokens and an "
            f"attention mask over the {held} cached and the new ones, or call cache.reset() and generate from the whole "
            "conversation"
        )
    if input_ids.shape[1] <= held:
        raise ValueError(
            f"this DeltaLogCache already holds {held} tokens; continuing it takes the whole conversation (those "
            f"{held} tokens followed by at least one new one), but generate got {input_ids.shape[1]} tokens, none "
            "new. For an unrelated prompt "
            "call cache.reset() or build a new DeltaLogCache"
        )
    if ledger is not None and ledger.shape == (input_ids.shape[0], held):
        if not torch.equal(input_ids[:, :held].to(ledger.device), ledger):
            raise ValueError(
                f"the first {held} input tokens differ from the {held} tokens this DeltaLogCache consumed, so it "
                "cannot continue them. For an unrelated prompt call cache.reset() or build a new DeltaLogCache"
            )


# generate's checks are bound when this module is imported, not only when a cache is built: in
# `model.generate(..., cache=DeltaLogCache(model))` Python looks `model.generate` up before it builds the cache.
install_generate_checks()
