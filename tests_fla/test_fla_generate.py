"""generate() on FLA's RWKV6 / GatedDeltaNet / KDA causal LMs with DeltaLogCache, against FLA's cache and kernels."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from fla.models.utils import Cache
from helpers import FAMILIES, PAD, generate_ours, generate_ref, max_abs, max_logit_diff, prompt_ids, tiny_model
from transformers.generation.streamers import BaseStreamer

from hf_deltalog import DeltaLogCache
from hf_deltalog.fla_cache import FLADeltaLogCache, FLADeltaLogLayer

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
GREEDY = dict(do_sample=False, return_dict_in_generate=True, output_logits=True)
PROMPT, NEW = 5, 7  # 6 decode steps after the prefill


def assert_matches_fla_after_reset(model, ids, cache) -> None:
    """After ``cache.reset()`` a greedy generate of ``ids`` gives FLA's own cache's tokens."""
    cache.reset()
    out = generate_ours(model, ids, cache, max_new_tokens=3, **GREEDY)
    ref, _ = generate_ref(model, ids, max_new_tokens=3, **GREEDY)
    assert torch.equal(out.sequences, ref.sequences)


@functools.lru_cache(maxsize=None)
def greedy_ref(family: str):
    return generate_ref(tiny_model(family), prompt_ids(2, PROMPT), max_new_tokens=NEW, **GREEDY)[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_is_a_full_forward(family):
    """The reference (FLA's cache driven through generate) gives the logits of a full forward without a cache."""
    model, ref = tiny_model(family), greedy_ref(family)
    with torch.no_grad():
        full = model(ref.sequences, use_cache=False).logits
    assert max(max_abs(step, full[:, PROMPT - 1 + i]) for i, step in enumerate(ref.logits)) <= 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_fla_default_generate_drops_its_cache(family):
    """Documents why the reference and DeltaLogCache hand the cache over as past_key_values: FLA 0.6.0's own generate
    under transformers 5.24 and 5.25 loses its cache after the prompt. If this starts failing, FLA (or transformers)
    fixed it, and the adaptation in FLADeltaLogCache._generate_through can go."""
    model, ids = tiny_model(family), prompt_ids(2, PROMPT)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=3, **GREEDY)
        full = model(out.sequences, use_cache=False).logits
    assert max_abs(out.logits[0], full[:, PROMPT - 1]) <= 1e-4  # the prefill is right
    assert max_abs(out.logits[2], full[:, PROMPT + 1]) > 1e-3  # later steps decode without their context


@pytest.mark.parametrize("merge_interval", [None, 1, 2])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_matches_fla_cache(family, merge_interval):
    """Same tokens over several merge cycles, for the default M and every small M (M = 1: eager dense decoding)."""
    model, ref = tiny_model(family), greedy_ref(family)
    cache = DeltaLogCache(model, merge_interval=merge_interval)
    assert isinstance(cache, FLADeltaLogCache)
    out = generate_ours(model, prompt_ids(2, PROMPT), cache, max_new_tokens=NEW, **GREEDY)
    assert out.past_key_values is cache
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) <= 1e-4  # the same fp32 arithmetic in another order
    M = cache.merge_interval
    assert M == (merge_interval or {"rwkv6": 8, "gated_deltanet": 8, "kda": 4}[family])
    layers = cache.deltalog_layers
    assert len(layers) == 2 and all(layer.backend == "torch" for layer in layers)
    # the log's length after NEW - 1 decode steps: M = 1, 2 and KDA's 4 merged; the default M = 8 of RWKV6 and
    # GatedDeltaNet has not yet (test_merges_at_the_default_and_at_m8 decodes past it)
    assert all(layer.length.tolist() == [(NEW - 1) % M] * 2 for layer in layers)


LONG = 10  # 9 decode steps: past a merge at M = 8


@pytest.mark.parametrize("merge_interval", [None, 8])
@pytest.mark.parametrize("family", FAMILIES)
def test_merges_at_the_default_and_at_m8(family, merge_interval):
    """The default M (8 for RWKV6 and GatedDeltaNet, 4 for KDA) and M = 8 through a merge: FLA's cache's tokens."""
    model, ids = tiny_model(family), prompt_ids(2, PROMPT)
    ref, _ = generate_ref(model, ids, max_new_tokens=LONG, **GREEDY)
    cache = DeltaLogCache(model, merge_interval=merge_interval)
    out = generate_ours(model, ids, cache, max_new_tokens=LONG, **GREEDY)
    assert torch.equal(out.sequences, ref.sequences) and max_logit_diff(out, ref) <= 1e-4
    M = cache.merge_interval
    assert M == (merge_interval or {"rwkv6": 8, "gated_deltanet": 8, "kda": 4}[family]) and LONG - 1 >= M
    assert all(layer.length.tolist() == [(LONG - 1) % M] * 2 for layer in cache.deltalog_layers)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("prefill", [1, 7, 55, 64])
def test_split_invariance(family, prefill):
    """A prefill of ``prefill`` tokens, then 9 one-token forwards (M = 4: two merges), gives the logits of FLA's own
    cache driven the same way and, up to 64 tokens in all, of a full forward. FLA 0.6.0's layers (in eval) run a
    forward of at most 64 tokens in ``fused_recurrent`` mode and a longer one in ``chunk`` mode, whose kernels fail
    under the Triton interpreter at any length (``chunk_delta_h.py`` through FLA's autotune cache,
    ``fla/ops/utils/cache.py``: "'int' object has no attribute 'to'"), so on the CPU a 64-token prefill is compared
    with FLA's cache only, and a prefill of 65 tokens cannot run (``eval/gpu_generate_check_fla.py --prompt-length
    65`` is the GPU check)."""
    model = tiny_model(family, layers=1)
    ids = prompt_ids(2, prefill + 9, seed=9)

    def split(cache):
        logits = [model(ids[:, :prefill], past_key_values=cache, use_cache=True).logits]
        for t in range(prefill, ids.shape[1]):
            logits.append(model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits)
        return torch.cat(logits, dim=1)

    with torch.no_grad():
        cache = DeltaLogCache(model, merge_interval=4)
        ours, fla = split(cache), split(Cache())
        assert max_abs(ours, fla) <= 1e-5
        if ids.shape[1] <= 64:  # fused_recurrent mode (a longer forward would run chunk mode: see above)
            full = model(ids, use_cache=False).logits
            assert max_abs(ours, full) <= 1e-4  # one recurrence over all tokens against the split one: fp32 rounding
    assert cache.get_seq_length() == ids.shape[1]
    assert all(layer.length.tolist() == [9 % 4] * 2 for layer in cache.deltalog_layers)


