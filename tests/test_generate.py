"""generate() with DeltaLogCache against transformers' default cache, on every GDN and KDA family."""

import pytest
import torch
from transformers import DynamicCache
from utils import BOS, FAMILIES, PAD, max_abs, prompt_ids, rel_err, tiny_model

from hf_deltalog import DeltaLogCache, DeltaLogLayer

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
GREEDY = dict(do_sample=False, return_dict_in_generate=True, output_logits=True)


def generate(model, ids, cache=None, **kw):
    with torch.no_grad():
        if cache is None:
            return model.generate(ids, **kw)
        return model.generate(ids, cache=cache, **kw)


def max_logit_diff(a, b):
    return max(max_abs(x, y) for x, y in zip(a.logits, b.logits))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_greedy_matches_dynamic_cache(family, dtype):
    """Same tokens over 3+ merge cycles (27 decode steps, the family's default M); logits bounded."""
    model = tiny_model(family, dtype)
    ids = prompt_ids(3, 7)
    ref = generate(model, ids, max_new_tokens=28, **GREEDY)
    cache = DeltaLogCache(model)
    out = generate(model, ids, cache, max_new_tokens=28, **GREEDY)
    M = cache.merge_interval
    assert M == {"gdn": 8, "kda": 4}[cache.deltalog_layers[0].spec.operator] and out.past_key_values is cache
    if dtype == torch.float32:
        # The same fp32 arithmetic in another order.
        assert torch.equal(out.sequences, ref.sequences)
        assert max_logit_diff(out, ref) <= 1e-4
    else:
        # bf16: the recurrence runs in fp32 on both paths and is rounded once to bf16 at its output, so outputs differ
        # by at most one bf16 ulp (2^-8), a few 1e-3 in these logits. Tokens must agree until a step where the
        # reference's top two logits are closer than that bound (a near tie), and logits must stay within it.
        bound = 2e-2
        steps = [i for i in range(28) if not torch.equal(out.sequences[:, 7 + i], ref.sequences[:, 7 + i])]
        upto = steps[0] + 1 if steps else 28
        assert max(max_abs(a, b) for a, b in zip(out.logits[:upto], ref.logits[:upto])) <= bound
        if steps:
            rows = (out.sequences[:, 7 + steps[0]] != ref.sequences[:, 7 + steps[0]]).nonzero()[:, 0]
            top2 = ref.logits[steps[0]][rows].float().topk(2, dim=-1).values
            assert ((top2[:, 0] - top2[:, 1]) <= bound).all(), "a token differs without a near tie"
    for layer in cache.deltalog_layers:
        assert layer.base.dtype == torch.float32 and layer.k_log.dtype == torch.float32
        assert layer.length.tolist() == [27 % M] * 3  # the log really filled and merged


@pytest.mark.parametrize("family", FAMILIES)
def test_materialized_state_equals_dense_every_step(family):
    """Drive both caches by hand: logits and every layer's logical state equal the dense path after every step."""
    model = tiny_model(family)
    ids = prompt_ids(2, 6)
    dense, ours = DynamicCache(config=model.config), DeltaLogCache(model, merge_interval=3)
    with torch.no_grad():
        a = model(ids, cache=dense, use_cache=True)
        b = model(ids, cache=ours, use_cache=True)
        for step in range(10):
            assert max_abs(b.logits, a.logits) <= 1e-4, step
            for i, layer in enumerate(ours.layers):
                if layer in ours.deltalog_layers:
                    assert rel_err(ours.materialize(i), dense.layers[i].recurrent_states[0]) <= 1e-5, (step, i)
            nxt = a.logits[:, -1:].argmax(-1)
            a = model(nxt, cache=dense, use_cache=True)
            b = model(nxt, cache=ours, use_cache=True)
    assert [int(layer.length[0]) for layer in ours.deltalog_layers] == [10 % 3] * 2  # ten decode steps


@pytest.mark.parametrize("merge_interval", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next", "kimi_linear"])
def test_every_merge_interval_gives_the_same_tokens(family, merge_interval):
    model = tiny_model(family)
    ids = prompt_ids(2, 5, seed=3)
    ref = generate(model, ids, max_new_tokens=20, **GREEDY)
    out = generate(model, ids, DeltaLogCache(model, merge_interval=merge_interval), max_new_tokens=20, **GREEDY)
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) <= 1e-4


