"""Static (graph-safe) DeltaLogCache and the captured decode loop, on a CPU with the capture switched off.

What a CUDA graph needs and a CPU can check: the step reads no device value on the host (no `.item()` and friends,
no data-dependent shapes), changes no host state, keeps every buffer at its address through append and merge steps,
and — run by the same loop that captures it on a GPU — gives the tokens of transformers' `generate` with the default
cache, for DeltaLogCache and transformers' own StaticCache alike (the loop is cache-agnostic).
"""

import copy

import numpy as np
import pytest
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from utils import EOS, FAMILIES, PAD, family_config, prompt_ids, tiny_model

from hf_deltalog import DeltaLogCache
from hf_deltalog.graph import GraphDecoder, graph_generate, max_cache_len_of

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
N = 20  # new tokens: 19 decode steps, several merge cycles at M = 3


def padded_prompt():
    ids, mask = prompt_ids(3, 7), torch.ones(3, 7, dtype=torch.long)
    ids[0, :3], mask[0, :3] = PAD, 0  # left padding in one row
    return ids, mask


def make_cache(kind, model, max_cache_len, **kw):
    if kind in ("deltalog", "deltalog-staggered"):  # staggered: row r restarts its log at r mod M zero entries
        return DeltaLogCache(model, static=True, max_cache_len=max_cache_len, merge_interval=3,
                             stagger_merges=kind == "deltalog-staggered", **kw)
    return transformers.StaticCache(config=model.config, max_cache_len=max_cache_len)


@pytest.mark.parametrize("family, kind", [(f, "deltalog") for f in FAMILIES] +
                         [("qwen3_5", "deltalog-staggered"), ("kimi_linear", "deltalog-staggered")] +
                         [("qwen3_5_moe", "static"), ("kimi_linear", "static")])
def test_loop_gives_the_tokens_of_generate(family, kind):
    """The decode loop (capture off) on a static cache == model.generate with the default dynamic cache: every
    family with DeltaLogCache, one GDN and one KDA family with transformers' StaticCache (the loop is the same)."""
    model = tiny_model(family)
    ids, mask = padded_prompt()
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=N, do_sample=False, eos_token_id=None)
    out = graph_generate(model, ids, mask, cache=make_cache(kind, model, 7 + N), max_new_tokens=N,
                         eos_token_id=None, capture=False)
    assert not out.captured
    assert torch.equal(out.sequences, ref)


@pytest.mark.parametrize("kind", ["deltalog", "static"])
def test_loop_stops_on_eos_like_generate(kind):
    """Rows that emit EOS emit the pad token afterwards, and the loop stops when every row has finished."""
    model = tiny_model("qwen3_5")
    ids, mask = padded_prompt()
    with torch.no_grad():
        free = model.generate(ids, attention_mask=mask, max_new_tokens=N, do_sample=False, eos_token_id=None)
    # An EOS id every row produces within the window, at different steps: the rows finish at different times.
    gen = free[:, 7:]
    common = set(gen[0].tolist()) & set(gen[1].tolist()) & set(gen[2].tolist())
    eos = min(common, key=lambda t: max(int((row == t).nonzero()[0]) for row in gen))
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=N, do_sample=False, eos_token_id=eos,
                             pad_token_id=PAD)
    out = graph_generate(model, ids, mask, cache=make_cache(kind, model, 7 + N), max_new_tokens=N,
                         eos_token_id=eos, pad_token_id=PAD, capture=False)
    assert ref.shape[1] < 7 + N, "the reference should stop early for this test to mean something"
    assert torch.equal(out.sequences, ref)


def test_a_row_whose_first_token_is_eos_and_the_pad_token_from_several_eos_ids_follow_generate():
    """A row whose first generated token (the prefill's) is EOS pads from the next step, and with no pad token the
    pad is the first of several EOS ids, as generate does (a mutation test, 76th review: a loop that let the prefill's
    EOS through, and one padding with the last EOS id, both failed no test). Also: time_steps=True times every decode
    step after the first token."""
    model = copy.deepcopy(tiny_model("qwen3_5"))  # tiny_model is cached: its generation_config is changed here
    ids, mask = padded_prompt()
    with torch.no_grad():
        free = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=None)
    first, later = int(free[0, 7]), int(free[1, 9])
    assert first != later
    model.generation_config.pad_token_id = None
    eos = [first, later]
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=eos)
    out = graph_generate(model, ids, mask, cache=make_cache("deltalog", model, 7 + 6), max_new_tokens=6,
                         eos_token_id=eos, capture=False, time_steps=True)
    assert ref[0, 7] == first and (ref[0, 8:] == first).all()  # padded with the first EOS id
    assert torch.equal(out.sequences, ref)
    assert len(out.step_ms) == out.sequences.shape[1] - 7 - 1 and all(t >= 0 for t in out.step_ms)
    model.generation_config.forced_bos_token_id = 5  # acts on a one-token prompt: refused (accepted after more)
    with pytest.raises(ValueError, match="forced_bos_token_id"):
        graph_generate(model, prompt_ids(3, 1), cache=make_cache("deltalog", model, 8), max_new_tokens=4,
                       capture=False)


class HostReads(TorchDispatchMode):
    """Records every op that reads a device value on the host or has a data-dependent output shape."""

    SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "item", "equal",
               "is_nonzero", "repeat_interleave"}

    def __init__(self):
        super().__init__()
        self.hits = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in self.SYNCING:
            self.hits.append(func.__name__)
        return func(*args, **(kwargs or {}))


def cache_tensors(cache):
    """Every tensor a cache holds, by a stable name (what a captured graph points at)."""
    found = {}
    for i, layer in enumerate(cache.layers):
        for name, value in vars(layer).items():
            values = value.items() if isinstance(value, dict) else [(None, value)]
            for key, t in values:
                if isinstance(t, torch.Tensor):
                    found[(i, name, key)] = t
    return found


