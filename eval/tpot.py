"""Decode time per output token (TPOT) of generate-style greedy decoding: default cache vs DeltaLogCache, eager and
CUDA-graph modes, full-size architectures with random bf16 weights built directly on the GPU.

Pairs compared (same model, prompt and batch in each pair; tokens compared between the two caches):

* ``eager``: ``model.generate`` with transformers' default cache (``DynamicCache``; FLA kernels when installed)
  against ``model.generate`` with ``DeltaLogCache(model)``. Per-step times come from CUDA events recorded by a
  stopping criterion after every token; the prefill is excluded.
* ``graph``: :func:`hf_deltalog.graph.GraphDecoder` (one captured CUDA graph of the one-token forward, replayed every
  step) on transformers' ``StaticCache`` against the same loop on ``DeltaLogCache(model, static=True)``: both sides
  get the same launch savings.

Per run: TPOT in ms/token (median of each repeat's per-step times; repeats are consecutive blocks of
``--new-tokens`` steps of one generation in graph mode, separate ``generate`` calls in eager mode), the spread
(p10/p90 of all steps, min/max of the repeat medians), peak GPU memory, the cache's recurrent-state bytes and the
DeltaLog buffers' overhead, and token agreement with the other cache of the pair. A profile of
``--profile-steps`` decode steps per batch size gives the share of GPU time spent updating the recurrent state
(the recurrence kernel plus, for the default cache, the copy of the new state into its buffer).

Results are written after every run (JSON and CSV under ``--out``); ``eval/tpot_report.py`` draws the plots and the
table. No matplotlib, numpy or network is needed on the GPU machine.

    python eval/tpot.py --out eval/results/h200/tpot --models qwen3_5_35b_a3b --batch-sizes 1 16 64 128 256 \\
        --modes graph eager --time-budget-s 540
    python eval/tpot.py --cpu-smoke --out /tmp/tpot-smoke      # tiny model on the CPU (what CI runs)
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_types import deltalog_merge_interval, fraction, non_negative_int, positive_int

sys.path.append(str(Path(__file__).resolve().parents[1]))  # hf_deltalog from this checkout when it is not installed
from hf_deltalog.lm_eval_cli import checkpoint_problem  # noqa: E402 - light: no torch, transformers or triton

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "eval" / "configs"
GIB = 1 << 30

# name -> (config file or None, dtype, note)
MODELS = {
    "qwen3_5_35b_a3b": dict(config=CONFIGS / "qwen3_5_35b_a3b.json", dtype="bfloat16",
                            note="Qwen3.5-35B-A3B architecture (text), random bf16 weights"),
    "kimi_linear_48b_a3b": dict(config=CONFIGS / "kimi_linear_48b_a3b.json", dtype="bfloat16",
                                note="Kimi-Linear-48B-A3B architecture, random bf16 weights"),
}
# The CPU smoke model: a tiny Qwen3.5-MoE config (GQA, K != V), fp32.
SMOKE_CONFIG = dict(model_type="qwen3_5_moe_text", vocab_size=128, hidden_size=64, num_hidden_layers=4,
                    layer_types=["linear_attention", "full_attention"] * 2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                    linear_key_head_dim=8, linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4,
                    num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                    tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)

# Guesses for the time estimate before anything was measured (ms): prefill per 1k prompt tokens, eager step,
# graph step at B = 256 (scaled linearly in B above a floor). Replaced by measurements as runs complete.
GUESS = {"prefill_ms_per_ktok": 40.0, "eager_step_ms": 220.0, "graph_step_ms_b256": 90.0, "graph_floor_ms": 15.0}


def parse(argv=None):
    # allow_abbrev=False: an abbreviation of --cpu-smoke (--cpu) would turn smoke mode on without its defaults
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--out", type=Path, required=True, help="folder for tpot.json / tpot.csv (written after every run)")
    p.add_argument("--models", nargs="+", default=["qwen3_5_35b_a3b", "kimi_linear_48b_a3b"],
                   help=f"built-in architectures ({', '.join(MODELS)}; smoke: --cpu-smoke's tiny model) or NAME=PATH "
                        "of a trained checkpoint folder")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64, 128, 256])
    p.add_argument("--modes", nargs="+", choices=["graph", "eager"], default=["graph", "eager"])
    p.add_argument("--eager-batch-sizes", nargs="+", type=int, default=None,
                   help="run eager mode only at these batch sizes (default: all); eager steps are slow")
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--new-tokens", type=int, default=128, help="timed decode steps per repeat")
    p.add_argument("--eager-new-tokens", type=int, default=None,
                   help="new tokens per eager generate call (default: --new-tokens); eager steps are slow")
    p.add_argument("--repeats", type=int, default=3, help="graph: timed blocks of --new-tokens steps; eager: calls")
    p.add_argument("--eager-repeats", type=int, default=1)
    p.add_argument("--warmup-steps", type=positive_int, default=2,
                   help="graph mode: eager decode steps before the CUDA-graph capture (at least 1: GraphDecoder runs "
                        "one before it captures)")
    p.add_argument("--profile-steps", type=non_negative_int, default=8,
                   help="eager-launched steps profiled per graph run (0: off)")
    p.add_argument("--record-margins", action="store_true",
                   help="graph mode: keep every step's top-2 logit gap and report it where the caches' tokens part "
                        "(one topk per step inside both graphs; off by default so the timed step is the plain one)")
    p.add_argument("--control-batch-sizes", type=int, nargs="*", default=None,
                   help="graph mode: at these batch sizes also run the static baseline a second time with the prompt "
                        "prefilled in chunks of other boundaries (same math, other rounding) and report its token "
                        "agreement with the first: how far rounding alone moves this model's greedy tokens")
    p.add_argument("--staggered-batch-sizes", type=int, nargs="*", default=None,
                   help="graph mode: at these batch sizes also run DeltaLogCache with stagger_merges=True (cache "
                        "'deltalog_staggered'), so that staggered merge phases and the default's aligned ones are "
                        "timed in one process")
    p.add_argument("--staggered-first", action="store_true",
                   help="with --staggered-batch-sizes: run the staggered DeltaLogCache before the default one (the "
                        "order of the two, swapped between two runs, should not matter)")
    p.add_argument("--merge-interval", type=deltalog_merge_interval, default=None,
                   help="DeltaLog M, 1 to 1024 (default: the cache's policy)")
    p.add_argument("--prefill-chunk-tokens", type=positive_int, default=65536,
                   help="prefill in time chunks of at most this many tokens over the batch (activation memory)")
    p.add_argument("--time-budget-s", type=float, default=None,
                   help="skip runs whose estimate would overrun this wall time (results so far are kept)")
    p.add_argument("--memory-fraction", type=fraction, default=0.92,
                   help="of the GPU memory the plan may use (above 0, at most 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny fp32 model on the CPU, B in {1, 2}, 8-token prompts: checks the script end to end")
    if p.parse_known_args(argv)[0].cpu_smoke:  # smoke defaults; explicit options still win
        p.set_defaults(models=["smoke"], batch_sizes=[1, 2], prompt_len=8, new_tokens=6, eager_new_tokens=6,
                       repeats=2, profile_steps=3)
    a = p.parse_args(argv)
    for name in a.models:
        label, sep, path = name.partition("=")
        if sep and not (label and path):
            p.error(f"--models: {name!r} is not NAME=PATH (both parts non-empty)")
        problem = sep and checkpoint_problem(path)  # transformers' "Repo id must be in the form ..." after imports
        if problem:
            p.error(f"--models {name}: {problem}")
        if not sep and name not in MODELS and name != "smoke":
            p.error(f"--models: unknown model {name!r}; accepted: {', '.join(MODELS)}, smoke (the --cpu-smoke model) "
                    "or NAME=PATH of a trained checkpoint folder")
    if a.eager_new_tokens is None:
        a.eager_new_tokens = a.new_tokens
    for name in ("prompt_len", "new_tokens", "eager_new_tokens", "repeats", "eager_repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.new_tokens < 2 or a.eager_new_tokens < 2:
        p.error("--new-tokens and --eager-new-tokens must be >= 2 (the first token comes from the prefill)")
    if any(b < 1 for b in a.batch_sizes):
        p.error("batch sizes must be >= 1")
    for name in ("control_batch_sizes", "staggered_batch_sizes"):  # graph-mode extras: name what they would miss
        missing = sorted(set(getattr(a, name) or ()) - set(a.batch_sizes))
        if missing or (getattr(a, name) and "graph" not in a.modes):
            p.error(f"--{name.replace('_', '-')} adds graph-mode runs at batch sizes of --batch-sizes; got "
                    f"{getattr(a, name)} with --batch-sizes {a.batch_sizes} and --modes {a.modes}")
    if a.eager_batch_sizes is not None:  # a subset of the eager runs: name the ones it would silently drop
        missing = sorted(set(a.eager_batch_sizes) - set(a.batch_sizes))
        if missing or "eager" not in a.modes:
            p.error(f"--eager-batch-sizes picks eager-mode runs among --batch-sizes; got {a.eager_batch_sizes} with "
                    f"--batch-sizes {a.batch_sizes} and --modes {a.modes} (batch sizes {missing} would not run)"
                    if missing else f"--eager-batch-sizes needs 'eager' in --modes; got --modes {a.modes}")
    if a.staggered_first and not a.staggered_batch_sizes:
        p.error("--staggered-first orders the runs of --staggered-batch-sizes; give that option too")
    return a


# ---------------------------------------------------------------------------------------------- models
def build_model(name, device, dtype_override=None):
    """Random-weight model of a built-in architecture, built directly on ``device``, or a checkpoint folder."""
    import torch
    import transformers

    if name == "smoke":
        config = transformers.AutoConfig.for_model(**SMOKE_CONFIG)
        dtype = torch.float32
    elif "=" in name:
        _, path = name.split("=", 1)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype_override or "auto")
        return model.to(device).eval()
    else:
        spec = MODELS[name]
        fields = {k: v for k, v in json.loads(Path(spec["config"]).read_text()).items() if not k.startswith("_")}
        config = transformers.AutoConfig.for_model(**fields)
        dtype = getattr(torch, spec["dtype"])
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def model_geometry(model):
    """Bytes per row of the recurrent states and per token-row of the attention KV cache, from the config."""
    from hf_deltalog.patches.registry import _resolve

    cfg = model.config.get_text_config(decoder=True)
    kinds = list(cfg.layer_types)
    n_linear, n_attn = kinds.count("linear_attention"), len(kinds) - kinds.count("linear_attention")
    _, HV, K, V = _resolve(cfg.model_type).dims(cfg)
    state_row = n_linear * HV * K * V * 4
    if getattr(cfg, "kv_lora_rank", None):  # MLA, cached expanded per head by transformers
        per_token = cfg.num_attention_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim + cfg.v_head_dim)
    else:
        per_token = 2 * cfg.num_key_value_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    elt = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return dict(state_bytes_per_row=state_row, kv_bytes_per_token_row=n_attn * per_token * elt,
                weight_bytes=weights, linear_layers=n_linear, attention_layers=n_attn)


def plan_prompt(geometry, batch, prompt_len, total_new, capacity_bytes, headroom_bytes):
    """The prompt length used at this batch size: the requested one, or the largest multiple of 64 whose static KV
    cache, recurrent states (+15 % log) and headroom fit next to the weights. Returns (prompt_len, need_bytes)."""
    def need(t):
        return (geometry["weight_bytes"] + batch * (t + total_new) * geometry["kv_bytes_per_token_row"]
                + 1.15 * batch * geometry["state_bytes_per_row"] + headroom_bytes)

    if capacity_bytes is None or need(prompt_len) <= capacity_bytes:
        return prompt_len, need(prompt_len)
    t = prompt_len
    while t > 64 and need(t) > capacity_bytes:
        t -= 64
    return t, need(t)


# ---------------------------------------------------------------------------------------------- runs
class EventTimes:
    """A stopping criterion that never stops: it records a CUDA event (or a host time) after every token."""

    def __init__(self, cuda):
        import torch
        from transformers import StoppingCriteria

        timer = self

        class _Criterion(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                timer.mark()
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        self.cuda, self.marks, self.criterion = cuda, [], _Criterion()

    def mark(self):
        import torch

        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def laps_ms(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [1e3 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


def summarize(blocks):
    """TPOT statistics from per-step times grouped in repeats (ms)."""
    steps = sorted(x for b in blocks for x in b)
    medians = [statistics.median(b) for b in blocks if b]

    def pct(q):
        return steps[min(len(steps) - 1, max(0, round(q * (len(steps) - 1))))]

    return dict(tpot_ms=statistics.median(medians), tpot_ms_repeats=medians, tpot_ms_min=min(medians),
                tpot_ms_max=max(medians), step_ms_p10=pct(0.1), step_ms_p90=pct(0.9), steps_timed=len(steps))


def make_prompt(vocab, batch, length, device, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, min(vocab, 32000), (batch, length), generator=g)
    return ids.to(device), torch.ones(batch, length, dtype=torch.long, device=device)


def cache_state_bytes(cache):
    """Recurrent-state bytes of a transformers cache (its linear-attention layers' recurrent states)."""
    from hf_deltalog import DeltaLogCache

    if isinstance(cache, DeltaLogCache):
        return cache.memory_breakdown()["state"]
    total = 0
    for layer in cache.layers:
        for t in getattr(layer, "recurrent_states", {}).values():
            if t is not None:
                total += t.numel() * t.element_size()
    return total


def run_eager(model, cache_kind, ids, mask, new_tokens, repeats, merge_interval, prefill_chunk, cuda):
    import torch

    from hf_deltalog import DeltaLogCache

    blocks, sequences, extra = [], None, {}
    for _ in range(repeats):
        timer = EventTimes(cuda)
        cache = DeltaLogCache(model, merge_interval=merge_interval) if cache_kind == "deltalog" else None
        kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                  stopping_criteria=[timer.criterion], return_dict_in_generate=True)
        if prefill_chunk < ids.shape[1]:
            kw["prefill_chunk_size"] = prefill_chunk  # transformers' chunked prefill (activation memory)
        if cache is not None:
            kw["cache"] = cache
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, **kw)
        blocks.append(timer.laps_ms())  # N tokens -> N - 1 decode steps (the first token is the prefill's)
        sequences = out.sequences[:, ids.shape[1]:]
        if cache is not None:
            extra = dict(cache.memory_breakdown(), merge_intervals=sorted({layer.merge_interval
                                                                           for layer in cache.deltalog_layers}),
                         staggered=sorted({layer.staggered for layer in cache.deltalog_layers}))
        else:
            extra = dict(state=cache_state_bytes(out.past_key_values))
        del out, cache
    return blocks, sequences, extra


