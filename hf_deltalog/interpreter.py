"""Running FLA's autotuned Triton kernels under Triton's CPU interpreter (``TRITON_INTERPRET=1``): tests and CPU
rehearsals only. On a GPU (``TRITON_INTERPRET`` unset or ``0``) nothing here changes anything.

Under the interpreter there is no driver to time an autotuner's configs (triton raises "0 active drivers" from
``Autotuner._bench``), so :func:`collapse_autotuners` makes every ``@triton.autotune`` keep one config: the one with the
largest block sizes, i.e. the fewest interpreted programs. All configs of an autotuner compute the same result; they
differ in speed only. ``TRITON_INTERPRET=1`` itself must be set before triton is first imported (the environment of
the process, or ``os.environ`` before any import of triton, torch's inductor, FLA or hf_deltalog's kernels).
"""

from __future__ import annotations

import importlib.util
import math
import sys

import torch

from hf_deltalog.kernels._op import interpreting

__all__ = ["collapse_autotuners", "hide_fla", "hide_fla_on_cpu", "interpreting"]

_PATCHED = False


def _block_volume(config) -> int:
    return math.prod(v for v in config.kwargs.values() if isinstance(v, int) and not isinstance(v, bool) and v > 0)


def collapse_autotuners() -> bool:
    """Under ``TRITON_INTERPRET=1``: wrap ``triton.runtime.autotuner.Autotuner.prune_configs`` so that every autotuner
    runs its largest-block config only (idempotent). Returns whether the interpreter is on (and the wrap applied);
    without the interpreter it returns False and changes nothing."""
    global _PATCHED
    if not interpreting():
        return False
    if not _PATCHED:
        from triton.runtime.autotuner import Autotuner

        prune = Autotuner.prune_configs

        def one_config(self, kwargs):
            return [max(prune(self, kwargs), key=_block_volume)]

        Autotuner.prune_configs = one_config
        _PATCHED = True
    return True


def fused_recurrent_under_interpreter(model) -> int:
    """Under ``TRITON_INTERPRET=1``: make every FLA layer of ``model`` that has a ``mode`` of ``"chunk"`` (FLA's
    ``RWKV6Attention``, ...) run its ``"fused_recurrent"`` kernel for every length, and return how many layers were
    switched; without the interpreter return 0 and change nothing.

    Why: FLA's chunked kernels (``fla.ops.common.chunk_h``) call ``.to`` on their ``range`` loop index, which Triton's
    interpreter hands out as a Python int, so they fail there ("'int' object has no attribute 'to'"); FLA's layers pick
    the chunked kernel for inputs longer than 64 tokens. Both kernels compute the same recurrence (FLA's own two
    implementations of it); on a GPU FLA's choice is left as it is.
    """
    if not interpreting():
        return 0
    switched = 0
    for module in model.modules():
        if type(module).__module__.startswith("fla.") and getattr(module, "mode", None) == "chunk":
            module.mode = "fused_recurrent"
            switched += 1
    return switched


def hide_fla() -> None:
    """Make ``import fla`` fail in this process, so that transformers' GDN / KDA layers take their PyTorch paths (what
    :func:`hide_fla_on_cpu` does on a CPU). Unconditional. Call it before transformers imports the model's modeling
    module."""
    sys.modules["fla"] = None


def hide_fla_on_cpu(device: str | torch.device) -> bool:
    """On a CPU run: make ``import fla`` fail in this process, so that transformers' GDN / KDA layers take their
    PyTorch paths, and return True; otherwise change nothing and return False.

    Why: with flash-linear-attention and triton both installed (the ``fla`` extra), transformers binds its GDN and KDA
    layers to FLA's Triton kernels when their modeling modules are imported, and those kernels fail on a machine
    without a GPU ("0 active drivers"), and under ``TRITON_INTERPRET=1`` too (FLA's chunked prefill kernels do not run
    in Triton's interpreter; hf_deltalog's own Triton kernels do, so ``backend='triton'`` still runs there).
    ``tests/conftest.py`` hides FLA the same way. Call it before the model is built; FLA's own model classes (RWKV6,
    ...) then cannot load in this process (run them in another one, with FLA's PyTorch references or under the
    interpreter). Nothing is hidden when FLA is not installed, or on a GPU.
    """
    if torch.device(device).type != "cpu":
        return False
    if sys.modules.get("fla", False) is None:
        return True  # hidden already
    if "fla" not in sys.modules and importlib.util.find_spec("fla") is None:
        return False  # not installed: nothing to hide
    hide_fla()
    return True