@pytest.mark.parametrize("kind", ["deltalog", "deltalog-staggered", "static"])
@pytest.mark.parametrize("family", ["qwen3_5_moe", "kimi_linear"])
def test_decode_step_is_graph_safe(family, kind):
    """Through append and merge steps: no host read, no data-dependent shape, no host state change, and every cache
    tensor and static input keeps its address (one graph serves every step)."""
    model = tiny_model(family)
    model.config._experts_implementation = "grouped_mm"  # the graph-safe MoE path (transformers' default on GPUs)
    ids, mask = padded_prompt()
    cache = make_cache(kind, model, 7 + 12)
    dec = GraphDecoder(model, cache, capture=False)
    dec.prefill(ids, mask, max_new_tokens=12)
    addresses = {k: t.data_ptr() for k, t in cache_tensors(cache).items()}
    buffers = [dec.tokens, dec.input_buf, dec.pos_buf, dec.mask_buf, dec.step_idx]
    buffer_addresses = [t.data_ptr() for t in buffers]
    host = [(layer._seen, layer._pending, layer.merge_interval) for layer in getattr(cache, "deltalog_layers", [])]
    phases = []
    for _ in range(11):
        with HostReads() as mode:
            dec.step()
        assert mode.hits == [], f"host reads in a decode step: {sorted(set(mode.hits))}"
        phases.append([int(layer.length[0]) for layer in getattr(cache, "deltalog_layers", [])])
    assert {k: t.data_ptr() for k, t in cache_tensors(cache).items()} == addresses
    assert [t.data_ptr() for t in buffers] == buffer_addresses
    assert [(layer._seen, layer._pending, layer.merge_interval)
            for layer in getattr(cache, "deltalog_layers", [])] == host
    if kind.startswith("deltalog"):
        assert [p[0] for p in phases] == [1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]  # appends and merges of row 0, M = 3
        rows = [layer.length.tolist() for layer in cache.deltalog_layers]
        assert rows == [[(11 + (r if kind == "deltalog-staggered" else 0)) % 3 for r in range(3)]] * len(rows)
        assert all(layer.decoded_steps() == 11 for layer in cache.deltalog_layers)
        # One step counter per device, advanced by one layer (one node per step in a captured graph, not one per layer).
        assert sum(layer.owns_step_counter for layer in cache.deltalog_layers) == 1
        assert len({layer.step_counter.data_ptr() for layer in cache.deltalog_layers}) == 1
        assert int(cache.get_seq_length()) == 7 + 1 + 11 - 1  # prompt + fed tokens (the last one is not fed yet)


def test_static_mode_contract():
    model = tiny_model("qwen3_5")
    static = DeltaLogCache(model, static=True, max_cache_len=16)
    assert static.is_compileable and all(layer.is_compileable for layer in static.deltalog_layers)
    assert type(static.layers[1]).__name__ == "StaticLayer" and max_cache_len_of(static) == 16
    dynamic = DeltaLogCache(model)
    assert not dynamic.is_compileable
    with pytest.raises(ValueError, match="needs a static cache"):
        GraphDecoder(model, dynamic, capture=False)
    with pytest.raises(ValueError, match="needs max_cache_len"):
        DeltaLogCache(model, static=True)
    with pytest.raises(ValueError, match="needs max_cache_len"):
        DeltaLogCache(model, static=True, max_cache_len=0)
    pure = model.config.__class__(**{**model.config.to_dict(), "layer_types": ["linear_attention"] * 4})
    with pytest.raises(ValueError, match="only linear-attention layers"):
        DeltaLogCache(pure, static=True, max_cache_len=16)
    with pytest.raises(ValueError, match="capture=True needs the model on a CUDA device"):
        GraphDecoder(model, static, capture=True)
    split = copy.deepcopy(model)  # the cached tiny model must stay intact for other tests
    split.lm_head.to("meta")  # parameters on two devices, as device_map='auto' over several GPUs leaves them
    with pytest.raises(ValueError, match="parameters are on 2 devices"):
        GraphDecoder(split, DeltaLogCache(split, static=True, max_cache_len=16), capture=True)
    dec = GraphDecoder(model, static, capture=False)
    with pytest.raises(ValueError, match="call prefill"):
        dec.step()
    with pytest.raises(ValueError, match="need 17"):
        dec.prefill(prompt_ids(2, 7), max_new_tokens=10)


@pytest.mark.parametrize("max_cache_len", [16, 6])  # the window (6) fills / never fills
@pytest.mark.parametrize("kind", ["deltalog", "static"])
def test_capture_refuses_static_sliding_window_layers(kind, max_cache_len):
    """transformers' StaticSlidingWindowLayer keeps its length as a host int, which sets the query offset of the
    sliding-window mask (and, once the window fills, the update): a replayed graph would keep the captured step's
    mask (on an H200 a captured LaraMini step decoded wrong tokens from the first replay on, even with a window that
    never fills: eval/results/h200/round56). So capture is refused for such caches, before the CUDA check; the eager
    loop decodes them (test_loop_gives_the_tokens_of_generate)."""
    model = tiny_model("lara_mini")
    cache = make_cache(kind, model, max_cache_len)
    assert max_cache_len_of(cache) == max_cache_len  # the full-attention layer's slots, not the window's
    with pytest.raises(ValueError, match=r"layers \[1, 4\] of this cache are transformers' static sliding-window"):
        GraphDecoder(model, cache, capture=True)
    GraphDecoder(model, cache, capture=False)


@pytest.mark.parametrize("kind", ["deltalog", "static"])
def test_loop_decodes_a_config_whose_attention_layers_all_slide(kind):
    """With no full-attention layer, max_cache_len_of found no slots and refused the cache; it now takes the static
    DeltaLogCache's max_cache_len, or the sliding layers' slots (transformers' StaticCache keeps no max_cache_len), and
    the loop gives generate's tokens."""
    cfg = family_config("lara_mini", sliding_window=20, layer_types=["linear_attention", "sliding_attention",
                                                                     "linear_attention", "sliding_attention",
                                                                     "linear_attention"])
    torch.manual_seed(0)
    model = transformers.LaraMiniForCausalLM(cfg).eval()
    ids, mask = padded_prompt()
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, eos_token_id=None)
    cache = make_cache(kind, model, 12)
    assert max_cache_len_of(cache) == 12
    out = graph_generate(model, ids, mask, cache=cache, max_new_tokens=5, eos_token_id=None, capture=False)
    assert torch.equal(out.sequences, ref)


