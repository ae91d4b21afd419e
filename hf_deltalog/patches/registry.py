"""Which transformers families DeltaLog binds, and the idempotent, revertible patch that binds them."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = [
    "FAMILIES",
    "FamilySpec",
    "is_patched",
    "patch",
    "patched_families",
    "supported_model_types",
    "unpatch",
]


def _kda_dims(config: Any) -> tuple[int, int, int, int]:
    """``(Hk, HV, K, V)`` of a KDA layer: one head count and ``K = V = linear_head_dim``."""
    heads, dim = int(config.linear_num_heads), int(config.linear_head_dim)
    return heads, heads, dim, dim


def _gdn_dims(config: Any) -> tuple[int, int, int, int]:
    """``(Hk, HV, K, V)`` of a GDN layer from its text config (the fields every GDN family reads)."""
    return (
        int(config.linear_num_key_heads),
        int(config.linear_num_value_heads),
        int(config.linear_key_head_dim),
        int(config.linear_value_head_dim),
    )


@dataclass(frozen=True)
class FamilySpec:
    """One transformers model family whose linear-attention layers DeltaLog serves.

    Attributes:
        model_type: the text config's ``model_type`` (e.g. ``"qwen3_5_text"``).
        module: the modeling module that holds the recurrences as module globals.
        operator: the recurrence (``"gdn"`` or ``"kda"``).
        recurrent: name of the one-token recurrence global in ``module``.
        chunk: name of the multi-token recurrence global in ``module``.
        dims: ``config -> (Hk, HV, K, V)``.
        default_merge_interval: ``M`` when the user gives none.
    """

    model_type: str
    module: str
    operator: str
    recurrent: str
    chunk: str
    dims: Callable[[Any], tuple[int, int, int, int]]
    default_merge_interval: int


def _gdn(model_type: str, package: str) -> FamilySpec:
    return FamilySpec(
        model_type=model_type,
        module=f"transformers.models.{package}.modeling_{package}",
        operator="gdn",
        recurrent="torch_recurrent_gated_delta_rule",
        chunk="torch_chunk_gated_delta_rule",
        dims=_gdn_dims,
        default_merge_interval=8,
    )


def _kda(model_type: str, package: str) -> FamilySpec:
    return FamilySpec(
        model_type=model_type,
        module=f"transformers.models.{package}.modeling_{package}",
        operator="kda",
        recurrent="recurrent_kimi_delta_attention",
        chunk="chunk_kimi_delta_attention",
        dims=_kda_dims,
        default_merge_interval=4,
    )


FAMILIES: dict[str, FamilySpec] = {
    spec.model_type: spec
    for spec in (
        _gdn("qwen3_next", "qwen3_next"),
        _gdn("qwen3_5_text", "qwen3_5"),
        _gdn("qwen3_5_moe_text", "qwen3_5_moe"),
        _gdn("qwen4_exp_text", "qwen4_exp"),
        _gdn("olmo_hybrid", "olmo_hybrid"),
        _gdn("lara_mini", "lara_mini"),
        _kda("kimi_linear", "kimi_linear"),
        _kda("bailing_hybrid", "bailing_hybrid"),
        _kda("glm5_next_text", "glm5_next"),
    )
}
# Wrapper configs (vision-language) whose text config is one of the above.
_WRAPPERS = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "qwen4_exp": "qwen4_exp_text",
             "glm5_next": "glm5_next_text"}

# The patch state outlives an importlib.reload of this module (IPython's autoreload does that): a reload keeps the
# module's namespace, so the state already there is kept, and what is bound stays known and revertible.
_LOCK = globals().get("_LOCK") or threading.RLock()
# model_type -> {global name: upstream function}; present iff the family is patched.
_ORIGINALS: dict[str, dict[str, Callable]] = globals().get("_ORIGINALS", {})
_GENERATION_ORIGINAL: dict[str, Callable] = globals().get("_GENERATION_ORIGINAL", {})


def supported_model_types() -> list[str]:
    """The transformers text-config ``model_type`` values DeltaLogCache serves (wrapper configs resolve to these);
    flash-linear-attention's: :func:`hf_deltalog.patches.fla.supported_fla_model_types`; all of them, for messages:
    :func:`supported_description`."""
    return sorted(FAMILIES)


def supported_description() -> str:
    """Every model type the project serves, for error messages: the text-config types, the wrapper types that
    resolve to them, and flash-linear-attention's model types."""
    from hf_deltalog.patches.fla import supported_fla_model_types

    return (f"transformers' {', '.join(supported_model_types())} (text configs), "
            f"{', '.join(sorted(_WRAPPERS))} (their wrapper configs), and flash-linear-attention's "
            f"{', '.join(supported_fla_model_types())} (fla.models)")


