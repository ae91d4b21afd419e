"""pytest setup of the FLA suite (flash-linear-attention's own model classes), run in its own pytest process.

* On a machine without a GPU, Triton runs under its interpreter: ``TRITON_INTERPRET=1`` must be set before triton is
  first imported.
* FLA's models call ``@triton.autotune``d kernels; under the interpreter there is no driver to time them (triton 3.9
  raises "0 active drivers" from ``Autotuner._bench``). Every autotuner is collapsed to one config by wrapping
  ``Autotuner.prune_configs``: the config with the largest block sizes, i.e. the fewest interpreted programs (all of an
  autotuner's configs compute the same result; they differ in speed only). On a GPU nothing is changed.
* flash-linear-attention is required here: without it the suite fails at collection instead of skipping, so a broken
  install cannot pass as green.
"""

from __future__ import annotations

import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import fla  # noqa: F401
    import triton  # noqa: F401
except ImportError as err:  # pragma: no cover - environment error, reported loudly
    raise ImportError(
        f"the FLA suite needs flash-linear-attention and triton ({err}); install them with "
        "pip install -e '.[dev,fla]' (see README, Tests)"
    ) from err

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    from triton.runtime.autotuner import Autotuner

    _prune = Autotuner.prune_configs

    def _block_volume(config) -> int:
        return math.prod(v for v in config.kwargs.values() if isinstance(v, int) and not isinstance(v, bool) and v > 0)

    def _one_config(self, kwargs):
        return [max(_prune(self, kwargs), key=_block_volume)]

    Autotuner.prune_configs = _one_config