@pytest.mark.parametrize("family", FAMILIES)
def test_staggered_and_aligned_merges_give_fla_cache_tokens(family):
    """stagger_merges=True / False and the default (False: every row merges at the same step)."""
    model, ref = tiny_model(family), greedy_ref(family)
    for kw, staggered in ((dict(stagger_merges=False), False), ({}, False), (dict(stagger_merges=True), True)):
        cache = DeltaLogCache(model, merge_interval=4, **kw)
        out = generate_ours(model, prompt_ids(2, PROMPT), cache, max_new_tokens=NEW, **GREEDY)
        assert torch.equal(out.sequences, ref.sequences) and max_logit_diff(out, ref) <= 1e-4
        expected = [(NEW - 1 + (r if staggered else 0)) % 4 for r in range(2)]
        assert all(layer.length.tolist() == expected for layer in cache.deltalog_layers), kw
        assert [layer.staggered for layer in cache.deltalog_layers] == [staggered] * len(cache.deltalog_layers)
    cache.reset()  # the last case's cache staggered
    assert cache.deltalog_layers and not any(layer.staggered for layer in cache.deltalog_layers)  # forgotten
    for bad in (None, "no"):
        with pytest.raises(TypeError, match=r"stagger_merges must be True or False \(False, the default: every row "
                                            r"merges at the same step; see hf_deltalog.cache.restart_log\); got"):
            DeltaLogCache(model, stagger_merges=bad)
    layer = cache.deltalog_layers[0]
    with pytest.raises(TypeError, match="stagger_merges must be True or False"):
        FLADeltaLogLayer(layer.spec, (layer.num_k_heads, layer.num_v_heads, layer.k_head_dim, layer.v_head_dim), 4,
                         "torch", 0, stagger_merges=0)


@pytest.mark.parametrize("stagger", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_triton_backend_greedy(family, stagger):
    """The Triton kernels (under the interpreter here) with their V-first base decode FLA's models too, with aligned
    and staggered merge phases."""
    model, ref = tiny_model(family), greedy_ref(family)
    cache = DeltaLogCache(model, merge_interval=3, backend="triton", stagger_merges=stagger)
    out = generate_ours(model, prompt_ids(2, PROMPT), cache, max_new_tokens=NEW, **GREEDY)
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) <= 1e-4
    for layer in cache.deltalog_layers:
        H, K, V = layer.num_v_heads, layer.k_head_dim, layer.v_head_dim
        assert layer.backend == "triton" and tuple(layer.base.shape) == (2, H, V, K)
        assert layer.length.tolist() == [(NEW - 1 + (r if stagger else 0)) % 3 for r in range(2)]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stagger", [False, True])