def _shown(value: Any) -> str:
    """``value`` for a TypeError about model type names: its repr, except for objects such as a model, whose repr is
    its whole module tree: their type, and the ``config.model_type`` to pass instead when they have one."""
    if isinstance(value, (str, list, tuple, int, float, type(None))):
        return repr(value)
    name = getattr(getattr(value, "config", None), "model_type", None)
    hint = f" (pass its config.model_type, {name!r})" if isinstance(name, str) else ""
    return f"a {type(value).__name__}{hint}"


def check_model_type_names(model_types: Any) -> list[str]:
    """``model_types`` (None, a name, or a list / tuple of names) as a list of names (None: empty list).

    Raises:
        TypeError: anything else (a number, a list holding a non-string).
    """
    if model_types is None:
        return []
    names = [model_types] if isinstance(model_types, str) else model_types
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"model_types must be None, a model type name or a list of them; got {_shown(model_types)}")
    return list(names)


def _resolve(model_type: str) -> FamilySpec:
    if not isinstance(model_type, str):
        raise TypeError(f"model_type must be a model type name (a str); got {_shown(model_type)}")
    spec = FAMILIES.get(_WRAPPERS.get(model_type, model_type))
    if spec is None:
        raise ValueError(f"model_type {model_type!r} has no DeltaLog binding; supported: {supported_description()}")
    return spec


def _import_family(spec: FamilySpec):
    import transformers

    try:
        module = importlib.import_module(spec.module)
    except ImportError as err:
        raise ImportError(
            f"hf_deltalog cannot import {spec.module} for {spec.model_type!r} with transformers "
            f"{transformers.__version__}: {err}. hf_deltalog is tested with the range in its pyproject.toml."
        ) from err
    for name in (spec.recurrent, spec.chunk):
        if not callable(getattr(module, name, None)):
            raise RuntimeError(
                f"{spec.module}.{name} no longer exists in transformers {transformers.__version__}; hf_deltalog binds "
                f"the decode step of {spec.model_type!r} there. Use a transformers version in hf_deltalog's tested range."
            )
    return module


def call_signature(fn: Callable) -> inspect.Signature:
    """The signature a call of ``fn`` binds to. transformers 5.25 wraps its recurrences in the ``kernels`` package's
    function modules (``torch.nn.Module`` instances whose ``__call__`` takes ``*args, **kwargs``): those are read
    through their ``forward``."""
    return inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn)


def _recurrent_dispatcher(upstream: Callable, spec: FamilySpec) -> Callable:
    # updated=(): an upstream that is a function module (transformers 5.25) must not lend its __dict__ (parameters,
    # submodules, hooks) to the dispatcher
    @functools.wraps(upstream, updated=())
    def deltalog_recurrent(query, key, value, g=None, beta=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, **kwargs):
        from hf_deltalog.cache import DeltaLogState, no_backward_through_state

        if isinstance(initial_state, DeltaLogState):
            out = initial_state.recurrent(
                upstream, spec, query, key, value, g, beta, output_final_state, use_qk_l2norm_in_kernel, kwargs
            )
            return no_backward_through_state(out, query, key, value, g, beta)
        return upstream(query, key, value, g=g, beta=beta, initial_state=initial_state,
                        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, **kwargs)

    return _dispatcher_of(deltalog_recurrent, upstream)


