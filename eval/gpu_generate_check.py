"""GPU end-to-end check: generate() with DeltaLogCache (Triton backend) against transformers' default cache.

A Qwen3.5-architecture model with real GDN head sizes (Hk = 16, HV = 32, K = V = 128; 4 layers, 3 of them GDN),
random bf16 and fp32 weights on the GPU, a batch of 8 prompts, greedy decoding. Reports token agreement and the
largest |Δlogit|, and checks the cache really ran the Triton kernel.

    python eval/gpu_generate_check.py [--new-tokens 64] [--out eval/results/gpu_generate_check.json]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import torch
import transformers

from hf_deltalog import DeltaLogCache


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gpu_generate_check.json")
    p.add_argument("--families", nargs="+", default=["qwen3_5"], choices=sorted(MODELS),
                   help="qwen3_5 (GDN heads of Qwen3.5: Hk = 16, HV = 32) and/or kimi_linear (KDA, H = 32)")
    a = p.parse_args()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rows = []
    for family in a.families:
        rows += check_family(family, a)
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, transformers=transformers.__version__)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")


def _qwen3_5():
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=1024, hidden_size=1024, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=False, initializer_range=0.05,
        pad_token_id=0, bos_token_id=1, eos_token_id=None)
    return transformers.Qwen3_5ForCausalLM(cfg)


def _kimi_linear():
    cfg = transformers.KimiLinearConfig(
        vocab_size=1024, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=8, linear_num_heads=32, linear_head_dim=128,
        linear_conv_kernel_dim=4, num_local_experts=4, num_experts_per_tok=2, kv_lora_rank=128, q_lora_rank=None,
        qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=128,
        layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=False, initializer_range=0.05,
        pad_token_id=0, bos_token_id=1, eos_token_id=None)
    return transformers.KimiLinearForCausalLM(cfg)


MODELS = {"qwen3_5": _qwen3_5, "kimi_linear": _kimi_linear}


def check_family(family, a):
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        model = MODELS[family]().to("cuda", dtype).eval()
        cfg = model.config
        kw = dict(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=False,
                  return_dict_in_generate=True, output_logits=True)
        # (batch, merge_interval): the default policy at a small batch (dense, FLA's kernel) and at a large one
        # (DeltaLog, M = 8), and explicit intervals.
        for batch, M in ((a.batch, None), (64, None), (64, 2), (64, 16)):
            ids = torch.randint(1, cfg.vocab_size, (batch, 32), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
            with torch.no_grad():
                ref = model.generate(ids, **kw)
                cache = DeltaLogCache(model, merge_interval=M)
                out = model.generate(ids, cache=cache, **kw)
            backends = sorted({layer.backend for layer in cache.deltalog_layers})
            effective = sorted({layer.merge_interval for layer in cache.deltalog_layers})
            dense = any(layer.dense_kernel is not None for layer in cache.deltalog_layers)
            agree = (out.sequences == ref.sequences).float().mean().item()
            first = next((i for i in range(a.new_tokens)
                          if not torch.equal(out.sequences[:, 32 + i], ref.sequences[:, 32 + i])), None)
            # Logits are comparable only while both runs have fed the same tokens: up to the first differing step.
            upto = a.new_tokens if first is None else first + 1
            dlogit = max((x.float() - y.float()).abs().max().item() for x, y in zip(out.logits[:upto], ref.logits[:upto]))
            margin = None
            if first is not None:  # the reference's top-1 minus top-2 logit in the rows that differ at that step
                rows_diff = (out.sequences[:, 32 + first] != ref.sequences[:, 32 + first]).nonzero()[:, 0]
                top2 = ref.logits[first][rows_diff].float().topk(2, dim=-1).values
                margin = (top2[:, 0] - top2[:, 1]).max().item()
            rows.append(dict(family=family, dtype=str(dtype), batch=batch, merge_interval=M, effective_merge_interval=effective,
                             dense_fla_kernel=dense, backends=backends, token_agreement=agree,
                             identical=bool(torch.equal(out.sequences, ref.sequences)),
                             max_abs_logit_diff_while_tokens_agree=dlogit, first_differing_step=first,
                             top2_margin_at_first_difference=margin))
            print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