def test_beam_search(family, stagger):
    """Beam search reorders (and first expands) the cache rows: same beams and scores as FLA's cache (staggered rows
    carry their phase with them)."""
    model, ids = tiny_model(family, layers=1), prompt_ids(1, 4, seed=4)
    kw = dict(num_beams=2, num_return_sequences=2, max_new_tokens=4, do_sample=False, return_dict_in_generate=True,
              output_scores=True)
    ref, _ = generate_ref(model, ids, **kw)
    out = generate_ours(model, ids, DeltaLogCache(model, merge_interval=2, stagger_merges=stagger), **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert torch.allclose(out.sequences_scores, ref.sequences_scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampling_with_num_return_sequences(family):
    model, ids = tiny_model(family, layers=1), prompt_ids(1, 4, seed=5)
    kw = dict(do_sample=True, num_return_sequences=2, max_new_tokens=4, top_k=0, temperature=1.0)
    torch.manual_seed(123)
    ref, _ = generate_ref(model, ids, **kw)
    torch.manual_seed(123)
    cache = DeltaLogCache(model, merge_interval=3)
    out = generate_ours(model, ids, cache, **kw)
    assert out.shape == (2, 8) and torch.equal(out, ref)
    assert cache.batch_size == 2


def left_pad(rows):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padding(family):
    """A left-padded batch gives FLA's tokens; GDN/KDA (which unpad) also give each row's solo tokens. RWKV6 does not
    unpad (FLA zeroes padded inputs, but their decays still apply), so there the padded reference is FLA's own."""
    model = tiny_model(family, layers=1)
    short, long_ = prompt_ids(1, 3, seed=6)[0].tolist(), prompt_ids(1, 6, seed=7)[0].tolist()
    ids, mask = left_pad([short, long_])
    kw = dict(max_new_tokens=4, **GREEDY)
    ref, _ = generate_ref(model, ids, attention_mask=mask, **kw)
    out = generate_ours(model, ids, DeltaLogCache(model, merge_interval=3), attention_mask=mask, **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) <= 1e-4
    if family != "rwkv6":
        solo = generate_ours(model, torch.tensor([short]), DeltaLogCache(model, merge_interval=3), **kw)
        assert torch.equal(solo.sequences[0, 3:], out.sequences[0, 6:])


@pytest.mark.parametrize("family", FAMILIES)
def test_multi_turn_continuation(family):
    """A second generate call continues the cache with the whole conversation; the tokens equal a fresh run of FLA's
    cache on that conversation (the continuation runs FLA's multi-token kernel on the materialised state)."""
    model = tiny_model(family, layers=1)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    first = generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
    turn2 = torch.cat([first, prompt_ids(2, 2, seed=9)], dim=1)
    second = generate_ours(model, turn2, cache, max_new_tokens=3, **GREEDY)
    ref, _ = generate_ref(model, turn2, max_new_tokens=3, **GREEDY)
    assert torch.equal(second.sequences, ref.sequences)
    assert max_logit_diff(second, ref) <= 1e-4
    assert cache.get_seq_length() == turn2.shape[1] + 2


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv6"])
def test_beam_search_cache_and_expanded_continuation_are_refused(family):
    """As for transformers' models: a cache that ran a beam search holds the beams in the search's order (not the
    returned sequences), so continuing it is refused until reset(); continuing a held cache with beams would expand
    its rows mid-call (FLA's RWKV6 failed with a RuntimeError there), so it is refused before anything changes."""
    model = tiny_model(family, layers=1)
    cache = DeltaLogCache(model, merge_interval=2)
    seqs = generate_ours(model, prompt_ids(1, 3, seed=0), cache, num_beams=3, num_return_sequences=3,
                         max_new_tokens=4, do_sample=False)
    with pytest.raises(ValueError, match="from a beam search"):
        generate_ours(model, torch.cat([seqs, prompt_ids(3, 1, seed=50)], 1), cache, max_new_tokens=2, **GREEDY)
    cache.reset()
    ids = prompt_ids(2, 4, seed=8)
    first = generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
    turn2 = torch.cat([first, prompt_ids(2, 2, seed=9)], dim=1)
    with pytest.raises(ValueError, match="num_beams / num_return_sequences = 2"):
        generate_ours(model, turn2, cache, max_new_tokens=3, num_beams=2)
    second = generate_ours(model, turn2, cache, max_new_tokens=3, **GREEDY)  # the cache is still usable
    ref, _ = generate_ref(model, turn2, max_new_tokens=3, **GREEDY)
    assert torch.equal(second.sequences, ref.sequences)


class _InterruptingStreamer(BaseStreamer):
    """A streamer whose third ``put`` (the prompt, then one per generated token) raises KeyboardInterrupt, as Ctrl-C
    in a streaming loop would."""

    def __init__(self):
        self.puts = 0

    def put(self, value):
        self.puts += 1
        if self.puts == 3:
            raise KeyboardInterrupt

    def end(self):
        pass


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv6"])
def test_a_generate_stopped_between_steps_is_not_continued_silently(family):
    """A generate stopped between two decode steps (here a streamer raising, as Ctrl-C would) leaves the
    layers consistent but never returns the ids the cache consumed: the next generate with an unrelated, longer
    prompt decoded from the old state, silently (found by a breaker review of transformers' models; FLA's own Cache
    does the same). It is refused until reset(), and after reset() the cache matches FLA's."""
    model = tiny_model(family, layers=1)
    cache = DeltaLogCache(model, merge_interval=2)
    with pytest.raises(KeyboardInterrupt):
        generate_ours(model, prompt_ids(1, 4, seed=8), cache, max_new_tokens=6, do_sample=False,
                      streamer=_InterruptingStreamer())
    held = cache.get_seq_length()
    assert held > 4
    other = prompt_ids(1, held + 3, seed=9)
    with pytest.raises(ValueError, match=rf"stopped with KeyboardInterrupt .* it holds {held} tokens per row"):
        generate_ours(model, other, cache, max_new_tokens=2, do_sample=False)
    assert cache.get_seq_length() == held
    assert_matches_fla_after_reset(model, other, cache)


class _CopyingStreamer(BaseStreamer):
    """A streamer that deep-copies the cache at its third ``put`` (the prompt, then one per generated token)."""

    def __init__(self, cache):
        self.cache, self.puts, self.copy = cache, 0, None

    def put(self, value):
        self.puts += 1
        if self.puts == 3:
            self.copy = copy.deepcopy(self.cache)

    def end(self):
        pass


def test_a_copy_taken_during_generate_is_not_continued_silently():
    """A copy of the cache taken inside generate holds tokens its record of consumed ids does not cover (found by the
    68th review on transformers' models: a consumed token edited in the continuation decoded from the wrong state
    without an error). The whole-conversation form is refused for such a copy; the new-tokens form continues it."""
    model = tiny_model("gated_deltanet", layers=1)
    cache = DeltaLogCache(model, merge_interval=3)
    streamer = _CopyingStreamer(cache)
    out = generate_ours(model, prompt_ids(1, 4, seed=8), cache, max_new_tokens=5, do_sample=False, streamer=streamer)
    copied = streamer.copy
    held = copied.get_seq_length()
    assert held == 5  # the prompt and the first generated token
    with pytest.raises(ValueError,
                       match=rf"copied .* while a generate call was running on it, and holds {held} tokens"):
        generate_ours(model, out[:, :held + 1], copied, max_new_tokens=2, do_sample=False)
    assert copied.get_seq_length() == held
    new = out[:, held:held + 1]
    cont = generate_ours(model, new, copied, attention_mask=torch.ones(1, held + 1, dtype=torch.long),
                         max_new_tokens=2, do_sample=False)
    ref, _ = generate_ref(model, out[:, :held + 1], max_new_tokens=2, do_sample=False)
    assert torch.equal(cont[:, 1:], ref[:, held + 1:])


class _ResettingStreamer(BaseStreamer):
    """A streamer that calls ``cache.reset()`` at its third ``put``, inside generate."""

    def __init__(self, cache):
        self.cache, self.puts = cache, 0

    def put(self, value):
        self.puts += 1
        if self.puts == 3:
            self.cache.reset()

    def end(self):
        pass


def test_a_reset_during_generate_refuses_the_next_turn_until_reset():
    """``cache.reset()`` from inside a generate call (a streamer) left the cache holding only the tokens after it; the
    end of the call then blamed a bypass of hf_deltalog's hand-over (a RuntimeError about a replaced
    prepare_inputs_for_generation) and locked the cache (74th review, after the same case on transformers' models).
    Now the call returns, and the next turn is refused with the cause until reset(); after reset() FLA's tokens."""
    model = tiny_model("gated_deltanet", layers=1)
    cache, kw = DeltaLogCache(model, merge_interval=3), dict(do_sample=False)
    out = generate_ours(model, prompt_ids(1, 4, seed=8), cache, max_new_tokens=5, streamer=_ResettingStreamer(cache),
                        **kw)
    held = cache.get_seq_length()
    assert 0 < held < out.shape[1] - 1
    more = torch.cat([out, prompt_ids(1, 2, seed=9)], 1)
    with pytest.raises(ValueError, match=rf"cache.reset\(\) was called while a generate call was running on this cache"
                                         rf" .* the {held} tokens"):
        generate_ours(model, more, cache, max_new_tokens=2, **kw)
    assert cache.get_seq_length() == held
    cache.reset()
    ref, _ = generate_ref(model, more, max_new_tokens=2, **kw)
    assert torch.equal(generate_ours(model, more, cache, max_new_tokens=2, **kw), ref)


def test_a_turn_of_only_new_tokens_keeps_the_consumed_ids_for_the_next_turn():
    """A middle turn in the only-new-tokens form returns the new and generated ids only. The cache forgot the ids it
    had consumed, so a third turn whose ids did not start with them (turn 2's returned ids plus new ones, as if they
    were the whole conversation) was accepted and decoded from the wrong tokens. Now the record continues across the
    turn: the wrong ids are refused before anything changes, and the whole conversation decodes FLA's tokens."""
    model = tiny_model("gated_deltanet", layers=1)
    kw = dict(do_sample=False)
    cache = DeltaLogCache(model, merge_interval=3)
    first = generate_ours(model, prompt_ids(2, 3, seed=3), cache, max_new_tokens=2, **kw)
    new = torch.cat([first[:, -1:], prompt_ids(2, 3, seed=5)], 1)  # the unconsumed last token, then new ones
    mask = torch.ones(2, cache.get_seq_length() + new.shape[1], dtype=torch.long)
    second = generate_ours(model, new, cache, attention_mask=mask, max_new_tokens=3, **kw)
    conversation = torch.cat([first[:, :-1], second], 1)
    held = cache.get_seq_length()
    assert held == conversation.shape[1] - 1
    more = prompt_ids(2, 2, seed=6)
    wrong = torch.cat([second, second, more], 1)  # long enough to be a continuation, but not this conversation
    assert wrong.shape[1] > held and not torch.equal(wrong[:, :held], conversation[:, :held])
    with pytest.raises(ValueError, match=f"the first {held} input tokens differ from the {held} tokens"):
        generate_ours(model, wrong, cache, max_new_tokens=2, **kw)
    assert cache.get_seq_length() == held
    right = torch.cat([conversation, more], 1)
    ref, _ = generate_ref(model, right, max_new_tokens=2, **kw)
    assert torch.equal(generate_ours(model, right, cache, max_new_tokens=2, **kw), ref)


ROW_OPERATIONS = [
    # (the operation, the rows of the returned ids the kept rows are NOT (refused), the rows they are (accepted))
    ("reorder_cache", lambda cache: cache.reorder_cache(torch.tensor([1, 0])), [0, 1], [1, 0]),
    ("batch_repeat_interleave", lambda cache: cache.batch_repeat_interleave(2), [1, 1, 0, 0], [0, 0, 1, 1]),
    ("batch_select_indices", lambda cache: cache.batch_select_indices([1]), [0], [1]),
]


@pytest.mark.parametrize("name,operation,wrong_rows,right_rows", ROW_OPERATIONS, ids=[c[0] for c in ROW_OPERATIONS])
def test_a_row_operation_between_turns_carries_the_record_of_consumed_ids(name, operation, wrong_rows, right_rows):
    """reorder_cache / batch_repeat_interleave / batch_select_indices between two turns rearrange the record of the ids
    the cache consumed with its rows. With that record left in the old row order, or dropped, the next turn's check
    compared against the wrong rows or against nothing: the returned sequences in the old row order (which the
    cache's rows no longer hold) were accepted and decoded from other rows' states, silently (73rd review's mutants:
    no test failed). Pins: those ids are refused before anything changes; the ids in the new row order are accepted
    and decode FLA's own cache's tokens for that conversation."""
    model = tiny_model("gated_deltanet", layers=1)
    kw = dict(max_new_tokens=2, do_sample=False)
    cache = DeltaLogCache(model, merge_interval=3)
    out = generate_ours(model, prompt_ids(2, 4, seed=8), cache, max_new_tokens=3, do_sample=False)
    held = cache.get_seq_length()
    assert held == out.shape[1] - 1 and not torch.equal(out[0, :held], out[1, :held])
    operation(cache)
    more = prompt_ids(len(right_rows), 2, seed=9)
    wrong = torch.cat([out[wrong_rows], more], 1)
    with pytest.raises(ValueError, match=f"the first {held} input tokens differ from the {held} tokens"):
        generate_ours(model, wrong, cache, **kw)
    assert cache.get_seq_length() == held and cache.batch_size == len(right_rows)
    right = torch.cat([out[right_rows], more], 1)
    ref, _ = generate_ref(model, right, **kw)
    assert torch.equal(generate_ours(model, right, cache, **kw), ref)


def test_reset_after_a_beam_search_forgets_it():
    """reset() forgets that the last generate ran a beam search. Kept, the mark made a cache filled again after the
    reset by the model's own forward (a prefill outside generate) refuse its continuation as "from a beam search"
    (73rd review's mutant: no test failed; a generate after the reset clears the mark at its end, so only tokens fed
    by a forward show it). Pins: after a beam search and reset(), a plain generate and a whole-conversation
    continuation of it, and a forward prefill continued by generate, give FLA's own cache's tokens."""
    model = tiny_model("gated_deltanet", layers=1)
    kw = dict(max_new_tokens=2, do_sample=False)
    cache = DeltaLogCache(model, merge_interval=3)

    def beam_search_then_reset():
        cache.reset()
        generate_ours(model, prompt_ids(1, 3, seed=0), cache, num_beams=2, max_new_tokens=3, do_sample=False)
        assert cache.get_seq_length() > 0
        cache.reset()

    beam_search_then_reset()
    ids = prompt_ids(1, 4, seed=8)
    first = generate_ours(model, ids, cache, **kw)
    assert torch.equal(first, generate_ref(model, ids, **kw)[0])
    turn2 = torch.cat([first, prompt_ids(1, 2, seed=9)], 1)
    assert torch.equal(generate_ours(model, turn2, cache, **kw), generate_ref(model, turn2, **kw)[0])
    beam_search_then_reset()
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    assert cache.get_seq_length() == ids.shape[1]
    turn = torch.cat([ids, prompt_ids(1, 2, seed=10)], 1)
    assert torch.equal(generate_ours(model, turn, cache, **kw), generate_ref(model, turn, **kw)[0])


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv6"])
def test_a_forward_interrupted_part_way_is_caught_at_the_next_generate(family):
    """An exception inside layer 1 during prefill leaves layer 0 holding the prompt and layer 1 nothing. FLA's own
    Cache then continues from that half-filled state (logits 0.64 off a clean run for GDN) and so did this cache,
    through the only-new-tokens form; the same call retried was refused with a message about continuation. Now every
    form is refused with a ValueError naming cache.reset(), and after reset() the cache matches FLA's."""
    model = tiny_model(family, layers=2)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    layer = model.model.layers[1]

    def hook(module, args):
        handle.remove()
        raise RuntimeError("interrupted")

    handle = layer.register_forward_pre_hook(hook)
    with pytest.raises(RuntimeError, match="interrupted"):
        generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
    new = prompt_ids(2, 2, seed=9)
    for args, kw in (((ids,), {}), ((new,), dict(attention_mask=torch.ones(2, 4 + 2, dtype=torch.long)))):
        with pytest.raises(ValueError, match="inconsistent.*cache.reset"):
            generate_ours(model, *args, cache, max_new_tokens=3, do_sample=False, **kw)
    assert_matches_fla_after_reset(model, ids, cache)


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv6"])
def test_a_decode_step_stopped_inside_a_layer_is_caught(family):
    """A decode step stopped inside layer 0 after FLA's short convolution moved its conv window in place, before the
    layer stored its states (simulated by a stop in the cache's update of layer 0), changed no token count: the next
    generate was not refused and decoded from the moved window. Now it raises a ValueError naming cache.reset(), and
    after reset() the cache matches FLA's."""
    model = tiny_model(family, layers=2)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    calls = {"n": 0}
    store = cache.update

    def stopping(*args, **kwargs):
        if kwargs.get("layer_idx") == 0:
            calls["n"] += 1
            if calls["n"] == 3:  # the prefill's store, one decode step's, then a stop inside the next step
                raise KeyboardInterrupt
        return store(*args, **kwargs)

    cache.update = stopping
    with pytest.raises(KeyboardInterrupt):
        generate_ours(model, ids, cache, max_new_tokens=5, do_sample=False)
    cache.update = store
    assert calls["n"] == 3
    with pytest.raises(ValueError, match=r"layer\(s\) \[0\] did not complete the last step.*cache.reset"):
        generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
    assert_matches_fla_after_reset(model, ids, cache)


def test_the_consumed_tokens_are_a_copy_of_the_returned_ids():
    """The record of what the cache consumed was a view of the ids generate returned: an in-place edit of them made
    a valid continuation fail the check. Now it is a copy."""
    model = tiny_model("gated_deltanet", layers=2)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    out = generate_ours(model, ids, cache, max_new_tokens=3, **GREEDY)
    seqs = out.sequences if hasattr(out, "sequences") else out
    turn2 = torch.cat([seqs, prompt_ids(2, 2, seed=9)], dim=1)
    seqs[:, 1] = 5  # the caller post-processes the returned ids in place
    got = generate_ours(model, turn2, cache, max_new_tokens=3, **GREEDY)
    ref, _ = generate_ref(model, turn2, max_new_tokens=3, **GREEDY)
    assert torch.equal(got.sequences, ref.sequences)


def test_reading_a_layer_state_dict_between_turns_is_not_a_stopped_forward():
    """`cache[i]` (FLA's state dict) read between two generate calls marked the layer as inside a step, and the valid
    continuation was refused. Only FLA's layers' own read (through fla.layers.utils.get_layer_cache) marks it now."""
    model = tiny_model("gated_deltanet", layers=2)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    out = generate_ours(model, ids, cache, max_new_tokens=3, **GREEDY)
    assert "conv_state" in cache[0]
    turn2 = torch.cat([out.sequences, prompt_ids(2, 2, seed=9)], dim=1)
    got = generate_ours(model, turn2, cache, max_new_tokens=3, **GREEDY)
    ref, _ = generate_ref(model, turn2, max_new_tokens=3, **GREEDY)
    assert torch.equal(got.sequences, ref.sequences)


def test_fla_get_layer_cache_called_from_user_code_is_only_a_read():
    """FLA's helper fla.layers.utils.get_layer_cache(layer, cache), called from user code between two steps, was taken
    for the layer's own step read: the next forward was refused and the cache locked (found by the sixteenth review).
    Only a call from FLA's layer code counts now; the loop matches one without the read."""
    from fla.layers.utils import get_layer_cache

    model = tiny_model("gated_deltanet", layers=2)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=90)
    read, plain = (DeltaLogCache(model, merge_interval=3, backend="torch") for _ in range(2))
    with torch.no_grad():
        for x in (ids, nxt, nxt):
            got = model(x, past_key_values=read, use_cache=True).logits
            assert torch.equal(got, model(x, past_key_values=plain, use_cache=True).logits)
            assert "conv_state" in get_layer_cache(model.model.layers[0].attn, read)


def test_a_manual_step_after_a_stop_inside_a_layer_is_refused():
    """A manual decode step stopped inside layer 0 after its short convolution moved the window: the next generate was
    refused, but a manual retry of the step decoded from the moved window (logits 0.158 off a full forward) and, by
    storing a state, cleared the mark, so a later generate was accepted too (found by the fifteenth review). Now the
    layer's next read refuses the step and locks the cache until reset()."""
    model = tiny_model("gated_deltanet", layers=2)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=90)
    cache = DeltaLogCache(model, merge_interval=3, backend="torch")

    def stop(module, args, output):
        raise RuntimeError("stop")

    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        handle = model.model.layers[0].attn.v_conv1d.register_forward_hook(stop)
        with pytest.raises(RuntimeError, match="stop"):
            model(nxt, past_key_values=cache, use_cache=True)
        handle.remove()
        with pytest.raises(ValueError, match=r"layer\(s\) \[0\] did not complete the last step.*cache.reset\(\)"):
            model(nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=r"cache\.reset\(\)"):  # still refused
            model(nxt, past_key_values=cache, use_cache=True)
    assert_matches_fla_after_reset(model, ids, cache)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("family, where", [("gated_deltanet", "before layer 1"), ("kda", "before layer 1"),
                                           ("rwkv6", "before layer 1"), ("rwkv6", "before the FFN of layer 1")])
