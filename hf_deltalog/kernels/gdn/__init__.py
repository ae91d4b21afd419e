"""Gated DeltaNet (GDN) decode: pure-PyTorch references (``naive``) and the Triton DeltaLog kernel.

The Triton kernel is optional: ``HAS_TRITON`` says whether ``triton`` imported, and ``fused_deltalog_gdn_decode`` is
``None`` when it did not (``TRITON_IMPORT_ERROR`` keeps the reason). The references always import.
"""

from hf_deltalog.kernels.gdn.naive import (
    l2norm,
    naive_deltalog_gdn_decode,
    naive_deltalog_gdn_materialize,
    naive_recurrent_gated_delta_rule,
)

try:
    import triton  # noqa: F401
except ImportError as _err:  # no triton on this machine: keep the pure-PyTorch references usable
    HAS_TRITON = False
    TRITON_IMPORT_ERROR: ImportError | None = _err
    fused_deltalog_gdn_decode = deltalog_gdn_workspace = None
else:
    HAS_TRITON = True
    TRITON_IMPORT_ERROR = None
    from hf_deltalog.kernels.gdn.fused_deltalog import deltalog_gdn_workspace, fused_deltalog_gdn_decode

__all__ = [
    "HAS_TRITON",
    "TRITON_IMPORT_ERROR",
    "deltalog_gdn_workspace",
    "fused_deltalog_gdn_decode",
    "l2norm",
    "naive_deltalog_gdn_decode",
    "naive_deltalog_gdn_materialize",
    "naive_recurrent_gated_delta_rule",
]