def test_loop_refuses_steps_beyond_max_new_tokens():
    model = tiny_model("qwen3_5")
    dec = GraphDecoder(model, DeltaLogCache(model, static=True, max_cache_len=12), capture=False)
    dec.prefill(prompt_ids(2, 7), max_new_tokens=3)
    dec.step()
    dec.step()
    with pytest.raises(ValueError, match="all 3 tokens"):
        dec.step()
    assert dec.sequences(3).shape == (2, 10)


@pytest.mark.parametrize("kind", ["static", "deltalog"])
def test_prefill_refuses_a_used_cache_and_bad_max_new_tokens(kind):
    """Prefill fills the cache from empty: a cache that still holds a prompt is refused (it would decode on top of the
    old tokens), as are max_new_tokens < 1; the refused call leaves the cache as it was."""
    model = tiny_model("qwen3_5")
    cache = make_cache(kind, model, 7 + N)
    with pytest.raises(ValueError, match="max_new_tokens must be an int of at least 1; got 0"):
        graph_generate(model, prompt_ids(2, 7), cache=cache, max_new_tokens=0, eos_token_id=None, capture=False)
    with pytest.raises(ValueError, match="got -1"):
        graph_generate(model, prompt_ids(2, 7), cache=cache, max_new_tokens=-1, eos_token_id=None, capture=False)
    for bad in (2.0, True, "2"):  # a wrong type is a TypeError (it was a ValueError)
        with pytest.raises(TypeError, match=f"max_new_tokens must be an int of at least 1; got {bad!r}"):
            graph_generate(model, prompt_ids(2, 7), cache=cache, max_new_tokens=bad, eos_token_id=None,
                           capture=False)
    graph_generate(model, prompt_ids(2, 7), cache=cache, max_new_tokens=3, eos_token_id=None, capture=False)
    held = int(cache.get_seq_length())
    with pytest.raises(ValueError, match=f"already holds {held} tokens per row.*cache.reset"):
        graph_generate(model, prompt_ids(2, 7), cache=cache, max_new_tokens=3, eos_token_id=None, capture=False)
    assert int(cache.get_seq_length()) == held == 9


