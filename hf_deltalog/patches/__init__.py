"""Bindings that route transformers' linear-attention decode step to DeltaLog.

transformers' GDN and KDA layers look their recurrence up as a module global at call time
(``torch_recurrent_gated_delta_rule`` / ``torch_chunk_gated_delta_rule``, or ``recurrent_kimi_delta_attention`` /
``chunk_kimi_delta_attention``, in each ``modeling_<family>.py``), and hand the kernel whatever
``cache.get_recurrent_state`` returned as ``initial_state``. :func:`patch` re-binds those two globals
to dispatchers: when ``initial_state`` is a :class:`~hf_deltalog.cache.DeltaLogState` (the handle a
:class:`~hf_deltalog.DeltaLogCache` returns) the one-token step runs on DeltaLog and multi-token calls run upstream's
own function on the materialised state; with any other cache (or none) the upstream function runs untouched, with
the same arguments. Projections, conv, gating, padding masks and norms all stay upstream.

:func:`patch` is idempotent and applied automatically when a ``DeltaLogCache`` is built; :func:`unpatch` restores the
upstream functions. Both check that the names they bind still exist and fail with the transformers version otherwise.
"""

from hf_deltalog.patches.registry import (
    FAMILIES,
    FamilySpec,
    is_patched,
    patch,
    patched_families,
    supported_model_types,
    unpatch,
)

__all__ = [
    "FAMILIES",
    "FamilySpec",
    "is_patched",
    "patch",
    "patched_families",
    "supported_model_types",
    "unpatch",
]
