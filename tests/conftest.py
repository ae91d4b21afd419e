"""pytest setup: on a machine without a GPU, Triton kernels run under the interpreter.

TRITON_INTERPRET must be set before triton decorates any kernel, i.e. before hf_deltalog is first imported.

This suite tests transformers' own GDN/KDA models, whose reference is transformers' PyTorch recurrence. With
flash-linear-attention (FLA) and triton installed, transformers binds those layers to FLA's GPU kernels when their
modeling modules are imported, and those kernels fail without a GPU. So this process hides FLA from transformers (an
explicit backend choice: the same as an environment without FLA). FLA's own models are tested by tests_fla/, in a
separate pytest process (README, Tests; .ci/run).
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if "fla" not in sys.modules:
    sys.modules["fla"] = None  # `import fla` raises ImportError in this process

# The same choice for the Python processes a test starts (scripts, notebook kernels): code to run first there.
HIDE_FLA = 'import sys; sys.modules.setdefault("fla", None)  # tests/conftest.py: transformers\' PyTorch path'


def python_script_command(script, *args) -> list:
    """``[python, -c, ...]`` that runs ``script`` as ``__main__`` with ``args``, with FLA hidden as in this process."""
    code = f"{HIDE_FLA}\nimport runpy; sys.argv = {[str(script), *map(str, args)]!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    return [sys.executable, "-c", code]
