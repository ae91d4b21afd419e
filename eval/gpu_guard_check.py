"""GPU check of the cache's guards on the Triton backend: what tests/test_cache_api.py and
tests_fla/test_fla_generate.py check on the CPU (PyTorch backend or the interpreter), run with the compiled kernels on
a CUDA device.

For transformers' Qwen3.5 (GDN) and Kimi-Linear (KDA) models and FLA's GatedDeltaNet, RWKV6 and KDA models (tiny
configs, K != V, HV != Hk where the family has it; fp32; ``backend="triton"``, ``merge_interval=3``: the DeltaLog
kernels decode, not the small-state policy's dense path), each case below passes or fails; the script prints one JSON
line per case and writes them all to ``--out``:

- ``multi_turn``: generate, read the state between the turns (``get_conv_state`` / ``materialize``, or FLA's
  ``cache[0]``), continue with the whole conversation: tokens identical to the default cache (transformers'
  ``DynamicCache``; FLA's ``Cache``) continued over the same two turns, largest |Δlogit| reported; also reported
  against a fresh default cache on the whole conversation (another prefill split: FLA's chunked kernels round fp32
  products to TF32 on the GPU). No false refusal after a GPU decode.
- ``interrupted_prefill``: an exception in a later layer during the prefill; the next generate raises the
  ``ValueError`` naming ``cache.reset()``; after ``reset()`` the tokens equal a fresh cache's.
- ``stopped_decode_step``: a stop inside layer 0 at a decode step, after its conv window moved and before its state
  was stored; same expectations.
- ``stopped_between_steps``: a stopping criterion raises ``KeyboardInterrupt`` between two decode steps (as Ctrl-C
  would): the layers agree, but the consumed ids never came back, so the next generate (an unrelated, longer prompt)
  raises the ``ValueError`` naming ``cache.reset()``; after ``reset()`` the tokens equal a fresh cache's.
- ``positional_generation_config`` (transformers' models): a beam search whose ``GenerationConfig`` is passed by
  position; continuing its cache is refused (``ValueError``: the rows are beams).
- ``inference_mode_then_plain`` (FLA): a turn under ``torch.inference_mode()``, then a plain one: tokens as FLA's
  cache doing the same.
- ``legacy_snapshot`` (FLA): a step decoded through ``cache.to_legacy_cache()``, then the next step on the cache: its
  logits as FLA's cache doing the same (within 1e-4; FLA's GDN / KDA layers move the tuple's shared conv window in
  place, for FLA's cache too).
- ``static_stop_between_layers`` (Qwen3.5 only): a static cache's decode step stopped before a linear layer
  (``disable_compile=True``: on a GPU transformers compiles a static cache's decode step, where a hook cannot stop it).
- ``past_recording_static`` (Qwen3.5 only): a static cache after ``activate_past_recording()`` is not compileable,
  so ``graph_generate`` refuses it (``ValueError``) and ``generate`` decodes it uncompiled, with the default cache's
  tokens; a manual loop over those tokens without ``attention_mask`` (transformers then skips the one-token mask)
  gives the default cache's logits (within 1e-4).
- ``compiled_forward`` (Qwen3.5 only): ``model.forward = torch.compile(model.forward)`` (inductor with a static
  cache, dynamo's eager backend with a dynamic one; eager for both with ``--cpu-smoke``): the prefill is traced too;
  tokens identical to the default cache.
  Also ``generate``'s own compile of a static cache's decode step (no ``disable_compile``).
- ``dtype_switch`` (Qwen3.5 only): ``backend="auto"``, a first turn in fp32, then ``model.double()`` and a second
  turn: the layers plan the PyTorch backend from the model's new dtype (the Triton kernels take no float64); tokens
  identical to the default cache continued the same way (where that fails on the GPU, the row reports both errors).
- ``backward_raises`` (transformers' models): a backward through a cached decode step raises ``RuntimeError``.
- ``refused_store_from_user_code``: after a turn, user code hands layer 0 a copy of its state on another device (the
  CPU; meta with ``--cpu-smoke``) and an int32 copy (transformers: ``update_recurrent_state``; FLA: ``cache.update``):
  both refused, the state, the length and the base's device unchanged, the cache not locked; the next turn's tokens
  equal the default cache's continued over the same two turns.
- ``manual_step_after_a_stop_between_layers`` (transformers) / ``manual_step_after_a_stop_between_stores`` (FLA; for
  RWKV6 the stop falls between the last block's recurrent store and its FFN's token-shift store): a manual decode
  loop's step stopped part-way; the next two manual steps raise the ``ValueError`` naming ``cache.reset()``, and after
  ``reset()`` the loop's logits equal a fresh cache's.

    python eval/gpu_guard_check.py [--out eval/results/gpu_guard_check.json]
    python eval/gpu_guard_check.py --cpu-smoke --families qwen3_5 kimi_linear
    python eval/gpu_guard_check.py --cpu-smoke --families fla_gated_deltanet fla_rwkv6 fla_kda
        # the same on the CPU, our kernels interpreted (--cpu-smoke sets TRITON_INTERPRET=1; transformers' families
        # with FLA hidden, so in their own call)

Exits 1 when a case fails. On the GPU every Triton autotuner runs its first config only (``--autotune`` keeps them
all): the cases check the cache, not FLA's speed, and autotuning FLA's chunked kernels takes minutes.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate_compare import log, select_device  # noqa: E402

M = 3
ONLY: set[str] = set()  # --cases: run these cases only (all when empty)


def _expect(exc_type, match: str, fn):
    """Run ``fn``; return None when it raises ``exc_type`` whose message contains ``match``, else what happened."""
    try:
        fn()
    except exc_type as e:
        return None if match in str(e) else f"{exc_type.__name__} without {match!r}: {e}"
    except BaseException as e:  # noqa: BLE001 - reported, not swallowed
        return f"{type(e).__name__} instead of {exc_type.__name__}: {e}"
    return f"no {exc_type.__name__}"


def _run_case(rows: list, family: str, name: str, fn) -> None:
    """Run case ``fn`` (returns a dict with ``ok``); a case that raises is a failed row, and the others still run."""
    if ONLY and name not in ONLY:
        return
    try:
        row = dict(family=family, case=name, **fn())
    except BaseException as e:  # noqa: BLE001 - reported in the row
        row = dict(family=family, case=name, ok=False, error=f"{type(e).__name__}: {e}",
                   where=traceback.format_exc(limit=-3))
    rows.append(row)
    print(json.dumps(row), flush=True)


def _stop_row(first, refused, same) -> dict:
    """A stop case's row: the stop raised (``first`` None), the next generate was refused (``refused`` None), and
    after ``reset()`` the tokens equal a fresh cache's (``same``)."""
    return dict(ok=first is None and refused is None and same, stop=first, refusal=refused, identical_after_reset=same)


