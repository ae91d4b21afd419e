"""pytest setup of the FLA suite (flash-linear-attention's own model classes), run in its own pytest process.

* On a machine without a GPU, Triton runs under its interpreter: ``TRITON_INTERPRET=1`` must be set before triton is
  first imported.
* FLA's models call ``@triton.autotune``d kernels; under the interpreter there is no driver to time them (triton 3.9
  raises "0 active drivers" from ``Autotuner._bench``). ``hf_deltalog.interpreter.collapse_autotuners`` keeps one
  config per autotuner there (the largest blocks; all configs compute the same result). On a GPU nothing is changed.
* flash-linear-attention is required here: without it the suite fails at collection instead of skipping, so a broken
  install cannot pass as green.
"""

from __future__ import annotations

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

from hf_deltalog.interpreter import collapse_autotuners  # noqa: E402 - after TRITON_INTERPRET is set

collapse_autotuners()  # a no-op unless TRITON_INTERPRET=1
