"""GPU end-to-end check for flash-linear-attention's models: generate() with DeltaLogCache against FLA's own cache.

FLA's ``RWKV6ForCausalLM`` (H = 32 heads, K = 32, V = 64: FLA's RWKV6 heads at hidden 2048 with expand_k = 0.5),
``GatedDeltaNetForCausalLM`` (Hk = 16, HV = 32, K = V = 128) and ``KDAForCausalLM`` (H = 32, K = V = 128), 4 recurrent
layers each, random weights, fp32 and bf16, greedy decoding of a batch of prompts. The reference is FLA's ``Cache``
with FLA's kernels; because FLA 0.6.0's ``generate`` under transformers 5.24 does not hand a cache to the model
(README, FLA models), the reference is driven with the cache renamed to ``past_key_values`` (done here, independently
of hf_deltalog), and its fp32 logits are checked against a full forward without a cache. Reports token agreement, the
largest |Δlogit| while tokens agree, the backend, the effective merge interval and whether FLA's dense kernel decoded
(small GDN/KDA states).

    python eval/gpu_generate_check_fla.py [--families gated_deltanet kda] [--dtypes float32 bfloat16] \
        [--runs 32 64:2] [--new-tokens 64] [--prompt-length 32] [--out eval/results/gpu_generate_check_fla.json]
    python eval/gpu_generate_check_fla.py --cpu-smoke     # tiny shapes on the CPU under the Triton interpreter

``--runs`` lists ``B`` (the cache's default merge interval) or ``B:M``; default ``BATCH 64 64:2 64:16``. Each run's
row is printed as soon as the two generations are compared; the fp32 check of the reference against a full forward
(FLA's chunked kernels for the whole sequence) follows on its own line. A line is printed before each generate call and
on SIGTERM (``timeout``) every thread's Python stack is dumped to stderr, so a slow or stopped run shows where it was.
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
from cli_types import positive_int
from generate_compare import compare, log, parse_runs, select_device, stacks_on_sigterm  # noqa: E402

FAMILIES = ("rwkv6", "gated_deltanet", "kda")
DTYPES = ("float32", "bfloat16")


def _config(family: str, smoke: bool):
    from fla.models import GatedDeltaNetConfig, KDAConfig, RWKV6Config

    layers, vocab = (1, 96) if smoke else (4, 1024)
    common = dict(vocab_size=vocab, num_hidden_layers=layers, pad_token_id=0, bos_token_id=1, eos_token_id=None,
                  fuse_cross_entropy=False, initializer_range=0.05)
    if family == "rwkv6":
        hidden, heads = (64, 2) if smoke else (2048, 32)
        return RWKV6Config(**common, hidden_size=hidden, num_heads=heads, expand_k=0.5, expand_v=1.0,
                           proj_low_rank_dim=8 if smoke else 32, gate_low_rank_dim=8 if smoke else 64)
    heads = dict(head_dim=8, num_heads=1, num_v_heads=2, expand_v=2.0) if smoke else (
        dict(head_dim=128, num_heads=16, num_v_heads=32, expand_v=1.0) if family == "gated_deltanet" else
        dict(head_dim=128, num_heads=32, num_v_heads=32, expand_v=1.0))
    cls = GatedDeltaNetConfig if family == "gated_deltanet" else KDAConfig
    return cls(**common, hidden_size=64 if smoke else 1024, conv_size=4, hidden_ratio=2, **heads)


def check_family(family: str, a, device) -> list[dict]:
    import torch
    from fla.models import GatedDeltaNetForCausalLM, KDAForCausalLM, RWKV6ForCausalLM
    from fla.models.utils import Cache

    from hf_deltalog import DeltaLogCache
    from hf_deltalog.fla_cache import fla_generate_handover

    classes = {"rwkv6": RWKV6ForCausalLM, "gated_deltanet": GatedDeltaNetForCausalLM, "kda": KDAForCausalLM}
    rows = []
    prompt = a.prompt_length or (8 if a.cpu_smoke else 32)
    for dtype in (getattr(torch, name) for name in a.dtypes):
        torch.manual_seed(0)
        model = classes[family](_config(family, a.cpu_smoke)).to(device, dtype).eval()
        vocab = model.config.vocab_size
        kw = dict(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=False,
                  return_dict_in_generate=True, output_logits=True)
        for batch, M in a.runs:
            gen = torch.Generator(device.type).manual_seed(1)
            ids = torch.randint(3, vocab, (batch, prompt), device=device, generator=gen)
            what = f"{family} {str(dtype).removeprefix('torch.')} B={batch} M={M}"
            with torch.no_grad():
                log(f"{what}: reference generate (FLA's cache) ...")
                t0 = time.perf_counter()
                reference_cache = Cache()
                with fla_generate_handover(model, reference_cache):  # FLA's generate would drop its own cache
                    ref = model.generate(ids, past_key_values=reference_cache, **kw)
                t_ref = time.perf_counter() - t0
                log(f"{what}: DeltaLogCache generate ...")
                cache = DeltaLogCache(model, merge_interval=M, backend="triton" if a.cpu_smoke else "auto",
                                      stagger_merges=a.stagger_merges)  # the smoke runs the interpreted kernels
                t0 = time.perf_counter()
                out = model.generate(ids, past_key_values=cache, **kw)
                t_ours = time.perf_counter() - t0
            layers = cache.deltalog_layers
            row = dict(family=family, dtype=str(dtype), batch=batch, merge_interval=M,
                       effective_merge_interval=sorted({layer.merge_interval for layer in layers}),
                       backends=sorted({layer.backend for layer in layers}),
                       staggered=sorted({layer.staggered for layer in layers}),
                       dense_fla_kernel=any(layer.dense_fla for layer in layers),
                       **compare(out, ref, prompt, a.new_tokens), reference_vs_full_forward_max_abs_logit_diff=None,
                       reference_generate_s=round(t_ref, 2), deltalog_generate_s=round(t_ours, 2))
            rows.append(row)
            print(row, flush=True)
            if dtype == torch.float32:  # the reference itself: FLA's cached decode equals a full forward
                log(f"{what}: full forward without a cache (checks the reference) ...")
                with torch.no_grad():
                    full = model(ref.sequences, use_cache=False).logits
                row["reference_vs_full_forward_max_abs_logit_diff"] = max(
                    (x - full[:, prompt - 1 + i]).abs().max().item() for i, x in enumerate(ref.logits))
                log(f"{what}: reference vs full forward max |dlogit| "
                    f"{row['reference_vs_full_forward_max_abs_logit_diff']:.3g}")
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-tokens", type=int, default=None, help="default 64 (4 with --cpu-smoke)")
    p.add_argument("--batch", type=int, default=8, help="batch of the first default run (see --runs)")
    p.add_argument("--runs", nargs="+", default=None, metavar="B[:M]",
                   help="runs per family and dtype: B (default merge interval) or B:M; default: BATCH 64 64:2 64:16 "
                        "(2 2:2 with --cpu-smoke)")
    p.add_argument("--dtypes", nargs="+", default=None, choices=DTYPES,
                   help="default float32 bfloat16 (float32 with --cpu-smoke)")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--prompt-length", type=positive_int, default=None,
                   help="prompt tokens (default 32; 8 with --cpu-smoke): FLA's layers prefill up to 64 tokens in "
                        "fused_recurrent mode and 65 or more in chunk mode (which cannot run under the CPU's Triton "
                        "interpreter)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default eval/results/gpu_generate_check_fla.json; none with --cpu-smoke)")
    p.add_argument("--stagger-merges", action="store_true",
                   help="DeltaLogCache(stagger_merges=True) in every run (default: the cache's default, aligned)")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU under the Triton interpreter")
    a = p.parse_args(argv)
    if a.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    a.new_tokens = a.new_tokens or (4 if a.cpu_smoke else 64)
    try:
        a.runs = parse_runs(a.runs, [(2, None), (2, 2)] if a.cpu_smoke else
                            [(a.batch, None), (64, None), (64, 2), (64, 16)])
    except ValueError as err:
        p.error(str(err))
    a.dtypes = a.dtypes or (["float32"] if a.cpu_smoke else list(DTYPES))
    import torch
    import transformers

    device = select_device(a.cpu_smoke)  # under --cpu-smoke FLA's autotuners (which transformers may bind) collapse
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    with stacks_on_sigterm(not a.cpu_smoke):
        rows = [row for family in a.families for row in check_family(family, a, device)]
    out = a.out if a.out is not None else (None if a.cpu_smoke else
                                           Path(__file__).parent / "results" / "gpu_generate_check_fla.json")
    if out is not None:
        import fla

        meta = dict(device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu", torch=torch.__version__,
                    transformers=transformers.__version__, fla=fla.__version__)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
