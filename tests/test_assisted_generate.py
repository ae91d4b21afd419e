"""Assisted generation (prompt lookup, an assistant model) with DeltaLogCache, and the kept recurrent states behind it.

transformers 5.25 runs assisted generation on linear-attention models: it asks the cache to keep the states after a
multi-token forward's last tokens (``activate_past_recording(recurrent_states_to_keep=n)``), and crops the rejected
draft tokens. Greedy assisted generation must give exactly the tokens of plain greedy generation.
"""

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import DynamicCache
from utils import FAMILIES, family_config, max_abs, prompt_ids, tiny_model

from hf_deltalog import DeltaLogCache

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
KEEPS_STATES = Version(transformers.__version__) >= Version("5.25")
needs_kept_states = pytest.mark.skipif(
    not KEEPS_STATES, reason="transformers < 5.25 refuses assisted generation for linear-attention models")
# Repeating n-grams, so that prompt lookup proposes drafts (of which the tiny random models reject many).
REPEATING = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])


class CropCounter:
    """Counts the tokens a DeltaLogCache's crops removed (wraps the bound method)."""

    def __init__(self, cache):
        self.removed, self.calls = 0, 0
        crop = cache.crop

        def counting(tokens_to_remove):
            crop(tokens_to_remove)
            self.calls += 1
            self.removed -= tokens_to_remove

        cache.crop = counting


@needs_kept_states
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("merge_interval", [1, 4])
def test_prompt_lookup_gives_the_greedy_tokens(family, merge_interval):
    """Every family, dense (M = 1) and with a log: drafts rejected after multi-token forwards are cropped back to the
    kept dense state, and the tokens are plain greedy generation's."""
    model = tiny_model(family)
    with torch.no_grad():
        ref = model.generate(REPEATING, max_new_tokens=16, do_sample=False)
        cache = DeltaLogCache(model, merge_interval=merge_interval)
        counter = CropCounter(cache)
        out = model.generate(REPEATING, max_new_tokens=16, do_sample=False, prompt_lookup_num_tokens=3, cache=cache)
    assert counter.removed > 0, "no draft token was rejected: the test did not crop"
    assert torch.equal(out, ref)
    assert int(cache.get_seq_length()) == out.shape[1] - 1


@needs_kept_states
@pytest.mark.parametrize("crop_ring", [False, True])
@pytest.mark.parametrize("merge_interval", [1, 3])
def test_assistant_model_gives_the_greedy_tokens(crop_ring, merge_interval):
    """An assistant model (another tiny model of the same vocabulary) drafts; the DeltaLog cache of the main model
    crops what the main model rejects, with the conv ring too (seeded again from the recorded columns)."""
    model, assistant = tiny_model("qwen3_5", seed=0), tiny_model("qwen3_5", seed=1)
    ids = prompt_ids(1, 9)
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=14, do_sample=False)
        cache = DeltaLogCache(model, merge_interval=merge_interval, crop_ring=crop_ring)
        counter = CropCounter(cache)
        out = model.generate(ids, max_new_tokens=14, do_sample=False, assistant_model=assistant, cache=cache)
    assert counter.removed > 0
    assert torch.equal(out, ref)


@needs_kept_states
@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_crop_of_a_multi_token_forward_equals_a_forward_of_the_kept_tokens(family):
    """crop(-n) after a multi-token forward restores the state before its last n tokens exactly (fp32: the same
    sequential steps upstream takes), conv windows included: the next forward's logits equal those of a
    DynamicCache fed only the kept tokens."""
    model = tiny_model(family)
    ids = prompt_ids(2, 11, seed=3)
    nxt = prompt_ids(2, 1, seed=4)
    for n in (1, 2, 3):
        cache = DeltaLogCache(model, merge_interval=4)
        cache.activate_past_recording(recurrent_states_to_keep=3)
        dense = DynamicCache(config=model.config)
        with torch.no_grad():
            model(ids[:, :6], cache=cache)
            model(ids[:, 6:], cache=cache)  # 5 tokens: the states before its last 3 are kept
            cache.crop(-n)
            model(ids[:, :11 - n], cache=dense)
            got = model(nxt, cache=cache).logits
            want = model(nxt, cache=dense).logits
        assert int(cache.get_seq_length()) == 12 - n
        assert max_abs(got, want) <= 1e-5, n


