"""RWKV6 decode: pure-PyTorch references (eager dense and DeltaLog, ``naive``) and the Triton DeltaLog kernels
(``fused_deltalog``, imported on use: it needs triton). The integration with FLA's model classes is not built yet."""

from hf_deltalog.kernels.rwkv6.naive import (
    naive_deltalog_rwkv6_decode,
    naive_deltalog_rwkv6_materialize,
    naive_recurrent_rwkv6,
)

__all__ = ["naive_deltalog_rwkv6_decode", "naive_deltalog_rwkv6_materialize", "naive_recurrent_rwkv6"]
