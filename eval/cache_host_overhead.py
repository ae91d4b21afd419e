"""Host cost of the cache's per-forward guard (dynamic mode), on the CPU.

A manual decode loop, or ``generate``, calls the cache from every layer; at the first call of each forward
``DeltaLogCache._begin_layer_step`` checks that the layers agree (host counts) and that the input brings the cache's
rows. This script measures, on a tiny Qwen3.5 config with ``--layers`` layers (3 linear : 1 attention, FLA hidden so
that transformers' PyTorch paths run):

- the check's common case (``_layers_agree_on_host``) and its slow path (``_check_consistent(host_only=True)``), µs;
- a decode step (batch 1, one token, PyTorch backend) with the guard and with ``_begin_layer_step`` replaced by a
  no-op, after one warm-up of each, interleaved ``--repeats`` times in one process (alternating which goes first),
  ms per step (median): the guard's share of a step.

    python eval/cache_host_overhead.py [--layers 48] [--steps 30] [--repeats 7] [--out eval/results/cpu/cache_host_overhead.json]

The tiny model's step is itself host-bound (microseconds of arithmetic per layer), so the share printed here is an
upper bound for real models, whose steps take milliseconds of GPU time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_types import positive_int


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--steps", type=positive_int, default=30, help="decode steps per timed run (at least 1)")
    p.add_argument("--repeats", type=positive_int, default=7,
                   help="timed runs of each kind, interleaved (at least 1)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if a.layers < 4 or a.layers % 4:
        p.error("--layers must be a positive multiple of 4 (3 linear-attention layers, then 1 attention layer)")

    from hf_deltalog.interpreter import hide_fla

    hide_fla()
    import torch
    import transformers

    from hf_deltalog import DeltaLogCache

    torch.manual_seed(0)
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=a.layers, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * (a.layers // 4))
    model = transformers.Qwen3_5ForCausalLM(cfg).eval()
    ids = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(1))

    def fresh():
        cache = DeltaLogCache(model, backend="torch")
        with torch.no_grad():
            logits = model(ids, past_key_values=cache, use_cache=True).logits
        return cache, logits[:, -1:].argmax(-1)

    cache, _ = fresh()
    fast = timeit.timeit(cache._layers_agree_on_host, number=5000) / 5000 * 1e6
    slow = timeit.timeit(lambda: cache._check_consistent(int(cache.get_seq_length()), host_only=True),
                         number=1000) / 1000 * 1e6

    def step_ms(guard: bool) -> float:
        cache, x = fresh()
        if not guard:
            cache._begin_layer_step = lambda *args, **kwargs: None
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(a.steps):
                x = model(x, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        return (time.perf_counter() - start) / a.steps * 1e3

    step_ms(True), step_ms(False)  # warm-up
    runs = {"guard": [], "no_guard": []}
    for repeat in range(a.repeats):
        order = (("guard", True), ("no_guard", False))
        for name, guard in order if repeat % 2 == 0 else order[::-1]:  # alternate which goes first
            runs[name].append(step_ms(guard))
    med = {name: statistics.median(v) for name, v in runs.items()}
    result = dict(layers=a.layers, steps=a.steps, repeats=a.repeats, torch=torch.__version__,
                  transformers=transformers.__version__, check_common_case_us=fast, check_slow_path_us=slow,
                  step_ms_median=med, step_ms_runs=runs,
                  guard_share_of_step=(med["guard"] - med["no_guard"]) / med["no_guard"])
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