def test_a_manual_step_after_a_forward_stopped_between_stores_is_refused(family, where, phase):
    """A manual decode loop that went on after a forward stopped between two layers decoded from layers holding
    different tokens (FLA's own Cache does the same): only generate refused it. And a stop inside an RWKV6 block after
    its recurrent state was stored and before its FFN stored the token-shift state changed no token count, so neither
    generate nor a manual step saw it: they decoded from a stale FFN shift. Now the next forward is refused with a
    ValueError naming cache.reset(), the cache stays locked, and after reset() it matches FLA's own cache."""
    model = tiny_model(family, layers=2)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=90)
    cache = DeltaLogCache(model, merge_interval=3, backend="torch")
    block = model.model.layers[1].ffn if "FFN" in where else model.model.layers[1]

    def stop(module, args):
        handle.remove()
        raise KeyboardInterrupt

    with torch.no_grad():
        if phase == "decode":
            model(ids, past_key_values=cache, use_cache=True)
        handle = block.register_forward_pre_hook(stop)
        with pytest.raises(KeyboardInterrupt):
            model(ids if phase == "prefill" else nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="inconsistent.*cache.reset"):
            model(nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="locked by a call it refused.*cache.reset"):  # locked
            model(nxt, past_key_values=cache, use_cache=True)
    assert_matches_fla_after_reset(model, ids, cache)