def test_static_reprefill_keeps_addresses_and_restarts():
    """A second prompt batch of the same size reuses every buffer (a captured graph stays valid) and decodes as a
    fresh cache would."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, static=True, max_cache_len=7 + N, merge_interval=3)
    ids, mask = padded_prompt()
    graph_generate(model, ids, mask, cache=cache, max_new_tokens=N, eos_token_id=None, capture=False)
    addresses = {k: t.data_ptr() for k, t in cache_tensors(cache).items()}
    cache.reset()
    other = prompt_ids(3, 7, seed=5)
    out = graph_generate(model, other, cache=cache, max_new_tokens=N, eos_token_id=None, capture=False)
    assert {k: t.data_ptr() for k, t in cache_tensors(cache).items()} == addresses
    with torch.no_grad():
        ref = model.generate(other, max_new_tokens=N, do_sample=False, eos_token_id=None)
    assert torch.equal(out.sequences, ref)


@pytest.mark.parametrize("family", ["qwen3_5", "glm5_next"])  # static attention layers: plain and indexed
def test_static_reset_then_another_batch_size_crop_and_continue(family):
    """reset() lets a batch of another size follow in static mode too (the static attention layers reallocate, as
    the DeltaLog layers do), and every layer's token count stays exact through the decode steps, a crop and a
    multi-token continuation: tokens == generate with the default cache on the same conversation."""
    model = tiny_model(family)
    cache = DeltaLogCache(model, static=True, max_cache_len=24, merge_interval=3, crop_ring=True)
    kw = dict(do_sample=False, eos_token_id=None)

    def held():
        counts = {layer.seen_tokens() for layer in cache.deltalog_layers} | {int(cache.get_seq_length())}
        assert len(counts) == 1, counts
        return counts.pop()

    graph_generate(model, prompt_ids(2, 7), cache=cache, max_new_tokens=6, eos_token_id=None, capture=False)
    assert held() == 7 + 6 - 1
    cache.reset()
    assert held() == 0
    ids = prompt_ids(3, 5, seed=3)
    out = graph_generate(model, ids, cache=cache, max_new_tokens=6, eos_token_id=None, capture=False).sequences
    with torch.no_grad():
        assert torch.equal(out, model.generate(ids, max_new_tokens=6, **kw))
    assert held() == 5 + 6 - 1
    cache.crop(-1)  # 5 decode steps at M = 3: the last 2 are in the log
    assert held() == 9
    # The user's next turn: the cropped token and 3 new ones in one forward, then decode steps.
    conversation = torch.cat([out[:, :10], prompt_ids(3, 3, seed=4)], dim=1)
    with torch.no_grad():
        ours = model.generate(conversation, past_key_values=cache, max_new_tokens=5, **kw)
        assert torch.equal(ours, model.generate(conversation, max_new_tokens=5, **kw))
    assert held() == 13 + 5 - 1


def test_static_dense_path_writes_the_base_in_place():
    """Where a layer decodes densely through an external kernel that returns a new state (FLA's on a GPU), static
    mode copies it into the base (fixed address) instead of rebinding the attribute."""
    from hf_deltalog.kernels.gdn.naive import naive_recurrent_gated_delta_rule

    model = tiny_model("qwen3_5")
    calls = []

    def dense(q, k, v, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, state_v_first):
        calls.append(1)
        S = initial_state.transpose(-1, -2) if state_v_first else initial_state
        o, S = naive_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=S, output_final_state=True,
                                                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        return o, (S.transpose(-1, -2) if state_v_first else S).clone()

    ids, mask = padded_prompt()
    ours = DeltaLogCache(model, static=True, max_cache_len=7 + N, merge_interval=1)
    dec = GraphDecoder(model, ours, capture=False)
    dec.prefill(ids, mask, max_new_tokens=N)
    for layer in ours.deltalog_layers:
        layer.dense_kernel = dense
    bases = [layer.base.data_ptr() for layer in ours.deltalog_layers]
    for _ in range(N - 1):
        dec.step()
    assert len(calls) == 2 * (N - 1) and [layer.base.data_ptr() for layer in ours.deltalog_layers] == bases
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=N, do_sample=False, eos_token_id=None)
    assert torch.equal(dec.sequences(N), ref)


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_log_overhead_within_budget_at_real_head_sizes(family):
    """Log buffers (plus kernel workspace) add at most 15 % to the recurrent state at the default merge intervals,
    at Qwen3.5 / Kimi-Linear head sizes; the crop ring is off by default and counted apart."""
    pytest.importorskip("triton", reason="the workspace is the Triton backend's")
    real = dict(qwen3_5=dict(linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                             linear_value_head_dim=128),
                kimi_linear=dict(linear_num_heads=32, linear_head_dim=128))[family]
    config = tiny_model(family).config.__class__(**{**tiny_model(family).config.to_dict(), **real})
    cache = DeltaLogCache(config, merge_interval=None, backend="triton", static=True, max_cache_len=8)
    layer = cache.deltalog_layers[0]
    layer.auto_merge_interval = False  # the default M (8 GDN / 4 KDA) at any batch size
    layer.conv_states[0] = torch.zeros(2, 8, 4)
    layer._allocate(2, torch.device("cpu"))
    report = cache.memory_breakdown()
    overhead = (report["log"] + report["workspace"]) / report["state"]
    assert report["crop_ring"] == 0 and 0.05 < overhead <= 0.15, report


def test_recorded_margins_are_the_top2_gaps_of_generate():
    """record_margins keeps, per row and generated token, the gap between the two largest logits: equal to the gap in
    generate's own scores (greedy, no logits processors) at every step, the prefill's token included."""
    model = tiny_model("qwen3_5")
    ids, mask = padded_prompt()
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=N, do_sample=False, eos_token_id=None,
                             output_scores=True, return_dict_in_generate=True)
    gaps = torch.stack([s.float().topk(2, -1).values.diff(dim=-1).neg()[:, 0] for s in ref.scores], dim=1)
    dec = GraphDecoder(model, make_cache("deltalog", model, 7 + N), capture=False, record_margins=True)
    dec.prefill(ids, mask, max_new_tokens=N)
    for _ in range(N - 1):
        dec.step()
    assert torch.equal(dec.sequences(N), ref.sequences)
    assert dec.margins.shape == (3, N) and (dec.margins >= 0).all()
    torch.testing.assert_close(dec.margins, gaps, rtol=1e-5, atol=1e-5)


def test_prefill_refuses_a_cache_half_filled_by_an_interrupted_forward():
    """An exception inside layer 1 (attention) during prefill leaves linear layer 0 holding the prompt while the
    attention layers, which the count reads, hold nothing: graph_generate then decoded on top of the stale state
    (17 of 24 tokens differed; transformers' StaticCache does the same). It now raises the inconsistency."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    cache = make_cache("deltalog", model, 32)
    handle = None

    def hook(module, args):
        handle.remove()
        raise RuntimeError("interrupted")

    handle = model.model.layers[1].register_forward_pre_hook(hook)
    with pytest.raises(RuntimeError, match="interrupted"):
        graph_generate(model, ids, cache=cache, max_new_tokens=4, capture=False)
    assert int(cache.get_seq_length()) == 0
    with pytest.raises(ValueError, match="inconsistent.*cache.reset"):
        graph_generate(model, ids, cache=cache, max_new_tokens=4, capture=False)
    cache.reset()
    out = graph_generate(model, ids, cache=cache, max_new_tokens=4, capture=False, eos_token_id=None)
    assert torch.equal(out.sequences, model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None))


def test_sequences_keep_the_prompt_when_the_caller_reuses_its_buffer():
    """prefill kept a reference to the caller's input_ids (when already on the model's device), so a caller that
    refilled its prompt buffer before sequences() got the new contents as the prompt (43rd review)."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    want = ids.clone()
    dec = GraphDecoder(model, make_cache("deltalog", model, 32), capture=False, eos_token_id=None)
    dec.prefill(ids, max_new_tokens=3)
    ids.fill_(0)
    dec.step()
    assert torch.equal(dec.sequences(2)[:, :6], want)


def test_prefill_refuses_non_integer_input_ids():
    """Float (or bool) input_ids failed inside the embedding with torch's raw message: now a TypeError before the
    model runs, the cache left empty."""
    model = tiny_model("qwen3_5")
    cache = make_cache("deltalog", model, 32)
    for bad in (prompt_ids(2, 6).float(), prompt_ids(2, 6) > 3):
        with pytest.raises(TypeError, match="input_ids must hold integer token ids"):
            graph_generate(model, bad, cache=cache, max_new_tokens=2, capture=False)
        assert cache.get_seq_length() == 0
    out = graph_generate(model, prompt_ids(2, 6).int(), cache=cache, max_new_tokens=2, capture=False,
                         eos_token_id=None)
    assert torch.equal(out.sequences[:, 6:], model.generate(prompt_ids(2, 6), max_new_tokens=2, do_sample=False,
                                                            eos_token_id=None)[:, 6:])


def test_argument_types_are_checked():
    """graph_generate(None, ...) failed with a raw AttributeError, warmup_steps="x" or -3 were ignored without capture
    and record_margins="no" / time_steps="no" counted as True (71st review): TypeErrors naming the argument now, before
    anything runs."""
    model = tiny_model("qwen3_5")
    cache = make_cache("deltalog", model, 32)
    with pytest.raises(TypeError, match="model must be a transformers causal LM .* got NoneType"):
        graph_generate(None, prompt_ids(2, 6), cache=cache, max_new_tokens=2, capture=False)
    with pytest.raises(TypeError, match="time_steps must be True or False; got 'no'"):
        graph_generate(model, prompt_ids(2, 6), cache=cache, max_new_tokens=2, capture=False, time_steps="no")
    with pytest.raises(TypeError, match="eos_token_id must be an int, a list of ints or a tensor of them; got True"):
        graph_generate(model, prompt_ids(2, 6), cache=cache, max_new_tokens=2, capture=False, eos_token_id=True)
    for bad in ("x", -3, 2.5, True):
        with pytest.raises(TypeError, match=f"warmup_steps must be an int ≥ 0 .*got {bad!r}"):
            graph_generate(model, prompt_ids(2, 6), cache=cache, max_new_tokens=2, capture=False, warmup_steps=bad)
    with pytest.raises(TypeError, match="record_margins must be True or False; got 'no'"):
        GraphDecoder(model, cache, capture=False, record_margins="no")
    assert cache.get_seq_length() == 0
    assert GraphDecoder(model, cache, capture=False, warmup_steps=np.int64(3)).warmup_steps == 0  # eager: no warm-up


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError),
                                      ("4", TypeError)])
def test_prefill_chunk_must_be_a_positive_int(bad, exc):
    """prefill_chunk=-1 failed with an UnboundLocalError and 2.5 was silently truncated to 2; a wrong type is a
    TypeError (it was a ValueError)."""
    model = tiny_model("qwen3_5")
    with pytest.raises(exc, match="prefill_chunk must be None or an int of at least 1"):
        graph_generate(model, prompt_ids(2, 6), cache=make_cache("deltalog", model, 32), max_new_tokens=2,
                       capture=False, prefill_chunk=bad)


@pytest.mark.parametrize("mask_shape", [(3, 8), (2, 7)])
def test_prefill_refuses_a_mask_of_another_shape_before_the_model_runs(mask_shape):
    """An attention mask of another shape than the ids ran the prompt through the model first: [3, 8] for [3, 7] ids
    failed at the mask buffer's copy with the cache holding the prompt, [2, 7] failed inside an attention layer with
    the layers holding 7 and 0 tokens; either way the next call was refused until reset(). Now a ValueError names the
    shapes before anything runs, the cache stays empty, and the right mask then decodes generate's tokens."""
    model = tiny_model("qwen3_5")
    ids, mask = padded_prompt()
    cache = make_cache("deltalog", model, 7 + 4)
    with pytest.raises(ValueError, match=rf"attention_mask must have the shape of input_ids \(3, 7\).*got "
                                         rf"\({mask_shape[0]}, {mask_shape[1]}\)"):
        graph_generate(model, ids, torch.ones(mask_shape, dtype=torch.long), cache=cache, max_new_tokens=4,
                       capture=False, eos_token_id=None)
    assert int(cache.get_seq_length()) == 0 and all(layer.base is None for layer in cache.deltalog_layers)
    out = graph_generate(model, ids, mask, cache=cache, max_new_tokens=4, capture=False, eos_token_id=None)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, eos_token_id=None)
    assert torch.equal(out.sequences, ref)


