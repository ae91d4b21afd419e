"""Kimi Delta Attention (KDA) decode: pure-PyTorch references (eager dense and DeltaLog, ``naive``) and the Triton
DeltaLog kernels (``fused_deltalog``, imported on use: it needs triton)."""

from hf_deltalog.kernels.kda.naive import (
    kda_l2norm,
    naive_deltalog_kda_decode,
    naive_deltalog_kda_materialize,
    naive_recurrent_kda,
)

__all__ = ["kda_l2norm", "naive_deltalog_kda_decode", "naive_deltalog_kda_materialize", "naive_recurrent_kda"]