def test_a_stop_before_the_rwkv6_ffn_store_is_caught_at_the_next_generate():
    """The generate form of the RWKV6 case above: a decode step stopped after the last layer's recurrent store, before
    its FFN's token-shift store, left every token count equal, and the next generate decoded on from the stale shift.
    Now it raises a ValueError naming cache.reset()."""
    model = tiny_model("rwkv6", layers=2)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    calls = {"n": 0}

    def stop(module, args):
        calls["n"] += 1
        if calls["n"] == 2:  # the prefill's, then a decode step's
            handle.remove()
            raise KeyboardInterrupt

    handle = model.model.layers[1].ffn.register_forward_pre_hook(stop)
    with pytest.raises(KeyboardInterrupt):
        generate_ours(model, ids, cache, max_new_tokens=4, do_sample=False)
    held = cache.get_seq_length()
    new = prompt_ids(2, 2, seed=9)  # the only-new-tokens form (no ids were recorded for the stopped call)
    with pytest.raises(ValueError, match=r"layer\(s\) \[1\] did not complete the last step.*cache.reset"):
        generate_ours(model, new, cache, max_new_tokens=3, do_sample=False,
                      attention_mask=torch.ones(2, held + 2, dtype=torch.long))
    assert_matches_fla_after_reset(model, ids, cache)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rows", [3, 1])