@needs_kept_states
def test_a_crop_beyond_the_kept_states_is_refused_and_changes_nothing():
    model = tiny_model("qwen3_5")
    ids = prompt_ids(1, 8, seed=5)
    cache = DeltaLogCache(model, merge_interval=4)
    cache.activate_past_recording(recurrent_states_to_keep=2)
    with torch.no_grad():
        model(ids, cache=cache)
    before = cache.materialize(0).clone()
    with pytest.raises(ValueError, match=r"kept the states before its last 2 tokens only.*recurrent_states_to_keep"):
        cache.crop(-3)
    assert torch.equal(cache.materialize(0), before) and int(cache.get_seq_length()) == 8
    cache.crop(-2)  # within the kept states
    assert int(cache.get_seq_length()) == 6
    with pytest.raises(ValueError, match="cannot crop 1 token exactly"):  # the kept states are used once
        cache.crop(-1)


@needs_kept_states
def test_a_step_after_the_multi_token_forward_drops_the_kept_states():
    """Kept states belong to the forward that produced them: after a one-token step the log covers that step only."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=4)
    cache.activate_past_recording(recurrent_states_to_keep=3)
    with torch.no_grad():
        model(prompt_ids(1, 6, seed=6), cache=cache)
        model(prompt_ids(1, 1, seed=7), cache=cache)
    cache.crop(-1)  # from the log
    with pytest.raises(ValueError, match="keeps only its last 0 decoded tokens"):
        cache.crop(-1)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("2", TypeError)])
def test_recurrent_states_to_keep_is_checked(bad, error):
    cache = DeltaLogCache(tiny_model("qwen3_5"))
    with pytest.raises(error, match="recurrent_states_to_keep must be None or an int >= 0"):
        cache.deltalog_layers[0].activate_past_recording(recurrent_states_to_keep=bad)


def test_kept_states_count_one_more_than_the_croppable_tokens():
    """The model computes the states after the forward's last ``k`` tokens; the state before the n-th last token is
    among them only for n < k, so a layer asked to make ``n`` tokens croppable asks the model for ``n + 1``."""
    layer = DeltaLogCache(tiny_model("qwen3_5")).deltalog_layers[0]
    layer.activate_past_recording(recurrent_states_to_keep=3)
    assert layer.recurrent_states_to_keep == 4
    layer.activate_past_recording()
    assert layer.recurrent_states_to_keep == 0


def _turn_one(model, cache, tokens=5):
    """A first plain greedy turn on ``cache``; returns the conversation so far plus a second prompt that repeats, so
    that prompt lookup drafts in the second turn."""
    with torch.no_grad():
        first = model.generate(REPEATING[:, :9], max_new_tokens=tokens, do_sample=False, cache=cache)
    return torch.cat([first, torch.tensor([[9, 10, 11, 9, 10, 11, 9, 10]])], dim=1)


@needs_kept_states
@pytest.mark.parametrize("family, static", [("qwen3_5", False), ("qwen3_5", True), ("kimi_linear", False),
                                            ("qwen4_exp", False)])
@pytest.mark.parametrize("drafts", ["prompt_lookup", "assistant_model"])
def test_an_assisted_continuation_takes_the_new_tokens_and_refuses_the_whole_conversation(family, static, drafts):
    """transformers 5.25's assisted decoding does not cut the cached prefix off the ids on its first forward: given the
    whole conversation it fed every cached token into the cache a second time (with no error, for the default cache
    too). The whole-conversation form is refused before anything changes; the new-tokens form continues the cache
    with the tokens of plain greedy generation over the whole conversation."""
    model = tiny_model(family)
    assist = ({"prompt_lookup_num_tokens": 3} if drafts == "prompt_lookup"
              else {"assistant_model": tiny_model(family, seed=1)})
    cache = DeltaLogCache(model, merge_interval=3, **({"static": True, "max_cache_len": 48} if static else {}))
    conversation = _turn_one(model, cache)
    held = int(cache.get_seq_length())
    state = cache.materialize(cache.deltalog_layers[0].layer_idx).clone()
    with torch.no_grad():
        ref = model.generate(conversation, max_new_tokens=12, do_sample=False)
        with pytest.raises(ValueError, match=rf"holds {held} tokens.*consumed twice.*Pass only the new tokens"):
            model.generate(conversation, max_new_tokens=12, do_sample=False, cache=cache, **assist)
        assert int(cache.get_seq_length()) == held
        assert torch.equal(cache.materialize(cache.deltalog_layers[0].layer_idx), state)
        new = conversation[:, held:]
        counter = CropCounter(cache)
        out = model.generate(new, attention_mask=torch.ones(1, conversation.shape[1], dtype=torch.long),
                             max_new_tokens=12, do_sample=False, cache=cache, **assist)
    assert counter.removed > 0, "no draft token was rejected: the test did not crop"
    assert torch.equal(out[:, new.shape[1]:], ref[:, conversation.shape[1]:])
    assert int(cache.get_seq_length()) == held + out.shape[1] - 1


@needs_kept_states
@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
@pytest.mark.parametrize("merge_interval", [1, 2])
def test_assisted_generation_whose_first_forward_is_one_token(family, merge_interval):
    """transformers asks ``is_croppable`` once, after the first forward, and then crops only tokens of multi-token
    forwards, whose states are kept. A first forward of one token (a one-token prompt; a continuation given only the
    last generated token, whose step may merge the log) cannot be cropped itself, and must not make the cache count as
    not croppable (transformers' "Assisted decoding requires a cache that can be cropped" refusal)."""
    model = tiny_model(family)
    with torch.no_grad():
        one = torch.tensor([[42]])
        ref = model.generate(one, max_new_tokens=10, do_sample=False)
        out = model.generate(one, max_new_tokens=10, do_sample=False, prompt_lookup_num_tokens=3,
                             cache=DeltaLogCache(model, merge_interval=merge_interval))
        assert torch.equal(out, ref)
        for tokens in (5, 6, 7, 8):  # turn-one lengths: the one-token step that starts turn two merges or appends
            cache = DeltaLogCache(model, merge_interval=merge_interval)
            first = model.generate(REPEATING, max_new_tokens=tokens, do_sample=False, cache=cache)
            ref = model.generate(first, max_new_tokens=10, do_sample=False)
            out = model.generate(first[:, -1:], attention_mask=torch.ones_like(first), max_new_tokens=10,
                                 do_sample=False, prompt_lookup_num_tokens=3, cache=cache)
            assert torch.equal(out[:, 1:], ref[:, first.shape[1]:]), tokens


@needs_kept_states
def test_recurrent_states_to_keep_round_trips_through_the_cache():
    """generate activates recording again with ``max(1, cache.get_recurrent_states_to_keep())``: the cache-wide count
    is what was asked, so that the round trip does not grow it; a layer tells the model one more state to compute."""
    cache = DeltaLogCache(tiny_model("qwen3_5"))
    cache.activate_past_recording(recurrent_states_to_keep=3)
    for _ in range(3):
        assert cache.get_recurrent_states_to_keep() == 3
        cache.activate_past_recording(recurrent_states_to_keep=max(1, cache.get_recurrent_states_to_keep()))
    layer = cache.deltalog_layers[0]
    assert cache.get_recurrent_states_to_keep(layer.layer_idx) == 4 and layer.states_to_crop == 3


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError)])
def test_a_refused_recurrent_states_to_keep_changes_no_layer(bad, error):
    """The cache checks the argument before any layer records: a sliding-window layer ahead of the first linear one
    would otherwise keep every key from then on."""
    config = family_config("lara_mini", layer_types=["sliding_attention", "linear_attention", "full_attention",
                                                      "linear_attention", "sliding_attention"])
    cache = DeltaLogCache(config)
    with pytest.raises(error, match="recurrent_states_to_keep must be None or an int >= 0"):
        cache.activate_past_recording(recurrent_states_to_keep=bad)
    assert not any(getattr(layer, "record_past", False) for layer in cache.layers)


