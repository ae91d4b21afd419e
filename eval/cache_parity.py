"""Token and logit parity of DeltaLogCache against transformers' default cache, per GDN and KDA family, dtype and M.

Tiny random models of each family (the test suite's configs: GDN Hk = 2, HV = 4, K = 8, V = 16; KDA H = 4,
K = V = 16), a batch of 3 prompts,
greedy decoding. For each (family, dtype, M) it records whether the tokens are identical, the largest |Δlogit| up to
the first differing token, the reference's top-two logit margin there (a near tie explains a bf16 divergence), and the
largest relative error of the materialised state against the dense state at the end.

    python eval/cache_parity.py --force [--new-tokens 64] [--out eval/results/cache_parity.json]

``token_agreement`` is the share of generated tokens (prompt excluded) that are identical.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_types import int_in, positive_int  # noqa: E402
from generate_compare import compare  # noqa: E402
from utils import FAMILIES, prompt_ids, rel_err, tiny_model  # noqa: E402

import hf_deltalog  # noqa: E402
from hf_deltalog import DeltaLogCache  # noqa: E402
from hf_deltalog.cache import MAX_MERGE_INTERVAL  # noqa: E402
from hf_deltalog.interpreter import hide_fla_on_cpu  # noqa: E402


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
    same = compare(out, ref, ids.shape[1], new_tokens)  # token_agreement over the generated tokens only
    return dict(family=family, dtype=str(dtype).removeprefix("torch."), merge_interval=merge_interval,
                new_tokens=new_tokens, tokens_identical=same["first_differing_step"] is None,
                token_agreement=same["token_agreement"],
                max_abs_logit_diff_while_tokens_agree=same["max_abs_logit_diff_while_tokens_agree"],
                first_differing_step=same["first_differing_step"],
                top2_margin_at_first_difference=same["top2_margin_at_first_difference"],
                final_state_rel_err=state_err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=positive_int, default=64)
    parser.add_argument("--merge-intervals", type=int_in(1, MAX_MERGE_INTERVAL, " (DeltaLogCache's merge_interval)"), nargs="+", default=[1, 2, 3, 8, 16],
                        help="DeltaLog M values, each in [1, 1024] (default: 1 2 3 8 16)")
    parser.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cache_parity.json")
    parser.add_argument("--force", action="store_true",
                        help="overwrite --out if it exists (the default --out is the committed results file)")
    args = parser.parse_args()
    if args.out.exists() and not args.force:
        parser.error(f"--out {args.out} exists (the default is the committed results file): pass --force to "
                     "overwrite it, or another --out")
    if args.out.is_dir():
        parser.error(f"--out {args.out} is a directory; give a file path")
    hide_fla_on_cpu("cpu")  # transformers' own models on the CPU (see hf_deltalog.interpreter)
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rows = [run(f, dt, m, args.new_tokens) for f in args.families for dt in (torch.float32, torch.bfloat16)
            for m in args.merge_intervals]
    meta = dict(torch=torch.__version__, transformers=transformers.__version__, hf_deltalog=hf_deltalog.__version__,
                python=platform.python_version(), machine=platform.machine(), device="cpu")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    print(f"{'family':14} {'dtype':8} {'M':>3} {'same tokens':>11} {'max|dlogit|*':>12} {'first diff':>10} "
          f"{'top-2 margin':>12} {'state rel err':>13}")
    for r in rows:
        margin = r["top2_margin_at_first_difference"]
        print(f"{r['family']:14} {r['dtype']:8} {r['merge_interval']:3d} {str(r['tokens_identical']):>11} "
              f"{r['max_abs_logit_diff_while_tokens_agree']:12.2e} {str(r['first_differing_step']):>10} "
              f"{'-' if margin is None else f'{margin:.2e}':>12} {r['final_state_rel_err']:13.2e}")
    print("* over the decode steps up to the first differing token (later logits follow different tokens)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