def _chunk_dispatcher(upstream: Callable, spec: FamilySpec) -> Callable:
    """The multi-token recurrence, bound: a DeltaLog handle passed as ``initial_state`` becomes the dense state; every
    call is otherwise handed to ``upstream`` exactly as it came. Arguments are read through ``upstream``'s own
    signature, so positional calls keep their meaning (transformers' torch functions take ``chunk_size`` before
    ``initial_state``, FLA's take ``scale``)."""
    signature = call_signature(upstream)

    @functools.wraps(upstream, updated=())
    def deltalog_chunk(*args, **kwargs):
        from hf_deltalog.cache import DeltaLogState, no_backward_through_state

        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return upstream(*args, **kwargs)  # upstream's own error for a call it does not accept
        state = bound.arguments.get("initial_state")
        if not isinstance(state, DeltaLogState):
            return upstream(*args, **kwargs)
        query, value = bound.args[0], bound.args[2]
        bound.arguments["initial_state"] = state.dense_for(spec, query, value)
        return no_backward_through_state(upstream(*bound.args, **bound.kwargs), *bound.args,
                                         *bound.kwargs.values())

    return _dispatcher_of(deltalog_chunk, upstream)


def _generation_dispatcher(upstream: Callable) -> Callable:
    """``GenerationMixin.generate`` with a DeltaLog cache's checks around it: its arguments are read through
    ``upstream``'s own signature (a positional ``generation_config`` counts as a keyword one), and every call is handed
    to ``upstream`` exactly as it came."""
    signature = inspect.signature(upstream)
    var_keyword = next((p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD), None)

    @functools.wraps(upstream)
    def generate(self, *args, **kwargs):
        from hf_deltalog.cache import DeltaLogCache, note_stopped_generate

        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return upstream(self, *args, **kwargs)  # upstream's own error for a call it does not accept
        named = bound.arguments
        extra = dict(named.get(var_keyword) or {}) if var_keyword else {}
        cache = extra.get("cache", extra.get("past_key_values", extra.get("cache_params")))
        _refuse_a_cache_from_before_a_reload(cache)
        # FLA models get an hf_deltalog.fla_cache.FLADeltaLogCache (an FLA Cache) that carries the same checks.
        if not isinstance(cache, DeltaLogCache) and not getattr(type(cache), "_deltalog_generate_checks", False):
            return upstream(self, *args, **kwargs)
        cache._check_model(self)
        passed = named.get("generation_config")
        resolved = _resolved_generation_config(self, passed, extra)

        def option(name: str, default: Any) -> Any:  # as generate resolves it
            if resolved is not None:
                value = getattr(resolved, name, None)
                return default if value is None else value
            value = extra.get(name)  # fallback: the call's kwarg, else the passed or the model's config
            config = passed or self.generation_config
            return getattr(config, name, default) if value is None else value

        embeds = extra.get("inputs_embeds")
        # a decoder-only generate given inputs_embeds sets use_cache=True itself (it could not tell the first step
        # from the next ones otherwise)
        forced_cache = embeds is not None and not getattr(self.config, "is_encoder_decoder", False)
        use_cache = True if forced_cache else option("use_cache", True)
        if use_cache is False:
            # transformers then re-feeds the whole sequence at every step, into the cache it was given: the
            # recurrent state would consume every token again (so would a DynamicCache's)
            raise ValueError(
                "generate got a DeltaLogCache with use_cache=False: transformers would feed the whole sequence "
                "into the cache again at every step and decode from a wrong state. Pass use_cache=True (the "
                "default) with the cache, or no cache with use_cache=False"
            )
        inputs = named.get("inputs")
        ids = inputs if inputs is not None else extra.get("input_ids")
        attention_mask = extra.get("attention_mask")
        num_beams = int(option("num_beams", 1) or 1)
        expand = max(num_beams, int(option("num_return_sequences", 1) or 1))
        held = int(cache._before_generate(ids, attention_mask, expand=expand))
        assistant = named.get("assistant_model", extra.get("assistant_model"))  # a parameter of generate
        assisted = _assisted(resolved, assistant, option)
        if held and isinstance(ids, torch.Tensor) and ids.dim() == 2 and assisted:
            _check_assisted_continuation(held, ids, attention_mask)
        check_room = getattr(cache, "_check_room", None)  # static DeltaLogCaches: enough attention slots?
        if check_room is not None:
            fed = embeds if isinstance(embeds, torch.Tensor) and embeds.dim() >= 2 else ids
            fed_tokens = None if fed is None else int(fed.shape[1])
            ids_tokens = int(ids.shape[1]) if isinstance(ids, torch.Tensor) and ids.dim() >= 2 else 0
            if ids is None and embeds is None:  # generate starts from one BOS token per row
                fed_tokens = ids_tokens = 1
            new_tokens = _new_tokens(self, option, passed, extra, fed_tokens, ids_tokens)
            # transformers 5.25's prompt lookup does not cap its drafts at max_length: the last forward can feed up to
            # prompt_lookup_num_tokens - 1 tokens past the last one generate keeps (an assistant model's are capped)
            lookup = option("prompt_lookup_num_tokens", None) if assisted and assistant is None else None
            past_the_end = max(int(lookup) - 1, 0) if isinstance(lookup, int) and not isinstance(lookup, bool) else 0
            check_room(held, fed_tokens, attention_mask, new_tokens, past_the_end)
        run = getattr(cache, "_generate_through", None)  # FLA caches adapt the call (see hf_deltalog.fla_cache)
        # While the call runs: a copy of the cache taken now (in a stopping criterion, a streamer) is marked as such
        # (hf_deltalog.cache.copy_state); the cache itself never reads the mark
        # (cleared only once the record of consumed tokens is updated: a copy taken before that is marked too)
        cache._generate_running = True
        try:
            try:
                out = run(upstream, self, *args, **kwargs) if run else upstream(self, *args, **kwargs)
            except BaseException as error:  # an interrupt, or an error raised by a streamer or a stopping criterion
                note_stopped_generate(cache, error, held)
                raise
            cache._after_generate(out, beams=num_beams > 1)
        finally:
            cache._generate_running = False
        return out

    return _dispatcher_of(generate, upstream)


