"""Token and logit parity of DeltaLogCache against transformers' default cache, per GDN family, dtype and M.

Tiny random models of each family (the test suite's configs: Hk = 2, HV = 4, K = 8, V = 16), a batch of 3 prompts,
greedy decoding. For each (family, dtype, M) it records whether the tokens are identical, the largest |Δlogit| over
all decode steps, and the largest relative error of the materialised state against the dense state at the end.

    python eval/cache_parity.py [--new-tokens 64] [--out eval/results/cache_parity.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import warnings
from pathlib import Path

import torch
import transformers
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from utils import GDN_FAMILIES, max_abs, prompt_ids, rel_err, tiny_model  # noqa: E402

import hf_deltalog  # noqa: E402
from hf_deltalog import DeltaLogCache  # noqa: E402


def run(family: str, dtype: torch.dtype, merge_interval: int, new_tokens: int) -> dict:
    model = tiny_model(family, dtype)
    ids = prompt_ids(3, 7)
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True,
              output_logits=True)
    dense, ours = DynamicCache(config=model.config), DeltaLogCache(model, merge_interval=merge_interval)
    with torch.no_grad():
        ref = model.generate(ids, cache=dense, **kw)
        out = model.generate(ids, cache=ours, **kw)
    state_err = max(rel_err(ours.materialize(i), dense.layers[i].recurrent_states[0])
                    for i, layer in enumerate(ours.layers) if layer in ours.deltalog_layers)
    return dict(family=family, dtype=str(dtype).removeprefix("torch."), merge_interval=merge_interval,
                new_tokens=new_tokens, tokens_identical=bool(torch.equal(out.sequences, ref.sequences)),
                token_agreement=float((out.sequences == ref.sequences).float().mean()),
                max_abs_logit_diff=max(max_abs(a, b) for a, b in zip(out.logits, ref.logits)),
                final_state_rel_err=state_err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--merge-intervals", type=int, nargs="+", default=[1, 2, 3, 8, 16])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cache_parity.json")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rows = [run(f, dt, m, args.new_tokens) for f in GDN_FAMILIES for dt in (torch.float32, torch.bfloat16)
            for m in args.merge_intervals]
    meta = dict(torch=torch.__version__, transformers=transformers.__version__, hf_deltalog=hf_deltalog.__version__,
                python=platform.python_version(), machine=platform.machine(), device="cpu")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    print(f"{'family':12} {'dtype':8} {'M':>3} {'same tokens':>11} {'max|dlogit|':>12} {'state rel err':>13}")
    for r in rows:
        print(f"{r['family']:12} {r['dtype']:8} {r['merge_interval']:3d} {str(r['tokens_identical']):>11} "
              f"{r['max_abs_logit_diff']:12.2e} {r['final_state_rel_err']:13.2e}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
