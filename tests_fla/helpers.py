"""Tiny FLA models (K ≠ V; HV ≠ Hk for GatedDeltaNet and KDA), FLA's own cached generate as the reference, helpers."""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch
from fla.models import (
    GatedDeltaNetConfig,
    GatedDeltaNetForCausalLM,
    KDAConfig,
    KDAForCausalLM,
    RWKV6Config,
    RWKV6ForCausalLM,
)
from fla.models.utils import Cache

VOCAB = 96
PAD, BOS, EOS = 0, 1, 2
FAMILIES = ["rwkv6", "gated_deltanet", "kda"]
# The fused norm / SwiGLU kernels are off (torch modules instead): fewer interpreted kernels per step, same cache path.
COMMON = dict(hidden_size=64, vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, hidden_ratio=2,
              fuse_cross_entropy=False, fuse_norm=False, fuse_swiglu=False)
# GDN/KDA: Hk = 1 key head of K = 8, HV = 2 value heads of V = 16 (GVA); RWKV6: H = 2 heads, K = 8, V = 16.
DELTA = dict(head_dim=8, num_heads=1, num_v_heads=2, expand_v=2.0, conv_size=4)
DIMS = {"rwkv6": (2, 2, 8, 16), "gated_deltanet": (1, 2, 8, 16), "kda": (1, 2, 8, 16)}


def family_config(name: str, layers: int = 2):
    common = dict(COMMON, num_hidden_layers=layers)
    if name == "rwkv6":
        return RWKV6Config(**common, num_heads=2, expand_k=0.25, expand_v=0.5, proj_low_rank_dim=8,
                           gate_low_rank_dim=8)
    if name == "gated_deltanet":
        return GatedDeltaNetConfig(**common, **DELTA)
    if name == "kda":
        return KDAConfig(**common, **DELTA)
    raise KeyError(name)


_CLASSES = {"rwkv6": RWKV6ForCausalLM, "gated_deltanet": GatedDeltaNetForCausalLM, "kda": KDAForCausalLM}


@functools.lru_cache(maxsize=None)
def tiny_model(name: str, layers: int = 2, seed: int = 0):
    """A cached tiny random FLA model (eval mode, fp32; ``layers`` recurrent layers). Do not modify it in a test."""
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RWKV6's "potentially buggy" notice
        model = _CLASSES[name](family_config(name, layers)).eval()
    with torch.no_grad():  # livelier decays than FLA's init (A ~ U(0, 16)) so that deferred updates matter
        for module in model.modules():
            if hasattr(module, "A_log"):
                module.A_log.copy_(torch.empty_like(module.A_log).uniform_(-3.0, 0.5))
            if hasattr(module, "bonus"):  # RWKV6's u: zero at init; random so the bonus term is exercised
                module.bonus.normal_(0.0, 0.5)
    return model


def prompt_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


@contextlib.contextmanager
def fla_cache_reaches_model(model):
    """Make ``generate`` hand a user's FLA cache to ``model`` (test-side, independent of hf_deltalog's code).

    transformers 5.24 passes the cache as ``cache=``; FLA 0.6.0's models read ``past_key_values`` and reject (and
    otherwise drop) ``cache``. Within this context the cache is renamed for the model and the kwarg check skips it.
    """
    cls = type(model)

    def validate(model_kwargs):
        cls._validate_model_kwargs(model, {k: v for k, v in model_kwargs.items() if k != "cache"})

    @functools.wraps(model.prepare_inputs_for_generation)  # generate's kwarg check reads this signature
    def prepare(*args, **kwargs):
        inputs = cls.prepare_inputs_for_generation(model, *args, **kwargs)
        if inputs.get("cache") is not None:
            inputs["past_key_values"] = inputs.pop("cache")
        return inputs

    model._validate_model_kwargs, model.prepare_inputs_for_generation = validate, prepare
    try:
        yield
    finally:
        del model._validate_model_kwargs, model.prepare_inputs_for_generation


def generate_ref(model, ids, **kwargs):
    """FLA's own cached decoding: ``generate`` with FLA's ``Cache`` and FLA's kernels (the reference)."""
    cache = Cache()
    with torch.no_grad(), fla_cache_reaches_model(model):
        out = model.generate(ids, past_key_values=cache, **kwargs)
    return out, cache


def generate_ours(model, ids, cache, **kwargs):
    with torch.no_grad():
        return model.generate(ids, past_key_values=cache, **kwargs)


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()
    return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item()


def max_logit_diff(a, b) -> float:
    return max(max_abs(x, y) for x, y in zip(a.logits, b.logits))


def torch_flash_attn_func(q, k, v, causal=True, window_size=(-1, -1), **_):
    """A PyTorch stand-in for flash-attn's ``flash_attn_func`` (not installable without a GPU), so that FLA's attention
    layers run on the CPU: ``q`` ``[B, Tq, H, D]``, ``k``/``v`` ``[B, Tk, Hkv, D]``, causal with the queries aligned to
    the last keys, sliding window ``(left, 0)`` when ``window_size[0] >= 0``; fp32 softmax."""
    Tq, H, D = q.shape[1], q.shape[2], q.shape[3]
    Tk = k.shape[1]
    k, v = (t.repeat_interleave(H // t.shape[2], 2).float() for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k) / D ** 0.5
    query = torch.arange(Tq)[:, None] + (Tk - Tq)
    key = torch.arange(Tk)[None, :]
    visible = key <= query if causal else torch.ones(Tq, Tk, dtype=torch.bool)
    if window_size[0] >= 0:
        visible &= key >= query - window_size[0]
    return torch.einsum("bhqk,bkhd->bqhd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v).to(q.dtype)


def hybrid_gated_deltanet(attention_layers: list[int], window_size: int | None, layers: int = 2, seed: int = 0):
    """A tiny FLA GatedDeltaNet model whose ``attention_layers`` are FLA's softmax attention (2 heads, optional sliding
    window). Build and run it inside ``monkeypatch.setattr("fla.layers.attn.flash_attn_func", torch_flash_attn_func)``."""
    config = family_config("gated_deltanet", layers)
    config.attn = {"layers": attention_layers, "num_heads": 2, "num_kv_heads": 2, "window_size": window_size}
    torch.manual_seed(seed)
    return GatedDeltaNetForCausalLM(config).eval()
