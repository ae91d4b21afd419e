"""Kimi Delta Attention (KDA) decode: pure-PyTorch references (eager dense and DeltaLog). The Triton kernel and the
cache integration of the KDA families are not built yet."""

from hf_deltalog.kernels.kda.naive import (
    kda_l2norm,
    naive_deltalog_kda_decode,
    naive_deltalog_kda_materialize,
    naive_recurrent_kda,
)

__all__ = ["kda_l2norm", "naive_deltalog_kda_decode", "naive_deltalog_kda_materialize", "naive_recurrent_kda"]