def test_numpy_integers_are_taken_and_a_captured_graph_is_checked_before_the_model_runs():
    """graph_generate refused max_new_tokens=np.int64(4), which generate and max_cache_len take. And a prefill asking
    more new tokens than a captured graph writes was refused only after the prompt had filled the cache. (A captured
    graph needs CUDA: a stand-in object marks the decoder as captured, as far as prefill's checks go.)"""
    model = tiny_model("qwen3_5")
    ids, mask = padded_prompt()
    cache = make_cache("deltalog", model, 7 + 6)
    out = graph_generate(model, ids, mask, cache=cache, max_new_tokens=np.int64(4), capture=False,
                         eos_token_id=None, prefill_chunk=np.int32(3))
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, eos_token_id=None)
    assert torch.equal(out.sequences, ref)
    cache.reset()
    dec = GraphDecoder(model, cache, capture=False)
    dec.prefill(ids, mask, max_new_tokens=4)
    dec.graph = object()  # the decoder's buffers were captured for 4 new tokens per row
    cache.reset()
    with pytest.raises(ValueError, match="the captured graph writes at most 4 tokens per row; got max_new_tokens=6"):
        dec.prefill(ids, mask, max_new_tokens=6)
    assert int(cache.get_seq_length()) == 0


def test_a_vision_language_prompt_with_image_placeholders_is_refused():
    """graph_generate takes token ids only: on a Qwen3.5 vision-language wrapper a prompt with image placeholder
    tokens decoded them as plain tokens (the tokens of generate without the pixels), silently. Now it is refused
    before anything runs; a text prompt on the same model still decodes generate's tokens."""
    from utils import COMMON, GDN, LAYERS

    image_token, video_token = 90, 91
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=64)
    config = transformers.Qwen3_5Config(text_config=dict(**COMMON, **GDN, layer_types=LAYERS,
                                                         model_type="qwen3_5_text"),
                                        vision_config=vision, image_token_id=image_token, video_token_id=video_token,
                                        vision_start_token_id=92, vision_end_token_id=93)
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    ids, mask = padded_prompt()
    ids = ids.clamp(max=80)  # text tokens only
    cache = DeltaLogCache(model, static=True, max_cache_len=7 + 4)
    out = graph_generate(model, ids, mask, cache=cache, max_new_tokens=4, capture=False, eos_token_id=None,
                         pad_token_id=PAD)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, eos_token_id=None,
                             pad_token_id=PAD)
    assert torch.equal(out.sequences, ref)
    cache.reset()
    for token, name in ((image_token, "image_token_id=90"), (video_token, "video_token_id=91")):
        media = ids.clone()
        media[1, 3:5] = token
        with pytest.raises(ValueError, match=rf"media placeholder tokens \({name}\).*model.generate"):
            graph_generate(model, media, mask, cache=cache, max_new_tokens=4, capture=False, eos_token_id=None,
                           pad_token_id=PAD)
        assert int(cache.get_seq_length()) == 0