def test_a_manual_step_with_another_number_of_rows_is_refused_before_the_conv(family, rows):
    """A manual step with more rows than the cache holds made FLA's conv kernel (Triton, interpreted here) write out of
    bounds before the cache's row check ran: the process aborted with "corrupted size vs. prev_size" (GDN; FLA's own
    Cache does the same), or RWKV6 failed with a RuntimeError about tensor sizes; fewer rows were refused only after
    the conv window had moved, which locked the cache. Now the forward's first step read compares the layer's rows
    with the cache's and raises a ValueError before anything moves: the cache is not locked, and the next valid step
    matches a cache that never saw the call."""
    model = tiny_model(family, layers=2)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=90)
    cache, clean = (DeltaLogCache(model, merge_interval=3, backend="triton") for _ in range(2))
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        model(ids, past_key_values=clean, use_cache=True)
        with pytest.raises(ValueError, match=f"holds 2 rows but the model passed {rows}; call cache.reset"):
            model(prompt_ids(rows, 1, seed=3), past_key_values=cache, use_cache=True)
        got = model(nxt, past_key_values=cache, use_cache=True).logits
        assert torch.equal(got, model(nxt, past_key_values=clean, use_cache=True).logits)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_manual_loop_on_a_model_with_fewer_layers_names_that_cause(family):
    """A cache built for a 3-layer model, run by a 2-layer model of the same family in a manual loop (the FLA cache
    does not see the model outside generate): the next forward after the prefill was refused with "an earlier forward
    stopped part-way", which did not name the real cause. The refusal now names both."""
    cache = DeltaLogCache(tiny_model(family, layers=3), backend="triton")
    model = tiny_model(family, layers=2)
    ids = prompt_ids(2, 5)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=r"layer 1: 5, layer 2: 0.*the model that ran it has only 2 layers while "
                                             r"this cache was built for a config with 3.*build the cache from a "
                                             r"config that lists the layers the model runs"):
            model(ids[:, -1:], past_key_values=cache, use_cache=True)


@pytest.mark.parametrize("window_size", [None, 2])
@pytest.mark.parametrize("rows", [1, 3])
def test_another_number_of_rows_is_refused_when_an_attention_layer_comes_first(monkeypatch, window_size, rows):
    """With an FLA attention layer first, a forward begins with that layer's store (FLA's attention reads its state
    dict directly, not through get_layer_cache), which the row check did not see: with a sliding window a 1-row step
    into a 2-row cache broadcast its keys into both rows, then failed with a torch RuntimeError and left the cache
    refusing every later step; other cases failed with a RuntimeError (found by the seventeenth review). Now the store
    is refused with a ValueError before anything moves. (flash-attn needs a GPU: a PyTorch stand-in runs FLA's
    attention here, and the valid steps match FLA's own Cache.)"""
    from helpers import hybrid_gated_deltanet, torch_flash_attn_func

    monkeypatch.setattr("fla.layers.attn.flash_attn_func", torch_flash_attn_func)
    model = hybrid_gated_deltanet([0], window_size)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=4)
    cache, fla_cache = DeltaLogCache(model, merge_interval=3, backend="torch"), Cache()
    with torch.no_grad():
        for c in (cache, fla_cache):
            model(ids, past_key_values=c, use_cache=True)
        with pytest.raises(ValueError, match=f"holds 2 rows but the model passed {rows}; call cache.reset"):
            model(prompt_ids(rows, 1, seed=3), past_key_values=cache, use_cache=True)
        for _ in range(2):
            got = model(nxt, past_key_values=cache, use_cache=True).logits
            assert max_abs(got, model(nxt, past_key_values=fla_cache, use_cache=True).logits) < 1e-5


@pytest.mark.parametrize("attention_layers, window_size", [([1], None), ([0], 2)])
def test_hybrid_with_attention_layers_generate_and_a_stopped_manual_step(monkeypatch, attention_layers, window_size):
    """FLA's GatedDeltaNet with softmax attention layers (FLA's `attn` config; on the CPU through a PyTorch stand-in
    for flash-attn): greedy generate gives FLA's own cache's tokens and logits (one turn: FLA's attention takes no
    multi-token continuation under an attention mask, with its own cache too), and a manual step stopped between the
    layers is refused at the next step (with an attention layer first, that step begins with a store)."""
    from helpers import hybrid_gated_deltanet, torch_flash_attn_func

    monkeypatch.setattr("fla.layers.attn.flash_attn_func", torch_flash_attn_func)
    model = hybrid_gated_deltanet(attention_layers, window_size, layers=3)
    ids = prompt_ids(2, 4, seed=8)
    cache = DeltaLogCache(model, merge_interval=3)
    out = generate_ours(model, ids, cache, max_new_tokens=4, **GREEDY)
    ref, _ = generate_ref(model, ids, max_new_tokens=4, **GREEDY)
    assert torch.equal(out.sequences, ref.sequences)
    assert max_logit_diff(out, ref) < 1e-5

    def stop(module, args):
        handle.remove()
        raise KeyboardInterrupt

    nxt = prompt_ids(2, 1, seed=10)
    with torch.no_grad():
        handle = model.model.layers[2].register_forward_pre_hook(stop)
        with pytest.raises(KeyboardInterrupt):
            model(nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="inconsistent.*cache.reset"):
            model(nxt, past_key_values=cache, use_cache=True)


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv6"])
def test_a_forward_with_use_cache_false_is_refused(family):
    """model(x, past_key_values=cache, use_cache=False): FLA's layers still move the conv / token-shift window (and the
    token count) without storing a recurrent state, so the next step decoded from a mismatched state (logits 0.061 off
    for GDN, 3.3e-4 for RWKV6; FLA's own Cache does the same; found by the fifteenth review). Now the forward is refused
    and the cache locked until reset()."""
    model = tiny_model(family, layers=2)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=90)
    cache = DeltaLogCache(model, merge_interval=3, backend="torch")
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="without storing a recurrent state .*use_cache=False"):
            model(nxt, past_key_values=cache, use_cache=False)
        with pytest.raises(ValueError, match=r"cache\.reset\(\)"):
            model(nxt, past_key_values=cache, use_cache=True)
    assert_matches_fla_after_reset(model, ids, cache)


