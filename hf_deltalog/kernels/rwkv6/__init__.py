"""RWKV6 decode: pure-PyTorch references (eager dense and DeltaLog). The Triton kernel and the integration with
FLA's model classes are not built yet."""

from hf_deltalog.kernels.rwkv6.naive import (
    naive_deltalog_rwkv6_decode,
    naive_deltalog_rwkv6_materialize,
    naive_recurrent_rwkv6,
)

__all__ = ["naive_deltalog_rwkv6_decode", "naive_deltalog_rwkv6_materialize", "naive_recurrent_rwkv6"]
