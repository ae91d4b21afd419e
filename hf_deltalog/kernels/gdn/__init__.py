"""Gated DeltaNet (GDN) decode: pure-PyTorch references (``naive``)."""

from hf_deltalog.kernels.gdn.naive import (
    l2norm,
    naive_deltalog_gdn_decode,
    naive_deltalog_gdn_materialize,
    naive_recurrent_gated_delta_rule,
)

__all__ = [
    "l2norm",
    "naive_deltalog_gdn_decode",
    "naive_deltalog_gdn_materialize",
    "naive_recurrent_gated_delta_rule",
]