class _PausingStreamer(BaseStreamer):
    """At its ``at``-th ``put`` (1: the prompt), sets ``reached`` and waits for ``resume``."""

    def __init__(self, at: int, reached, resume):
        self.calls, self.at, self.reached, self.resume = 0, at, reached, resume

    def put(self, value):
        self.calls += 1
        if self.calls == self.at:
            self.reached.set()
            assert self.resume.wait(300), "the other generate did not get there"

    def end(self):
        pass


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("first_done", ["first", "second"])
def test_two_threads_generate_on_one_model_each_through_their_own_cache(monkeypatch, family, first_done):
    """Two threads' generate calls on one FLA model overlap (a serving pattern). The cache hand-over was model
    state: the second call ran with the first call's adaptation, which knew only the first cache, and failed with
    "model_kwargs are not used by the model: ['cache']"; in the race between its check and its install, a call
    decoded silently without its cache (FLA built an empty one at every step: other tokens, logits 0.68 off), and
    the first call to finish removed the other's adaptation. Now both calls give FLA's own cache's tokens, whichever
    finishes first. (The forwards are serialised by a lock only because Triton's interpreter is not thread-safe;
    the generate calls still interleave step by step.)"""
    import threading

    model = tiny_model(family)
    ids = [prompt_ids(1, 4, seed=s) for s in (1, 2)]
    kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=PAD)
    refs = [generate_ref(model, i, **kw)[0] for i in ids]
    lock, forward = threading.Lock(), model.model.forward

    def serialised(*args, **kwargs):
        with lock:
            return forward(*args, **kwargs)

    monkeypatch.setattr(model.model, "forward", serialised)
    a_mid, b_mid, a_go, b_go = (threading.Event() for _ in range(4))
    # thread A pauses mid-generate until B is mid-generate too; then one of them runs to its end before the other
    # goes on
    streamers = [_PausingStreamer(3, a_mid, a_go), _PausingStreamer(3, b_mid, b_go)]
    out = [None, None]

    def run(k):
        try:
            out[k] = generate_ours(model, ids[k], DeltaLogCache(model, backend="torch", merge_interval=2),
                                   streamer=streamers[k], **kw)
        except Exception as error:  # noqa: BLE001 - reported below
            out[k] = error
        finally:  # never leave the other threads waiting on one that has ended
            (a_mid if k == 0 else b_mid).set()
            (b_go if k == 0 else a_go).set()

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    threads[0].start()
    assert a_mid.wait(300)
    threads[1].start()
    assert b_mid.wait(300)
    (a_go if first_done == "first" else b_go).set()
    for thread in threads:
        thread.join(300)
    assert not any(thread.is_alive() for thread in threads)
    for k in (0, 1):
        assert isinstance(out[k], torch.Tensor), out[k]
        assert torch.equal(out[k], refs[k])
    assert _handover_left_nothing(model)


def test_a_generate_started_from_a_streamer_decodes_through_its_own_cache():
    """A generate on the same model started inside another one (from its streamer, one thread) failed with
    "model_kwargs are not used by the model: ['cache']": it found the outer call's adaptation and did not hand its
    own cache over. Both now give FLA's own cache's tokens."""
    model = tiny_model("gated_deltanet")
    ids = [prompt_ids(1, 4, seed=s) for s in (1, 2)]
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    refs = [generate_ref(model, i, **kw)[0] for i in ids]
    inner = {}

    class Nested(BaseStreamer):
        calls = 0

        def put(self, value):
            Nested.calls += 1
            if Nested.calls == 2:
                inner["out"] = generate_ours(model, ids[1], DeltaLogCache(model, backend="torch"), **kw)

        def end(self):
            pass

    outer = generate_ours(model, ids[0], DeltaLogCache(model, backend="torch"), streamer=Nested(), **kw)
    assert torch.equal(outer, refs[0]) and torch.equal(inner["out"], refs[1])
    assert _handover_left_nothing(model)


def _handover_left_nothing(model) -> bool:
    """No hand-over state left: no handed cache, no hook on the model's class, no instance attribute."""
    from hf_deltalog import fla_cache

    hooked = any(type(model).__dict__.get(name) in fla_cache._HOOKS for name in fla_cache._HOOK_NAMES)
    return not hooked and id(model) not in fla_cache._HANDED and not set(fla_cache._HOOK_NAMES) & set(vars(model))


def test_a_user_adaptation_made_during_a_handover_is_left_alone():
    """A user's own hand-over adaptation (instance attributes made with functools.wraps, as the tests' helper does),
    set while a DeltaLog generate ran: when that generate ended, the hand-over removed the user's
    prepare_inputs_for_generation (its marker attribute had been copied by functools.wraps) and kept the user's
    _validate_model_kwargs, so the user's next generate with FLA's Cache decoded silently without it (other tokens;
    33rd review). The hand-over no longer sets or removes anything on the model."""
    from helpers import fla_cache_reaches_model

    model, ids = tiny_model("gated_deltanet"), prompt_ids(1, 4)
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    ref = generate_ref(model, ids, **kw)[0]
    user = fla_cache_reaches_model(model)

    class EnterOnce(BaseStreamer):
        def put(self, value):
            if not set(vars(model)) & {"_validate_model_kwargs", "prepare_inputs_for_generation"}:
                user.__enter__()

        def end(self):
            pass

    try:
        generate_ours(model, ids, DeltaLogCache(model, backend="torch"), streamer=EnterOnce(), **kw)
        assert {"_validate_model_kwargs", "prepare_inputs_for_generation"} <= set(vars(model))
        with torch.no_grad():
            assert torch.equal(model.generate(ids, past_key_values=(cache := Cache()), **kw), ref)
        assert cache.get_seq_length() == ids.shape[1] + 3
    finally:
        user.__exit__(None, None, None)
    assert _handover_left_nothing(model)


def test_a_handover_covers_a_generate_run_in_another_thread():
    """transformers' streaming pattern: generate in a worker thread (TextIteratorStreamer), inside a hand-over opened
    by the caller. The hand-over recognised only the opening thread's caches, so the worker failed with
    "model_kwargs are not used by the model: ['cache']" and the consumer waited forever (33rd review)."""
    import concurrent.futures

    from hf_deltalog.fla_cache import fla_generate_handover

    model, ids = tiny_model("rwkv6"), prompt_ids(1, 4)
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    ref = generate_ref(model, ids, **kw)[0]
    cache = Cache()
    with fla_generate_handover(model, cache), concurrent.futures.ThreadPoolExecutor(1) as pool:
        out = pool.submit(generate_ours, model, ids, cache, **kw).result(timeout=300)
    assert torch.equal(out, ref) and _handover_left_nothing(model)


def test_a_handover_entered_in_another_context_is_still_released():
    """Entered inside contextvars.copy_context().run (as anyio / starlette step sync generators) and exited outside
    it: the exit raised "Token was created in a different Context" before releasing, and the model kept the hooks for
    good (33rd review). The hand-over keeps no context variable now."""
    import contextvars

    from hf_deltalog.fla_cache import fla_generate_handover

    model = tiny_model("kda")
    handover = fla_generate_handover(model, Cache())
    contextvars.copy_context().run(handover.__enter__)
    handover.__exit__(None, None, None)
    assert _handover_left_nothing(model)