def _assisted(resolved: Any, assistant: Any, option: Callable[[str, Any], Any]) -> bool:
    """Whether a ``generate`` call runs assisted generation (an assistant model, prompt lookup, early-exit drafts or
    multi-token prediction), as transformers >= 5.25 decides it (``GenerationConfig.get_generation_mode``). False on
    transformers versions without kept recurrent states (5.24 refuses assisted generation for these models itself)."""
    from transformers.cache_utils import Cache

    if not hasattr(Cache, "get_recurrent_states_to_keep"):
        return False
    get_mode = getattr(resolved, "get_generation_mode", None)
    if get_mode is not None:
        try:
            mode = get_mode(assistant)
        except Exception:  # noqa: BLE001 - an invalid combination: generate raises it itself
            return False
        return getattr(mode, "value", mode) == "assisted_generation"
    return assistant is not None or any(
        option(name, None) not in (None, False) for name in ("prompt_lookup_num_tokens", "assistant_early_exit", "use_mtp"))


def _check_assisted_continuation(held: int, ids: torch.Tensor, attention_mask: Any) -> None:
    """Raise ValueError when assisted generation would continue a cache holding ``held`` tokens from the whole
    conversation ``ids`` ``[B, T]``: transformers 5.25's assisted decoding does not cut the cached prefix off the ids
    on its first forward, so every cached token would be fed into the cache a second time (its default caches are
    corrupted the same way, with no error). The new-tokens form (ids ``[B, T_new]``, ``attention_mask``
    ``[B, held + T_new]``) feeds only the new tokens and is taken."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 \
            and attention_mask.shape[1] == held + ids.shape[1]:
        return
    raise ValueError(
        f"assisted generation (assistant_model, prompt_lookup_num_tokens, ...) cannot continue this cache from the "
        f"whole conversation: it holds {held} tokens, and transformers' assisted decoding feeds every id it is given "
        f"into the cache on its first step (it does not cut the cached prefix off), so those {held} tokens would be "
        "consumed twice (transformers' own caches give wrong tokens the same way, with no error). Pass only the new "
        f"tokens as input_ids [B, T_new] with an attention_mask over the {held} cached and the new ones "
        f"[B, {held} + T_new], or call cache.reset() and generate from the whole conversation")


def _refuse_a_cache_from_before_a_reload(cache: Any) -> None:
    """Raise RuntimeError when ``cache`` is an instance of one of hf_deltalog's classes as it was before its module was
    reloaded (``importlib.reload``, IPython's autoreload): the reloaded code does not know its objects."""
    cls = type(cache)
    if not cls.__module__.startswith("hf_deltalog."):
        return
    module = sys.modules.get(cls.__module__)
    if module is not None and getattr(module, cls.__name__, cls) is not cls:
        raise RuntimeError(f"this {cls.__name__} was built before {cls.__module__} was reloaded (importlib.reload, "
                           "IPython's autoreload): the reloaded code does not know its objects; build a new cache")


def _new_tokens(model: Any, option: Callable[[str, Any], Any], passed: Any, extra: dict[str, Any],
                fed_tokens: int | None, ids_tokens: int) -> int | None:
    """How many tokens this ``generate`` call may generate, by transformers' own rule
    (``GenerationMixin._prepare_generated_length``): ``max_new_tokens`` when set; else a ``max_length`` that someone
    set counts the prompt fed to the model (ids, or ``inputs_embeds``); else the default ``max_length`` (20) new
    tokens, capped so that ids and new tokens stay within the config's ``max_position_embeddings``. None when the call
    feeds nothing we can count."""
    max_new = option("max_new_tokens", None)
    if max_new is not None:
        return int(max_new)
    if fed_tokens is None:
        return None
    max_length = option("max_length", None)
    if max_length is None:
        return None
    if extra.get("max_length") is not None or getattr(passed, "max_length", None) is not None \
            or getattr(model.generation_config, "max_length", None) is not None:
        return int(max_length) - fed_tokens
    total = int(max_length) + ids_tokens  # nobody set a length: generate makes max_length new tokens, capped
    cap = getattr(model.config, "max_position_embeddings", None)
    if isinstance(cap, int) and not isinstance(cap, bool):
        total = min(total, cap)
    return total - ids_tokens


def _resolved_generation_config(model: Any, passed: Any, extra: dict[str, Any]) -> Any:
    """The generation config ``generate`` will run with: ``passed`` (the call's ``generation_config``, or None),
    completed with the model's own ``generation_config`` and then overridden by the call's other keyword arguments
    ``extra``, through transformers' own ``_prepare_generation_config`` (a passed config leaves unset fields to the
    model's defaults, e.g. a model default of ``num_beams=4``). None when that method is missing or fails
    (``generate`` itself then reports the problem)."""
    prepare = getattr(model, "_prepare_generation_config", None)
    if prepare is None:
        return None
    try:
        resolved, _ = prepare(passed, **extra)
    except Exception:  # noqa: BLE001 - e.g. a legacy config; generate raises it itself
        return None
    return resolved


def _patch_generation() -> None:
    """Wrap ``GenerationMixin.generate`` so a DeltaLogCache can check that a generate call continues what it holds."""
    from transformers.generation.utils import GenerationMixin

    if "generate" in _GENERATION_ORIGINAL and _ours(GenerationMixin.__dict__.get("generate")):
        return
    upstream = _upstream_of(GenerationMixin.__dict__.get("generate"))
    if upstream is None:
        import transformers

        raise RuntimeError(
            f"GenerationMixin.generate is missing in transformers {transformers.__version__}; "
            "use a transformers version in hf_deltalog's tested range."
        )
    _GENERATION_ORIGINAL["generate"] = upstream
    GenerationMixin.generate = _generation_dispatcher(upstream)


def install_generate_checks() -> None:
    """Wrap ``GenerationMixin.generate`` with a DeltaLog cache's checks (idempotent; calls with any other cache, or
    none, are handed to upstream unchanged). Called when ``hf_deltalog.cache`` is imported, as well as by
    :func:`patch`: in ``model.generate(..., cache=DeltaLogCache(model))`` Python looks ``model.generate`` up before
    it builds the cache, so binding it only when a cache is built would leave that first call unchecked."""
    with _LOCK:
        _patch_generation()


# Whether unpatch() was called with no patch() since: unpickling (or deep-copying) a cache binds the recurrences only
# when nobody unbound them deliberately (patch_after_unpickling).
_UNPATCHED = globals().get("_UNPATCHED", {"by_user": False})


def patch_after_unpickling() -> None:
    """What a cache restored by ``pickle`` / ``torch.load`` / ``copy.deepcopy`` calls: :func:`patch`, unless
    :func:`unpatch` was called since the last :func:`patch` (a deliberate unbinding stays, as for a cache built before
    it); after ``unpatch_fla()`` alone, the transformers families only."""
    from hf_deltalog.patches import fla

    if not _UNPATCHED["by_user"]:
        patch(list(FAMILIES) if fla._UNPATCHED["by_user"] else None)


def patch(model_types: str | list[str] | None = None) -> list[str]:
    """Bind the DeltaLog decode path into the given families (default: every supported family).

    Idempotent: a family already patched is left as it is. Models used with any other cache keep running the
    upstream functions with unchanged arguments.

    Args:
        model_types: text-config ``model_type`` names (or their wrapper names, e.g. ``"qwen3_5"``), or FLA model types
            (``"rwkv6"``, ``"gated_deltanet"``, ``"kda"``: :func:`hf_deltalog.patches.fla.patch_fla`); None for every
            transformers family, and every FLA family too when FLA is already imported.

    Returns:
        The transformers model types that are patched after the call (FLA's: ``patches.fla.is_fla_patched``).

    Raises:
        TypeError: ``model_types`` is not None, a string or a list / tuple of strings. ValueError: an unknown model
        type. ImportError / RuntimeError: the installed transformers lacks a module or a function the binding needs
        (the message names the transformers version).
    """
    from hf_deltalog.patches.fla import FLA_FAMILIES, patch_fla

    if model_types is None:
        specs = list(FAMILIES.values())
        fla_names = list(FLA_FAMILIES) if sys.modules.get("fla") is not None else []
    else:
        names = check_model_type_names(model_types)
        fla_names = [name for name in names if name in FLA_FAMILIES]
        specs = [_resolve(name) for name in names if name not in FLA_FAMILIES]
    if fla_names:
        patch_fla(fla_names)
    with _LOCK:
        for spec in specs:
            if spec.model_type in _ORIGINALS and _bound(spec):
                continue
            # Not patched, or the module's globals no longer hold the dispatchers (the module was reloaded, or
            # something rebound them): bind what the module holds now.
            module = _import_family(spec)
            originals = {name: _upstream_of(getattr(module, name)) for name in (spec.recurrent, spec.chunk)}
            setattr(module, spec.recurrent, _recurrent_dispatcher(originals[spec.recurrent], spec))
            setattr(module, spec.chunk, _chunk_dispatcher(originals[spec.chunk], spec))
            _ORIGINALS[spec.model_type] = originals
        _patch_generation()
        _UNPATCHED["by_user"] = False
        if model_types is None:  # every family, FLA's too once FLA is imported
            from hf_deltalog.patches import fla

            fla._UNPATCHED["by_user"] = False
        return patched_families()


def unpatch() -> None:
    """Restore every upstream function that :func:`patch` replaced. Idempotent.

    A :class:`~hf_deltalog.DeltaLogCache` built afterwards patches again; one built before cannot be used for decoding
    until then: its state reaches the upstream recurrence, which raises a RuntimeError saying so, and that forward,
    stopped part-way, leaves the cache refusing further use until ``cache.reset()`` (after :func:`patch`).
    ``generate``'s checks come back with :func:`patch` too: call it (or build the cache in a statement of its own)
    before ``model.generate(..., cache=DeltaLogCache(model))``, whose ``model.generate`` is looked up before the cache
    is built.
    An FLA model's ``generate`` with such a cache fails before it decodes, with transformers' ``ValueError`` naming
    ``cache`` as an unused model kwarg: the ``generate`` wrapper handed the cache to FLA's models.
    """
    from hf_deltalog.patches.fla import unpatch_fla

    unpatch_fla()
    with _LOCK:
        _UNPATCHED["by_user"] = True
        for model_type, originals in list(_ORIGINALS.items()):
            module = importlib.import_module(FAMILIES[model_type].module)
            for name, fn in originals.items():
                if _ours(getattr(module, name, None)):  # what was bound after patch() (a reload, a rebinding) stays
                    setattr(module, name, fn)
            del _ORIGINALS[model_type]
        upstream = _GENERATION_ORIGINAL.pop("generate", None)
        if upstream is not None:
            from transformers.generation.utils import GenerationMixin

            if _ours(GenerationMixin.__dict__.get("generate")):
                GenerationMixin.generate = upstream


def is_patched(model_type: str) -> bool:
    """Whether the family of ``model_type`` (text or wrapper name, or FLA model type) currently runs the DeltaLog
    binding.

    Raises:
        TypeError: ``model_type`` is not a str. ValueError: a model type the project does not serve.
    """
    from hf_deltalog.patches.fla import FLA_FAMILIES, is_fla_patched

    if not isinstance(model_type, str):
        raise TypeError(f"model_type must be a model type name (a str); got {_shown(model_type)}")
    if model_type in FLA_FAMILIES:
        return is_fla_patched(model_type)
    spec = _resolve(model_type)
    return spec.model_type in _ORIGINALS and _bound(spec)


def patched_families() -> list[str]:
    """The text-config model types currently patched."""
    return sorted(model_type for model_type in _ORIGINALS if _bound(FAMILIES[model_type]))


# Every dispatcher made here and in patches/fla.py, by identity: a third party's ``functools.wraps`` wrapper of one
# copies its ``__deltalog_upstream__`` attribute but is not ours (unpatch keeps it, patch wraps it).
_DISPATCHERS: weakref.WeakSet = globals().get("_DISPATCHERS") or weakref.WeakSet()


def _dispatcher_of(fn: Callable, upstream: Callable) -> Callable:
    """Mark ``fn`` as a dispatcher wrapping ``upstream`` (``fn.__deltalog_upstream__``) and return it."""
    fn.__deltalog_upstream__ = upstream
    _DISPATCHERS.add(fn)
    return fn


def _ours(fn: Any) -> bool:
    """Whether ``fn`` is one of the dispatchers :func:`patch` (or :func:`~hf_deltalog.patches.fla.patch_fla`) binds."""
    try:
        return fn in _DISPATCHERS
    except TypeError:  # not weak-referenceable: not a function of ours
        return False


def _upstream_of(fn: Any) -> Any:
    """The upstream function behind ``fn`` (``fn`` itself unless it is one of our dispatchers)."""
    while _ours(fn):
        fn = fn.__deltalog_upstream__
    return fn


def _bound(spec: FamilySpec) -> bool:
    """Whether the family's module (if imported) holds the dispatchers in both globals."""
    module = sys.modules.get(spec.module)
    return module is not None and all(_ours(getattr(module, name, None)) for name in (spec.recurrent, spec.chunk))


def runs_fla_kernels(model_type: str, device_type: str = "cpu") -> bool:
    """Whether the family's recurrences run flash-linear-attention's Triton kernels for inputs on ``device_type``
    devices: transformers binds them to FLA's functions when FLA imports as the modeling module is imported
    (``use_kernel_func_from_hub_with_fallback``). transformers 5.24 then calls FLA for inputs on any device (on a CPU
    they fail); 5.25 calls it only for the device types it lists for FLA (CUDA and a few accelerators, not the CPU) and
    its PyTorch path for the others. Read from the upstream functions' closures (5.25 wraps them in the ``kernels``
    package's function modules: their ``forward``'s closure); False when the module is not imported."""
    spec = _resolve(model_type)
    module = sys.modules.get(spec.module)
    return any(_closure_runs_fla(_upstream_of(getattr(module, name, None)), device_type, depth=4)
               for name in (spec.recurrent, spec.chunk))


def _closure_runs_fla(fn: Any, device_type: str, depth: int) -> bool:
    """Whether ``fn`` (a function, or a function module) closes over an FLA function and, when it also closes over a
    ``supported_devices`` tuple (transformers 5.25), lists ``device_type`` there; looks ``depth`` closures deep."""
    if isinstance(fn, torch.nn.Module):
        fn = getattr(type(fn).forward, "__func__", type(fn).forward)
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if depth <= 0 or code is None or not closure:
        return False
    cells: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, closure):
        try:
            cells[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    devices = cells.get("supported_devices")
    if isinstance(devices, tuple) and device_type not in devices:
        return False
    for value in cells.values():
        if callable(value) and str(getattr(value, "__module__", "")).startswith("fla."):
            return True
    return any(_closure_runs_fla(value, device_type, depth - 1) for value in cells.values()
               if callable(value) and value is not fn)