def run_graph(model, cache_kind, ids, mask, new_tokens, repeats, warmup, merge_interval, prefill_chunk,
              profile_steps, cuda, record_margins=False):
    import torch
    import transformers

    from hf_deltalog import DeltaLogCache
    from hf_deltalog.graph import GraphDecoder, StepTimer

    total = 1 + (warmup + 1) + repeats * new_tokens + profile_steps  # prefill token, warm-up + capture steps, ...
    max_len = ids.shape[1] + total
    if cache_kind in ("deltalog", "deltalog_staggered"):
        cache = DeltaLogCache(model, merge_interval=merge_interval, static=True, max_cache_len=max_len,
                              stagger_merges=cache_kind == "deltalog_staggered")
    else:
        cache = transformers.StaticCache(config=model.config, max_cache_len=max_len)
    dec = GraphDecoder(model, cache, capture=cuda, warmup_steps=warmup, eos_token_id=None,
                       record_margins=record_margins)
    dec.prefill(ids, mask, max_new_tokens=total, prefill_chunk=prefill_chunk)
    for _ in range(warmup + 1):  # eager warm-up steps, then the capture (and its first replay)
        dec.step()
    blocks = []
    for _ in range(repeats):
        timer = StepTimer(dec.device)
        timer.start()
        for _ in range(new_tokens):
            dec.step()
            timer.lap()
        blocks.append(timer.laps_ms())
    profile = profile_steps_share(dec, model, profile_steps, cuda) if profile_steps else None
    steps = 1 + warmup + 1 + repeats * new_tokens
    sequences = dec.tokens[:, :steps].clone()
    if cache_kind in ("deltalog", "deltalog_staggered"):
        extra = dict(cache.memory_breakdown(), merge_intervals=sorted({layer.merge_interval
                                                                       for layer in cache.deltalog_layers}),
                     backends=sorted({layer.backend for layer in cache.deltalog_layers}),
                     staggered=sorted({layer.staggered for layer in cache.deltalog_layers}))
    else:
        extra = dict(state=cache_state_bytes(cache))
    extra["captured"] = dec.captured
    if record_margins:
        extra["margins"] = dec.margins[:, :steps].cpu()
    del dec, cache
    return blocks, sequences, extra, profile