def test_a_deepcopy_of_the_model_during_a_handover_carries_nothing_of_it():
    """A deepcopy of the model taken inside a generate (from a streamer) carried the hand-over's closures, bound to the
    original model, as instance attributes: pickling the copy failed ("Can't pickle local object") after the generate
    ended (33rd review). Nothing is set on the model now; the copy pickles and decodes as FLA's cache does."""
    import copy
    import pickle

    model, ids = tiny_model("gated_deltanet"), prompt_ids(1, 4)
    kw = dict(max_new_tokens=3, do_sample=False, pad_token_id=PAD)
    copies = []

    class Copier(BaseStreamer):
        def put(self, value):
            if not copies:
                copies.append(copy.deepcopy(model))

        def end(self):
            pass

    generate_ours(model, ids, DeltaLogCache(model, backend="torch"), streamer=Copier(), **kw)
    clone = pickle.loads(pickle.dumps(copies[0]))
    assert torch.equal(generate_ours(clone, ids, DeltaLogCache(clone, backend="torch"), **kw),
                       generate_ref(model, ids, **kw)[0])
    assert _handover_left_nothing(model) and _handover_left_nothing(clone)


def test_user_instance_attributes_do_not_make_generate_decode_without_the_cache(monkeypatch):
    """A user's own `model._validate_model_kwargs = lambda kw: None` (to silence the kwarg check) made the hand-over
    step aside, and a DeltaLogCache generate decoded silently without its cache (other tokens, the cache empty; 33rd
    review). The class hooks hand the cache over anyway now; and an instance prepare_inputs_for_generation that drops
    the cache makes generate raise instead of returning cache-less tokens."""
    model, ids = tiny_model("gated_deltanet"), prompt_ids(1, 4)
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    ref = generate_ref(model, ids, **kw)[0]
    monkeypatch.setattr(model, "_validate_model_kwargs", lambda model_kwargs: None, raising=False)
    cache = DeltaLogCache(model, backend="torch")
    assert torch.equal(generate_ours(model, ids, cache, **kw), ref) and cache.get_seq_length() == 7
    prepare = type(model).prepare_inputs_for_generation

    def dropping(*args, **kwargs):
        inputs = prepare(model, *args, **kwargs)
        inputs.pop("cache", None)
        inputs.pop("past_key_values", None)
        return inputs

    monkeypatch.setattr(model, "prepare_inputs_for_generation", dropping, raising=False)
    locked = DeltaLogCache(model, backend="torch")
    with pytest.raises(RuntimeError, match="only 0 went through this DeltaLogCache"):
        generate_ours(model, ids, locked, **kw)
    # the locked cache's later calls name that cause (they said "refused part-way through a forward", which no
    # call had been)
    monkeypatch.delattr(model, "prepare_inputs_for_generation")
    with pytest.raises(ValueError, match="is locked: an earlier generate returned 8 tokens per row, but only 0") as err:
        generate_ours(model, ids, locked, **kw)
    assert "part-way" not in str(err.value) and "cache.reset()" in str(err.value)
    locked.reset()
    assert torch.equal(generate_ours(model, ids, locked, **kw), ref)


def test_a_class_method_rebound_during_generate_is_caught():
    """A library re-binding the model class's prepare_inputs_for_generation while a generate ran (after its second
    token) removed the hand-over from the later steps: FLA decoded them without the cache and generate returned other
    tokens with no error; the check after generate looked only for a cache holding no token (34th review). Now a cache
    that holds fewer tokens than generate fed it raises (and stays locked until reset()); the next handover hooks the
    class again over the rebinding, which the last one puts back."""
    import functools

    model, ids = tiny_model("gated_deltanet"), prompt_ids(1, 4)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=PAD)
    cls = type(model)
    had, own = "prepare_inputs_for_generation" in cls.__dict__, cls.__dict__.get("prepare_inputs_for_generation")
    upstream = getattr(cls, "prepare_inputs_for_generation")
    while hasattr(upstream, "__wrapped__"):  # FLA's method under any hooks
        upstream = upstream.__wrapped__

    @functools.wraps(upstream)
    def rebound(self, *args, **kwargs):
        return upstream(self, *args, **kwargs)

    class Rebinder(BaseStreamer):
        calls = 0

        def put(self, value):
            Rebinder.calls += 1
            if Rebinder.calls == 3:
                cls.prepare_inputs_for_generation = rebound

        def end(self):
            pass

    cache = DeltaLogCache(model, backend="torch")
    try:
        with pytest.raises(RuntimeError, match="returned 10 tokens per row, but only 5 went through"):
            generate_ours(model, ids, cache, streamer=Rebinder(), **kw)
        assert cls.__dict__.get("prepare_inputs_for_generation") is rebound  # the rebinding stays
        with pytest.raises(ValueError, match="Call cache.reset"):
            generate_ours(model, ids, cache, **kw)
        assert torch.equal(generate_ours(model, ids, DeltaLogCache(model, backend="torch"), **kw),
                           generate_ref(model, ids, **kw)[0])  # hooked again over the rebinding
        assert cls.__dict__.get("prepare_inputs_for_generation") is rebound
    finally:
        if had:
            cls.prepare_inputs_for_generation = own
        else:
            del cls.prepare_inputs_for_generation
    assert _handover_left_nothing(model)


def test_a_rebinding_between_two_open_handovers_is_restored_exactly():
    """Handover A open, the class's prepare_inputs_for_generation rebound, handover B opened and both closed: B's
    install recorded A's hook as the class's own _validate_model_kwargs and left it on the class for good (34th
    review). The state the first install saw is kept; only the rebinding is remembered and put back."""
    from hf_deltalog.fla_cache import fla_generate_handover

    first, second = tiny_model("kda"), tiny_model("kda", seed=1)
    cls = type(first)
    own = {name: (name in cls.__dict__, cls.__dict__.get(name))
           for name in ("_validate_model_kwargs", "prepare_inputs_for_generation")}
    upstream = cls.prepare_inputs_for_generation

    def user(self, *args, **kwargs):
        return upstream(self, *args, **kwargs)

    try:
        with fla_generate_handover(first, Cache()):
            cls.prepare_inputs_for_generation = user
            with fla_generate_handover(second, Cache()):
                pass
        assert cls.__dict__.get("prepare_inputs_for_generation") is user
        had, fn = own["_validate_model_kwargs"]
        assert ("_validate_model_kwargs" in cls.__dict__) == had and cls.__dict__.get("_validate_model_kwargs") is fn
    finally:
        for name, (had, fn) in own.items():
            if had:
                setattr(cls, name, fn)
            elif name in cls.__dict__:
                delattr(cls, name)
    assert _handover_left_nothing(first) and _handover_left_nothing(second)