def test_a_small_numpy_prefill_chunk_does_not_wrap_and_masks_must_be_tensors():
    """prefill_chunk=np.int8(100) on a 150-token prompt: start + chunk wrapped in int8 (100 + 100 = -56), the second
    chunk was empty and the model failed with the cache holding 100 tokens. A list mask failed with an
    AttributeError. Now the chunk is a Python int, and a non-tensor mask or prompt is a TypeError before anything
    runs."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(1, 150)
    cache = DeltaLogCache(model, static=True, max_cache_len=150 + 3, merge_interval=3)
    out = graph_generate(model, ids, cache=cache, max_new_tokens=3, capture=False, eos_token_id=None,
                         prefill_chunk=np.int8(100))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=3, do_sample=False, eos_token_id=None)
    assert torch.equal(out.sequences, ref)
    cache.reset()
    with pytest.raises(TypeError, match="input_ids and attention_mask must be torch tensors; got Tensor and list"):
        graph_generate(model, ids, [[1] * 150], cache=cache, max_new_tokens=3, capture=False, eos_token_id=None)
    with pytest.raises(TypeError, match="got ndarray and NoneType"):
        graph_generate(model, ids.numpy(), cache=cache, max_new_tokens=3, capture=False, eos_token_id=None)
    assert int(cache.get_seq_length()) == 0


def test_empty_prompt_and_sequences_out_of_range_are_refused():
    """An empty prompt failed inside range(); sequences(10) after 3 generated tokens silently returned 3."""
    model = tiny_model("qwen3_5")
    cache = make_cache("deltalog", model, 32)
    dec = GraphDecoder(model, cache, capture=False)
    with pytest.raises(ValueError, match="T ≥ 1"):
        dec.prefill(torch.zeros(2, 0, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(ValueError, match="call prefill"):
        dec.sequences(1)
    dec.prefill(prompt_ids(2, 6), max_new_tokens=3)
    dec.step()
    assert dec.sequences(2).shape == (2, 8)
    for bad in (3, -1):
        with pytest.raises(ValueError, match=r"steps must be an int in \[0, 2\]"):
            dec.sequences(bad)
    for bad in (1.0, True, "1"):  # a wrong type is a TypeError (it was a ValueError); a numpy integer is taken
        with pytest.raises(TypeError, match=r"steps must be an int in \[0, 2\]"):
            dec.sequences(bad)
    assert torch.equal(dec.sequences(np.int64(2)), dec.sequences(2))


def test_eos_token_id_as_a_tensor_is_accepted():
    """generate takes eos_token_id as a tensor; graph_generate failed with "iteration over a 0-d tensor"."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    ref = graph_generate(model, ids, cache=make_cache("deltalog", model, 32), max_new_tokens=6, capture=False,
                         eos_token_id=[3], pad_token_id=0).sequences
    for eos in (torch.tensor(3), torch.tensor([3]), 3):
        out = graph_generate(model, ids, cache=make_cache("deltalog", model, 32), max_new_tokens=6, capture=False,
                             eos_token_id=eos, pad_token_id=0).sequences
        assert torch.equal(out, ref)
    with pytest.raises(TypeError, match="eos_token_id must be"):
        GraphDecoder(model, make_cache("deltalog", model, 32), capture=False, eos_token_id=[2.5], pad_token_id=0)
    # pad_token_id=True / "x" were accepted at construction (found by the eleventh review); a 1-element tensor is an id
    for bad in (True, "x", 1.0):
        with pytest.raises(TypeError, match="pad_token_id must be an int"):
            GraphDecoder(model, make_cache("deltalog", model, 32), capture=False, eos_token_id=3, pad_token_id=bad)
    for pad, eos in ((torch.tensor(0), 3), (np.int64(0), np.int64(3))):  # numpy ints, as generate takes them
        out = graph_generate(model, ids, cache=make_cache("deltalog", model, 32), max_new_tokens=6, capture=False,
                             eos_token_id=eos, pad_token_id=pad).sequences
        assert torch.equal(out, ref)


@pytest.mark.parametrize("option, value", [("repetition_penalty", 1.5), ("no_repeat_ngram_size", 2),
                                           ("min_new_tokens", 8), ("bad_words_ids", "first"), ("num_beams", 2),
                                           ("suppress_tokens", "first")])
def test_graph_generate_refuses_generation_config_options_it_does_not_apply(option, value):
    """graph_generate is greedy from the raw logits and read only eos / pad from model.generation_config: a checkpoint
    whose generation_config sets a logits processor (a repetition_penalty, min_new_tokens, ...) or beams got tokens
    that differed silently from model.generate's (found by a breaker review). Refused, naming the option; with the
    option at its neutral value or unset the loop gives generate's tokens again."""
    model = copy.deepcopy(tiny_model("qwen3_5"))  # tiny_model is cached: its generation_config is changed here
    ids, mask = padded_prompt()
    if value == "first":  # ban the first token greedy decoding picks in row 0
        first = int(model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False)[0, -1])
        value = [[first]] if option == "bad_words_ids" else [first]
    setattr(model.generation_config, option, value)
    with torch.no_grad():
        assert not torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False),
                               model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                              **{option: None if option != "num_beams" else 1}))
    cache = make_cache("deltalog", model, 7 + 12)
    with pytest.raises(ValueError, match=rf"decodes greedily from the raw logits, but model.generation_config sets "
                                         rf"{option}="):
        graph_generate(model, ids, mask, cache=cache, max_new_tokens=12, capture=False)
    assert int(cache.get_seq_length()) == 0
    neutral = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_new_tokens": 0, "num_beams": 1}
    setattr(model.generation_config, option, neutral.get(option))
    out = graph_generate(model, ids, mask, cache=cache, max_new_tokens=12, capture=False)
    with torch.no_grad():
        assert torch.equal(out.sequences, model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False))


@pytest.mark.parametrize("option, value, eos_token_id", [("min_length", 7, "config"), ("forced_bos_token_id", 5, "config"),
                                                         ("min_new_tokens", 8, None), ("min_length", 12, None)])
def test_graph_generate_accepts_generation_config_options_that_cannot_act(option, value, eos_token_id):
    """Options that generate(do_sample=False) would not apply to this call are accepted (a review found them refused):
    min_length up to the prompt's length (7 here), forced_bos_token_id after a prompt of more than one token, and
    min_length / min_new_tokens when the call decodes without EOS ids. Tokens equal generate's."""
    model = copy.deepcopy(tiny_model("qwen3_5"))  # tiny_model is cached: its generation_config is changed here
    ids, mask = padded_prompt()
    setattr(model.generation_config, option, value)
    out = graph_generate(model, ids, mask, cache=make_cache("deltalog", model, 7 + 12), max_new_tokens=12,
                         capture=False, eos_token_id=eos_token_id)
    gen_eos = {} if eos_token_id == "config" else dict(eos_token_id=None)
    with torch.no_grad():
        assert torch.equal(out.sequences, model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                                         **gen_eos))
    model.generation_config.min_length = 8  # one more than the prompt: acts, refused (with EOS ids)
    with pytest.raises(ValueError, match="min_length=8"):
        graph_generate(model, ids, mask, cache=make_cache("deltalog", model, 7 + 12), max_new_tokens=12,
                       capture=False)


