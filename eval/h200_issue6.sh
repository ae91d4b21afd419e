#!/usr/bin/env bash
# Trained tiny checkpoints and lm-eval parity on one H200 (issue 6), in one go; everything goes under $OUT.
#
#   OUT=/path/to/out bash eval/h200_issue6.sh
#
# Needs: a CUDA torch with triton, transformers 5.24, flash-linear-attention 0.6.0, hf_deltalog importable from
# this checkout, and the packages in eval/wheels_issue6.txt (lm_eval and the dependencies its import needs).
# Steps (about 8 minutes in all):
#   1. train the GDN, KDA and RWKV6 checkpoints, 100 s of training each (+ about 20 s of setup and test perplexity)
#   2. lm-eval parity of the two local tasks at batch 64 in bf16 on the GDN and KDA checkpoints, twice: with the
#      cache's default merge interval (on the GPU small layers decode densely through FLA, M = 1) and with the
#      DeltaLog log in use (M = 8 for GDN, M = 4 for KDA: the Triton DeltaLog kernels)
#   3. the same parity for RWKV6 when DeltaLogCache accepts FLA's RWKV6 model (it reports "skipped" otherwise)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
exec > >(tee "$OUT/h200_issue6.log") 2>&1
status=0
step() { echo "== $(date +%T) $*"; }

step environment
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.csv"
python -c "import torch, transformers, triton, fla, lm_eval, hf_deltalog; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__, 'fla', fla.__version__, 'lm_eval', lm_eval.__version__, 'hf_deltalog', hf_deltalog.__file__)" || exit 1

for model in gdn kda rwkv6; do
  step "train $model"
  timeout 240 python eval/train_tiny.py train --model "$model" --time-budget 100 --out "$OUT/checkpoints/$model-shakespeare" || status=1
done

parity() {  # parity NAME [extra arguments]
  local name=$1; shift
  step "parity $name"
  timeout 200 python eval/lm_eval_parity.py --dtype bfloat16 --device cuda --batch-size 64 --out "$OUT/parity/$name" "$@" || status=1
}
ck="$OUT/checkpoints"
parity gdn_kda_bf16_default_m --pretrained "$ck/gdn-shakespeare" "$ck/kda-shakespeare"
parity gdn_bf16_m8 --pretrained "$ck/gdn-shakespeare" --merge-interval 8
parity kda_bf16_m4 --pretrained "$ck/kda-shakespeare" --merge-interval 4
if python -c "
import sys, transformers, fla.models
from hf_deltalog import DeltaLogCache
DeltaLogCache(transformers.AutoConfig.from_pretrained(sys.argv[1]))" "$ck/rwkv6-shakespeare" 2>"$OUT/rwkv6_cache_check.txt"; then
  parity rwkv6_bf16 --pretrained "$ck/rwkv6-shakespeare"
else
  step "parity rwkv6 skipped: DeltaLogCache does not accept the RWKV6 model yet (see rwkv6_cache_check.txt)"
fi
step "done (status $status)"
exit $status
