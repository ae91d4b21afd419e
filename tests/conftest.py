"""pytest setup: on a machine without a GPU, Triton kernels run under the interpreter.

TRITON_INTERPRET must be set before triton decorates any kernel, i.e. before hf_deltalog is first imported.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
