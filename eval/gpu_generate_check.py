"""GPU end-to-end check: generate() with DeltaLogCache (Triton backend) against transformers' default cache.

A Qwen3.5-architecture model with real GDN head sizes (Hk = 16, HV = 32, K = V = 128; 4 layers, 3 of them GDN), a
Kimi-Linear-architecture model with real KDA heads (H = 32, K = V = 128) and/or a LaraMini-architecture model (GDN
with sliding-window attention layers; Hk = 8, HV = 16, K = V = 128), random fp32 and bf16 weights on the GPU,
greedy decoding. Reports per run: token agreement (share of identical tokens), the largest |Δlogit| while the tokens
agree, the first differing step and the reference's top-1 minus top-2 logit there (a near-tie explains a bf16
divergence), the backend, the effective merge interval, whether FLA's dense kernel decoded (the policy's small-state
path), and the wall time of both generate calls.

    python eval/gpu_generate_check.py [--families qwen3_5 kimi_linear lara_mini] [--batch 8] [--dtypes float32 bfloat16]
        [--runs 4 32 64:2] [--new-tokens 64] [--graph] [--sliding-window 16] [--out eval/results/gpu_generate_check.json]
    python eval/gpu_generate_check.py --cpu-smoke    # tiny shapes on the CPU, our kernels under the Triton interpreter

``--runs`` lists ``B`` (the default merge interval: the cache's policy) or ``B:M`` (``merge_interval=M``); default
``BATCH 64 64:2 64:16`` (``--cpu-smoke``: ``2 3:2``). A line is printed (flushed) before each generate call, so a slow step shows where it is; on
SIGTERM (``timeout``) every thread's Python stack is dumped to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate_compare import compare, log, parse_runs, select_device, stacks_on_sigterm  # noqa: E402

DTYPES = ("float32", "bfloat16")


def _qwen3_5(transformers, smoke: bool, sliding_window=None):
    heads = (dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16)
             if smoke else
             dict(hidden_size=1024, intermediate_size=2048, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                  linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                  linear_value_head_dim=128))
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=96 if smoke else 1024, num_hidden_layers=4, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=False, initializer_range=0.05,
        pad_token_id=0, bos_token_id=1, eos_token_id=None, **heads)
    return transformers.Qwen3_5ForCausalLM(cfg)


def _kimi_linear(transformers, smoke: bool, sliding_window=None):
    dims = (dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_attention_heads=4,
                 num_key_value_heads=4, linear_num_heads=4, linear_head_dim=16, kv_lora_rank=16, qk_rope_head_dim=8,
                 qk_nope_head_dim=8, v_head_dim=16)
            if smoke else
            dict(hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256, num_attention_heads=8,
                 num_key_value_heads=8, linear_num_heads=32, linear_head_dim=128, kv_lora_rank=128,
                 qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=128))
    cfg = transformers.KimiLinearConfig(
        vocab_size=96 if smoke else 1024, num_hidden_layers=4, linear_conv_kernel_dim=4, num_local_experts=4,
        num_experts_per_tok=2, q_lora_rank=None, layer_types=["linear_attention"] * 3 + ["full_attention"],
        tie_word_embeddings=False, initializer_range=0.05, pad_token_id=0, bos_token_id=1, eos_token_id=None, **dims)
    return transformers.KimiLinearForCausalLM(cfg)


def _lara_mini(transformers, smoke: bool, sliding_window=None):
    """LaraMini's GDN and attention head sizes as transformers' LaraMiniConfig defaults give them (Hk = 8, HV = 16,
    K = V = 128; attention 16 heads of 128, 4 KV heads), its period-5 layer pattern (linear, sliding, linear, full,
    sliding) and by default a 16-token window (4 with ``smoke``), so that the sliding-window layers roll while the GDN
    layers decode; 4 experts instead of 128."""
    dims = (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                 linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16, moe_intermediate_size=32,
                 shared_expert_intermediate_size=32)
            if smoke else
            dict(hidden_size=1024, num_attention_heads=16, num_key_value_heads=4, head_dim=128, linear_num_key_heads=8,
                 linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                 moe_intermediate_size=512, shared_expert_intermediate_size=512))
    cfg = transformers.LaraMiniConfig(
        vocab_size=96 if smoke else 1024, num_hidden_layers=5, linear_conv_kernel_dim=4, num_experts=4,
        num_experts_per_tok=2, sliding_window=sliding_window or (4 if smoke else 16),
        layer_types=["linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention"],
        tie_word_embeddings=False, initializer_range=0.05, pad_token_id=0, bos_token_id=1, eos_token_id=None, **dims)
    return transformers.LaraMiniForCausalLM(cfg)


MODELS = {"qwen3_5": _qwen3_5, "kimi_linear": _kimi_linear, "lara_mini": _lara_mini}


def check_family(family, a, device) -> list[dict]:
    import torch
    import transformers

    from hf_deltalog import DeltaLogCache
    from hf_deltalog.graph import graph_generate

    rows = []
    prompt = 8 if a.cpu_smoke else 32
    # On the CPU the Triton kernels run only when asked for (under the interpreter); on the GPU "auto" picks them.
    backend = "triton" if a.cpu_smoke else "auto"
    for dtype_name in a.dtypes:
        dtype = getattr(torch, dtype_name)
        torch.manual_seed(0)
        model = MODELS[family](transformers, a.cpu_smoke, a.sliding_window).to(device, dtype).eval()
        if a.graph:  # torch's grouped_mm (transformers' MoE default on a GPU) copies to the host in fp32: not capturable
            model.config._experts_implementation = "batched_mm"
        cfg = model.config
        kw = dict(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=False,
                  return_dict_in_generate=True, output_logits=True)
        for batch, M in a.runs:
            ids = torch.randint(1, cfg.vocab_size, (batch, prompt), device=device,
                                generator=torch.Generator(device.type).manual_seed(1))
            with torch.no_grad():
                log(f"{family} {dtype_name} B={batch} M={M}: reference generate (default cache) ...")
                t0 = time.perf_counter()
                ref = model.generate(ids, **kw)
                t_ref = time.perf_counter() - t0
                log(f"{family} {dtype_name} B={batch} M={M}: DeltaLogCache generate ...")
                cache = DeltaLogCache(model, merge_interval=M, backend=backend, stagger_merges=a.stagger_merges)
                if a.past_recording:
                    cache.activate_past_recording()
                t0 = time.perf_counter()
                out = model.generate(ids, past_key_values=cache, **kw)
                t_ours = time.perf_counter() - t0
            layers = cache.deltalog_layers
            graph = {}
            if a.graph:  # the same greedy decode as one captured CUDA graph (eagerly on a CPU), static DeltaLogCache
                log(f"{family} {dtype_name} B={batch} M={M}: graph_generate (static DeltaLogCache) ...")
                for capture in ([False, True] if device.type == "cuda" else [False]):
                    static = DeltaLogCache(model, merge_interval=M, backend=backend, static=True,
                                           max_cache_len=prompt + a.new_tokens, stagger_merges=a.stagger_merges)
                    key = "graph_captured" if capture else "graph_eager"
                    try:
                        run = graph_generate(model, ids, cache=static, max_new_tokens=a.new_tokens, eos_token_id=None,
                                             capture=capture)
                    except ValueError as err:  # e.g. static sliding-window layers cannot be captured
                        graph[key] = dict(refused=str(err))
                        continue
                    same = (run.sequences == ref.sequences)[:, prompt:].all(0)  # [new tokens]: all rows agree
                    graph[key] = dict(identical_to_reference=bool(same.all()),
                                      token_agreement=float((run.sequences == ref.sequences)[:, prompt:].float().mean()),
                                      first_differing_step=None if same.all() else int((~same).nonzero()[0]))
            window = getattr(cfg, "sliding_window", None) if "sliding_attention" in cfg.layer_types else None
            rows.append(dict(family=family, dtype=str(dtype), batch=batch, merge_interval=M, sliding_window=window,
                             effective_merge_interval=sorted({layer.merge_interval for layer in layers}),
                             dense_fla_kernel=any(layer.dense_kernel is not None for layer in layers),
                             backends=sorted({layer.backend for layer in layers}),
                             staggered=sorted({layer.staggered for layer in layers}),
                             past_recording=a.past_recording,
                             **compare(out, ref, prompt, a.new_tokens), reference_generate_s=round(t_ref, 2),
                             deltalog_generate_s=round(t_ours, 2), **graph))
            print(rows[-1], flush=True)
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-tokens", type=int, default=None, help="default 64 (4 with --cpu-smoke)")
    p.add_argument("--batch", type=int, default=8, help="batch of the first default run (see --runs)")
    p.add_argument("--runs", nargs="+", default=None, metavar="B[:M]",
                   help="runs per family and dtype: B (default merge interval) or B:M; default: BATCH 64 64:2 64:16")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=(*DTYPES, "float64"),
                   help="float64 (not a default) decodes on the PyTorch backend under backend=\"auto\"")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default eval/results/gpu_generate_check.json; none with --cpu-smoke)")
    p.add_argument("--families", nargs="+", default=["qwen3_5"], choices=sorted(MODELS),
                   help="qwen3_5 (GDN heads of Qwen3.5: Hk = 16, HV = 32), kimi_linear (KDA, H = 32) and/or "
                        "lara_mini (GDN, Hk = 8, HV = 16, beside sliding-window attention)")
    p.add_argument("--stagger-merges", action="store_true",
                   help="DeltaLogCache(stagger_merges=True) in every run (default: the cache's default, aligned)")
    p.add_argument("--past-recording", action="store_true",
                   help="call activate_past_recording() on each DeltaLogCache before its generate (transformers' GDN "
                        "layers then pass q, k, v as strided views)")
    p.add_argument("--graph", action="store_true",
                   help="also decode each run with hf_deltalog.graph.graph_generate on a static DeltaLogCache (a "
                        "captured CUDA graph on a GPU) and compare its tokens with the reference's; MoE layers then "
                        "run transformers' batched_mm experts in all three decodes (its grouped_mm is not "
                        "capturable in fp32)")
    p.add_argument("--sliding-window", type=int, default=None,
                   help="lara_mini's attention window, a positive int (default 16; 4 with --cpu-smoke); only with "
                        "--families lara_mini. hf_deltalog.graph refuses to capture its static sliding-window layers "
                        "whatever the window, so --graph decodes lara_mini eagerly only (the captured run is recorded "
                        "as refused)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny shapes on the CPU, DeltaLogCache's Triton backend under the interpreter")
    a = p.parse_args(argv)
    if a.sliding_window is not None and (a.sliding_window < 1 or a.families != ["lara_mini"]):
        p.error(f"--sliding-window takes a positive int and applies to --families lara_mini only; got "
                f"{a.sliding_window} with --families {' '.join(a.families)}")
    try:
        smoke_runs = [(2, None), (3, 2)]
        a.runs = parse_runs(a.runs, smoke_runs if a.cpu_smoke else [(a.batch, None), (64, None), (64, 2), (64, 16)])
    except ValueError as err:
        p.error(str(err))
    a.new_tokens = a.new_tokens or (4 if a.cpu_smoke else 64)
    if a.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (hf_deltalog imports it)
        # transformers' GDN / KDA layers take their PyTorch paths: with flash-linear-attention installed transformers
        # binds them to FLA's chunked kernels, which the interpreter cannot run (tests/conftest.py does the same)
        from hf_deltalog.interpreter import hide_fla

        hide_fla()
    import torch
    import transformers

    device = select_device(a.cpu_smoke)  # under --cpu-smoke FLA's autotuners (which transformers may bind) collapse
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    with stacks_on_sigterm(not a.cpu_smoke):
        rows = [row for family in a.families for row in check_family(family, a, device)]
    out = a.out if a.out is not None else (None if a.cpu_smoke else
                                           Path(__file__).parent / "results" / "gpu_generate_check.json")
    if out is not None:
        meta = dict(gpu=torch.cuda.get_device_name() if device.type == "cuda" else None, torch=torch.__version__,
                    transformers=transformers.__version__)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
