"""Tiny random models of every GDN (K ≠ V, HV ≠ Hk) and KDA family, and comparison helpers shared by the tests."""

from __future__ import annotations

import functools

import torch
import transformers
from packaging.version import Version

# transformers 5.25: assisted generation for linear-attention models (kept recurrent states), and the KDA families'
# one-token step honours past recording (it stores its conv columns instead of updating the window in place).
TRANSFORMERS_5_25 = Version(transformers.__version__) >= Version("5.25")

VOCAB = 96
PAD, BOS, EOS = 0, 1, 2
# Hk = 2 key heads, HV = 4 value heads (GQA), K = 8 ≠ V = 16: a transposed state or a wrong head map cannot pass.
GDN = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16,
           linear_conv_kernel_dim=4)
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
              tie_word_embeddings=False)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
LAYERS = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
# LaraMini's released period-5 pattern, with a window shorter than the tests' prompts plus new tokens, so that its
# sliding-window layers drop keys while the linear layers decode.
LARA_LAYERS = ["linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention"]

GDN_FAMILIES = ["qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen4_exp", "olmo_hybrid", "lara_mini"]
KDA_FAMILIES = ["kimi_linear", "bailing_hybrid", "glm5_next"]
FAMILIES = GDN_FAMILIES + KDA_FAMILIES
# KDA: H = 4 heads of K = V = 16 (KDA ties K = V = linear_head_dim and has no GQA).
KDA = dict(linear_num_heads=4, linear_head_dim=16, linear_conv_kernel_dim=4)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)


def _drop(*keys):
    return {k: v for k, v in COMMON.items() if k not in keys}


def family_config(name: str, **overrides):
    """A tiny config of family ``name`` (4 layers: linear, attention, linear, attention; lara_mini: 5, see LARA_LAYERS)."""
    t = transformers
    if name == "qwen3_next":
        cfg = t.Qwen3NextConfig(**COMMON, **GDN, **MOE, layer_types=LAYERS)
    elif name == "qwen3_5":
        cfg = t.Qwen3_5TextConfig(**COMMON, **GDN, layer_types=LAYERS)
    elif name == "qwen3_5_moe":
        cfg = t.Qwen3_5MoeTextConfig(**_drop("intermediate_size"), **GDN, **MOE, layer_types=LAYERS)
    elif name == "qwen4_exp":
        cfg = t.Qwen4ExpTextConfig(**_drop("intermediate_size"), **GDN, **MOE, layer_types=LAYERS, hc_count=2,
                                   hc_lowrank=16, ngram_vocab_size_base=1000, indexer_n_heads=2, indexer_kv_heads=1,
                                   indexer_head_dim=16, indexer_budget=8, indexer_compress_ratio=4)
    elif name == "olmo_hybrid":
        cfg = t.OlmoHybridConfig(**_drop("head_dim"), **GDN, layer_types=LAYERS)
    elif name == "lara_mini":
        cfg = t.LaraMiniConfig(**_drop("intermediate_size", "num_hidden_layers"), **GDN, **MOE, num_hidden_layers=5,
                               layer_types=LARA_LAYERS, sliding_window=6)
    elif name == "kimi_linear":
        cfg = t.KimiLinearConfig(**_drop("head_dim", "num_key_value_heads"), **KDA, **MLA, num_key_value_heads=4,
                                 moe_intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, q_lora_rank=None,
                                 layer_types=LAYERS)
    elif name == "bailing_hybrid":
        cfg = t.BailingHybridConfig(**_drop("num_key_value_heads", "head_dim"), **MLA, num_key_value_heads=4,
                                    head_dim=16, moe_intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                                    n_group=1, topk_group=1, short_conv_kernel_size=4, layer_group_size=2,
                                    first_k_dense_replace=1)
    elif name == "glm5_next":
        text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                    num_experts_per_tok=2, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=0, qk_nope_head_dim=16,
                    v_head_dim=16, index_topk=8, index_kpool=4, index_head_dim=16, index_n_heads=2, **KDA, hc_mult=2,
                    layer_types=["linear_attention", "indexed_attention"] * 2, pad_token_id=PAD, eos_token_id=EOS,
                    bos_token_id=BOS)
        cfg = t.Glm5NextConfig(text_config=text, vision_config=dict(depth=1, hidden_size=32, intermediate_size=64,
                                                                    num_heads=2, out_hidden_size=64))
    else:
        raise KeyError(name)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


_CLASSES = {
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForCausalLM",
    "qwen3_5_moe": "Qwen3_5MoeForCausalLM",
    "qwen4_exp": "Qwen4ExpForCausalLM",
    "olmo_hybrid": "OlmoHybridForCausalLM",
    "lara_mini": "LaraMiniForCausalLM",
    "kimi_linear": "KimiLinearForCausalLM",
    "bailing_hybrid": "BailingHybridForCausalLM",
    "glm5_next": "Glm5NextForConditionalGeneration",
}


@functools.lru_cache(maxsize=None)
def _model(name: str, dtype: torch.dtype, seed: int):
    torch.manual_seed(seed)
    model = getattr(transformers, _CLASSES[name])(family_config(name)).eval()
    with torch.no_grad():  # livelier decays than the init (softplus(a + 1) at A ~ U(0.01, 16)) to exercise the log
        for module in model.modules():
            if hasattr(module, "A_log") and hasattr(module, "dt_bias"):
                module.A_log.copy_(torch.empty_like(module.A_log).uniform_(-3.0, 0.5))
    return model.to(dtype)


def tiny_model(name: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A cached tiny random model of family ``name`` (eval mode). Do not modify it in a test."""
    return _model(name, dtype, seed)


def prompt_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64."""
    a64, b64 = a.double(), b.double()
    return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item()


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def live_slots(log: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """``log`` ``[B, H, C, D]`` with the slots at or past each row's ``length`` ``[B]`` set to 0 (stale slots are not
    part of the logical state; the KDA and RWKV6 kernels use the decay slots that a merge makes stale as scratch)."""
    keep = torch.arange(log.shape[2])[None, :] < length[:, None].long()  # [B, C]
    return torch.where(keep[:, None, :, None], log, torch.zeros((), dtype=log.dtype))


def record_past(cache) -> None:
    """``cache.activate_past_recording()``, keeping no recurrent states. transformers 5.25's own caches need the count
    spelled out (their linear-attention layers store ``None`` without it, and the models' ``min(None, seq_len)``
    fails); 5.24's take no argument."""
    if TRANSFORMERS_5_25:
        cache.activate_past_recording(recurrent_states_to_keep=0)
    else:
        cache.activate_past_recording()
