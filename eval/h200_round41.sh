#!/usr/bin/env bash
# One H200, at most ~170 s (the session's last device seconds). GPU smoke after this stop's cache changes (a
# forward stopped inside a layer is refused; float64 layers plan the PyTorch backend; conv-width check; generate's
# checks read the resolved generation config; outputs that read the cached state refuse a backward pass; the
# consumed-token record is a copy): the jobs of round 35, unchanged. Generate with DeltaLogCache against the default
# cache for the three operators (fp32, greedy), and graph_generate with a captured CUDA graph on the trained GDN
# checkpoint against model.generate. Four jobs share the GPU (tiny models).
#   OUT=/path bash eval/h200_round41.sh     # results: $OUT/round41/
set -u
OUT=${OUT:-/tmp/out}
R=$OUT/round41; rm -rf $R; mkdir -p $R  # written in place: if the device time runs out, what finished comes back
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=4
T0=$(date +%s)
stamp() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
( timeout 140 python3 eval/gpu_generate_check.py --families qwen3_5 --runs 8 64 64:2 --dtypes float32 \
    --out $R/gdn_fp32.json > $R/gdn_fp32.log 2>&1; stamp "gdn rc=$?" ) &
( timeout 140 python3 eval/gpu_generate_check.py --families kimi_linear --runs 64 --dtypes float32 \
    --out $R/kimi_fp32.json > $R/kimi_fp32.log 2>&1; stamp "kimi rc=$?" ) &
( timeout 150 python3 eval/gpu_generate_check_fla.py --families rwkv6 --runs 32:8 --dtypes float32 \
    --out $R/fla_fp32.json > $R/fla_fp32.log 2>&1; stamp "fla rc=$?" ) &
( timeout 140 python3 - > $R/graph.log 2>&1 <<'PY'
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
    plan = {l.layer_idx: l.merge_interval for l in cache.deltalog_layers}
    rows.append(dict(B=B, merge_interval=M, plan=plan, captured=out.captured,
                     identical=bool(torch.equal(out.sequences, ref)),
                     agreeing_tokens=float((out.sequences[:, 24:] == ref[:, 24:]).float().mean())))
    print(json.dumps(rows[-1]), flush=True)
PY
  stamp "graph rc=$?" ) &
wait
for f in gdn_fp32 kimi_fp32 fla_fp32; do echo "--- $f"; tail -8 $R/$f.log | cut -c1-220; done
echo "--- graph"; cat $R/graph.log | tail -5
stamp done
true
