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
from utils import FAMILIES, max_abs, prompt_ids, tiny_model

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
