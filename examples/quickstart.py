"""Quickstart: the same generate() call with transformers' default cache and with DeltaLogCache.

Loads the bundled trained checkpoint `eval/checkpoints/gdn-shakespeare` (a Qwen3.5-architecture Gated DeltaNet
hybrid: 3 GDN layers with 2 key heads for 4 value heads, K = V = 128, and 1 attention layer; trained on the
tiny-shakespeare training split by `eval/train_tiny.py`; nothing is downloaded) with its byte-level BPE tokenizer.
Generates greedily for a batch of real prompts with both caches and prints the texts, the token agreement and the
decode time per output token of each (median and range of ``--repeats`` timed runs: on a shared CPU a single run can
be off by an order of magnitude). It runs transformers checkpoints (flash-linear-attention's, e.g. the bundled RWKV6
one, are compared by ``eval/lm_eval_parity.py`` and ``eval/gpu_generate_check_fla.py``).

    python examples/quickstart.py [--model DIR] [--new-tokens 48] [--merge-interval 8] [--device cpu] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.streamers import BaseStreamer

from hf_deltalog import DeltaLogCache
from hf_deltalog.interpreter import hide_fla_on_cpu
from hf_deltalog.lm_eval_cli import (
    checkpoint_note,
    checkpoint_problem,
    config_problem,
    device_problem,
    is_fla_checkpoint,
)

CHECKPOINT = Path(__file__).resolve().parents[1] / "eval" / "checkpoints" / "gdn-shakespeare"
PROMPTS = [
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "HAMLET:\nTo be, or not to be, that is the question:\n",
    "GLOUCESTER:\nNow is the winter of our discontent\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n",
]


class _StepClock(BaseStreamer):
    """Records when generate hands over each step's tokens: the prompt first, then one call per generated token."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def timed_generate(model, inputs, cache, new_tokens: int, repeats: int):
    """Greedy generate; returns (sequences, [ms per output token of the decode phase, prefill excluded] per repeat).

    The decode time is the time from the first generated token to the last, over the ``new_tokens − 1`` decode steps
    between them (read in one call, through a streamer: no subtraction of separately timed calls, so scheduler noise
    cannot make it negative), after an untimed warm-up call that takes one-time setup (lazy initialisation)."""
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    times = []
    with torch.no_grad():
        model.generate(**inputs, cache=cache() if cache else None, max_new_tokens=2, do_sample=False)  # warm-up
        for _ in range(repeats):
            clock = _StepClock()
            out = model.generate(**inputs, cache=cache() if cache else None, streamer=clock, **kw)
            first, last = clock.times[1], clock.times[-1]  # [0]: the prompt; [1]: the prefill's token
            times.append(1e3 * (last - first) / (new_tokens - 1))
    return out, times


def _summary(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} ({min(times):.2f}–{max(times):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(CHECKPOINT),
                        help="a from_pretrained folder (or a hub id already in the local cache)")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--merge-interval", type=int, default=None, help="DeltaLog M (default: 8 for GDN)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per cache (the median is printed)")
    args = parser.parse_args()
    if args.new_tokens < 2:
        parser.error(f"--new-tokens must be at least 2 (the decode time is per token after the first); got "
                     f"{args.new_tokens}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    if args.merge_interval is not None and not 1 <= args.merge_interval <= 1024:
        parser.error(f"--merge-interval must be an integer in [1, 1024] (DeltaLogCache's range); got {args.merge_interval}")
    problem = device_problem(args.device)
    if problem:
        parser.error(f"--device {problem}")
    problem = checkpoint_problem(args.model) or config_problem(args.model)  # else transformers' tracebacks
    if problem:
        parser.error(f"--model {problem}")
    note = checkpoint_note(args.model)
    if note:
        print(note, file=sys.stderr)
    if Path(args.model).is_dir() and not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model}: a folder without config.json, not a checkpoint folder (the quickstart "
                     "loads a transformers checkpoint saved with save_pretrained, or a hub id)")
    if is_fla_checkpoint(args.model):
        parser.error(f"{args.model} is a flash-linear-attention checkpoint; the quickstart runs transformers "
                     "checkpoints (compare FLA's with eval/lm_eval_parity.py or eval/gpu_generate_check_fla.py)")
    hide_fla_on_cpu(args.device)  # with the `fla` extra on a CPU: transformers' PyTorch paths (hf_deltalog.interpreter)
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.logging.set_verbosity_error()

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, local_files_only=True)
    except OSError as e:  # a hub id that is not in the local cache (nothing is downloaded), a checkpoint missing files
        parser.error(f"--model {args.model}: cannot be loaded offline ({str(e).splitlines()[0]})")
    try:  # a model DeltaLogCache does not serve is refused here, before the default cache's timed runs
        DeltaLogCache(model, merge_interval=args.merge_interval)
    except ValueError as e:
        parser.error(f"--model {args.model}: {e}")
    model = model.to(args.device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    inputs = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(args.device)
    width = inputs["input_ids"].shape[1]

    dense, dense_ms = timed_generate(model, inputs, None, args.new_tokens, args.repeats)
    caches = []  # the DeltaLogCaches made, to report the merge interval each layer decoded with

    def new_cache() -> DeltaLogCache:
        caches.append(DeltaLogCache(model, merge_interval=args.merge_interval))
        return caches[-1]

    ours, ours_ms = timed_generate(model, inputs, new_cache, args.new_tokens, args.repeats)

    same = (dense[:, width:] == ours[:, width:]).float().mean().item()
    for i, prompt in enumerate(PROMPTS):
        print(f"prompt {i}: {prompt!r}")
        print(f"  default cache : {tokenizer.decode(dense[i, width:], skip_special_tokens=True)!r}")
        print(f"  DeltaLogCache : {tokenizer.decode(ours[i, width:], skip_special_tokens=True)!r}")
    # The merge interval each linear-attention layer ran with: the cache's policy may decode a small state densely
    # (M = 1; on a GPU through FLA's dense kernel), so the requested M alone does not say what ran.
    ms = sorted({layer.merge_interval for layer in caches[-1].deltalog_layers})
    policy = args.merge_interval is None
    ran = ", ".join(f"M = {m}" + (" (dense: the policy's choice for this small state)" if m == 1 and policy else "")
                    for m in ms)
    print(f"\nmodel: {Path(args.model).name} ({model.config.model_type}, {n_params / 1e6:.1f} M params, fp32), "
          f"batch {len(PROMPTS)}, {args.new_tokens} new tokens, device {args.device}, DeltaLog layers ran {ran}")
    print(f"token agreement: {100 * same:.1f}% ({'identical' if same == 1.0 else 'DIFFERENT'})")
    print(f"decode ms per output token, median (range) of {args.repeats} runs: default cache {_summary(dense_ms)}, "
          f"DeltaLogCache {_summary(ours_ms)}")
    if same != 1.0:
        raise SystemExit("the two caches produced different tokens")


if __name__ == "__main__":
    main()
