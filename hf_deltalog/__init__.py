"""hf_deltalog: DeltaLog caches and decode kernels for recurrent linear-attention models in transformers.

    from hf_deltalog import DeltaLogCache
    out = model.generate(**inputs, cache=DeltaLogCache(model), max_new_tokens=256)

The cache and the transformers binding are imported on first use, so ``hf_deltalog.kernels`` works without
transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "DeltaLogCache": "hf_deltalog.cache",
    "DeltaLogLayer": "hf_deltalog.cache",
    "DeltaLogState": "hf_deltalog.cache",
    "is_patched": "hf_deltalog.patches",
    "patch": "hf_deltalog.patches",
    "supported_model_types": "hf_deltalog.patches",
    "unpatch": "hf_deltalog.patches",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hf_deltalog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