LABEL_STEP, LABEL_STATE = "tpot::decode_step", "tpot::recurrent_state_update"


@contextmanager
def _state_update_labels(model):
    """Label, for the profiler, every call that updates a recurrent state: the recurrence global of the model's
    modeling module (hf_deltalog's dispatcher, which runs DeltaLog or falls through to FLA/torch) and transformers'
    ``LinearAttentionLayer.update_recurrent_state`` (the default caches' copy into their buffer)."""
    import importlib

    import torch
    from transformers.cache_utils import LinearAttentionLayer

    from hf_deltalog.patches.registry import _resolve

    spec = _resolve(model.config.get_text_config(decoder=True).model_type)
    module = importlib.import_module(spec.module)
    saved = getattr(module, spec.recurrent), LinearAttentionLayer.update_recurrent_state

    def labelled(fn):
        def call(*args, **kwargs):
            with torch.profiler.record_function(LABEL_STATE):
                return fn(*args, **kwargs)
        return call

    setattr(module, spec.recurrent, labelled(saved[0]))
    LinearAttentionLayer.update_recurrent_state = labelled(saved[1])
    try:
        yield
    finally:
        setattr(module, spec.recurrent, saved[0])
        LinearAttentionLayer.update_recurrent_state = saved[1]


def profile_steps_share(dec, model, steps, cuda):
    """Share of decode time in recurrent-state updates over ``steps`` steps, launched eagerly (the kernels the
    graph replays, with their launches attributable to the labelled calls). GPU time on CUDA, CPU time otherwise."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with _state_update_labels(model), profile(activities=activities) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(LABEL_STEP), torch.no_grad():
                dec._step_body()
        if cuda:
            torch.cuda.synchronize()
    # The host-side ranges of the labels; each one's device time is that of the kernels launched inside it.
    totals = {LABEL_STEP: 0.0, LABEL_STATE: 0.0}
    for e in prof.events():
        if e.name in totals and e.device_type == torch.autograd.DeviceType.CPU:
            totals[e.name] += _device_us(e) if cuda else e.cpu_time_total
    step_us, state_us = totals[LABEL_STEP], totals[LABEL_STATE]
    out = dict(steps=steps, clock="gpu" if cuda else "cpu", step_ms=step_us / 1e3 / steps,
               state_update_ms=state_us / 1e3 / steps, share=(state_us / step_us) if step_us else None)
    if cuda:
        # Cross-check by kernel names: the recurrence kernels (ours and FLA's) and all device copies.
        rows = [e for e in prof.key_averages() if _self_device_us(e) > 0]
        total = sum(map(_self_device_us, rows))
        recurrent = sum(_self_device_us(e) for e in rows if any(s in e.key for s in ("deltalog", "fused_recurrent")))
        copies = sum(_self_device_us(e) for e in rows if "Memcpy DtoD" in e.key or "copy" in e.key.lower())
        out.update(kernel_ms=total / 1e3 / steps, recurrence_kernels_share=recurrent / total if total else None,
                   copy_kernels_share=copies / total if total else None,
                   top_kernels=[dict(name=e.key[:120], ms_per_step=_self_device_us(e) / 1e3 / steps)
                                for e in sorted(rows, key=lambda e: -_self_device_us(e))[:12]])
    return out


def _device_us(e):
    return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)


def _self_device_us(e):
    return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)


def agreement(a, b, margins_a=None, margins_b=None):
    """Fraction of equal tokens and the first step where any row differs (None: identical). With the top-2 logit
    margins of both runs (``[B, steps]``, graph mode with --record-margins): for every row that differs, the margin
    each run had at that row's first differing step (``margins_at_first_difference``: the baseline's and ours, the
    largest over rows, their median, and the row count)."""
    n = min(a.shape[1], b.shape[1])
    a, b = a[:, :n].cpu(), b[:, :n].cpu()
    differs = (a != b).any(dim=0).nonzero()
    out = dict(token_agreement=(a == b).float().mean().item(), identical=bool((a == b).all()),
               first_differing_step=int(differs[0]) if len(differs) else None, compared_steps=n)
    if margins_a is not None and margins_b is not None:
        rows = (a != b).any(dim=1).nonzero().flatten()
        first = [int((a[r] != b[r]).nonzero()[0]) for r in rows.tolist()]
        base = [float(margins_b[r, s]) for r, s in zip(rows.tolist(), first)]
        ours = [float(margins_a[r, s]) for r, s in zip(rows.tolist(), first)]
        out["margins_at_first_difference"] = dict(
            rows=len(first), baseline_max=max(base, default=None), ours_max=max(ours, default=None),
            baseline_median=statistics.median(base) if base else None,
            ours_median=statistics.median(ours) if ours else None,
            first_steps_median=statistics.median(first) if first else None)
    return out


# ---------------------------------------------------------------------------------------------- driver
def versions():
    import torch
    import transformers

    import hf_deltalog

    info = dict(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__,
                hf_deltalog=hf_deltalog.__version__)
    for mod in ("triton", "fla"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional
            info[mod] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GIB, 1)
    return info


class Results:
    def __init__(self, out: Path, meta: dict):
        self.out, self.data = out, dict(meta=meta, runs=[], skipped=[])
        out.mkdir(parents=True, exist_ok=True)

    def add(self, row=None, skipped=None):
        if row is not None:
            self.data["runs"].append(row)
        if skipped is not None:
            self.data["skipped"].append(skipped)
        self.write()

    def write(self):
        (self.out / "tpot.json").write_text(json.dumps(self.data, indent=1) + "\n")
        fields = ["model", "mode", "cache", "batch", "prompt_len", "new_tokens", "repeats", "tpot_ms", "tpot_ms_min",
                  "tpot_ms_max", "step_ms_p10", "step_ms_p90", "speedup_vs_baseline", "token_agreement",
                  "first_differing_step", "peak_memory_gib", "state_bytes", "log_overhead", "crop_ring_bytes",
                  "state_update_share", "staggered", "staggered_speedup_vs_default", "wall_s"]
        with open(self.out / "tpot.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            for r in self.data["runs"]:
                w.writerow(r)


def estimate_s(mode, batch, prompt_len, steps, measured):
    """Rough wall time of one run (s), from measurements of this model so far, else from GUESS."""
    pre = measured.get("prefill_ms_per_ktok", GUESS["prefill_ms_per_ktok"]) * batch * prompt_len / 1e3
    if mode == "eager":
        step = measured.get("eager_step_ms", GUESS["eager_step_ms"])
    else:
        per_row = measured.get("graph_ms_per_row", GUESS["graph_step_ms_b256"] / 256)
        step = max(GUESS["graph_floor_ms"], per_row * batch)
    return (pre + steps * step) / 1e3 + 2.0


def main(argv=None):
    a = parse(argv)
    if a.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (hf_deltalog may import it)
        # transformers' GDN / KDA layers take their PyTorch paths: with flash-linear-attention installed transformers
        # binds them to FLA's kernels, which fail on a CPU ("0 active drivers"; tests/conftest.py does the same)
        from hf_deltalog.interpreter import hide_fla

        hide_fla()
    import torch
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    cuda = torch.cuda.is_available() and not a.cpu_smoke
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda and not a.cpu_smoke:
        sys.exit("no CUDA device: use --cpu-smoke on a CPU")
    meta = dict(versions(), args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                started=time.strftime("%Y-%m-%d %H:%M:%S"),
                command="python eval/tpot.py " + " ".join(sys.argv[1:] if argv is None else argv),
                cpu_smoke=a.cpu_smoke, method=__doc__.split("\n\n")[1].strip())
    results = Results(a.out, meta)
    t_start = time.perf_counter()
    capacity = torch.cuda.get_device_properties(0).total_memory * a.memory_fraction if cuda else None

    for name in a.models:
        t0 = time.perf_counter()
        model = build_model(name, device)
        geometry = model_geometry(model)
        build_s = time.perf_counter() - t0
        label = name.split("=", 1)[0]
        print(f"[{label}] built in {build_s:.1f}s: {geometry['weight_bytes'] / GIB:.1f} GiB of weights, "
              f"{geometry['linear_layers']} linear / {geometry['attention_layers']} attention layers", flush=True)
        measured: dict = {}
        for batch in a.batch_sizes:
            total_new = 1 + a.warmup_steps + 1 + a.repeats * a.new_tokens + a.profile_steps
            text = model.config.get_text_config()
            # Prefill activations (MoE rows of a chunk: top-k copies of the hidden states, a few tensors each), the
            # logits of a step, the graph's pool: a rough allowance.
            headroom = 4 * GIB + a.prefill_chunk_tokens * text.hidden_size * 96 + batch * text.vocab_size * 12
            prompt_len, need = plan_prompt(geometry, batch, a.prompt_len, max(total_new, a.eager_new_tokens),
                                           capacity, headroom)
            ids, mask = make_prompt(model.config.get_text_config().vocab_size, batch, prompt_len, device, a.seed)
            chunk = max(1, a.prefill_chunk_tokens // batch)
            pair = {}
            for mode in a.modes:
                if mode == "eager" and a.eager_batch_sizes is not None and batch not in a.eager_batch_sizes:
                    continue
                kinds = ("static", "deltalog") if mode == "graph" else ("default", "deltalog")
                if mode == "graph" and batch in (a.control_batch_sizes or ()):
                    kinds += ("static_control",)
                if mode == "graph" and batch in (a.staggered_batch_sizes or ()):
                    at = kinds.index("deltalog") + (0 if a.staggered_first else 1)
                    kinds = kinds[:at] + ("deltalog_staggered",) + kinds[at:]
                for cache_kind in kinds:
                    if mode == "graph":
                        steps = a.warmup_steps + 1 + a.repeats * a.new_tokens + a.profile_steps
                        est = estimate_s(mode, batch, prompt_len, steps, measured)
                    else:
                        est = a.eager_repeats * estimate_s(mode, batch, prompt_len, a.eager_new_tokens, measured)
                    key = dict(model=label, mode=mode, cache=cache_kind, batch=batch, prompt_len=prompt_len)
                    elapsed = time.perf_counter() - t_start
                    if a.time_budget_s is not None and elapsed + est > a.time_budget_s:
                        print(f"  skip {key}: estimate {est:.0f}s, {elapsed:.0f}s used of {a.time_budget_s:.0f}s",
                              flush=True)
                        results.add(skipped=dict(key, estimate_s=round(est, 1), reason="time budget"))
                        continue
                    print(f"  run {mode:5s} {cache_kind:8s} B={batch:<4d} prompt={prompt_len} (estimate {est:.0f}s)",
                          flush=True)
                    gc.collect()
                    if cuda:
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats()
                    t_run = time.perf_counter()
                    try:
                        if mode == "graph":
                            # The control prefills the same prompt in chunks of other boundaries (the same math,
                            # other rounding), so it measures how far rounding alone moves this model's tokens.
                            run_chunk = chunk if cache_kind != "static_control" else max(1, min(chunk, prompt_len) // 2)
                            blocks, seqs, extra, prof = run_graph(model, cache_kind, ids, mask, a.new_tokens,
                                                                  a.repeats, a.warmup_steps, a.merge_interval,
                                                                  run_chunk, a.profile_steps, cuda, a.record_margins)
                        else:
                            blocks, seqs, extra = run_eager(model, cache_kind, ids, mask, a.eager_new_tokens,
                                                            a.eager_repeats, a.merge_interval, chunk, cuda)
                            prof = None
                    except Exception as err:  # noqa: BLE001 - record the failure, keep measuring the other runs
                        import traceback

                        kind = "out of memory" if isinstance(err, torch.OutOfMemoryError) else "error"
                        print(f"  {kind}: {type(err).__name__}: {str(err)[:300]}", flush=True)
                        results.add(skipped=dict(key, reason=f"{kind}: {type(err).__name__}: {str(err)[:500]}",
                                                 traceback=traceback.format_exc()[-3000:]))
                        gc.collect()
                        if cuda:
                            torch.cuda.synchronize()
                            torch.cuda.empty_cache()
                        continue
                    wall = time.perf_counter() - t_run
                    stats = summarize(blocks)
                    row = dict(key, new_tokens=a.new_tokens if mode == "graph" else a.eager_new_tokens,
                               repeats=len(blocks), wall_s=round(wall, 2), estimate_s=round(est, 1), **stats,
                               peak_memory_gib=(torch.cuda.max_memory_allocated() / GIB) if cuda else None,
                               planned_memory_gib=need / GIB, prompt_len_requested=a.prompt_len,
                               state_bytes=extra.get("state"), log_bytes=extra.get("log"),
                               workspace_bytes=extra.get("workspace"), crop_ring_bytes=extra.get("crop_ring"),
                               merge_intervals=extra.get("merge_intervals"), backends=extra.get("backends"),
                               staggered=extra.get("staggered"),
                               captured=extra.get("captured"))
                    if extra.get("log") is not None and extra.get("state"):
                        row["log_overhead"] = (extra["log"] + extra["workspace"]) / extra["state"]
                    if prof is not None:
                        row["profile"] = prof
                        row["state_update_share"] = prof["share"]
                    other = pair.get((mode, "baseline"))
                    if cache_kind in ("deltalog", "deltalog_staggered", "static_control") and other is not None:
                        row.update(agreement(seqs, other["seqs"], extra.get("margins"), other.get("margins")))
                        row["speedup_vs_baseline"] = other["row"]["tpot_ms"] / row["tpot_ms"]
                    if cache_kind == "static_control":
                        row["control_prefill_chunk"] = run_chunk
                    # On the second of the two DeltaLog runs (default, staggered) of a batch: > 1 means the staggered
                    # phases were faster than the default's aligned ones.
                    if cache_kind in ("deltalog", "deltalog_staggered"):
                        first = pair.get((mode, "deltalog_staggered" if cache_kind == "deltalog" else "deltalog"))
                        if first is not None:
                            ours, staggered = (row, first["row"]) if cache_kind == "deltalog" else (first["row"], row)
                            row["staggered_speedup_vs_default"] = ours["tpot_ms"] / staggered["tpot_ms"]
                    pair[(mode, {"static": "baseline", "default": "baseline"}.get(cache_kind, cache_kind))] = dict(
                        seqs=seqs, row=row, margins=extra.get("margins"))
                    results.add(row)
                    # Calibrate the estimates from what was measured.
                    if mode == "eager":
                        measured["eager_step_ms"] = stats["tpot_ms"]
                    else:
                        measured["graph_ms_per_row"] = max(measured.get("graph_ms_per_row", 0),
                                                           stats["tpot_ms"] / max(batch, 64))
                    steps_run = (a.eager_new_tokens * len(blocks)) if mode == "eager" else sum(map(len, blocks))
                    pre_s = max(0.0, wall - steps_run * stats["tpot_ms"] / 1e3)
                    measured["prefill_ms_per_ktok"] = max(1.0, 1e3 * pre_s / (len(blocks) if mode == "eager" else 1)
                                                          / (batch * prompt_len / 1e3))
                    msg = f"    TPOT {stats['tpot_ms']:.2f} ms (repeats " + \
                        ", ".join(f"{x:.2f}" for x in stats["tpot_ms_repeats"]) + ")"
                    if row.get("speedup_vs_baseline") is not None:
                        msg += f", x{row['speedup_vs_baseline']:.3f} vs baseline, tokens " \
                               f"{100 * row['token_agreement']:.1f}% equal"
                    if row.get("staggered_speedup_vs_default") is not None:
                        msg += f", staggered x{row['staggered_speedup_vs_default']:.4f} vs the default (aligned)"
                    if prof is not None and prof["share"] is not None:
                        msg += f", state update {100 * prof['share']:.1f}%"
                    print(msg + f", peak {row['peak_memory_gib'] or 0:.1f} GiB, {wall:.1f}s", flush=True)
                    del seqs
        del model
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    results.data["meta"]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    results.data["meta"]["wall_s"] = round(time.perf_counter() - t_start, 1)
    results.write()
    print(f"wrote {a.out / 'tpot.json'} and tpot.csv ({time.perf_counter() - t_start:.0f}s)")
    # A run that failed (an error, out of memory) fails the script, after what succeeded was written, as does a
    # script that measured nothing; runs the time budget skipped alone do not.
    failed = [s for s in results.data["skipped"] if s["reason"] != "time budget"]
    if not results.data["runs"]:
        failed, what = results.data["skipped"], "no run completed"
    else:
        what = f"{len(failed)} of the requested runs failed"
    if failed:
        sys.exit(f"{what}; the reasons are in {a.out / 'tpot.json'}:\n" + "\n".join(
            f"  {s['model']} {s['mode']} {s['cache']} B={s['batch']}: {s['reason'][:200]}" for s in failed))
    return results.data


if __name__ == "__main__":
    main()
