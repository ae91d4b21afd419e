"""The RWKV6 checkpoint's multiple-choice log-likelihoods in fp32 against an fp64 reference, one request at a time.

Scores each choice of documents ``[--start, --stop)`` of the local multiple-choice task (``eval/tasks/shakespeare``)
as the continuation of its context four ways and prints each one's difference from the fp64 reference:

* fp64 reference: one full forward of the model in float64, with FLA's PyTorch references of its Triton ops
  (``eval/train_tiny.py``'s ``rwkv6_kernels("torch")``) and hf_deltalog's dense recurrence
  (``hf_deltalog.kernels.rwkv6.naive.naive_recurrent_rwkv6``, which keeps fp64; FLA's fp32-only one is swapped out);
* FLA's fp32 PyTorch forward (the same references in fp32, one full forward);
* FLA's cache (``fla.models.utils.Cache``) by cached decoding, fp32, FLA's kernels (under the Triton interpreter on
  a CPU): prefill the context, then one continuation token per forward;
* DeltaLogCache (``merge_interval=8``) by the same cached decoding;
* both caches once more through lm-eval's model, ``hf_deltalog.harness.CachedHFLM`` (``generate`` with the
  continuation forced; what ``eval/lm_eval_parity.py`` reports).

Requests are tokenized as lm-eval does (``HFLM._encode_pair``), batch 1, so no padding is involved (lm-eval's batches
left-pad the contexts). Needs flash-linear-attention and lm_eval.

    TRITON_INTERPRET=1 python eval/rwkv6_fp64_check.py --start 0 --stop 2      # CPU: about 3 minutes per document
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hf_deltalog import DeltaLogCache  # noqa: E402
from hf_deltalog.interpreter import collapse_autotuners, fused_recurrent_under_interpreter  # noqa: E402
from hf_deltalog.kernels.rwkv6.naive import naive_recurrent_rwkv6  # noqa: E402

CHECKPOINT = HERE / "checkpoints" / "rwkv6-shakespeare"
DOCS = HERE / "tasks" / "shakespeare" / "shakespeare_test.jsonl"


def _train_tiny():
    spec = importlib.util.spec_from_file_location("train_tiny", HERE / "train_tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fp64_recurrence(r, k, v, w, u, scale=1.0, initial_state=None, output_final_state=False, cu_seqlens=None, **kw):
    if cu_seqlens is not None:
        raise NotImplementedError("cu_seqlens")
    # bool(): FLA's layer passes its use_cache (None possible); the reference takes only bools
    return naive_recurrent_rwkv6(r, k, v, w, u, scale=scale, initial_state=initial_state,
                                 output_final_state=bool(output_final_state))


def full_forward_ll(model, ctx: list[int], cont: list[int]) -> float:
    logp = model(input_ids=torch.tensor([ctx + cont])).logits.double().log_softmax(-1)[0]
    return sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont))


def cached_ll(model, ctx: list[int], cont: list[int], cache) -> float:
    out = model(input_ids=torch.tensor([ctx]), past_key_values=cache, use_cache=True)
    total = 0.0
    for i, t in enumerate(cont):
        total += out.logits[0, -1].double().log_softmax(-1)[t].item()
        if i + 1 < len(cont):
            out = model(input_ids=torch.tensor([[t]]), past_key_values=out.past_key_values, use_cache=True)
    return total


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--stop", type=int, default=2)
    p.add_argument("--checkpoint", type=Path, default=CHECKPOINT)
    a = p.parse_args(argv)
    collapse_autotuners()
    import fla.layers.rwkv6 as layer
    import fla.models  # noqa: F401  (registers RWKV6 with Auto*)
    from fla.models.utils import Cache as FLACache

    from hf_deltalog.harness import CachedHFLM

    lm = CachedHFLM(pretrained=str(a.checkpoint), device="cpu", dtype="float32", batch_size=1, merge_interval=8)
    fused_recurrent_under_interpreter(lm.model)
    docs = [json.loads(line) for line in DOCS.read_text(encoding="utf-8").splitlines()][a.start:a.stop]
    reqs = [(*lm._encode_pair(d["context"], c), d["id"]) for d in docs for c in d["choices"]]
    load = lambda dtype: transformers.AutoModelForCausalLM.from_pretrained(  # noqa: E731
        a.checkpoint, dtype=dtype, local_files_only=True).eval()
    with torch.no_grad(), _train_tiny().rwkv6_kernels("torch"):
        layer.fused_recurrent_rwkv6 = layer.chunk_rwkv6 = _fp64_recurrence  # put back by rwkv6_kernels on exit
        m64, m32 = load(torch.float64), load(torch.float32)
        ref = [full_forward_ll(m64, c, x) for c, x, _ in reqs]
        torch32 = [full_forward_ll(m32, c, x) for c, x, _ in reqs]
    model = lm.model
    rows = []
    with torch.no_grad():
        for i, (c, x, doc) in enumerate(reqs):
            fla_ll = cached_ll(model, c, x, FLACache())
            dl_ll = cached_ll(model, c, x, DeltaLogCache(model, merge_interval=8))
            harness = {}
            for kind in ("default", "deltalog"):
                lm.cache = kind
                harness[kind] = lm._score_batch([(c, x)])[0][0]
            rows.append(dict(doc=doc, context=len(c), continuation=len(x), fp64=ref[i], torch_fp32=torch32[i] - ref[i],
                             fla_cache=fla_ll - ref[i], deltalog=dl_ll - ref[i], deltalog_minus_fla=dl_ll - fla_ll,
                             harness_default=harness["default"] - ref[i], harness_deltalog=harness["deltalog"] - ref[i]))
            r = rows[-1]
            print(f"doc {doc} request {i}: {len(c)}+{len(x)} tokens, fp64 LL {r['fp64']:.6f}; minus fp64: FLA fp32 "
                  f"forward {r['torch_fp32']:+.2e}, FLA cache {r['fla_cache']:+.2e}, DeltaLog {r['deltalog']:+.2e}, "
                  f"lm-eval default {r['harness_default']:+.2e}, lm-eval DeltaLog {r['harness_deltalog']:+.2e}; "
                  f"DeltaLog - FLA {r['deltalog_minus_fla']:+.2e}", flush=True)
    return rows


if __name__ == "__main__":
    main()