def test_past_recording_makes_a_static_cache_not_compileable():
    """Past recording grows the conv states and assigns them anew at every step (transformers' linear-attention layer
    reports is_compileable=False then): a captured graph would replay a stale conv window, so the static cache must say
    it is not compileable and the captured loop must refuse it, as it refuses transformers' StaticCache."""
    model = tiny_model("qwen3_5")
    for cache in (DeltaLogCache(model, static=True, max_cache_len=16),
                  transformers.StaticCache(config=model.config, max_cache_len=16)):
        assert cache.is_compileable
        cache.activate_past_recording()
        assert not cache.is_compileable
        with pytest.raises(ValueError, match="needs a static cache"):
            GraphDecoder(model, cache, capture=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_recording_static_cache_without_an_attention_mask(family):
    """Found by the 58th review: past recording makes a static cache not compileable, and transformers then skips the
    causal mask of a one-token step without attention_mask (or with an all-ones one: see the next test): SDPA
    attended the empty static slots and the logits moved
    by ~0.1 in a manual decode loop (transformers' StaticCache does the same). The recording static cache's attention
    layers return only their filled slots now: a prefill, 4 steps, crop(-2) and 2 more steps match transformers'
    DynamicCache fed the kept tokens (prefill, the first 2 steps, the last 2), without a mask; with a left-padded
    batch and its mask too."""
    model = tiny_model(family)
    # 2 + 4 tokens: lara_mini's static sliding-window layers (6 slots) stay croppable; crop_ring: the KDA families
    # record no decoded conv columns
    ids, mask = prompt_ids(2, 2), torch.ones(2, 2, dtype=torch.long)
    mask[1, :1] = 0
    steps = [prompt_ids(2, 1, seed=40 + i) for i in range(6)]
    one = torch.ones(2, 1, dtype=torch.long)

    def run(cache, feed, masked):
        logits, seen = [], mask
        with torch.no_grad():
            for x in feed:
                if x is None:
                    cache.crop(-2)
                    seen = seen[:, :-2]
                    continue
                seen = seen if x is ids else torch.cat([seen, one], 1)
                kw = {"attention_mask": seen} if masked else {}
                logits.append(model(x, cache=cache, use_cache=True, **kw).logits)
        return logits

    for masked in (False, True):
        cache = DeltaLogCache(model, static=True, max_cache_len=16, merge_interval=8, crop_ring=True)
        cache.activate_past_recording()
        assert not cache.is_compileable
        got = run(cache, [ids, *steps[:4], None, *steps[4:]], masked)
        want = run(transformers.DynamicCache(config=model.config), [ids, *steps[:2], *steps[4:]], masked)
        got = got[:3] + got[5:]  # the cropped steps' logits have no counterpart
        worst = max(float((g - w).abs().max()) for g, w in zip(got, want))
        assert worst < 1e-5, (masked, worst)
        assert int(cache.get_seq_length()) == 2 + 4


@pytest.mark.parametrize("family", FAMILIES)
def test_a_recording_static_cache_in_generate_with_an_unpadded_batch(family):
    """Found by the 59th review: transformers skips the one-token mask of a non-compileable cache for an all-ones
    attention_mask too, which is what generate passes for an unpadded batch, so generate itself decoded with the
    empty static slots attended (this setup, before a2b5e4c: |Δscore| 0.07 for qwen3_5, 0.12 for lara_mini). With
    max_cache_len = 5, below lara_mini's window of 6, its static sliding-window layers keep 5 slots, which a2b5e4c
    left unmasked (|Δscore| 0.40)."""
    model = tiny_model(family)
    ids = prompt_ids(1, 2)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, output_scores=True,
              return_dict_in_generate=True, pad_token_id=0)
    cache = DeltaLogCache(model, static=True, max_cache_len=5, merge_interval=8)
    cache.activate_past_recording()
    with torch.no_grad():
        out = model.generate(ids, cache=cache, **kw)
        ref = model.generate(ids, **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert max(float((a - b).abs().max()) for a, b in zip(out.scores, ref.scores)) < 1e-5


@pytest.mark.parametrize("record", [False, True])
def test_a_static_sliding_window_layer_with_fewer_slots_than_its_window_refuses_more_tokens(record):
    """Found by the 60th review: in a config whose attention layers all slide (no full-attention layer to fail on an
    overflow), a static cache of max_cache_len 5 below the window of 6 took a 6th token in a manual loop: its 5 slots
    rolled and dropped a key the window still attends (|Δlogit| ~0.26; transformers' StaticCache does the same).
    Such a step is refused now, naming max_cache_len, and the cache is locked until reset(); with max_cache_len equal
    to the window the slots roll as the window does, and 9 tokens match a full forward."""
    cfg = family_config("lara_mini", layer_types=["linear_attention", "sliding_attention", "linear_attention",
                                                  "sliding_attention", "sliding_attention"])
    torch.manual_seed(0)
    model = transformers.LaraMiniForCausalLM(cfg).eval()
    window = cfg.sliding_window
    for slots in (window - 1, window):
        cache = DeltaLogCache(model, static=True, max_cache_len=slots, merge_interval=8)
        if record:
            cache.activate_past_recording()
        toks = prompt_ids(1, 2)
        with torch.no_grad():
            model(toks, cache=cache, use_cache=True)
            for i in range(7):
                x = prompt_ids(1, 1, seed=30 + i)
                toks = torch.cat([toks, x], 1)
                if toks.shape[1] > slots == window - 1:
                    with pytest.raises(ValueError, match=rf"has room for {slots} tokens per row \(max_cache_len\), "
                                                         rf"but layer 1 \(a sliding window of {window}\) would hold "
                                                         rf"{slots + 1}"):
                        model(x, cache=cache, use_cache=True)
                    with pytest.raises(ValueError, match="locked by a call it refused"):
                        model(x, cache=cache, use_cache=True)
                    break
                got = model(x, cache=cache, use_cache=True).logits
                want = model(toks, use_cache=False).logits[:, -1:]
                assert (got - want).abs().max() < 1e-5, (slots, toks.shape[1])
        assert toks.shape[1] == (slots + 1 if slots < window else 9)


def test_a_static_full_attention_layer_past_its_slots_locks_the_cache():
    """Found by the 61st review: a manual loop's token past max_cache_len made transformers' StaticLayer raise a raw
    IndexError (index_copy_) after it had counted the token, and left the cache unlocked and miscounted. It is a
    ValueError naming max_cache_len now, the cache is locked, and after reset() it decodes as a fresh cache."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, static=True, max_cache_len=5)
    with torch.no_grad():
        model(prompt_ids(1, 5), cache=cache)
        with pytest.raises(ValueError, match=r"has room for 5 tokens per row \(max_cache_len\), and layer 1 was "
                                             r"given more \(index_copy_"):
            model(prompt_ids(1, 1, seed=2), cache=cache)
        with pytest.raises(ValueError, match="locked by a call it refused"):
            model(prompt_ids(1, 1, seed=2), cache=cache)
        cache.reset()
        got = model(prompt_ids(1, 5, seed=3), cache=cache).logits
        want = model(prompt_ids(1, 5, seed=3), cache=DeltaLogCache(model, static=True, max_cache_len=5)).logits
    assert torch.equal(got, want)


def test_reading_a_static_cache_from_user_code_is_only_a_read():
    """get_recurrent_state called between turns (or before the prefill) is a read in static mode too: it does not mark
    the layer as inside a step, so the next generate neither refuses the cache nor changes its tokens."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, static=True, max_cache_len=24, merge_interval=3)
    assert cache.get_recurrent_state(0) is None  # before the prefill
    with torch.no_grad():
        first = model.generate(ids, cache=cache, max_new_tokens=5, do_sample=False)
        state = cache.get_recurrent_state(0)  # between turns
        assert state is not None
        turn = torch.cat([first, prompt_ids(2, 2, seed=3)], 1)
        out = model.generate(turn, cache=cache, max_new_tokens=5, do_sample=False)
        ref = model.generate(turn, max_new_tokens=5, do_sample=False)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("static", [True, False])
def test_generate_through_a_compiled_forward(static):
    """The usual recipe ``model.forward = torch.compile(model.forward)``: dynamo traces the prefill too, where the cache
    allocates its buffers (``mark_static_address`` is not callable inside a traced function; transformers' layers skip
    it there, and so does this cache). backend="eager": dynamo's tracing without a C++ compiler."""
    model = copy.deepcopy(tiny_model("qwen3_5"))
    ids = prompt_ids(2, 6)
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=8, do_sample=False)
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend="eager")
        cache = DeltaLogCache(model, merge_interval=3, **(dict(static=True, max_cache_len=16) if static else {}))
        out = model.generate(ids, cache=cache, max_new_tokens=8, do_sample=False)
    torch._dynamo.reset()
    assert torch.equal(out, ref)