@pytest.mark.parametrize("family, stagger", [(f, False) for f in FAMILIES] + [("qwen3_5", True), ("kimi_linear", True)])
def test_beam_search(family, stagger):
    """Beam search reorders rows every step; staggered rows carry their own phase (length) with them."""
    model = tiny_model(family)
    ids = prompt_ids(2, 6, seed=4)
    kw = dict(num_beams=3, num_return_sequences=3, max_new_tokens=12, do_sample=False, return_dict_in_generate=True,
              output_scores=True)
    ref = generate(model, ids, **kw)
    out = generate(model, ids, DeltaLogCache(model, merge_interval=4, stagger_merges=stagger), **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert torch.allclose(out.sequences_scores, ref.sequences_scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampling_with_seed(family):
    model = tiny_model(family)
    ids = prompt_ids(2, 6, seed=5)
    kw = dict(do_sample=True, num_return_sequences=2, max_new_tokens=16, top_k=0, temperature=1.0)
    torch.manual_seed(123)
    ref = generate(model, ids, **kw)
    torch.manual_seed(123)
    out = generate(model, ids, DeltaLogCache(model), **kw)
    assert out.shape == (4, 22) and torch.equal(out, ref)


def left_pad(rows):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padded_batch_matches_solo_runs(family):
    model = tiny_model(family)
    rows = [[BOS] + prompt_ids(1, 4, seed=6)[0].tolist(), [BOS] + prompt_ids(1, 9, seed=7)[0].tolist()]
    ids, mask = left_pad(rows)
    with torch.no_grad():
        batched = model.generate(ids, attention_mask=mask, cache=DeltaLogCache(model), max_new_tokens=14,
                                 do_sample=False)
        for i, r in enumerate(rows):
            solo_ids = torch.tensor([r])
            solo = model.generate(solo_ids, cache=DeltaLogCache(model), max_new_tokens=14, do_sample=False)
            solo_dense = model.generate(solo_ids, max_new_tokens=14, do_sample=False)
            assert torch.equal(solo, solo_dense)
            got, want = batched[i, ids.shape[1]:].tolist(), solo[0, len(r):].tolist()
            # A row that reached EOS alone is padded in the batch until the other row finishes.
            assert got[:len(want)] == want and set(got[len(want):]) <= {PAD}, i


@pytest.mark.parametrize("family", ["qwen3_5", "olmo_hybrid", "bailing_hybrid"])
def test_batch_of_one_with_padding(family):
    model = tiny_model(family)
    row = [BOS] + prompt_ids(1, 6, seed=8)[0].tolist()
    ids, mask = left_pad([row])
    ids = torch.cat([torch.full((1, 3), PAD), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), mask], dim=1)
    with torch.no_grad():
        padded = model.generate(ids, attention_mask=mask, cache=DeltaLogCache(model), max_new_tokens=12,
                                do_sample=False)
        plain = model.generate(torch.tensor([row]), cache=DeltaLogCache(model), max_new_tokens=12, do_sample=False)
    assert padded[0, ids.shape[1]:].tolist() == plain[0, len(row):].tolist()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("prefill", [1, 7, 64, 65])
def test_split_invariance(family, prefill):
    """Prefill of `a` tokens then one-token decodes reproduces the full forward's logits (and the default cache's)."""
    model = tiny_model(family)
    ids = prompt_ids(2, prefill + 9, seed=9)

    def split(cache):
        logits = [model(ids[:, :prefill], cache=cache, use_cache=True).logits]
        for t in range(prefill, ids.shape[1]):
            logits.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits)
        return torch.cat(logits, dim=1)

    with torch.no_grad():
        full = model(ids).logits
        cache = DeltaLogCache(model, merge_interval=4)
        ours, dense = split(cache), split(DynamicCache(config=model.config))
    assert max_abs(ours, dense) <= 1e-5
    # The full forward runs the chunked form, decoding the recurrent form: fp32 rounding in different orders.
    # glm5_next's indexed (sparse top-k) attention picks its keys differently in one pass than step by step, so
    # transformers' own cache is not split-invariant there (max |Δlogit| ~0.1 at a = 7); only the default cache is
    # the reference for it.
    if family != "glm5_next":
        assert max_abs(ours, full) <= 1e-4
    assert cache.get_seq_length() == ids.shape[1]


