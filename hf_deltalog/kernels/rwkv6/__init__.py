"""RWKV6 decode: pure-PyTorch references (eager dense and DeltaLog, ``naive``) and the Triton DeltaLog kernels
(``fused_deltalog``, imported on use: it needs triton). FLA's ``RWKV6ForCausalLM`` decodes through them via
:mod:`hf_deltalog.fla_cache`."""

from hf_deltalog.kernels.rwkv6.naive import (
    naive_deltalog_rwkv6_decode,
    naive_deltalog_rwkv6_materialize,
    naive_recurrent_rwkv6,
)

__all__ = ["naive_deltalog_rwkv6_decode", "naive_deltalog_rwkv6_materialize", "naive_recurrent_rwkv6"]