@needs_kept_states
def test_a_static_cache_needs_room_for_prompt_lookup_drafts_past_the_end():
    """transformers 5.25's prompt lookup does not cap its drafts at max_length: the last forward may feed up to
    ``prompt_lookup_num_tokens − 1`` tokens past what generate keeps (14 + 16 − 1 = 29 here, 33 with drafts of 5 on
    this prompt). Refused up front, before anything changes (on a GPU the overflow is not even raised on the host);
    with room for the drafts the tokens are greedy generation's."""
    model = tiny_model("qwen3_5")
    with torch.no_grad():
        ref = model.generate(REPEATING, max_new_tokens=16, do_sample=False)
        cache = DeltaLogCache(model, static=True, max_cache_len=32)
        with pytest.raises(ValueError, match=r"has room for 32 tokens per row.*up to 33 \(a prompt of 14 and 16 new "
                                             r"tokens, the last one never fed and up to 4 draft tokens past them"):
            model.generate(REPEATING, max_new_tokens=16, do_sample=False, prompt_lookup_num_tokens=5, cache=cache)
        assert int(cache.get_seq_length()) == 0
        out = model.generate(REPEATING, max_new_tokens=16, do_sample=False, prompt_lookup_num_tokens=5,
                             cache=DeltaLogCache(model, static=True, max_cache_len=33))
    assert torch.equal(out, ref)