def _manual_stop_row(model, new_cache, block, ids, nxt, cache_arg: str) -> dict:
    """A manual decode loop (``model(x, <cache_arg>=cache)`` per step): a prefill, then a step stopped by a pre-hook on
    ``block`` (a decoder block part-way through the model); the next two steps must be refused (ValueError naming
    ``cache.reset()``; the second says that the first locked the cache), and after ``reset()`` three steps must give
    the logits of a fresh cache (within 1e-5: the same kernels on the same inputs; the bound only covers a library
    picking another GEMM algorithm between calls)."""
    import torch

    cache = new_cache()

    def step(c, x):
        return model(x, use_cache=True, **{cache_arg: c}).logits

    def hook(module, args):
        handle.remove()
        raise KeyboardInterrupt

    with torch.no_grad():
        step(cache, ids)
        handle = block.register_forward_pre_hook(hook)
        first = _expect(KeyboardInterrupt, "", lambda: step(cache, nxt))
        handle.remove()
        refused = _expect(ValueError, "cache.reset()", lambda: step(cache, nxt))
        locked = _expect(ValueError, "locked by a call it refused", lambda: step(cache, nxt))
        cache.reset()
        fresh = new_cache()
        diff = max((step(cache, x).float() - step(fresh, x).float()).abs().max().item() for x in (ids, nxt, nxt))
    return dict(_stop_row(first, refused or locked, diff <= 1e-5), max_abs_logit_diff_after_reset=diff)


