"""hf_deltalog: DeltaLog caches and decode kernels for recurrent linear-attention models in transformers.

    from hf_deltalog import DeltaLogCache
    out = model.generate(**inputs, past_key_values=DeltaLogCache(model), max_new_tokens=256)
"""

from hf_deltalog.cache import DeltaLogCache, DeltaLogLayer, DeltaLogState
from hf_deltalog.patches import is_patched, patch, supported_model_types, unpatch

__version__ = "0.1.0"

__all__ = [
    "DeltaLogCache",
    "DeltaLogLayer",
    "DeltaLogState",
    "__version__",
    "is_patched",
    "patch",
    "supported_model_types",
    "unpatch",
]