@pytest.mark.parametrize("family", FAMILIES)
def test_multi_token_continuation_on_a_populated_cache(family):
    """Decode into the log, then forward several tokens at once: exact, and the log restarts from the dense state."""
    model = tiny_model(family)
    ids = prompt_ids(2, 20, seed=10)
    with torch.no_grad():
        full = model(ids).logits
        cache = DeltaLogCache(model, merge_interval=8)
        parts = [model(ids[:, :6], cache=cache, use_cache=True).logits]
        for t in range(6, 11):
            parts.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits)
        assert [int(x.length[0]) for x in cache.deltalog_layers] == [5, 5]
        parts.append(model(ids[:, 11:17], cache=cache, use_cache=True).logits)
        assert [int(x.length[0]) for x in cache.deltalog_layers] == [0, 0]
        for t in range(17, 20):
            parts.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits)
    assert max_abs(torch.cat(parts, dim=1), full) <= 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_multi_turn_generate_continues_the_cache(family):
    model = tiny_model(family)
    ids = prompt_ids(2, 5, seed=11)
    dense, ours = DynamicCache(config=model.config), DeltaLogCache(model, merge_interval=3)
    turn1_ref = generate(model, ids, dense, max_new_tokens=7, do_sample=False)
    turn1 = generate(model, ids, ours, max_new_tokens=7, do_sample=False)
    assert torch.equal(turn1, turn1_ref)
    follow_up = torch.cat([turn1, prompt_ids(2, 4, seed=12)], dim=1)
    turn2_ref = generate(model, follow_up, dense, max_new_tokens=9, **GREEDY)
    turn2 = generate(model, follow_up, ours, max_new_tokens=9, **GREEDY)
    assert torch.equal(turn2.sequences, turn2_ref.sequences)
    assert max_logit_diff(turn2, turn2_ref) <= 1e-4
    assert ours.get_seq_length() == dense.get_seq_length() == follow_up.shape[1] + 8


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe", "glm5_next"])
def test_chunked_prefill(family):
    model = tiny_model(family)
    ids = prompt_ids(2, 13, seed=13)
    ref = generate(model, ids, max_new_tokens=10, **GREEDY)
    out = generate(model, ids, DeltaLogCache(model), max_new_tokens=10, prefill_chunk_size=4, **GREEDY)
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) <= 1e-4


@pytest.mark.parametrize("family, stagger", [(f, False) for f in ("qwen3_5", "qwen3_next", "kimi_linear",
                                                                    "bailing_hybrid")]
                         + [("qwen3_5", True), ("kimi_linear", True)])
