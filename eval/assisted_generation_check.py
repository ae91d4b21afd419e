"""Greedy assisted generation (prompt lookup) against plain greedy generation, default cache and DeltaLogCache.

transformers >= 5.25 runs assisted generation on linear-attention models by keeping the recurrent states after a
multi-token forward's last tokens (``activate_past_recording(recurrent_states_to_keep=n)``) and cropping the rejected
draft tokens. Greedy assisted generation must reproduce plain greedy generation token for token. This script checks
that on the tiny random models of the test suite (fp32), for transformers' default cache and for DeltaLogCache,
and counts the draft tokens the crops removed.

    python eval/assisted_generation_check.py --out eval/results/cpu/assisted_generation_5.25.json
    python eval/assisted_generation_check.py --keep-one-more --out eval/results/cpu/assisted_generation_5.25_keep_one_more.json
    python eval/assisted_generation_check.py --device cuda --backend triton --out eval/results/h200/round74/assisted_triton_M4.json

On a GPU transformers runs its GDN / KDA layers through FLA's kernels (chunked for multi-token forwards, whose fp32
products round to TF32), so a draft forward and a one-token step can differ by rounding there, for either cache; each
row also reports the largest |Δlogit| between plain greedy generation with the default cache and with DeltaLogCache.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cli_types import deltalog_merge_interval, positive_int  # noqa: E402 - eval/ is on sys.path when run as a script

# Repeating n-grams, so that prompt lookup proposes drafts.
PROMPTS = [[5, 6, 7, 8] * 3 + [5, 6], [9, 10, 11] * 4 + [9], [20, 21, 22, 23, 24] * 2 + [20, 21]]


def removed_tokens(cache) -> list[int]:
    """Wrap ``cache.crop`` to record the tokens each crop removes; returns the (growing) record."""
    record: list[int] = []
    crop = cache.crop

    def counting(tokens_to_remove):
        record.append(-int(tokens_to_remove))
        return crop(tokens_to_remove)

    cache.crop = counting
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    parser.add_argument("--max-new-tokens", type=positive_int, default=24)
    parser.add_argument("--draft", type=positive_int, default=3, help="prompt_lookup_num_tokens")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--backend", default="auto", choices=("auto", "torch", "triton"),
                        help="DeltaLogCache's backend (on a GPU, triton runs our kernels; auto may decode these tiny "
                             "states densely)")
    parser.add_argument("--merge-interval", type=deltalog_merge_interval, default=4,
                        help="DeltaLogCache's merge interval M")
    parser.add_argument("--keep-one-more", action="store_true",
                        help="make transformers' linear-attention cache layers keep one more recurrent state than "
                             "generate asks for (a diagnosis of the default cache's result)")
    args = parser.parse_args()
    from hf_deltalog.interpreter import hide_fla_on_cpu
    from hf_deltalog.lm_eval_cli import device_problem

    problem = device_problem(args.device)
    if problem:
        parser.error(f"--device {problem}")

    hide_fla_on_cpu(args.device)  # before transformers' GDN / KDA modules are imported (see its docstring)
    import torch
    import transformers
    from transformers import DynamicCache
    from utils import FAMILIES, tiny_model

    from hf_deltalog import DeltaLogCache

    ours = f"deltalog_M{args.merge_interval}"
    device = torch.device(args.device)
    if device.type == "cuda":
        # FLA's autotuners (transformers' GDN / KDA layers run FLA's kernels on a GPU) try their first config only:
        # this checks tokens, and autotuning FLA's chunked kernels for every tiny shape takes minutes
        from triton.runtime.autotuner import Autotuner

        prune = Autotuner.prune_configs
        Autotuner.prune_configs = lambda self, kwargs: prune(self, kwargs)[:1]
    if args.keep_one_more:
        from transformers.cache_utils import LinearAttentionCacheLayerMixin

        upstream = LinearAttentionCacheLayerMixin.activate_past_recording

        def one_more(self, recurrent_states_to_keep=None):
            upstream(self, None if recurrent_states_to_keep is None else recurrent_states_to_keep + 1)

        LinearAttentionCacheLayerMixin.activate_past_recording = one_more
    rows = []
    for family in FAMILIES:
        model = tiny_model(family).to(device)  # a cached model: moved back below
        for prompt in PROMPTS:
            ids = torch.tensor([prompt], device=device)
            with torch.no_grad():
                greedy = {"do_sample": False, "output_scores": True, "return_dict_in_generate": True}
                ref = model.generate(ids, max_new_tokens=args.max_new_tokens, **greedy)
                plain = model.generate(ids, max_new_tokens=args.max_new_tokens, **greedy, cache=DeltaLogCache(
                    model, merge_interval=args.merge_interval, backend=args.backend))
                steps = min(len(ref.scores), len(plain.scores))
                row = {"family": family, "prompt": prompt,
                       "plain_greedy_identical": bool(torch.equal(plain.sequences, ref.sequences)),
                       "plain_greedy_max_abs_dlogit": max(
                           (a - b).abs().max().item() for a, b in zip(ref.scores[:steps], plain.scores[:steps]))}
                ref = ref.sequences
                for name, cache in (("default", DynamicCache(config=model.config)),
                                    (ours, DeltaLogCache(model, merge_interval=args.merge_interval,
                                                         backend=args.backend))):
                    record = removed_tokens(cache)
                    out = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False,
                                         prompt_lookup_num_tokens=args.draft, cache=cache)
                    same = bool(torch.equal(out, ref))
                    diverges = None if same else int((out[0, :ref.shape[1]] != ref[0, :out.shape[1]]).nonzero()[0])
                    row[name] = {"identical_to_greedy": same, "first_differing_position": diverges,
                                 "crops": len(record), "draft_tokens_removed": sum(record),
                                 "max_removed_by_one_crop": max(record, default=0)}
            rows.append(row)
            print(f"{family:15s} prompt {len(rows) % len(PROMPTS) or len(PROMPTS)}: "
                  + "  ".join(f"{k}: {'identical' if v['identical_to_greedy'] else 'DIFFERS at ' + str(v['first_differing_position'])}"
                              f" ({v['draft_tokens_removed']} draft tokens cropped)"
                              for k, v in row.items() if isinstance(v, dict)))
        model.to("cpu")
    summary = {name: sum(r[name]["identical_to_greedy"] for r in rows) for name in ("default", ours)}
    print(f"identical to greedy: {summary} of {len(rows)} runs")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "transformers": transformers.__version__, "torch": torch.__version__, "device": str(device),
            "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None, "backend": args.backend,
            "merge_interval": args.merge_interval,
            "max_new_tokens": args.max_new_tokens, "prompt_lookup_num_tokens": args.draft,
            "default_cache_keeps_one_more_state": args.keep_one_more,
            "identical_to_greedy": summary, "runs": len(rows), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
