"""Quickstart: the same generate() call with transformers' default cache and with DeltaLogCache.

Builds a small Qwen3.5-architecture model (3 Gated DeltaNet layers and 1 attention layer, K = 64 ≠ V = 128,
2 key heads for 4 value heads) from the config bundled next to this script, with random weights (nothing is
downloaded), and a byte-level tokenizer. Generates greedily for a batch of real prompts with both caches and prints
the texts, the token agreement and the decode time per output token of each.

    python examples/quickstart.py [--new-tokens 48] [--merge-interval 8] [--device cpu]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

from hf_deltalog import DeltaLogCache

CONFIG = Path(__file__).parent / "configs" / "qwen3_5-tiny.json"
PROMPTS = [
    "First Citizen: Before we proceed any further, hear me speak.",
    "To be, or not to be, that is the question:",
    "Now is the winter of our discontent",
    "O Romeo, Romeo! wherefore art thou Romeo?",
]


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (one id per byte, then pad/bos/eos), built with the `tokenizers` library."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   padding_side="left")
    return fast


def build_model(device: str) -> transformers.PreTrainedModel:
    config = AutoConfig.for_model(**{**_read(CONFIG)})
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).to(device).eval()


def _read(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


def timed_generate(model, inputs, cache, new_tokens: int):
    """Greedy generate; returns (sequences, ms per output token of the decode phase, prefill excluded)."""
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    with torch.no_grad():
        t0 = time.perf_counter()
        model.generate(**inputs, cache=cache() if cache else None, max_new_tokens=1, do_sample=False)
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = model.generate(**inputs, cache=cache() if cache else None, **kw)
        total = time.perf_counter() - t0
    return out, 1e3 * (total - prefill) / (new_tokens - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--merge-interval", type=int, default=None, help="DeltaLog M (default: 8 for GDN)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.logging.set_verbosity_error()

    tokenizer = byte_tokenizer()
    model = build_model(args.device)
    inputs = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(args.device)
    width = inputs["input_ids"].shape[1]

    dense, dense_ms = timed_generate(model, inputs, None, args.new_tokens)
    ours, ours_ms = timed_generate(model, inputs, lambda: DeltaLogCache(model, merge_interval=args.merge_interval),
                                   args.new_tokens)

    same = (dense[:, width:] == ours[:, width:]).float().mean().item()
    for i, prompt in enumerate(PROMPTS):
        print(f"prompt {i}: {prompt!r}")
        print(f"  default cache : {tokenizer.decode(dense[i, width:], skip_special_tokens=True)!r}")
        print(f"  DeltaLogCache : {tokenizer.decode(ours[i, width:], skip_special_tokens=True)!r}")
    m = DeltaLogCache(model, merge_interval=args.merge_interval).merge_interval
    print(f"\nmodel: {CONFIG.name} (random weights, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M params), "
          f"batch {len(PROMPTS)}, {args.new_tokens} new tokens, device {args.device}, DeltaLog M = {m}")
    print(f"token agreement: {100 * same:.1f}% ({'identical' if same == 1.0 else 'DIFFERENT'})")
    print(f"decode ms per output token: default cache {dense_ms:.2f}, DeltaLogCache {ours_ms:.2f}")
    if same != 1.0:
        raise SystemExit("the two caches produced different tokens")


if __name__ == "__main__":
    main()