def test_a_compiled_read_of_a_dynamic_cache_is_only_a_read():
    """get_recurrent_state from a function of the user's own compiled with torch.compile, between turns: in dynamic mode
    the caller is still told apart (the next generate is not refused as after a stopped forward)."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, merge_interval=3)
    torch._dynamo.reset()
    read = torch.compile(lambda c: c.get_recurrent_state(0), backend="eager")
    with torch.no_grad():
        first = model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False)
        assert read(cache) is not None
        turn = torch.cat([first, prompt_ids(2, 2, seed=3)], 1)
        out = model.generate(turn, cache=cache, max_new_tokens=4, do_sample=False)
    torch._dynamo.reset()
    assert torch.equal(out, model.generate(turn, max_new_tokens=4, do_sample=False))


def test_graph_decoder_refuses_a_model_that_is_not_a_module():
    """GraphDecoder(None, ...) failed with "'NoneType' object has no attribute 'parameters'" (52nd review)."""
    cache = DeltaLogCache(tiny_model("qwen3_5"), static=True, max_cache_len=16)
    with pytest.raises(TypeError, match="model must be a transformers causal LM .*; got NoneType"):
        GraphDecoder(None, cache, capture=False)


def test_prefill_takes_any_integer_ids_refuses_a_mask_that_is_not_0_or_1_and_warns_on_right_padding():
    """uint8 / int16 ids passed the integer check and failed in the embedding (which takes int64 / int32 only): now
    taken as int64. A mask of 0.5 or 2 was taken silently: now a ValueError before the model runs. A row ending in
    padding (right padding) decoded without a word: now the UserWarning generate gives too."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=2, do_sample=False, eos_token_id=None)
    for dtype in (torch.uint8, torch.int16):
        small = ids % 200  # within uint8
        with torch.no_grad():
            ref_small = model.generate(small, max_new_tokens=2, do_sample=False, eos_token_id=None)
        out = graph_generate(model, small.to(dtype), cache=make_cache("deltalog", model, 8), max_new_tokens=2,
                             capture=False, eos_token_id=None)
        assert torch.equal(out.sequences, ref_small), dtype
    cache = make_cache("deltalog", model, 8)
    for value, values in ((0.5, r"\[0.5, 1.0\]"), (2, r"\[1.0, 2.0\]")):
        mask = torch.ones(2, 6)
        mask[0, 0] = value
        with pytest.raises(ValueError, match=r"attention_mask must hold 0 \(padding\) and 1 \(prompt token\) only; "
                                             r"got the values " + values):
            graph_generate(model, ids, mask, cache=cache, max_new_tokens=2, capture=False, eos_token_id=None)
        assert int(cache.get_seq_length()) == 0 and all(layer.base is None for layer in cache.deltalog_layers)
    out = graph_generate(model, ids, torch.ones(2, 6, dtype=torch.bool), cache=cache, max_new_tokens=2,
                         capture=False, eos_token_id=None)
    assert torch.equal(out.sequences, ref)
    right = torch.ones(2, 6, dtype=torch.long)
    right[1, -2:] = 0
    with pytest.warns(UserWarning, match="ends in padding.*pad on the left") as caught:
        graph_generate(model, ids, right, cache=make_cache("deltalog", model, 8), max_new_tokens=2, capture=False,
                       eos_token_id=None)
    with pytest.warns(UserWarning, match="ends in padding") as caught_prefill:
        GraphDecoder(model, make_cache("deltalog", model, 8), capture=False).prefill(ids, right, max_new_tokens=2)
    assert [w.filename for w in (*caught, *caught_prefill)] == [__file__] * 2  # the warning names the caller's line
    assert hasattr(graph_generate, "__wrapped__")  # graph_generate keeps its torch.no_grad() decorator