def test_triton_backend_matches_dynamic_cache(family, stagger):
    """The fused Triton kernel end to end through generate (under TRITON_INTERPRET=1 on a machine without a GPU)."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    model = tiny_model(family)
    ids = prompt_ids(2, 5, seed=14)
    dense = DynamicCache(config=model.config)
    ref = generate(model, ids, dense, max_new_tokens=12, **GREEDY)
    cache = DeltaLogCache(model, merge_interval=4, backend="triton", stagger_merges=stagger)
    out = generate(model, ids, cache, max_new_tokens=12, **GREEDY)
    assert all(layer.backend == "triton" and layer.state_v_first for layer in cache.deltalog_layers)
    assert all(layer.length.tolist() == [(11 + (r if stagger else 0)) % 4 for r in range(2)]
               for layer in cache.deltalog_layers)
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) <= 1e-4
    for i, layer in enumerate(cache.layers):  # the V-first base comes back in transformers' layout
        if layer in cache.deltalog_layers:
            assert rel_err(cache.materialize(i), dense.layers[i].recurrent_states[0]) <= 1e-5


def test_merge_interval_policy():
    """Default M: 8 on the PyTorch backend; on the Triton backend, layers with a small state decode densely (M = 1).
    An explicit merge_interval is always kept."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5, seed=15)
    ref = generate(model, ids, max_new_tokens=6, **GREEDY)
    for backend, merge_interval, expected in (("torch", None, 8), ("triton", None, 1), ("triton", 4, 4)):
        cache = DeltaLogCache(model, merge_interval=merge_interval, backend=backend)
        out = generate(model, ids, cache, max_new_tokens=6, **GREEDY)
        assert torch.equal(out.sequences, ref.sequences), backend
        assert [layer.merge_interval for layer in cache.deltalog_layers] == [expected] * 2, backend


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_staggered_and_aligned_merges_give_the_default_cache_tokens(family):
    """stagger_merges=True / False and the default (False: every row merges at the same step), also with crop_ring."""
    model = tiny_model(family)
    ids = prompt_ids(3, 6, seed=12)
    ref = generate(model, ids, max_new_tokens=11, **GREEDY)
    for kw, stagger in ((dict(stagger_merges=True), True), (dict(stagger_merges=False), False), ({}, False),
                        (dict(crop_ring=True, stagger_merges=True), True), (dict(merge_interval=3), False),
                        (dict(merge_interval=1, stagger_merges=True), False)):  # M = 1: no log, nothing staggers
        options = dict(dict(merge_interval=4), **kw)
        cache = DeltaLogCache(model, **options)
        out = generate(model, ids, cache, max_new_tokens=11, **GREEDY)
        assert torch.equal(out.sequences, ref.sequences) and max_logit_diff(out, ref) <= 1e-4, kw
        M = options["merge_interval"]
        expected = [(10 + (r if stagger else 0)) % M for r in range(3)]  # 10 decode steps after the prefill
        assert all(layer.length.tolist() == expected for layer in cache.deltalog_layers), kw
        assert all(layer.staggered is stagger for layer in cache.deltalog_layers), kw
    staggered = DeltaLogCache(model, merge_interval=4, stagger_merges=True)
    generate(model, ids, staggered, max_new_tokens=3, **GREEDY)
    assert staggered.deltalog_layers and all(layer.staggered for layer in staggered.deltalog_layers)
    staggered.reset()
    assert not any(layer.staggered for layer in staggered.deltalog_layers)  # forgotten with the tokens
    generate(model, ids[:1], staggered, max_new_tokens=3, **GREEDY)  # a single row has only phase 0
    assert not any(layer.staggered for layer in staggered.deltalog_layers) and staggered.stagger_merges is True
    for bad in (None, 1, "no", torch.tensor(True)):
        with pytest.raises(TypeError, match=r"stagger_merges must be True or False \(False, the default: every row "
                                            r"merges at the same step; see hf_deltalog.cache.restart_log\); got"):
            DeltaLogCache(model, stagger_merges=bad)
    with pytest.raises(TypeError, match="got None \\(None chose staggering by state size until 2026-12-02; that rule "
                                        "was removed\\)"):
        DeltaLogCache(model, stagger_merges=None)
    with pytest.raises(TypeError, match="stagger_merges must be True or False"):
        DeltaLogLayer(cache.deltalog_layers[0].spec, (2, 4, 8, 16), 4, "torch", layer_idx=0, stagger_merges="no")


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_threads_decoding_one_model_each_through_their_own_cache(family):
    """A serving pattern: several threads call generate on one model at once, each with its own cache (two
    DeltaLogCaches of different M and a DynamicCache). The patches hold no per-call state, so each thread must get
    the tokens and logits it gets alone (found so by the 32nd review; this keeps it so)."""
    import threading

    model = tiny_model(family)
    ids = [prompt_ids(2, 5, seed=s) for s in (1, 2, 3)]
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=PAD, return_dict_in_generate=True, output_logits=True)

    def caches():
        return [DeltaLogCache(model, backend="torch", merge_interval=2), DeltaLogCache(model, backend="torch",
                merge_interval=3), DynamicCache(config=model.config)]

    with torch.no_grad():
        alone = [model.generate(i, cache=c, **kw) for i, c in zip(ids, caches())]
    start, out = threading.Barrier(3), [None] * 3

    def run(k, cache):
        start.wait()
        try:
            with torch.no_grad():
                out[k] = model.generate(ids[k], cache=cache, **kw)
        except Exception as error:  # noqa: BLE001 - reported below
            out[k] = error

    threads = [threading.Thread(target=run, args=(k, c)) for k, c in enumerate(caches())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for got, want in zip(out, alone):
        assert not isinstance(got, Exception), got
        assert torch.equal(got.sequences, want.sequences)
        assert max(max_abs(a, b) for a, b in zip(got.logits, want.logits)) <= 1e-6
