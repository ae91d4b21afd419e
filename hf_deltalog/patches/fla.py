"""Which flash-linear-attention (FLA) model families DeltaLog binds, and the idempotent, revertible patch binding them.

FLA's layers (``fla.layers.rwkv6.RWKV6Attention``, ``fla.layers.gated_deltanet.GatedDeltaNet``,
``fla.layers.kda.KimiDeltaAttention``) look their kernels up as module globals of their layer module at call time
(``fused_recurrent_rwkv6`` / ``chunk_rwkv6``, ``fused_recurrent_gated_delta_rule`` / ``chunk_gated_delta_rule``,
``fused_recurrent_kda`` / ``chunk_kda``) and pass whatever ``past_key_values[layer_idx]['recurrent_state']`` holds as
``initial_state``. :func:`patch_fla` re-binds those globals to dispatchers: when ``initial_state`` is the handle an
:class:`~hf_deltalog.fla_cache.FLADeltaLogCache` hands out, the layer's call runs on DeltaLog (one token per sequence)
or FLA's own kernel on the materialised state (several tokens); with any other cache, or none, FLA's function runs
untouched, with the same arguments. Projections, token shift, short convolutions, gates, norms and unpadding all stay
FLA's.

Nothing here imports FLA at module import: the FLA modules are imported by :func:`patch_fla`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

from hf_deltalog.patches.registry import _dispatcher_of, _ours, _upstream_of, check_model_type_names

__all__ = [
    "FLA_FAMILIES",
    "FLAFamilySpec",
    "fla_family_of",
    "is_fla_patched",
    "patch_fla",
    "supported_fla_model_types",
    "unpatch_fla",
]


def _delta_dims(config: Any) -> tuple[int, int, int, int]:
    """``(Hk, HV, K, V)`` of an FLA GatedDeltaNet / KDA layer: ``num_heads`` key heads of ``head_dim``,
    ``num_v_heads`` (default ``num_heads``) value heads of ``head_dim · expand_v`` (the layers' own arithmetic)."""
    heads, head_dim = int(config.num_heads), int(config.head_dim)
    v_heads = int(config.num_v_heads) if getattr(config, "num_v_heads", None) is not None else heads
    return heads, v_heads, head_dim, int(head_dim * config.expand_v)


def _rwkv6_dims(config: Any) -> tuple[int, int, int, int]:
    """``(H, H, K, V)`` of an FLA RWKV6 layer: ``K = round(hidden · expand_k) / H``,
    ``V = round(hidden · expand_v) / H``."""
    heads = int(config.num_heads)
    key_dim, value_dim = round(config.hidden_size * config.expand_k), round(config.hidden_size * config.expand_v)
    return heads, heads, key_dim // heads, value_dim // heads


@dataclass(frozen=True)
class FLAFamilySpec:
    """One FLA model family whose recurrent layers DeltaLog serves.

    Attributes:
        model_type: the FLA config's ``model_type`` (``"rwkv6"``, ``"gated_deltanet"``, ``"kda"``).
        module: the FLA layer module that holds the kernels as module globals.
        operator: the recurrence (``"rwkv6"``, ``"gdn"`` or ``"kda"``).
        recurrent: name of the fused-recurrent kernel global in ``module`` (FLA's layers use it for ≤ 64 tokens).
        chunk: name of the chunked kernel global in ``module``.
        dims: ``config -> (Hk, HV, K, V)``.
        state_v_first: FLA's layer keeps its recurrent state ``[N, HV, V, K]`` (True: GDN, KDA) or ``[N, H, K, V]``.
        default_merge_interval: ``M`` when the user gives none.
        ffn_state: the family's blocks store a token-shift FFN state (``offset=0``) after the layer's recurrent or
            attention state, so a layer's step ends with that store (RWKV6).
    """

    model_type: str
    module: str
    operator: str
    recurrent: str
    chunk: str
    dims: Callable[[Any], tuple[int, int, int, int]]
    state_v_first: bool
    default_merge_interval: int
    ffn_state: bool = False


FLA_FAMILIES: dict[str, FLAFamilySpec] = {
    spec.model_type: spec
    for spec in (
        FLAFamilySpec("rwkv6", "fla.layers.rwkv6", "rwkv6", "fused_recurrent_rwkv6", "chunk_rwkv6", _rwkv6_dims,
                      state_v_first=False, default_merge_interval=8, ffn_state=True),
        FLAFamilySpec("gated_deltanet", "fla.layers.gated_deltanet", "gdn", "fused_recurrent_gated_delta_rule",
                      "chunk_gated_delta_rule", _delta_dims, state_v_first=True, default_merge_interval=8),
        FLAFamilySpec("kda", "fla.layers.kda", "kda", "fused_recurrent_kda", "chunk_kda", _delta_dims,
                      state_v_first=True, default_merge_interval=4),
    )
}

# Kept through an importlib.reload of this module, as in hf_deltalog.patches.registry.
_LOCK = globals().get("_LOCK") or threading.RLock()
# model_type -> {global name: FLA's function}; present iff patched
_ORIGINALS: dict[str, dict[str, Callable]] = globals().get("_ORIGINALS", {})


def supported_fla_model_types() -> list[str]:
    """The FLA config ``model_type`` values DeltaLogCache serves."""
    return sorted(FLA_FAMILIES)


def _of_fla_family(obj: Any, model_type: str) -> bool:
    """Whether ``obj``'s class is one of FLA's classes of ``model_type`` (defined in ``fla.models.<model_type>``) or
    derives from one; FLA's shared base classes (``fla.models.modeling_utils`` and the like) do not count."""
    prefix = f"fla.models.{model_type}."
    return any((getattr(c, "__module__", None) or "").startswith(prefix) for c in type(obj).__mro__)


def fla_family_of(model_or_config: Any) -> FLAFamilySpec | None:
    """The FLA family of a model or config built by flash-linear-attention, else None: the config's ``model_type`` is
    one of FLA's and the config's class, or the model's, is FLA's class of that family or a subclass of it (a user's
    subclass of FLA's config, or FLA's model class with a config class copied from FLA's, as remote code does).

    Reads only the objects' classes and ``model_type``: it never imports FLA, so transformers' own models stay free of it.
    """
    config = getattr(model_or_config, "config", model_or_config)
    spec = FLA_FAMILIES.get(getattr(config, "model_type", None))
    if spec is None:
        return None
    owners = (config,) if config is model_or_config else (config, model_or_config)
    return spec if any(_of_fla_family(obj, spec.model_type) for obj in owners) else None


def _resolve(model_type: str) -> FLAFamilySpec:
    if not isinstance(model_type, str):
        raise TypeError(f"model_type must be an FLA model type name (a str); got {model_type!r}")
    spec = FLA_FAMILIES.get(model_type)
    if spec is None:
        raise ValueError(
            f"model_type {model_type!r} has no FLA DeltaLog binding; supported: "
            f"{', '.join(supported_fla_model_types())}"
        )
    return spec


def _import_layer_module(spec: FLAFamilySpec):
    try:
        import fla  # noqa: F401
        module = importlib.import_module(spec.module)
    except ImportError as err:
        raise ImportError(
            f"hf_deltalog cannot import {spec.module} for FLA's {spec.model_type!r} models: {err}. Install "
            "flash-linear-attention (pip install 'hf-deltalog[fla]'); hf_deltalog is tested with its version in "
            "pyproject.toml"
        ) from err
    for name in (spec.recurrent, spec.chunk):
        if not callable(getattr(module, name, None)):
            import fla

            raise RuntimeError(
                f"{spec.module}.{name} does not exist in flash-linear-attention {getattr(fla, '__version__', '?')}; "
                f"hf_deltalog binds the decode step of FLA's {spec.model_type!r} layers there. Use the FLA version in "
                "hf_deltalog's tested range (pyproject.toml)"
            )
    return module


def _dispatcher(upstream: Callable, spec: FLAFamilySpec, multi_token: bool) -> Callable:
    """Wrap FLA's kernel ``upstream``: a DeltaLog handle as ``initial_state`` goes to the handle, anything else to FLA.

    ``multi_token`` marks the chunked kernel: it always runs FLA's kernel, on the materialised state.
    """
    signature = inspect.signature(upstream)

    @functools.wraps(upstream)
    def deltalog_dispatch(*args, **kwargs):
        from hf_deltalog.fla_cache import FLADeltaLogState

        state = kwargs.get("initial_state")
        if state is None and args:
            state = signature.bind_partial(*args, **kwargs).arguments.get("initial_state")
        if not isinstance(state, FLADeltaLogState):
            return upstream(*args, **kwargs)
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        arguments = dict(call.arguments)
        extra = arguments.pop(next((n for n, p in signature.parameters.items() if p.kind is p.VAR_KEYWORD), ""), {})
        arguments.update(extra)
        from hf_deltalog.cache import no_backward_through_state

        return no_backward_through_state(state.run(upstream, spec, arguments, multi_token), *arguments.values())

    return _dispatcher_of(deltalog_dispatch, upstream)


# Whether unpatch_fla() was called with no patch_fla() since: an FLA cache restored by pickle / copy.deepcopy then
# leaves the layers unbound (FLADeltaLogCache.__setstate__; registry.patch_after_unpickling for transformers').
_UNPATCHED = globals().get("_UNPATCHED", {"by_user": False})


def patch_fla(model_types: str | list[str] | None = None) -> list[str]:
    """Bind the DeltaLog decode path into FLA's layer modules of the given families (default: all three).

    Idempotent. Layers used with FLA's own cache (or any other) keep running FLA's kernels with unchanged arguments.

    Returns:
        The FLA model types patched after the call.

    Raises:
        TypeError: ``model_types`` is not None, a string or a list / tuple of strings. ValueError: an unknown model
        type. ImportError / RuntimeError: FLA missing, or lacking a kernel the binding needs (the message names the
        FLA version).
    """
    names = list(FLA_FAMILIES) if model_types is None else check_model_type_names(model_types)
    specs = [_resolve(name) for name in names]
    with _LOCK:
        for spec in specs:
            if spec.model_type in _ORIGINALS and _bound(spec):
                continue
            # Not patched, or the module's globals no longer hold the dispatchers (the module was reloaded, or
            # something rebound them): bind what the module holds now.
            module = _import_layer_module(spec)
            originals = {name: _upstream_of(getattr(module, name)) for name in (spec.recurrent, spec.chunk)}
            setattr(module, spec.recurrent, _dispatcher(originals[spec.recurrent], spec, multi_token=False))
            setattr(module, spec.chunk, _dispatcher(originals[spec.chunk], spec, multi_token=True))
            _ORIGINALS[spec.model_type] = originals
        _UNPATCHED["by_user"] = False
        return sorted(model_type for model_type in _ORIGINALS if _bound(FLA_FAMILIES[model_type]))


def unpatch_fla() -> None:
    """Restore every FLA function :func:`patch_fla` replaced. Idempotent.

    A cache built before cannot decode until :func:`patch_fla` runs again (its handle reaches FLA's kernel, which
    fails; the handle's ``.to``/``.device`` access names the cause). After :func:`hf_deltalog.unpatch`, which also
    removes the ``generate`` wrapper that hands the cache to FLA's models, ``model.generate(..., past_key_values=cache)``
    fails before that, with transformers' ``ValueError`` "The following `model_kwargs` are not used by the model:
    ['cache']"; :func:`hf_deltalog.patch` restores both.
    """
    with _LOCK:
        _UNPATCHED["by_user"] = True
        for model_type, originals in list(_ORIGINALS.items()):
            module = sys.modules.get(FLA_FAMILIES[model_type].module)
            for name, fn in originals.items():
                if _ours(getattr(module, name, None)):  # what was bound after patch_fla() (a reload, a rebinding) stays
                    setattr(module, name, fn)
            del _ORIGINALS[model_type]


def is_fla_patched(model_type: str) -> bool:
    """Whether FLA's ``model_type`` layers currently run the DeltaLog binding.

    Raises:
        TypeError: ``model_type`` is not a str. ValueError: not an FLA model type the project serves.
    """
    spec = _resolve(model_type)
    return spec.model_type in _ORIGINALS and _bound(spec)


def _bound(spec: FLAFamilySpec) -> bool:
    """Whether the family's layer module (if imported) holds the dispatchers in both globals."""
    module = sys.modules.get(spec.module)
    return module is not None and all(_ours(getattr(module, name, None)) for name in (spec.recurrent, spec.chunk))
