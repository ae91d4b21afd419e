#!/usr/bin/env bash
# One H200, at most ~260 s. GPU smoke of the cache-layer changes of 2026-12-01 (rounds 36-40 changed kernels; the
# breaker fixes after round 38 changed only Python: in-step marks, consistency checks, backward guard, float64 plan,
# conv-buffer reallocation, generate's resolved config), on the compiled kernels:
#   - eval/gpu_guard_check.py: multi-turn continuation, interrupted prefill, a decode step stopped inside a layer,
#     a static cache's step stopped between layers, the backward guard; transformers' and FLA's model classes;
#   - generate against the default cache at real head sizes (as round 35): GDN B = 64 (policy) and 64:2, KDA B = 64,
#     FLA RWKV6 32:8;
#   - graph_generate with a captured CUDA graph on the trained GDN checkpoint, then reset() and a second capture.
#   OUT=/path bash eval/h200_round41.sh     # results: $OUT/round41.tar.gz
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/round41; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=3
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
( timeout 240 python3 eval/gpu_guard_check.py --out $R/guards.json > $R/guards.log 2>&1; stamp "guards rc=$?" ) &
( timeout 220 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 64 64:2 --dtypes float32 \
    --out $R/gdn_fp32.json > $R/gdn_fp32.log 2>&1; stamp "gdn rc=$?" ) &
( timeout 240 python3 eval/gpu_generate_check.py --families kimi_linear --runs 64 --dtypes float32 \
    --out $R/kimi_fp32.json > $R/kimi_fp32.log 2>&1; stamp "kimi rc=$?" ) &
( timeout 240 python3 eval/gpu_generate_check_fla.py --families rwkv6 --runs 32:8 --dtypes float32 \
    --out $R/fla_fp32.json > $R/fla_fp32.log 2>&1; stamp "fla rc=$?" ) &
( timeout 220 python3 - > $R/graph.log 2>&1 <<'PY'
import json, torch
from transformers import AutoModelForCausalLM
from hf_deltalog import DeltaLogCache
from hf_deltalog.graph import graph_generate
torch.backends.cuda.matmul.allow_tf32 = False
model = AutoModelForCausalLM.from_pretrained("eval/checkpoints/gdn-shakespeare", dtype=torch.float32).cuda().eval()
gen = torch.Generator().manual_seed(0)
rows = []
for B, M in ((64, 8), (64, None)):
    ids = torch.randint(3, model.config.vocab_size, (B, 24), generator=gen).cuda()
    ref = model.generate(ids, max_new_tokens=32, do_sample=False, eos_token_id=None)
    cache = DeltaLogCache(model, static=True, max_cache_len=24 + 32, merge_interval=M)
    out = graph_generate(model, ids, cache=cache, max_new_tokens=32, eos_token_id=None, capture=True)
    cache.reset()
    again = graph_generate(model, ids, cache=cache, max_new_tokens=32, eos_token_id=None, capture=True)
    plan = {l.layer_idx: l.merge_interval for l in cache.deltalog_layers}
    rows.append(dict(B=B, merge_interval=M, plan=plan, captured=out.captured,
                     identical=bool(torch.equal(out.sequences, ref)),
                     identical_after_reset=bool(torch.equal(again.sequences, ref)),
                     agreeing_tokens=float((out.sequences[:, 24:] == ref[:, 24:]).float().mean())))
    print(json.dumps(rows[-1]), flush=True)
PY
  stamp "graph rc=$?" ) &
wait
echo "--- guards"; grep -E '^\{|cases passed' $R/guards.log | cut -c1-300
for f in gdn_fp32 kimi_fp32 fla_fp32; do echo "--- $f"; tail -6 $R/$f.log | cut -c1-260; done
echo "--- graph"; tail -5 $R/graph.log
stamp done
tar -czf "$OUT/round41.tar.gz" -C $R .