def _interrupt_at(at: int):
    """A StoppingCriteriaList whose criterion raises KeyboardInterrupt at its ``at``-th call (between decode steps)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class InterruptAt(StoppingCriteria):
        calls = 0

        def __call__(self, input_ids, scores, **kwargs):
            self.calls += 1
            if self.calls == at:
                raise KeyboardInterrupt
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([InterruptAt()])


def _ids(batch, length, vocab, device, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, length), generator=g).to(device)


def _max_dlogit(a, b) -> float:
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a.logits, b.logits))


def _threaded_generates(model, jobs, serialise: bool) -> list:
    """Run the ``jobs`` (callables that call ``model.generate``) in threads started together; their results, or the
    exception each raised. ``serialise``: the model's forwards take a lock (Triton's interpreter is not thread-safe:
    on the CPU the calls still interleave step by step, on a GPU they run at once)."""
    import threading

    inner, out, start = model.model, [None] * len(jobs), threading.Barrier(len(jobs))
    forward, lock = inner.forward, threading.Lock()

    def locked(*args, **kwargs):
        with lock:
            return forward(*args, **kwargs)

    def run(k):
        start.wait()
        try:
            out[k] = jobs[k]()
        except Exception as e:  # noqa: BLE001 - reported by the case
            out[k] = e

    if serialise:
        inner.forward = locked
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    finally:
        if serialise:
            del inner.forward
    return out


def _threads_row(got: list, want: list) -> dict:
    import torch

    same = [isinstance(g, torch.Tensor) and torch.equal(g, w) for g, w in zip(got, want)]
    return dict(ok=all(same), identical=same, errors=[f"{type(g).__name__}: {g}"[:300] for g in got
                                                      if isinstance(g, BaseException)])


def transformers_cases(family: str, device) -> list[dict]:
    import torch
    import transformers
    from gpu_generate_check import MODELS

    from hf_deltalog import DeltaLogCache

    torch.manual_seed(0)
    model = MODELS[family](transformers, True).to(device).eval()
    vocab = model.config.vocab_size
    greedy = dict(do_sample=False, return_dict_in_generate=True, output_logits=True)
    ids = _ids(2, 6, vocab, device, 1)
    rows = []

    def case(name, fn):
        _run_case(rows, family, name, fn)

    def fresh_tokens(prompt, cache_kw=None, n=4):
        cache = DeltaLogCache(model, backend="triton", merge_interval=M, **(cache_kw or {}))
        return model.generate(prompt, past_key_values=cache, max_new_tokens=n, do_sample=False, disable_compile=True)

    def multi_turn():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        with torch.no_grad():
            first = model.generate(ids, past_key_values=cache, max_new_tokens=5, do_sample=False)
            dyn = model.generate(ids, max_new_tokens=5, do_sample=False, return_dict_in_generate=True)
        backends = sorted({layer.backend for layer in cache.deltalog_layers})
        cache.get_conv_state(0)
        cache.materialize(0)
        turn2 = torch.cat([first, _ids(2, 2, vocab, device, 3)], 1)
        with torch.no_grad():
            ours = model.generate(turn2, past_key_values=cache, max_new_tokens=5, **greedy)
            ref = model.generate(turn2, past_key_values=dyn.past_key_values, max_new_tokens=5, **greedy)
            fresh = model.generate(turn2, max_new_tokens=5, **greedy)
        same = torch.equal(first, dyn.sequences) and torch.equal(ours.sequences, ref.sequences)
        return dict(ok=same and backends == ["triton"], backends=backends, identical=same,
                    max_abs_logit_diff=_max_dlogit(ours, ref), identical_to_a_fresh_default_cache=torch.equal(
                        ours.sequences, fresh.sequences), max_abs_logit_diff_to_fresh=_max_dlogit(ours, fresh))

    def after_reset(cache, prompt, cache_kw=None):
        cache.reset()
        with torch.no_grad():
            return torch.equal(model.generate(prompt, past_key_values=cache, max_new_tokens=4, do_sample=False,
                                              disable_compile=True),
                               fresh_tokens(prompt, cache_kw))

    def interrupted_prefill():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        layer = model.model.layers[2]

        def hook(module, args):
            handle.remove()
            raise RuntimeError("interrupted")

        handle = layer.register_forward_pre_hook(hook)
        with torch.no_grad():
            first = _expect(RuntimeError, "interrupted",
                            lambda: model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False))
            refused = _expect(ValueError, "cache.reset()",
                              lambda: model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False))
        handle.remove()
        same = after_reset(cache, ids)
        return _stop_row(first, refused, same)

    def stopped_decode_step():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        calls = {"n": 0}
        store = cache.update_recurrent_state

        def stopping(recurrent_states, layer_idx, *args, **kwargs):
            if layer_idx == 0:
                calls["n"] += 1
                if calls["n"] == 3:  # the prefill's store, one decode step's, then a stop inside the next step
                    raise KeyboardInterrupt
            return store(recurrent_states, layer_idx, *args, **kwargs)

        cache.update_recurrent_state = stopping
        with torch.no_grad():
            first = _expect(KeyboardInterrupt, "",
                            lambda: model.generate(ids, past_key_values=cache, max_new_tokens=5, do_sample=False))
            cache.update_recurrent_state = store
            refused = _expect(ValueError, "cache.reset()",
                              lambda: model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False))
        same = after_reset(cache, ids)
        return _stop_row(first, refused, same)

    def static_stop_between_layers():
        kw = dict(static=True, max_cache_len=64)
        cache = DeltaLogCache(model, backend="triton", merge_interval=M, **kw)
        one = ids[:1]
        with torch.no_grad():
            out = model.generate(one, past_key_values=cache, max_new_tokens=3, do_sample=False, disable_compile=True)
        turn2 = torch.cat([out, _ids(1, 2, vocab, device, 3)], 1)
        calls = {"n": 0}

        def hook(module, args):
            calls["n"] += 1
            if calls["n"] == 2:
                handle.remove()
                raise KeyboardInterrupt

        handle = model.model.layers[2].register_forward_pre_hook(hook)
        with torch.no_grad():
            first = _expect(KeyboardInterrupt, "", lambda: model.generate(
                turn2, past_key_values=cache, max_new_tokens=4, do_sample=False, disable_compile=True))
            held = int(cache.get_seq_length())
            refused = _expect(ValueError, "cache.reset()", lambda: model.generate(  # the only-new-tokens form
                _ids(1, 1, vocab, device, 4), attention_mask=torch.ones(1, held + 1, dtype=torch.long, device=device),
                past_key_values=cache, max_new_tokens=2, do_sample=False, disable_compile=True))
        handle.remove()
        same = after_reset(cache, turn2, kw)
        return _stop_row(first, refused, same)

    def stopped_between_steps():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        other = _ids(2, 12, vocab, device, 11)
        with torch.no_grad():
            first = _expect(KeyboardInterrupt, "", lambda: model.generate(
                ids, past_key_values=cache, max_new_tokens=6, do_sample=False, stopping_criteria=_interrupt_at(3)))
            refused = _expect(ValueError, "cache.reset()", lambda: model.generate(
                other, past_key_values=cache, max_new_tokens=3, do_sample=False))
        same = after_reset(cache, other)
        return _stop_row(first, refused, same)

    def positional_generation_config():
        from transformers import GenerationConfig

        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        config = GenerationConfig(num_beams=3, num_return_sequences=3, max_new_tokens=4, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            out = model.generate(ids, config, past_key_values=cache, disable_compile=True)
            turn2 = torch.cat([out, _ids(6, 2, vocab, device, 12)], 1)
            refused = _expect(ValueError, "from a beam search", lambda: model.generate(
                turn2, past_key_values=cache, max_new_tokens=2, do_sample=False, pad_token_id=0))
        return dict(ok=refused is None and out.shape[0] == 6, refusal=refused)

    def past_recording_static():
        from hf_deltalog.graph import graph_generate

        n = 6
        cache = DeltaLogCache(model, backend="triton", merge_interval=M, static=True, max_cache_len=6 + n)
        cache.activate_past_recording()
        refused = _expect(ValueError, "needs a static cache",
                          lambda: graph_generate(model, ids, cache=cache, max_new_tokens=n, eos_token_id=None))
        with torch.no_grad():  # generate does not compile a cache that is not compileable: the default cache's tokens
            out = model.generate(ids, past_key_values=cache, max_new_tokens=n, do_sample=False, eos_token_id=None)
            ref = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None)
        same = torch.equal(out, ref)
        # A manual loop without attention_mask (transformers skips a non-compileable cache's one-token mask there, as
        # for the all-ones mask of the generate above): the recording static cache's attention layers return only
        # their filled slots, as the default cache's do.
        manual = DeltaLogCache(model, backend="triton", merge_interval=M, static=True, max_cache_len=6 + n)
        manual.activate_past_recording()
        default = transformers.DynamicCache(config=model.config)
        with torch.no_grad():
            loop = max((model(x, past_key_values=manual).logits - model(x, past_key_values=default).logits).abs().max()
                       .item() for x in [ids, *out[:, ids.shape[1]:].split(1, dim=1)])
        return dict(ok=refused is None and same and not cache.is_compileable and loop <= 1e-4, refusal=refused,
                    identical=same, manual_loop_without_mask_max_abs_logit_diff=loop)

    def compiled_forward():
        compiled = copy.deepcopy(model)
        rows_ = {}
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None)
            # inductor on the GPU; dynamo's eager backend on a CPU (inductor there needs a C++ compiler)
            for mode, backend, kw in (("static", "inductor" if device.type == "cuda" else "eager",
                                       dict(static=True, max_cache_len=14)), ("dynamic", "eager", {})):
                torch._dynamo.reset()
                compiled.forward = torch.compile(model.forward.__func__.__get__(compiled), backend=backend)
                cache = DeltaLogCache(compiled, backend="triton", merge_interval=M, **kw)
                out = compiled.generate(ids, past_key_values=cache, max_new_tokens=8, do_sample=False,
                                        eos_token_id=None, disable_compile=True)
                rows_[f"{mode}_{backend}_identical"] = torch.equal(out, ref)
            torch._dynamo.reset()  # generate's own compile of a static cache's decode step (no disable_compile)
            cache = DeltaLogCache(model, backend="triton", merge_interval=M, static=True, max_cache_len=14)
            out = model.generate(ids, past_key_values=cache, max_new_tokens=8, do_sample=False, eos_token_id=None)
            rows_["generate_autocompile_identical"] = torch.equal(out, ref)
        torch._dynamo.reset()
        return dict(ok=all(rows_.values()), **rows_)

    def dtype_switch():
        from transformers import DynamicCache

        results = {}
        for kind in ("default", "deltalog"):
            m = copy.deepcopy(model)
            cache = DynamicCache(config=m.config) if kind == "default" else DeltaLogCache(m, merge_interval=M)
            try:
                with torch.no_grad():
                    first = m.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False)
                    m.double()
                    turn2 = torch.cat([first, _ids(2, 2, vocab, device, 5)], 1)
                    results[kind] = m.generate(turn2, past_key_values=cache, max_new_tokens=3, do_sample=False)
            except Exception as error:  # noqa: BLE001 - reported: the default cache may fail on a GPU too
                results[kind] = f"{type(error).__name__}: {str(error)[:160]}"
            if kind == "deltalog":
                results["backends"] = sorted({layer.backend for layer in cache.deltalog_layers})
        a, b = results["default"], results["deltalog"]
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
        return dict(ok=same or (isinstance(a, str) and isinstance(b, str)), identical=same, backends=results["backends"],
                    default=a if isinstance(a, str) else "ok", deltalog=b if isinstance(b, str) else "ok")

    def backward_raises():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        model(ids, cache=cache, use_cache=True)
        logits = model(_ids(2, 1, vocab, device, 5), cache=cache, use_cache=True).logits
        err = _expect(RuntimeError, "backpropagation through a DeltaLogCache is not supported",
                      lambda: logits.logsumexp(-1).sum().backward())
        return dict(ok=err is None and logits.requires_grad, error=err)

    def threads():  # a serving pattern: generate calls on one model at once, each with its own cache
        from transformers import DynamicCache

        prompts = [_ids(2, 6, vocab, device, 20 + k) for k in range(3)]
        with torch.no_grad():
            want = [model.generate(p, max_new_tokens=4, do_sample=False) for p in prompts]

        def job(prompt, cache):
            with torch.no_grad():
                return model.generate(prompt, past_key_values=cache, max_new_tokens=4, do_sample=False,
                                      disable_compile=True)

        caches = [DeltaLogCache(model, backend="triton", merge_interval=M), DeltaLogCache(model, backend="triton",
                  merge_interval=M + 1), DynamicCache(config=model.config)]
        got = _threaded_generates(model, [lambda p=p, c=c: job(p, c) for p, c in zip(prompts, caches)],
                                  serialise=device.type != "cuda")
        return _threads_row(got, want)

    def new_only_turns():  # turn 2 gives only the new tokens; turn 3's ids are still compared with what was consumed
        from transformers import DynamicCache

        cache, dense = DeltaLogCache(model, backend="triton", merge_interval=M), DynamicCache(config=model.config)
        with torch.no_grad():
            first = model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False)
            model.generate(ids, past_key_values=dense, max_new_tokens=3, do_sample=False)
            new = torch.cat([first[:, -1:], _ids(2, 3, vocab, device, 14)], 1)
            mask = torch.ones(2, cache.get_seq_length() + new.shape[1], dtype=torch.long, device=device)
            second = model.generate(new, attention_mask=mask, past_key_values=cache, max_new_tokens=3,
                                    do_sample=False)
            same2 = torch.equal(second, model.generate(new, attention_mask=mask, past_key_values=dense,
                                                       max_new_tokens=3, do_sample=False))
            more = _ids(2, 2, vocab, device, 15)
            refused = _expect(ValueError, "input tokens differ", lambda: model.generate(
                torch.cat([second, second, more], 1), past_key_values=cache, max_new_tokens=2, do_sample=False))
            right = torch.cat([first[:, :-1], second, more], 1)
            same3 = torch.equal(model.generate(right, past_key_values=cache, max_new_tokens=2, do_sample=False),
                                model.generate(right, past_key_values=dense, max_new_tokens=2, do_sample=False))
        return dict(ok=same2 and refused is None and same3, identical_turn2=same2, refusal=refused,
                    identical_turn3=same3)

    def inference_mode_turns():  # turn 1 under torch.inference_mode(), turn 2 and a manual step under no_grad
        from transformers import DynamicCache

        dense = DynamicCache(config=model.config)
        with torch.no_grad():
            want1 = model.generate(ids, past_key_values=dense, max_new_tokens=3, do_sample=False)
            turn2 = torch.cat([want1, _ids(2, 2, vocab, device, 16)], 1)
            want2 = model.generate(turn2, past_key_values=dense, max_new_tokens=3, do_sample=False)
            step = _ids(2, 1, vocab, device, 17)
            want_step = model(step, past_key_values=dense, use_cache=True).logits[:, -1]
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        with torch.inference_mode():
            got1 = model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False)
        with torch.no_grad():
            got2 = model.generate(turn2, past_key_values=cache, max_new_tokens=3, do_sample=False)
            got_step = model(step, past_key_values=cache, use_cache=True).logits[:, -1]
        step_diff = (got_step.float() - want_step.float()).abs().max().item()
        with torch.inference_mode():
            model.generate(ids, past_key_values=DeltaLogCache(model, backend="triton", merge_interval=M),
                           max_new_tokens=1, do_sample=False)
        cache.reset()
        with torch.no_grad():
            again = torch.equal(model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False), want1)
        same = torch.equal(got1, want1) and torch.equal(got2, want2)
        return dict(ok=same and again and step_diff <= 1e-4, identical_turns=same, identical_after_reset=again,
                    manual_step_max_abs_logit_diff=step_diff)

    def refused_store_from_user_code():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        with torch.no_grad():
            first = model.generate(ids, past_key_values=cache, max_new_tokens=4, do_sample=False)
            dyn = model.generate(ids, max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
        state, seen = cache.materialize(0), cache.get_seq_length()
        elsewhere = "meta" if device.type == "cpu" else "cpu"  # another device than the layer's conv window
        refusals = [_expect(error, says, lambda bad=bad: cache.update_recurrent_state(bad, 0)) for error, says, bad in (
            (ValueError, f"but was handed a recurrent state on {elsewhere}", state.to(elsewhere)),
            (TypeError, "got torch.int32", state.to(torch.int32)))]
        unchanged = torch.equal(cache.materialize(0), state) and cache.get_seq_length() == seen \
            and cache.deltalog_layers[0].base.device == state.device and cache._status.broken is None
        turn2 = torch.cat([first, _ids(2, 2, vocab, device, 16)], 1)
        with torch.no_grad():
            got = model.generate(turn2, past_key_values=cache, max_new_tokens=4, **greedy)
            ref = model.generate(turn2, past_key_values=dyn.past_key_values, max_new_tokens=4, **greedy)
        same = torch.equal(first, dyn.sequences) and torch.equal(got.sequences, ref.sequences)
        return dict(ok=all(r is None for r in refusals) and unchanged and same, refusals=refusals,
                    unchanged=unchanged, identical=same, max_abs_logit_diff=_max_dlogit(got, ref))

    case("multi_turn", multi_turn)
    case("new_only_turns", new_only_turns)
    case("inference_mode_turns", inference_mode_turns)
    case("interrupted_prefill", interrupted_prefill)
    case("stopped_decode_step", stopped_decode_step)
    case("stopped_between_steps", stopped_between_steps)
    case("threads", threads)
    case("positional_generation_config", positional_generation_config)
    case("manual_step_after_a_stop_between_layers", lambda: _manual_stop_row(
        model, lambda: DeltaLogCache(model, backend="triton", merge_interval=M), model.model.layers[2], ids,
        _ids(2, 1, vocab, device, 6), "cache"))
    if family == "qwen3_5":
        case("static_stop_between_layers", static_stop_between_layers)
        case("past_recording_static", past_recording_static)
        case("compiled_forward", compiled_forward)
        case("dtype_switch", dtype_switch)
    case("backward_raises", backward_raises)
    case("refused_store_from_user_code", refused_store_from_user_code)
    return rows


def fla_cases(family: str, device) -> list[dict]:
    import torch
    from fla.models import GatedDeltaNetForCausalLM, KDAForCausalLM, RWKV6ForCausalLM
    from fla.models.utils import Cache
    from gpu_generate_check_fla import _config

    from hf_deltalog import DeltaLogCache
    from hf_deltalog.fla_cache import fla_generate_handover

    classes = {"rwkv6": RWKV6ForCausalLM, "gated_deltanet": GatedDeltaNetForCausalLM, "kda": KDAForCausalLM}
    cfg = copy.deepcopy(_config(family, True))
    cfg.num_hidden_layers = 2
    torch.manual_seed(0)
    model = classes[family](cfg).to(device).eval()
    vocab = cfg.vocab_size
    greedy = dict(do_sample=False, return_dict_in_generate=True, output_logits=True)
    ids = _ids(2, 4, vocab, device, 8)
    rows = []

    def case(name, fn):
        _run_case(rows, f"fla_{family}", name, fn)

    def reference(prompt, n, **kw):
        cache = Cache()
        with torch.no_grad(), fla_generate_handover(model, cache):
            return model.generate(prompt, past_key_values=cache, max_new_tokens=n, **kw)

    def ours(prompt, cache, n, **kw):
        with torch.no_grad():
            return model.generate(prompt, past_key_values=cache, max_new_tokens=n, **kw)

    def matches_reference_after_reset(cache):
        cache.reset()
        return torch.equal(ours(ids, cache, 3, do_sample=False), reference(ids, 3, do_sample=False))

    def first_turn(n):
        """A first turn of n tokens with a DeltaLogCache and with FLA's cache: (cache, tokens, FLA's cache, tokens)."""
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        first = ours(ids, cache, n, do_sample=False)
        fla_cache = Cache()
        with torch.no_grad(), fla_generate_handover(model, fla_cache):
            ref1 = model.generate(ids, past_key_values=fla_cache, max_new_tokens=n, do_sample=False)
        return cache, first, fla_cache, ref1

    def multi_turn():
        cache, first, fla_cache, ref1 = first_turn(5)
        backends = sorted({layer.backend for layer in cache.deltalog_layers})
        assert "conv_state" in cache[0] or family == "rwkv6"
        turn2 = torch.cat([first, _ids(2, 2, vocab, device, 9)], 1)
        got = ours(turn2, cache, 5, **greedy)
        with torch.no_grad(), fla_generate_handover(model, fla_cache):
            ref = model.generate(turn2, past_key_values=fla_cache, max_new_tokens=5, **greedy)
        fresh = reference(turn2, 5, **greedy)
        same = torch.equal(first, ref1) and torch.equal(got.sequences, ref.sequences)
        return dict(ok=same and backends == ["triton"], backends=backends, identical=same,
                    max_abs_logit_diff=_max_dlogit(got, ref), identical_to_a_fresh_default_cache=torch.equal(
                        got.sequences, fresh.sequences), max_abs_logit_diff_to_fresh=_max_dlogit(got, fresh))

    def interrupted_prefill():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)

        def hook(module, args):
            handle.remove()
            raise RuntimeError("interrupted")

        handle = model.model.layers[1].register_forward_pre_hook(hook)
        first = _expect(RuntimeError, "interrupted", lambda: ours(ids, cache, 3, do_sample=False))
        refused = _expect(ValueError, "cache.reset()", lambda: ours(ids, cache, 3, do_sample=False))
        handle.remove()
        same = matches_reference_after_reset(cache)
        return _stop_row(first, refused, same)

    def stopped_decode_step():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        calls = {"n": 0}
        store = cache.update

        def stopping(*args, **kwargs):
            if kwargs.get("layer_idx") == 0:
                calls["n"] += 1
                if calls["n"] == 3:
                    raise KeyboardInterrupt
            return store(*args, **kwargs)

        cache.update = stopping
        first = _expect(KeyboardInterrupt, "", lambda: ours(ids, cache, 5, do_sample=False))
        cache.update = store
        refused = _expect(ValueError, "cache.reset()", lambda: ours(ids, cache, 3, do_sample=False))
        same = matches_reference_after_reset(cache)
        row = _stop_row(first, refused, same)
        return dict(row, ok=row["ok"] and calls["n"] == 3)

    def stopped_between_steps():
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        first = _expect(KeyboardInterrupt, "", lambda: ours(ids, cache, 6, do_sample=False,
                                                           stopping_criteria=_interrupt_at(3)))
        refused = _expect(ValueError, "cache.reset()", lambda: ours(_ids(2, 12, vocab, device, 11), cache, 3,
                                                                     do_sample=False))
        same = matches_reference_after_reset(cache)
        return _stop_row(first, refused, same)

    def inference_mode_then_plain():
        def turn2_of(first):
            return torch.cat([first, _ids(2, 2, vocab, device, 9)], 1)

        fla_cache = Cache()
        with torch.inference_mode(), fla_generate_handover(model, fla_cache):
            ref1 = model.generate(ids, past_key_values=fla_cache, max_new_tokens=3, do_sample=False)
        with torch.no_grad(), fla_generate_handover(model, fla_cache):
            ref2 = model.generate(turn2_of(ref1), past_key_values=fla_cache, max_new_tokens=3, do_sample=False)
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        with torch.inference_mode():
            first = model.generate(ids, past_key_values=cache, max_new_tokens=3, do_sample=False)
        got = ours(turn2_of(first), cache, 3, do_sample=False)
        same = torch.equal(first, ref1) and torch.equal(got, ref2)
        return dict(ok=same, identical=same)

    def legacy_snapshot():
        side, nxt = _ids(2, 1, vocab, device, 12), _ids(2, 1, vocab, device, 13)

        def last_logits(cache, peek):
            with torch.no_grad():
                model(ids, past_key_values=cache, use_cache=True)
                if peek:
                    model(side, past_key_values=cache.to_legacy_cache(), use_cache=True)
                return model(nxt, past_key_values=cache, use_cache=True).logits[:, -1]

        fla_peek, fla_clean = last_logits(Cache(), True), last_logits(Cache(), False)
        got = last_logits(DeltaLogCache(model, backend="triton", merge_interval=M), True)
        # FLA's GDN / KDA layers move the conv window of the tuple's (shared) tensors in place, for FLA's cache too
        return dict(ok=(got - fla_peek).abs().max().item() <= 1e-4,
                    max_abs_logit_diff_to_fla_doing_the_same=(got - fla_peek).abs().max().item(),
                    fla_peek_moved_its_cache=(fla_peek - fla_clean).abs().max().item())

    def threads():  # generate calls on one FLA model at once: two DeltaLogCaches and FLA's own Cache (hand-over)
        prompts = [_ids(2, 4, vocab, device, 20 + k) for k in range(3)]
        want = [reference(p, 4, do_sample=False) for p in prompts]
        jobs = [lambda p=p: ours(p, DeltaLogCache(model, backend="triton", merge_interval=M), 4, do_sample=False)
                for p in prompts[:2]] + [lambda: reference(prompts[2], 4, do_sample=False)]
        return _threads_row(_threaded_generates(model, jobs, serialise=device.type != "cuda"), want)

    def new_only_turns():  # turn 2 gives only the new tokens; turn 3's ids are still compared with what was consumed
        cache = DeltaLogCache(model, backend="triton", merge_interval=M)
        first = ours(ids, cache, 3, do_sample=False)
        new = torch.cat([first[:, -1:], _ids(2, 3, vocab, device, 14)], 1)
        mask = torch.ones(2, cache.get_seq_length() + new.shape[1], dtype=torch.long, device=device)
        second = ours(new, cache, 3, do_sample=False, attention_mask=mask)
        more = _ids(2, 2, vocab, device, 15)
        refused = _expect(ValueError, "input tokens differ",
                          lambda: ours(torch.cat([second, second, more], 1), cache, 2, do_sample=False))
        right = torch.cat([first[:, :-1], second, more], 1)
        same = torch.equal(ours(right, cache, 2, do_sample=False), reference(right, 2, do_sample=False))
        return dict(ok=refused is None and same, refusal=refused, identical_turn3=same)

    def refused_store_from_user_code():
        cache, first, fla_cache, ref1 = first_turn(4)
        state, held = cache.materialize(0), cache.get_seq_length()
        elsewhere = "meta" if device.type == "cpu" else "cpu"  # another device than the layer's conv state
        refusals = [_expect(error, says, lambda bad=bad: cache.update(recurrent_state=bad, layer_idx=0))
                    for error, says, bad in (
                        (ValueError, f"a recurrent state on {elsewhere}, but the layer's conv state is on",
                         state.to(elsewhere)),
                        (TypeError, "got torch.int32", state.to(torch.int32)))]
        unchanged = torch.equal(cache.materialize(0), state) and cache.get_seq_length() == held \
            and cache.deltalog_layers[0].base.device == state.device and cache._shared.status.broken is None
        turn2 = torch.cat([first, _ids(2, 2, vocab, device, 17)], 1)
        got = ours(turn2, cache, 4, **greedy)
        with torch.no_grad(), fla_generate_handover(model, fla_cache):
            ref = model.generate(turn2, past_key_values=fla_cache, max_new_tokens=4, **greedy)
        same = torch.equal(first, ref1) and torch.equal(got.sequences, ref.sequences)
        return dict(ok=all(r is None for r in refusals) and unchanged and same, refusals=refusals,
                    unchanged=unchanged, identical=same, max_abs_logit_diff=_max_dlogit(got, ref))

    case("multi_turn", multi_turn)
    case("new_only_turns", new_only_turns)
    case("interrupted_prefill", interrupted_prefill)
    case("stopped_decode_step", stopped_decode_step)
    case("stopped_between_steps", stopped_between_steps)
    case("threads", threads)
    case("inference_mode_then_plain", inference_mode_then_plain)
    case("legacy_snapshot", legacy_snapshot)
    last = model.model.layers[-1]  # RWKV6: stop after the last block's recurrent store, before its FFN's store
    case("manual_step_after_a_stop_between_stores", lambda: _manual_stop_row(
        model, lambda: DeltaLogCache(model, backend="triton", merge_interval=M),
        last.ffn if family == "rwkv6" else last, ids, _ids(2, 1, vocab, device, 10), "past_key_values"))
    case("refused_store_from_user_code", refused_store_from_user_code)
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["qwen3_5", "kimi_linear", "fla_gated_deltanet", "fla_rwkv6",
                                                      "fla_kda"])
    p.add_argument("--cpu-smoke", action="store_true",
                   help="run on the CPU, our Triton kernels under the interpreter (sets TRITON_INTERPRET=1)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--autotune", action="store_true", help="keep every autotuner's configs on the GPU")
    p.add_argument("--cases", nargs="+", default=[], help="run only these cases (their names as in the rows)")
    a = p.parse_args(argv)
    ONLY.update(a.cases)
    fla_families = [f for f in a.families if f.startswith("fla_")]
    if a.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (hf_deltalog imports it)
    if a.cpu_smoke and fla_families:
        if len(fla_families) < len(a.families):
            p.error("on the CPU run transformers' families and FLA's (fla_*) in separate calls: transformers' own "
                    "models need FLA hidden there (hf_deltalog.interpreter.hide_fla_on_cpu)")
    elif a.cpu_smoke:
        from hf_deltalog.interpreter import hide_fla

        hide_fla()  # transformers' GDN / KDA layers take their PyTorch paths (tests/conftest.py)
    device = select_device(a.cpu_smoke)
    if device.type == "cuda" and not a.autotune:
        from triton.runtime.autotuner import Autotuner

        prune = Autotuner.prune_configs
        Autotuner.prune_configs = lambda self, kwargs: prune(self, kwargs)[:1]
    rows = []
    for family in a.families:
        log(f"{family} ...")
        rows += fla_cases(family.removeprefix("fla_"), device) if family.startswith("fla_") else \
            transformers_cases(family, device)
    unknown = sorted(ONLY - {r["case"] for r in rows})
    if unknown:  # a misspelt name would otherwise run nothing and pass
        p.error(f"--cases: no case {unknown} for the families {a.families}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(rows, indent=1))
    failed = [f"{r['family']}/{r['case']}" for r in rows if not r["ok"]]
    log(f"{len(rows) - len(failed)} of {len(rows)} cases passed" + (f"; failed: {failed}" if failed else ""))
    return rows if not failed else sys.exit(1)


if __name__ == "__main__":
    main()
