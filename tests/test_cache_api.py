"""DeltaLogCache's Cache API: lifecycle, batch operations, crop, lengths, memory, and errors on bad input."""

import copy
import pickle

import numpy as np
import pytest
import torch
import transformers
from transformers import DynamicCache, GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import DynamicSlidingWindowLayer
from utils import (
    FAMILIES,
    GDN,
    KDA_FAMILIES,
    MOE,
    PAD,
    TRANSFORMERS_5_25,
    VOCAB,
    _drop,
    family_config,
    max_abs,
    prompt_ids,
    record_past,
    rel_err,
    tiny_model,
)

import hf_deltalog
from hf_deltalog import DeltaLogCache, DeltaLogLayer

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def forward(model, ids, cache):
    with torch.no_grad():
        return model(ids, cache=cache, use_cache=True).logits


def decode(model, cache, first, steps):
    """Feed `steps` greedy tokens starting after logits `first`; returns the stacked logits of each step."""
    logits, nxt = [], first[:, -1:].argmax(-1)
    for _ in range(steps):
        out = forward(model, nxt, cache)
        logits.append(out)
        nxt = out[:, -1:].argmax(-1)
    return torch.cat(logits, dim=1)


# ---------------------------------------------------------------------------------------------- construction
def test_built_from_config_keyword_as_transformers_caches_are():
    """``DynamicCache(config=model.config)`` is transformers' spelling; ``DeltaLogCache(config=...)`` failed with a bare
    "unexpected keyword argument" (68th review). It builds the same cache; neither or both sources: TypeError."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(config=model.config, merge_interval=2)
    assert cache.merge_interval == 2 and type(cache.layers[0]).__name__ == "DeltaLogLayer"
    with torch.no_grad():
        assert torch.equal(model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False),
                           model.generate(ids, max_new_tokens=4, do_sample=False))
    with pytest.raises(TypeError, match=r"needs the model or its config: DeltaLogCache\(model\)"):
        DeltaLogCache()
    with pytest.raises(TypeError, match="got both a model_or_config and config="):
        DeltaLogCache(model, config=model.config)


def test_built_from_model_config_or_wrapper_config():
    model = tiny_model("qwen3_5")
    for source in (model, model.config):
        cache = DeltaLogCache(source)
        kinds = [type(layer).__name__ for layer in cache.layers]
        assert kinds == ["DeltaLogLayer", "DynamicLayer", "DeltaLogLayer", "DynamicLayer"]
    wrapper = transformers.Qwen3_5Config(text_config=family_config("qwen3_5").to_dict())
    assert DeltaLogCache(wrapper, merge_interval=2).model_type == "qwen3_5_text"


def test_layer_dims_and_default_merge_interval():
    cache = DeltaLogCache(tiny_model("qwen3_next"))
    layer = cache.layers[0]
    assert isinstance(layer, DeltaLogLayer) and cache.merge_interval == 8 and layer.capacity == 7
    assert (layer.num_k_heads, layer.num_v_heads, layer.k_head_dim, layer.v_head_dim) == (
        GDN["linear_num_key_heads"], GDN["linear_num_value_heads"], GDN["linear_key_head_dim"],
        GDN["linear_value_head_dim"])


@pytest.mark.parametrize("bad", [0, -3, 1025])
def test_merge_interval_out_of_range(bad):
    with pytest.raises(ValueError, match=r"merge_interval must be an integer in \[1, 1024\]"):
        DeltaLogCache(tiny_model("qwen3_5"), merge_interval=bad)


@pytest.mark.parametrize("good", [np.int64(4), torch.tensor(4)])
def test_merge_interval_accepts_integer_likes(good):
    assert DeltaLogCache(tiny_model("qwen3_5"), merge_interval=good).merge_interval == 4


@pytest.mark.parametrize("bad", ["8", 2.5, True, torch.tensor(4.0)])
def test_merge_interval_not_an_integer(bad):
    with pytest.raises(TypeError, match=r"merge_interval must be an integer in \[1, 1024\]"):
        DeltaLogCache(tiny_model("qwen3_5"), merge_interval=bad)


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'torch', 'triton'\)"):
        DeltaLogCache(tiny_model("qwen3_5"), backend="cuda")


def test_model_without_supported_linear_attention():
    llama = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2)
    with pytest.raises(ValueError, match="DeltaLogCache does not support 'llama' models") as err:
        DeltaLogCache(llama)
    # the message listed only the text-config types: the wrapper and FLA types it takes are named too
    assert all(name in str(err.value) for name in ("qwen3_5_text", "kimi_linear", "qwen3_5,", "rwkv6",
                                                   "gated_deltanet", "kda"))
    attention_only = family_config("qwen3_5", layer_types=["full_attention"] * 4)
    with pytest.raises(ValueError, match="no 'linear_attention' layer"):
        DeltaLogCache(attention_only)
    with pytest.raises(TypeError, match=r"takes a transformers PreTrainedModel \(or a module wrapping one .*\) or a "
                                        r"PretrainedConfig; got dict"):
        DeltaLogCache({"model_type": "qwen3_5_text"})


def test_built_from_a_module_wrapping_the_model():
    """`DeltaLogCache(torch.compile(model))` and `DeltaLogCache(peft_model)` raised TypeError (55th review): a module
    that forwards `.config` is taken as its model (torch.compile's wrapper compiles nothing until it is called)."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    ref = model.generate(ids, max_new_tokens=6, do_sample=False, cache=DynamicCache(config=model.config))

    class Wrapper(torch.nn.Module):  # as PEFT's PeftModel: `.config` reaches the wrapped model's
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @property
        def config(self):
            return self.inner.config

    for wrapped in (torch.compile(model), Wrapper(model)):
        cache = DeltaLogCache(wrapped, merge_interval=2)
        assert [type(layer).__name__ for layer in cache.layers] == [type(layer).__name__ for layer in
                                                                    DeltaLogCache(model).layers]
        out = model.generate(ids, max_new_tokens=6, do_sample=False, cache=cache)
        assert torch.equal(out, ref)
    with pytest.raises(TypeError, match="or a PretrainedConfig; got Linear"):
        DeltaLogCache(torch.nn.Linear(2, 2))  # a module without a config


def test_signature_is_the_constructors():
    """help(DeltaLogCache) and inspect.signature showed __new__'s `(model_or_config=None, *args, **kwargs)`."""
    import inspect

    params = inspect.signature(DeltaLogCache).parameters
    assert list(params)[:3] == ["model_or_config", "merge_interval", "backend"] and "stagger_merges" in params

    class Windowed(DeltaLogCache):  # a subclass showed DeltaLogCache's parameters, not its own (56th review)
        def __init__(self, model, window=4):
            super().__init__(model)

    class Plain(DeltaLogCache):
        pass

    assert list(inspect.signature(Windowed).parameters) == ["model", "window"]
    assert list(inspect.signature(Plain).parameters) == list(params)


def test_cache_of_another_model_is_rejected():
    ids = prompt_ids(2, 5)
    # Another family with the same shapes, through forward: refused part-way, so the cache refuses all further use
    # until reset() (the conv state of layer 0 had already advanced).
    qwen, olmo = tiny_model("qwen3_5"), tiny_model("olmo_hybrid")
    cache = DeltaLogCache(qwen)
    forward(qwen, ids, cache)
    with pytest.raises(ValueError, match="built for model_type 'qwen3_5_text' but is used by a 'olmo_hybrid' model"):
        forward(olmo, ids[:, :1], cache)
    with pytest.raises(ValueError, match="was locked by a call it refused inside a forward"):
        forward(qwen, ids[:, :1], cache)
    cache.reset()
    assert max_abs(forward(qwen, ids, cache), forward(qwen, ids, DeltaLogCache(qwen))) == 0
    # Through generate the configuration is checked first and nothing changes.
    state = cache.materialize(0)
    with pytest.raises(ValueError, match="generate was called on a 'olmo_hybrid' model with another configuration"):
        olmo.generate(torch.cat([ids, ids[:, :2]], 1), cache=cache, max_new_tokens=2)
    assert torch.equal(cache.materialize(0), state) and cache.get_seq_length() == 5
    # Layer kinds in another order.
    swapped = family_config("qwen3_5", layer_types=["full_attention", "linear_attention"] * 2)
    with pytest.raises(ValueError, match="treats layer 0 as linear attention, but .* layer 0 is a DynamicLayer"):
        forward(qwen, ids, DeltaLogCache(swapped))
    # Same family, other head dims: caught at the prefill's state hand-over.
    other = family_config("qwen3_5", linear_value_head_dim=32)
    locked = DeltaLogCache(other)
    with pytest.raises(ValueError, match="belongs to a model with another configuration"):
        forward(tiny_model("qwen3_5"), ids, locked)
    assert locked._status.broken is not None  # refused inside a forward: locked (from user code it would not be)
    # Same family, fewer layers.
    short = family_config("qwen3_5", num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
    with pytest.raises(ValueError, match="layer 2 does not exist"):
        forward(tiny_model("qwen3_5"), ids, DeltaLogCache(short))


@pytest.mark.parametrize("other", ["kimi_linear", "head_dim", "conv_width", "conv_width_compiled"])
def test_manual_step_of_another_models_layer_is_refused_before_its_conv_update(other):
    """A one-token forward of another model on a filled cache: its layer reads the conv window and the recurrent
    state, then updates the window in place. Another channel count failed inside transformers' conv update with a raw
    RuntimeError (torch.cat), and another conv width (same family and head sizes) decoded on with the wrong kernel
    until the recurrence's checks; now the recurrent-state read compares the calling layer's conv1d with the window
    (ValueError naming both, cache locked as for every refusal inside a forward). Also inside a forward compiled
    without fullgraph (found by the 50th review: a check placed after the frame read was traced and pruned there)."""
    ids = prompt_ids(2, 6)
    qwen = tiny_model("qwen3_5")
    overrides = {"head_dim": dict(linear_key_head_dim=16), "conv_width": dict(linear_conv_kernel_dim=3),
                 "conv_width_compiled": dict(linear_conv_kernel_dim=3)}
    model = tiny_model(other) if other == "kimi_linear" else \
        transformers.Qwen3_5ForCausalLM(family_config("qwen3_5", **overrides[other])).eval()
    cache = DeltaLogCache(qwen)
    forward(qwen, ids, cache)
    step = model.forward if other != "conv_width_compiled" else torch.compile(model.forward, backend="aot_eager")
    with torch.no_grad(), pytest.raises(ValueError, match=r"layer 0: the model's conv1d has \d+ channels of width "
                                                          r"\d+, but this cache's conv window holds \d+ channels of "
                                                          r"width 4"):
        step(ids[:, :1], cache=cache, use_cache=True)
    with pytest.raises(ValueError, match="was locked by a call it refused inside a forward"):
        forward(qwen, ids[:, :1], cache)


def test_batch_size_mismatch_then_reset_to_another_batch():
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    forward(model, prompt_ids(2, 5), cache)
    with pytest.raises(ValueError, match="holds 2 rows but generate was given 3"):
        model.generate(prompt_ids(3, 9), cache=cache, max_new_tokens=2)
    with pytest.raises(ValueError, match="holds 2 rows but the model passed 3"):
        forward(model, prompt_ids(3, 4), cache)
    cache.reset()  # as the message says: then a batch of another size works
    ids = prompt_ids(3, 6, seed=2)
    out = model.generate(ids, cache=cache, max_new_tokens=6, do_sample=False)
    assert torch.equal(out, model.generate(ids, max_new_tokens=6, do_sample=False))


def test_a_beam_search_cache_cannot_be_continued():
    """After a beam search the rows are the beams in the search's own order, not the returned sequences (with
    num_return_sequences == num_beams their shapes match, so the id check alone let a wrong continuation through):
    refused until reset(); afterwards the cache serves a new prompt."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=2)
    out = model.generate(prompt_ids(1, 3), cache=cache, num_beams=3, num_return_sequences=3, max_new_tokens=4,
                         do_sample=False)
    held = cache.get_seq_length()
    with pytest.raises(ValueError, match="from a beam search: its rows are the beams"):
        model.generate(torch.cat([out, prompt_ids(3, 1, seed=50)], 1), cache=cache, max_new_tokens=2, do_sample=False)
    assert cache.get_seq_length() == held
    cache.reset()
    ids = prompt_ids(3, 4, seed=51)
    assert torch.equal(model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False),
                       model.generate(ids, max_new_tokens=3, do_sample=False))
    # reset() forgets the beam search also for a cache filled by a direct forward, then continued with only the new
    # tokens (that form is not compared with any record of ids: the beam-search mark alone would refuse it)
    cache.reset()
    model.generate(prompt_ids(1, 3), cache=cache, num_beams=3, num_return_sequences=3, max_new_tokens=2,
                   do_sample=False)
    cache.reset()
    dense = DynamicCache(config=model.config)
    with torch.no_grad():
        for c in (cache, dense):
            model(ids, past_key_values=c, use_cache=True)
    new = prompt_ids(3, 2, seed=52)
    mask = torch.ones(3, 4 + 2, dtype=torch.long)
    assert torch.equal(model.generate(new, attention_mask=mask, cache=cache, max_new_tokens=3, do_sample=False),
                       model.generate(new, attention_mask=mask, cache=dense, max_new_tokens=3, do_sample=False))


@pytest.mark.parametrize("expand", [dict(num_beams=2), dict(num_return_sequences=2, do_sample=True)])
def test_continuing_with_beams_or_several_sequences_is_refused_up_front(expand):
    """generate would expand the held rows mid-call (the layers refused it part-way and left the cache unusable):
    refused before anything changes; the same conversation then continues exactly with one sequence per row."""
    model = tiny_model("qwen3_5")
    cache, dense = DeltaLogCache(model, merge_interval=2), DynamicCache(config=model.config)
    ids = prompt_ids(2, 4, seed=8)
    first = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    model.generate(ids, past_key_values=dense, max_new_tokens=3, do_sample=False)
    follow_up = torch.cat([first, prompt_ids(2, 2, seed=9)], 1)
    with pytest.raises(ValueError, match="num_beams / num_return_sequences = 2"):
        model.generate(follow_up, cache=cache, max_new_tokens=3, **expand)
    with torch.no_grad():
        ours = model.generate(follow_up, cache=cache, max_new_tokens=3, do_sample=False)
        assert torch.equal(ours, model.generate(follow_up, past_key_values=dense, max_new_tokens=3, do_sample=False))
    # what the message offers for several sampled continuations per row: repeat the cache's rows and the ids alike
    third = torch.cat([ours, prompt_ids(2, 2, seed=10)], 1).repeat_interleave(2, dim=0)
    cache.batch_repeat_interleave(2)
    with torch.no_grad():
        torch.manual_seed(0)
        sampled = model.generate(third, cache=cache, max_new_tokens=3, do_sample=True)
        torch.manual_seed(0)
        assert torch.equal(sampled, model.generate(third, max_new_tokens=3, do_sample=True))


def test_a_static_cache_is_not_offered_batch_repeat_interleave():
    """Static mode keeps transformers' StaticLayer for attention, which has no batch_repeat_interleave: the refusal
    to expand held rows must not offer it (66th review)."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=2, static=True, max_cache_len=32)
    ids = prompt_ids(2, 4, seed=8)
    first = model.generate(ids, cache=cache, max_new_tokens=2, do_sample=False)
    with pytest.raises(ValueError, match="num_return_sequences = 2") as err:
        model.generate(first, cache=cache, max_new_tokens=2, num_return_sequences=2, do_sample=True)
    assert "batch_repeat_interleave" not in str(err.value)


def test_generate_refuses_a_cache_with_use_cache_false():
    """With use_cache=False transformers re-feeds the whole sequence into the given cache at every step (a
    DynamicCache then decodes from a wrong state too): refused before the cache is touched."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    with pytest.raises(ValueError, match="use_cache=False"):
        model.generate(prompt_ids(2, 6), cache=cache, use_cache=False, max_new_tokens=3, do_sample=False)
    assert cache.get_seq_length() == 0 and cache.deltalog_layers[0].base is None


def test_static_max_cache_len_takes_a_numpy_integer():
    """max_cache_len, like merge_interval, takes a numpy integer (a review found np.int64(64) refused as 'not a positive
    int'); a bool, a float or a non-positive value is still refused."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, static=True, max_cache_len=np.int64(16), merge_interval=np.int64(3))
    assert cache.max_cache_len == 16 and type(cache.max_cache_len) is int
    ids, kw = prompt_ids(2, 6, seed=3), dict(max_new_tokens=4, do_sample=False, eos_token_id=None)
    with torch.no_grad():
        assert torch.equal(model.generate(ids, cache=cache, **kw), model.generate(ids, **kw))
    for bad in (np.int64(0), -3, None):
        with pytest.raises(ValueError, match="static=True needs max_cache_len, a positive int"):
            DeltaLogCache(model, static=True, max_cache_len=bad)
    for bad in (True, 16.0, "16"):  # a wrong type is a TypeError (it was a ValueError)
        with pytest.raises(TypeError, match="static=True needs max_cache_len, a positive int"):
            DeltaLogCache(model, static=True, max_cache_len=bad)


def test_static_generate_refuses_more_tokens_than_max_cache_len():
    """Static mode: a generate call whose prompt and new tokens need more attention slots than max_cache_len is
    refused before the cache is touched (it failed with an IndexError inside the attention layer); a call that
    fits exactly (the last generated token is never fed) gives the default cache's tokens, as does a continuation."""
    model = tiny_model("qwen3_5")
    ids, kw = prompt_ids(2, 6, seed=3), dict(do_sample=False, eos_token_id=None)
    cache = DeltaLogCache(model, static=True, max_cache_len=6 + 3)
    with pytest.raises(ValueError, match=r"has room for 9 tokens per row \(max_cache_len\), but this generate call feeds it "
                                         r"up to 13 \(a prompt of 6 and 8 new tokens"):
        model.generate(ids, cache=cache, max_new_tokens=8, **kw)
    assert int(cache.get_seq_length()) == 0
    with torch.no_grad():
        out = model.generate(ids, cache=cache, max_new_tokens=4, **kw)  # 6 + 4 - 1 = 9 slots
        assert torch.equal(out, model.generate(ids, max_new_tokens=4, **kw))
        with pytest.raises(ValueError, match="feeds it up to 10"):  # the 9 held tokens, the last one, one new
            model.generate(out, cache=cache, max_new_tokens=1, **kw)
    assert int(cache.get_seq_length()) == 9


@pytest.mark.parametrize("length_kw", [dict(max_length=20), dict()], ids=["max_length", "default-max_length"])
def test_static_generate_bounded_by_max_length_is_checked_too(length_kw):
    """Without max_new_tokens, generate's max_length (20 by default, prompt included) bounds the call: a static cache
    too small for it was not checked and failed with an IndexError inside the attention layer after the linear
    layers had advanced. It is refused before anything changes; one that fits (max_length - 1 slots) matches."""
    model = tiny_model("qwen3_5")
    model.generation_config.max_length = 20  # transformers' default, whatever the tiny config says
    ids, kw = prompt_ids(2, 6, seed=3), dict(do_sample=False, eos_token_id=None)
    small = DeltaLogCache(model, static=True, max_cache_len=12)
    with pytest.raises(ValueError, match=r"has room for 12 tokens per row \(max_cache_len\), but this generate call feeds it "
                                         r"up to 19"):
        model.generate(ids, cache=small, **length_kw, **kw)
    assert int(small.get_seq_length()) == 0
    fits = DeltaLogCache(model, static=True, max_cache_len=19)
    with torch.no_grad():
        assert torch.equal(model.generate(ids, cache=fits, **length_kw, **kw),
                           model.generate(ids, **length_kw, **kw))



def test_static_generate_with_no_length_at_all_is_checked():
    """When nobody sets a length (no max_new_tokens / max_length in the call, its generation_config or the model's),
    transformers 5.x generates max_length = 20 *new* tokens; the room check counted the prompt in those 20, so a
    cache too small passed it and failed mid-generate with an IndexError. It now counts 20 new tokens."""
    model = copy.deepcopy(tiny_model("qwen3_5"))  # tiny_model is cached: its generation_config is changed here
    model.generation_config.max_length = None
    ids, kw = prompt_ids(1, 10, seed=3), dict(do_sample=False, eos_token_id=None)
    small = DeltaLogCache(model, static=True, max_cache_len=25)
    with pytest.raises(ValueError, match=r"has room for 25 tokens per row \(max_cache_len\), but this generate call feeds it "
                                         r"up to 29"):
        model.generate(ids, cache=small, **kw)
    fits = DeltaLogCache(model, static=True, max_cache_len=29)
    out = model.generate(ids, cache=fits, **kw)
    assert out.shape[1] == 10 + 20 and torch.equal(out, model.generate(ids, **kw))

def test_static_default_length_follows_generates_max_position_embeddings_cap():
    """Nobody sets a length and prompt + 20 exceeds max_position_embeddings: generate caps max_length there, so it
    makes fewer than 20 tokens. The room check assumed 20 and refused a cache that fits (transformers' StaticCache
    serves it), with a wrong count (found by a breaker review); it now follows generate's cap."""
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForCausalLM(family_config("qwen3_5", max_position_embeddings=24)).eval()
    ids, kw = prompt_ids(1, 8, seed=3), dict(do_sample=False, eos_token_id=None)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        assert ref.shape[1] == 24  # 16 new tokens: the cache is fed 8 + 16 - 1 = 23
        with pytest.raises(ValueError, match=r"has room for 22 tokens per row \(max_cache_len\), but this generate call "
                                             r"feeds it up to 23 \(a prompt of 8 and 16 new tokens"):
            model.generate(ids, cache=DeltaLogCache(model, static=True, max_cache_len=22), **kw)
        assert torch.equal(model.generate(ids, cache=DeltaLogCache(model, static=True, max_cache_len=23), **kw), ref)


@pytest.mark.parametrize("length_kw", [dict(max_new_tokens=10), dict(max_length=18)],
                         ids=["max_new_tokens", "max_length"])
def test_static_room_check_counts_inputs_embeds(length_kw):
    """A generate call given inputs_embeds (no ids) was not checked: a static cache too small for it failed with an
    IndexError inside the attention layer (found by a breaker review). The embeddings' length counts as the prompt
    now (a max_length then counts them too, as in generate); a cache that fits gives the default cache's tokens."""
    model = tiny_model("qwen3_5")
    ids, kw = prompt_ids(2, 8, seed=3), dict(do_sample=False, eos_token_id=None, **length_kw)
    embeds = model.get_input_embeddings()(ids).detach()
    small = DeltaLogCache(model, static=True, max_cache_len=16)
    with pytest.raises(ValueError, match=r"has room for 16 tokens per row \(max_cache_len\), but this generate call "
                                         r"feeds it up to 17 \(a prompt of 8 and 10 new tokens"):
        model.generate(inputs_embeds=embeds, cache=small, **kw)
    assert int(small.get_seq_length()) == 0
    with torch.no_grad():
        out = model.generate(inputs_embeds=embeds, cache=DeltaLogCache(model, static=True, max_cache_len=17), **kw)
        assert out.shape[1] == 10 and torch.equal(out, model.generate(inputs_embeds=embeds, **kw))


def test_static_room_check_counts_the_bos_token_of_a_call_without_a_prompt():
    """generate without ids or embeddings starts from one BOS token per row; the room check skipped such calls, so a
    static cache too small failed with an IndexError mid-decode and was left holding tokens (found by a breaker
    review). Counted as a prompt of one token now; a cache that fits gives the default cache's tokens."""
    model = tiny_model("qwen3_5")
    kw = dict(max_new_tokens=6, do_sample=False, eos_token_id=None)
    small = DeltaLogCache(model, static=True, max_cache_len=5)
    with pytest.raises(ValueError, match=r"feeds it up to 6 \(a prompt of 1 and 6 new tokens"):
        model.generate(cache=small, **kw)
    assert int(small.get_seq_length()) == 0
    with torch.no_grad():
        out = model.generate(cache=DeltaLogCache(model, static=True, max_cache_len=6), **kw)
        assert out.shape == (1, 7) and torch.equal(out, model.generate(**kw))


def test_use_cache_false_with_inputs_embeds_is_not_refused():
    """A decoder-only generate given inputs_embeds sets use_cache=True itself, so use_cache=False there feeds nothing
    twice; the use_cache=False refusal refused it anyway (found by a breaker review). It runs and gives the default
    cache's tokens."""
    model = tiny_model("qwen3_5")
    embeds = model.get_input_embeddings()(prompt_ids(2, 5, seed=3)).detach()
    kw = dict(inputs_embeds=embeds, max_new_tokens=6, do_sample=False, eos_token_id=None, use_cache=False)
    with torch.no_grad():
        assert torch.equal(model.generate(cache=DeltaLogCache(model), **kw), model.generate(**kw))


@pytest.mark.parametrize("positional", [False, True], ids=["keyword", "positional"])
def test_a_positional_generation_config_is_checked_like_a_keyword_one(positional):
    """generate(ids, config, cache=...) is valid transformers usage, but the checks read only a generation_config
    passed by keyword, so a positional one ran unchecked: use_cache=False decoded wrong tokens, a static cache too
    small failed with an IndexError, and a beam search's cache was continued into wrong tokens (found by a breaker
    review). The call's arguments are read through generate's own signature now."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 8, seed=3)

    def run(config, cache, inputs=ids):
        if positional:
            return model.generate(inputs, config, cache=cache)
        return model.generate(inputs, generation_config=config, cache=cache)

    cache = DeltaLogCache(model)
    with pytest.raises(ValueError, match="use_cache=False"):
        run(GenerationConfig(use_cache=False, max_new_tokens=3, do_sample=False), cache)
    assert cache.get_seq_length() == 0
    small = DeltaLogCache(model, static=True, max_cache_len=12)
    with pytest.raises(ValueError, match=r"feeds it up to 37 \(a prompt of 8 and 30 new tokens"):
        run(GenerationConfig(max_new_tokens=30, do_sample=False), small)
    assert int(small.get_seq_length()) == 0
    beams = GenerationConfig(num_beams=3, num_return_sequences=3, max_new_tokens=4, do_sample=False,
                             eos_token_id=None, pad_token_id=PAD)
    with torch.no_grad():
        out = run(beams, cache)
    with pytest.raises(ValueError, match="from a beam search"):
        model.generate(torch.cat([out, prompt_ids(6, 2, seed=4)], 1), cache=cache, max_new_tokens=2, do_sample=False,
                       pad_token_id=PAD)


class _InterruptAt(StoppingCriteria):
    """Raises KeyboardInterrupt at its ``at``-th call, as Ctrl-C between two decode steps would."""

    def __init__(self, at: int):
        self.at, self.calls = at, 0

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_generate_stopped_by_an_exception_is_not_continued_silently(family):
    """A generate call stopped between decode steps (Ctrl-C, a streamer or a stopping criterion raising) leaves every
    layer consistent but never returns the ids the cache consumed, so the record of consumed tokens was stale: the
    next generate with an unrelated, longer prompt decoded from the old state, silently (found by a breaker review;
    transformers' DynamicCache does the same). The next generate is refused until reset(); a call stopped before
    the cache changed leaves it usable."""
    model = tiny_model(family)
    cache, kw = DeltaLogCache(model), dict(do_sample=False, eos_token_id=None)
    with torch.no_grad():
        first = model.generate(prompt_ids(1, 8, seed=3), cache=cache, max_new_tokens=3, **kw)
        follow_up = torch.cat([first, prompt_ids(1, 2, seed=5)], 1)
        with pytest.raises(ValueError, match="temperature"):  # refused by transformers before any forward
            model.generate(follow_up, cache=cache, max_new_tokens=3, do_sample=True, temperature=-1.0)
        assert cache.get_seq_length() == 10  # unchanged, so not marked: the conversation goes on
        with pytest.raises(KeyboardInterrupt):
            model.generate(follow_up, cache=cache, max_new_tokens=10,
                           stopping_criteria=StoppingCriteriaList([_InterruptAt(4)]), **kw)
        held = cache.get_seq_length()
        assert held > 12  # the 12 ids and some generated tokens, whose ids never came back
        other = prompt_ids(1, 20, seed=7)
        with pytest.raises(ValueError, match=r"stopped with KeyboardInterrupt after the cache had consumed tokens, so "
                                             rf"it holds {held} tokens per row"):
            model.generate(other, cache=cache, max_new_tokens=5, **kw)
        with pytest.raises(ValueError, match="stopped with KeyboardInterrupt"):  # its own conversation too
            model.generate(torch.cat([follow_up, prompt_ids(1, held - 12, seed=6)], 1), cache=cache, max_new_tokens=2,
                           **kw)
        assert cache.get_seq_length() == held
        cache.reset()
        assert torch.equal(model.generate(other, cache=cache, max_new_tokens=5, **kw),
                           model.generate(other, max_new_tokens=5, **kw))


class _CopyAt(StoppingCriteria):
    """Copies the cache (``copy.deepcopy`` or a pickle round trip) and the ids so far at its ``at``-th call."""

    def __init__(self, cache, at: int, how: str):
        self.cache, self.at, self.how, self.calls, self.copy = cache, at, how, 0, None

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            cache = copy.deepcopy(self.cache) if self.how == "deepcopy" else pickle.loads(pickle.dumps(self.cache))
            self.copy = (cache, input_ids.clone())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_taken_during_generate_is_not_continued_silently(how):
    """A copy of the cache taken inside generate (a stopping criterion, a streamer) holds the tokens the running call
    had fed it, which its record of consumed tokens did not cover: continuing the copy with the whole conversation,
    one consumed token edited, decoded from the wrong state without an error (found by the 68th review). That form is
    now refused for such a copy until reset(), also after a turn in the new-tokens form (70th review), which continues
    it exactly; the original, whose call ended, stays continuable with the whole conversation."""
    model = tiny_model("qwen3_5")
    cache, kw = DeltaLogCache(model), dict(do_sample=False, eos_token_id=None)
    snap = _CopyAt(cache, 3, how)
    with torch.no_grad():
        out = model.generate(prompt_ids(2, 7), cache=cache, max_new_tokens=8, stopping_criteria=[snap], **kw)
        copied, seen = snap.copy
        held = int(copied.get_seq_length())
        assert held == seen.shape[1] - 1 == 9  # the prompt and two generated tokens went through the copy
        edited = seen.clone()
        edited[:, held - 1] = (edited[:, held - 1] + 1) % 96  # a token the copy consumed
        refused = r"copied \(copy.deepcopy, pickle or torch.save\) while a generate call was running on it, and holds "
        for ids in (edited, seen):  # edited or not: the copy cannot tell, so the whole conversation is refused
            with pytest.raises(ValueError, match=refused + rf"{held} tokens per row"):
                model.generate(ids, cache=copied, max_new_tokens=3, **kw)
        assert int(copied.get_seq_length()) == held  # nothing consumed by the refused calls
        new = seen[:, held:]
        mask = torch.ones(seen.shape[0], held + new.shape[1], dtype=torch.long)
        cont = model.generate(new, attention_mask=mask, cache=copied, max_new_tokens=3, **kw)
        assert torch.equal(cont[:, new.shape[1]:], model.generate(seen, max_new_tokens=3, **kw)[:, seen.shape[1]:])
        later = torch.cat([edited, cont[:, new.shape[1]:]], 1)  # the conversation so far, one consumed token edited
        with pytest.raises(ValueError, match=refused):  # still refused after a turn in the accepted form
            model.generate(torch.cat([later, prompt_ids(2, 1, seed=6)], 1), cache=copied, max_new_tokens=2, **kw)
        more = torch.cat([out, prompt_ids(2, 2, seed=4)], 1)  # the original: its own conversation goes on
        assert torch.equal(model.generate(more, cache=cache, max_new_tokens=3, **kw),
                           model.generate(more, max_new_tokens=3, **kw))
        copied.reset()  # after reset() the copy serves any prompt
        assert torch.equal(model.generate(edited, cache=copied, max_new_tokens=3, **kw),
                           model.generate(edited, max_new_tokens=3, **kw))


class _ChangeAt(StoppingCriteria):
    """Calls ``change(cache)`` (a crop, a reset, a row operation) at its ``at``-th call, inside generate."""

    def __init__(self, cache, at: int, change):
        self.cache, self.at, self.change, self.calls = cache, at, change, 0

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            self.change(self.cache)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@pytest.mark.parametrize("change", ["crop", "reset", "reorder_cache"])
def test_a_cache_changed_during_generate_is_not_continued_silently(change):
    """``crop`` / ``reset`` / a row operation called on the cache from inside a generate call (a streamer, a stopping
    criterion) left it holding other tokens than the call returned (one dropped mid-stream, only those after the reset,
    rows swapped), and its record of consumed tokens was lost or wrong: the next turn's whole conversation was accepted
    and decoded from that state, other tokens than the default cache's (found by the 74th review, kimi_linear). Now
    every form of the next turn is refused until reset(), before anything changes; after reset() it decodes exactly."""
    model = tiny_model("kimi_linear")
    cache, kw = DeltaLogCache(model, crop_ring=True), dict(do_sample=False, eos_token_id=None)
    how = {"crop": lambda c: c.crop(-1), "reset": lambda c: c.reset(),
           "reorder_cache": lambda c: c.reorder_cache(torch.tensor([1, 0]))}[change]
    with torch.no_grad():
        out = model.generate(prompt_ids(2, 6), cache=cache, max_new_tokens=8,
                             stopping_criteria=[_ChangeAt(cache, 3, how)], **kw)
        held = int(cache.get_seq_length())
        more = torch.cat([out, prompt_ids(2, 2, seed=7)], 1)
        refused = rf"cache.{change}\(\) was called while a generate call was running on this cache .* the {held} tokens"
        with pytest.raises(ValueError, match=refused):
            model.generate(more, cache=cache, max_new_tokens=3, **kw)
        new = more[:, out.shape[1] - 1:]  # the new-tokens form is refused too: the held tokens are not the call's
        with pytest.raises(ValueError, match=refused):
            model.generate(new, attention_mask=torch.ones(2, held + new.shape[1], dtype=torch.long), cache=cache,
                           max_new_tokens=3, **kw)
        assert int(cache.get_seq_length()) == held  # nothing consumed by the refused calls
        cache.reset()
        assert torch.equal(model.generate(more, cache=cache, max_new_tokens=3, **kw),
                           model.generate(more, max_new_tokens=3, **kw))


def test_a_change_during_generate_that_leaves_the_returned_tokens_is_accepted():
    """The mark of a change during generate is settled when the call ends: a reset before the call fed the cache
    anything (a streamer's first put, which sees the prompt before the prefill) leaves exactly the returned tokens in
    it, so the next turn is checked (an edited one refused) and decoded as usual; a beam search's own reorders add
    nothing to the beam-search refusal."""
    model = tiny_model("kimi_linear")
    cache, kw = DeltaLogCache(model), dict(do_sample=False, eos_token_id=None)

    class ResetAtFirstPut:
        def put(self, value):
            if not hasattr(self, "done"):
                self.done = cache.reset()

        def end(self):
            pass

    with torch.no_grad():
        first = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, streamer=ResetAtFirstPut(), **kw)
        assert cache._changed_during_generate is None
        turn = torch.cat([first, prompt_ids(2, 2, seed=3)], 1)
        edited = turn.clone()
        edited[:, 1] = (edited[:, 1] + 1) % 96
        with pytest.raises(ValueError, match="differ from the .* tokens this DeltaLogCache consumed"):
            model.generate(edited, cache=cache, max_new_tokens=2, **kw)
        assert torch.equal(model.generate(turn, cache=cache, max_new_tokens=2, **kw),
                           model.generate(turn, max_new_tokens=2, **kw))
        cache.reset()
        model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, num_beams=2, **kw)
        assert cache._changed_during_generate is None
        with pytest.raises(ValueError, match="tokens from a beam search"):
            model.generate(prompt_ids(2, 12), cache=cache, max_new_tokens=2, **kw)


def test_a_copy_taken_before_the_running_call_fed_the_cache_is_checked_as_usual():
    """A copy taken at the start of a turn (a streamer's first put, before that call's prefill) holds exactly the
    tokens its record covers: the whole conversation is checked as for any cache, not refused (70th review). And the
    cache a call is running on never refuses itself (a threaded streamer's next turn may start before the call's
    wrapper has returned: 70th review)."""
    model = tiny_model("qwen3_5")
    cache, kw = DeltaLogCache(model), dict(do_sample=False, eos_token_id=None)
    with torch.no_grad():
        first = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, **kw)
        turn = torch.cat([first, prompt_ids(2, 2, seed=3)], 1)

        class CopyAtFirstPut:
            def put(self, value):
                if not hasattr(self, "copy"):
                    self.copy = copy.deepcopy(cache)

            def end(self):
                pass

        streamer = CopyAtFirstPut()
        second = model.generate(turn, cache=cache, max_new_tokens=2, streamer=streamer, **kw)
        copied = streamer.copy
        assert copied.get_seq_length() == first.shape[1] - 1 and copied._copied_mid_generate
        edited = turn.clone()
        edited[:, 1] = (edited[:, 1] + 1) % 96
        with pytest.raises(ValueError, match="differ from the .* tokens this DeltaLogCache consumed"):
            model.generate(edited, cache=copied, max_new_tokens=2, **kw)
        assert torch.equal(model.generate(turn, cache=copied, max_new_tokens=2, **kw),
                           model.generate(turn, max_new_tokens=2, **kw))
        cache._generate_running = True  # as while a call's wrapper has not returned yet
        third = torch.cat([second, prompt_ids(2, 1, seed=5)], 1)
        assert torch.equal(model.generate(third, cache=cache, max_new_tokens=2, **kw),
                           model.generate(third, max_new_tokens=2, **kw))
        assert not cache._generate_running


def test_a_copy_taken_while_generate_records_its_tokens_is_marked_too(monkeypatch):
    """The mark was cleared before the record of consumed tokens was updated: a copy taken in between (a threaded
    streamer's reader, released inside generate) held the call's tokens unmarked, and an edited conversation was
    accepted (72nd review). A state pickled while a call ran, by the version that did not mark copies, loads as such a
    copy, and no loaded cache is running a call."""
    model = tiny_model("qwen3_5")
    cache, kw = DeltaLogCache(model), dict(do_sample=False, eos_token_id=None)
    copies = []
    after = DeltaLogCache._after_generate

    def copy_first(self, *args, **kwargs):
        copies.append(copy.deepcopy(self))
        return after(self, *args, **kwargs)

    monkeypatch.setattr(DeltaLogCache, "_after_generate", copy_first)
    with torch.no_grad():
        out = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, **kw)
    monkeypatch.undo()
    copied = copies[0]
    assert copied._copied_mid_generate and not copied._generate_running and not cache._generate_running
    edited = torch.cat([out, prompt_ids(2, 1, seed=3)], 1)
    edited[:, 6] = (edited[:, 6] + 1) % 96  # a generated token the copy consumed
    with pytest.raises(ValueError, match="copied .* while a generate call was running on it"):
        model.generate(edited, cache=copied, max_new_tokens=2, **kw)
    legacy = pickle.loads(pickle.dumps(cache))  # what a pickle of the earlier version held during a call:
    state = {**vars(legacy), "_generate_running": True}
    state.pop("_copied_mid_generate")
    legacy.__setstate__(state)
    assert legacy._copied_mid_generate and not legacy._generate_running
    legacy.reset()
    assert not legacy._copied_mid_generate and not copy.deepcopy(legacy)._copied_mid_generate


def test_static_batch_size_mismatch_with_an_attention_layer_first():
    """Static mode, attention before linear attention (the first layer to see the batch is transformers'
    StaticLayer): another batch size is refused before any length advances; after reset() it is served."""
    torch.manual_seed(0)
    config = family_config("qwen3_5", layer_types=["full_attention", "linear_attention"] * 2)
    model = transformers.Qwen3_5ForCausalLM(config).eval()
    cache = DeltaLogCache(model, static=True, max_cache_len=16)
    forward(model, prompt_ids(2, 5), cache)
    with pytest.raises(ValueError, match="layer 0 holds 2 rows but the model passed 3"):
        forward(model, prompt_ids(3, 4), cache)
    assert int(cache.get_seq_length()) == 5 and [layer.seen_tokens() for layer in cache.deltalog_layers] == [5, 5]
    cache.reset()
    ids = prompt_ids(3, 6, seed=2)
    with torch.no_grad():
        out = model.generate(ids, cache=cache, max_new_tokens=6, do_sample=False)
        assert torch.equal(out, model.generate(ids, max_new_tokens=6, do_sample=False))
    assert int(cache.get_seq_length()) == 11 and [layer.seen_tokens() for layer in cache.deltalog_layers] == [11, 11]


# ---------------------------------------------------------------------------------------------- reuse
def test_second_generate_continues_or_raises():
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    first = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=6, do_sample=False)
    held = cache.get_seq_length()
    assert held == first.shape[1] - 1
    unrelated = prompt_ids(2, held + 3, seed=99)
    with pytest.raises(ValueError, match="differ from the .* tokens this DeltaLogCache consumed"):
        model.generate(unrelated, cache=cache, max_new_tokens=2)
    with pytest.raises(ValueError, match="continuing it takes the whole conversation"):
        model.generate(prompt_ids(2, 4, seed=98), cache=cache, max_new_tokens=2)
    for at in (0, held - 1):  # one consumed token edited, the first or the last (the last one was not compared)
        edited = torch.cat([first, prompt_ids(2, 1, seed=97)], 1)
        edited[1, at] = (edited[1, at] + 1) % 96
        with pytest.raises(ValueError, match="differ from the .* tokens this DeltaLogCache consumed"):
            model.generate(edited, cache=cache, max_new_tokens=2)
    assert cache.get_seq_length() == held  # nothing was consumed by the refused calls
    # After reset the same object serves the unrelated prompt exactly like a fresh cache.
    cache.reset()
    again = model.generate(unrelated, cache=cache, max_new_tokens=6, do_sample=False)
    fresh = model.generate(unrelated, cache=DeltaLogCache(model), max_new_tokens=6, do_sample=False)
    assert torch.equal(again, fresh)


def test_continuation_with_only_the_new_tokens():
    model = tiny_model("qwen3_5")
    ids = prompt_ids(1, 6)
    cache, dense = DeltaLogCache(model), DynamicCache(config=model.config)
    for c in (cache, dense):
        model.generate(ids, cache=c, max_new_tokens=4, do_sample=False)
    new = prompt_ids(1, 3, seed=5)
    mask = torch.ones(1, cache.get_seq_length() + 3, dtype=torch.long)
    held = cache.get_seq_length()
    for width in (held + 2, held + 4):  # a mask one column short or long is neither form: refused, nothing consumed
        with pytest.raises(ValueError, match=rf"the cache holds {held} tokens and generate was given 3 ids with an "
                                             rf"attention mask over {width} tokens; the mask must cover the ids when "
                                             rf"they are the whole conversation \(3 columns\), or the cached and the "
                                             rf"new tokens when the ids are only the new ones \({held} \+ 3 = "):
            model.generate(new, attention_mask=torch.ones(1, width, dtype=torch.long), cache=cache, max_new_tokens=2)
        assert cache.get_seq_length() == held
    # the whole conversation with a mask one column short: it said "{held + 1} new ones were passed" (a breaker's find)
    whole = torch.cat([prompt_ids(1, 6), torch.zeros(1, held - 6 + 1, dtype=torch.long)], 1)
    with pytest.raises(ValueError, match=rf"given {held + 1} ids with an attention mask over {held} tokens"):
        model.generate(whole, attention_mask=torch.ones(1, held, dtype=torch.long), cache=cache, max_new_tokens=2)
    assert cache.get_seq_length() == held
    out = model.generate(new, attention_mask=mask, cache=cache, max_new_tokens=5, do_sample=False)
    ref = model.generate(new, attention_mask=mask, cache=dense, max_new_tokens=5, do_sample=False)
    assert torch.equal(out, ref)


def test_a_turn_of_only_new_tokens_keeps_the_consumed_ids_for_the_next_turn():
    """A middle turn in the only-new-tokens form returns the new and generated ids only. The cache forgot the ids it
    had consumed, so a third turn whose ids did not start with them (turn 2's returned ids plus new ones, as if they
    were the whole conversation) was accepted and decoded from the wrong tokens. Now the record continues across the
    turn: the wrong ids are refused before anything changes, and the whole conversation decodes the default cache's
    tokens."""
    model = tiny_model("qwen3_5")
    kw = dict(do_sample=False)
    cache, dense = DeltaLogCache(model), DynamicCache(config=model.config)
    first = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, **kw)
    assert torch.equal(first, model.generate(prompt_ids(2, 5), cache=dense, max_new_tokens=3, **kw))
    new = torch.cat([first[:, -1:], prompt_ids(2, 3, seed=5)], 1)  # the unconsumed last token, then new ones
    mask = torch.ones(2, cache.get_seq_length() + new.shape[1], dtype=torch.long)
    second = model.generate(new, attention_mask=mask, cache=cache, max_new_tokens=4, **kw)
    assert torch.equal(second, model.generate(new, attention_mask=mask, cache=dense, max_new_tokens=4, **kw))
    conversation = torch.cat([first[:, :-1], second], 1)
    held = cache.get_seq_length()
    assert held == conversation.shape[1] - 1
    more = prompt_ids(2, 2, seed=6)
    wrong = torch.cat([second, second, more], 1)  # long enough to be a continuation, but not this conversation
    assert wrong.shape[1] > held and not torch.equal(wrong[:, :held], conversation[:, :held])
    with pytest.raises(ValueError, match=f"the first {held} input tokens differ from the {held} tokens"):
        model.generate(wrong, cache=cache, max_new_tokens=3, **kw)
    assert cache.get_seq_length() == held
    right = torch.cat([conversation, more], 1)
    assert torch.equal(model.generate(right, cache=cache, max_new_tokens=3, **kw),
                       model.generate(right, cache=dense, max_new_tokens=3, **kw))


def test_crop_after_direct_forwards_keeps_the_consumed_ids_the_cache_still_holds():
    """After generate (7 ids recorded), two direct one-token forwards (held 9, record still 7) and crop(-2), the cache
    holds the 7 recorded ids again, but crop cut the record from its end to 5, so the next turn's ids were not
    compared and a wrong conversation decoded silently. Now crop cuts the record to the cache's new length."""
    model = tiny_model("qwen3_5")
    kw = dict(do_sample=False)
    cache = DeltaLogCache(model, crop_ring=True)
    first = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, **kw)
    with torch.no_grad():
        for t in prompt_ids(2, 2, seed=11).T:
            model(t[:, None], past_key_values=cache)
    cache.crop(-2)
    assert cache.get_seq_length() == 7
    wrong = torch.cat([prompt_ids(2, 7, seed=12), prompt_ids(2, 2, seed=13)], 1)
    with pytest.raises(ValueError, match="the first 7 input tokens differ from the 7 tokens"):
        model.generate(wrong, cache=cache, max_new_tokens=2, **kw)
    right = torch.cat([first, prompt_ids(2, 2, seed=13)], 1)
    dense = DynamicCache(config=model.config)
    model.generate(prompt_ids(2, 5), cache=dense, max_new_tokens=3, **kw)
    assert torch.equal(model.generate(right, cache=cache, max_new_tokens=3, **kw),
                       model.generate(right, cache=dense, max_new_tokens=3, **kw))


# ---------------------------------------------------------------------------------------------- lengths
def test_seq_length_and_mask_sizes_hybrid():
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    assert cache.get_seq_length() == 0
    forward(model, prompt_ids(2, 5), cache)
    forward(model, prompt_ids(2, 1), cache)
    assert cache.get_seq_length() == 6 and cache.get_mask_sizes(1, 0) == (7, 0)


def test_pure_linear_attention_config():
    """No attention layer: the cache counts tokens itself, and generate runs (upstream's DynamicCache cannot)."""
    cfg = family_config("qwen3_5", num_hidden_layers=2, layer_types=["linear_attention"] * 2)
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForCausalLM(cfg).eval()
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, merge_interval=3)
    with torch.no_grad():
        out = model.generate(ids, cache=cache, max_new_tokens=8, do_sample=False)
        full = model(out, use_cache=False).logits  # upstream's own DynamicCache rejects this config
        assert cache.get_seq_length() == 12 and cache.get_mask_sizes(1, 0) == (13, 0)
        # Teacher-forced check: each generated token is the argmax of the full forward at its position.
        assert torch.equal(full[:, 4:-1].argmax(-1), out[:, 5:])


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_pure_linear_attention_continuation(family):
    """No attention layer: transformers' generate cuts the cached prefix off the ids only when some layer is an
    attention layer, so continuing with the whole conversation would feed it into the state a second time (found by a
    breaker review: logits 0.69 off, no error). It is refused before anything changes; the other form (only the new
    tokens, a mask over cached and new ones) continues exactly as one uncached run of the whole conversation."""
    cfg = family_config(family, num_hidden_layers=2, layer_types=["linear_attention"] * 2)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, merge_interval=3, backend="torch")
    with torch.no_grad():
        out = model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False)
        new = prompt_ids(2, 3, seed=7)
        with pytest.raises(ValueError, match="no attention layers"):
            model.generate(torch.cat([out, new], 1), cache=cache, max_new_tokens=3, do_sample=False)
        assert cache.get_seq_length() == 8  # unchanged
        held = cache.get_seq_length()
        mask = torch.ones(2, held + 1 + new.shape[1], dtype=torch.long)
        cont = model.generate(torch.cat([out[:, -1:], new], 1), attention_mask=mask, cache=cache, max_new_tokens=3,
                              do_sample=False, return_dict_in_generate=True, output_logits=True)
        whole = torch.cat([out, new, cont.sequences[:, 1 + new.shape[1]:]], 1)
        full = model(whole, use_cache=False).logits
    k = cont.sequences.shape[1] - 1 - new.shape[1]  # generated tokens
    ref = full[:, whole.shape[1] - k - 1:-1]
    assert max_abs(torch.stack(cont.logits, 1), ref) < 1e-4


def interrupt_once(model, layer_idx):
    """Make the decoder layer ``layer_idx`` raise on its next call only (an exception, or Ctrl-C, inside a forward)."""
    layer = model.model.layers[layer_idx]

    def hook(module, args):
        handle.remove()
        raise RuntimeError("interrupted")

    handle = layer.register_forward_pre_hook(hook)


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
@pytest.mark.parametrize("stop_at", [1, 2], ids=["before-an-attention-layer", "before-a-linear-layer"])
def test_a_forward_interrupted_part_way_is_caught_at_the_next_generate(family, stop_at):
    """An exception inside the model during prefill leaves the first layers advanced and the others not. Retrying
    the same generate on that cache decoded from the half-filled state (logits 0.08-0.77 off; DynamicCache does the
    same) or failed with transformers' "batch size is not consistent across layers: [2, -1]". Now the next generate
    raises a ValueError naming cache.reset(), and after reset() the retry matches a fresh cache."""
    model = tiny_model(family)
    kinds = ["linear_attention" if isinstance(layer, DeltaLogLayer) else "attention"
             for layer in DeltaLogCache(model).layers]
    assert kinds[:3] == ["linear_attention", "attention", "linear_attention"], kinds  # what the ids say
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, backend="torch")
    interrupt_once(model, stop_at)
    with pytest.raises(RuntimeError, match="interrupted"):
        model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    with pytest.raises(ValueError, match="inconsistent.*cache.reset"):
        model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    cache.reset()
    fresh = DeltaLogCache(model, backend="torch")
    assert torch.equal(model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False),
                       model.generate(ids, cache=fresh, max_new_tokens=3, do_sample=False))



@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_stop_inside_the_first_linear_layer_is_caught(family, phase):
    """A stop inside layer 0 after its conv window moved and before its recurrent state was stored (where an OOM in
    the prefill recurrence or a Ctrl-C most likely lands) changed no token count, so the next generate was not
    refused: it decoded from the moved window (logits up to 0.097 off after a decode-step stop; other tokens after a
    prefill stop). Now it raises a ValueError naming cache.reset(), and after reset() the retry matches a fresh
    cache."""
    model = tiny_model(family)
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    calls = {"n": 0}
    stop_on = 1 if phase == "prefill" else 3  # layer 0's first store is the prefill's, then one per decode step
    store = cache.update_recurrent_state

    def stopping(recurrent_states, layer_idx, *args, **kwargs):
        if layer_idx == 0:
            calls["n"] += 1
            if calls["n"] == stop_on:
                raise KeyboardInterrupt
        return store(recurrent_states, layer_idx, *args, **kwargs)

    cache.update_recurrent_state = stopping
    with pytest.raises(KeyboardInterrupt):
        model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False)
    cache.update_recurrent_state = store
    with pytest.raises(ValueError, match=r"inconsistent: a forward stopped part-way, and layer\(s\) \[0(, 2)?\] did not complete.*cache.reset"):
        model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    cache.reset()
    fresh = DeltaLogCache(model, backend="torch", merge_interval=3)
    assert torch.equal(model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False),
                       model.generate(ids, cache=fresh, max_new_tokens=3, do_sample=False))


@pytest.mark.parametrize("family", ["qwen3_5", "lara_mini", "qwen3_next"])
def test_a_forward_that_fails_before_the_cache_changes_does_not_lock_it(family):
    """transformers 5.25's linear layers read the recurrent state first, then project the input, which can fail on
    bad input (here an empty [B, 0] forward: transformers' own reshape error) before anything in the cache changes.
    That locked the cache until reset() ("a forward stopped part-way ... a conv window moved"), although nothing had
    moved (a breaker's find, 2026-12-04, second stop); transformers' default cache goes on. Now the next step decodes
    what the default cache decodes, and a stop after the conv window was handed out still locks (the model updates it
    in place)."""
    model = tiny_model(family)
    ids, nxt = prompt_ids(2, 7), prompt_ids(2, 1, seed=4)
    logits = {}
    for kind, cache in (("default", DynamicCache(config=model.config)),
                        ("deltalog", DeltaLogCache(model, backend="torch", merge_interval=3))):
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True)
            state = cache.layers[0].conv_states[0].clone()
            with pytest.raises(RuntimeError, match="cannot reshape tensor of 0 elements"):
                model(ids[:, :0], past_key_values=cache, use_cache=True)
            assert torch.equal(cache.layers[0].conv_states[0], state)
            if kind == "deltalog" and not TRANSFORMERS_5_25:
                # 5.24's layers take the conv window (which they update in place) before the recurrent state: a stop
                # after that is taken for a moved window, and the cache stays locked, as before
                with pytest.raises(ValueError, match="inconsistent: a forward stopped part-way"):
                    model(nxt, past_key_values=cache, use_cache=True)
                return
            logits[kind] = torch.cat([model(nxt, past_key_values=cache, use_cache=True).logits for _ in range(4)], 1)
            assert cache.get_seq_length() == 11
    assert max_abs(logits["deltalog"], logits["default"]) < 1e-5
    cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    get_conv_state = cache.get_conv_state

    def stop_after_the_window_was_handed_out(*args, **kwargs):
        get_conv_state(*args, **kwargs)
        raise KeyboardInterrupt

    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        cache.get_conv_state = stop_after_the_window_was_handed_out
        with pytest.raises(KeyboardInterrupt):
            model(nxt, past_key_values=cache, use_cache=True)
        cache.get_conv_state = get_conv_state
        with pytest.raises(ValueError, match=r"inconsistent: a forward stopped part-way, and layer\(s\) \[0\]"):
            model(nxt, past_key_values=cache, use_cache=True)


def _decoder_layers(model):
    inner = model.model
    return (inner.language_model if hasattr(inner, "language_model") else inner).layers


def _stop_in_decoder_layer(model, layer_idx, on_call=2):
    """Make decoder layer ``layer_idx`` raise KeyboardInterrupt on its ``on_call``-th call (1: the prefill)."""
    calls = {"n": 0}

    def hook(module, args):
        calls["n"] += 1
        if calls["n"] == on_call:
            handle.remove()
            raise KeyboardInterrupt

    handle = _decoder_layers(model)[layer_idx].register_forward_pre_hook(hook)


@pytest.mark.parametrize("static, layer", [(True, 2), (False, 3)], ids=["static-before-a-linear-layer",
                                                                       "dynamic-before-the-last-attention-layer"])
def test_a_decode_step_stopped_between_layers_is_caught(static, layer):
    """Two stops the token counts missed. Static mode: the layers share one step counter, so a decode step stopped
    before linear layer 2 left every layer reporting the same count (the logs differ: layer 0 appended, layer 2 not).
    Dynamic: a stop before the last attention layer left it one token behind, and only the linear layers were
    compared. Both continued silently from the mixed state (logits 0.097 and 0.0136 off a no-cache forward); both are
    now refused, and after reset() the cache matches a fresh one."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(1, 6)
    kw = dict(static=True, max_cache_len=64) if static else {}
    cache = DeltaLogCache(model, backend="torch", merge_interval=4, **kw)
    out = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    turn2 = torch.cat([out, prompt_ids(1, 2, seed=3)], dim=1)
    _stop_in_decoder_layer(model, layer)
    with pytest.raises(KeyboardInterrupt):
        model.generate(turn2, cache=cache, max_new_tokens=4, do_sample=False)
    held = int(cache.get_seq_length())
    with pytest.raises(ValueError, match="inconsistent.*cache.reset"):  # the only-new-tokens form
        model.generate(torch.tensor([[17]]), attention_mask=torch.ones(1, held + 1, dtype=torch.long), cache=cache,
                       max_new_tokens=2, do_sample=False)
    cache.reset()
    fresh = DeltaLogCache(model, backend="torch", merge_interval=4, **kw)
    assert torch.equal(model.generate(turn2, cache=cache, max_new_tokens=3, do_sample=False),
                       model.generate(turn2, cache=fresh, max_new_tokens=3, do_sample=False))


def _stop_once(cache, method, layer_idx):
    """Make ``cache.<method>`` raise KeyboardInterrupt on its next call for layer ``layer_idx`` (a stop inside that
    layer, at that store)."""
    store = getattr(cache, method)

    def stopping(*args, **kwargs):
        called = kwargs.get("layer_idx", args[1] if len(args) > 1 else None)
        if called == layer_idx:
            setattr(cache, method, store)
            raise KeyboardInterrupt
        return store(*args, **kwargs)

    setattr(cache, method, stopping)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("family, where, layer", [
    ("qwen3_5", "before", 1),  # after linear layer 0, before an attention layer
    ("qwen3_5", "before", 2),  # before a linear layer
    ("kimi_linear", "before", 3),  # before the last (attention) layer
    ("qwen3_5", "update_recurrent_state", 0),  # inside linear layer 0, its conv window moved
    ("kimi_linear", "update_recurrent_state", 2),
    ("glm5_next", "update_indexer", 1),  # inside an indexed attention layer: keys stored, indexer keys not
    ("glm5_next", "update_indexer", 3),  # the same in the last layer: every token count agrees
])
def test_a_manual_step_after_a_stopped_forward_is_refused(family, where, layer, phase):
    """A manual decode loop (model(x, past_key_values=cache) per step) that went on after a forward stopped between
    two layers, or inside one, decoded from layers holding different tokens; only generate checked (the last documented
    gap; DynamicCache goes on silently too). Now the next forward is refused with a ValueError naming cache.reset(),
    the cache stays locked, and after reset() it matches a fresh cache."""
    model = tiny_model(family)
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    nxt = prompt_ids(2, 1, seed=5)
    with torch.no_grad():
        if phase == "decode":
            model(ids, past_key_values=cache, use_cache=True)
        if where == "before":
            _stop_in_decoder_layer(model, layer, on_call=1)
        else:
            _stop_once(cache, where, layer)
        with pytest.raises(KeyboardInterrupt):
            model(ids if phase == "prefill" else nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="inconsistent.*cache.reset"):
            model(nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match="locked by a call it refused.*cache.reset"):  # locked
            model(nxt, past_key_values=cache, use_cache=True)
        cache.reset()
        fresh = DeltaLogCache(model, backend="torch", merge_interval=3)
        for step in (ids, nxt, nxt):
            got = model(step, past_key_values=cache, use_cache=True).logits
            want = model(step, past_key_values=fresh, use_cache=True).logits
            assert torch.equal(got, want)


def test_a_manual_loop_on_a_model_with_fewer_layers_names_that_cause():
    """A cache built for 6 layers, run by a 4-layer model of the same family in a manual loop (the cache does not see
    the model outside generate): the prefill fills layers 0-3, and the next forward was refused with "an earlier
    forward stopped part-way", which did not name the real cause. The refusal now names both."""
    config = family_config("qwen3_5", num_hidden_layers=6, layer_types=["linear_attention", "full_attention"] * 3)
    cache = DeltaLogCache(config, backend="torch")
    model = tiny_model("qwen3_5")  # 4 layers
    ids = prompt_ids(2, 5)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=r"layer 3: 5, layer 4: 0, layer 5: 0.*the model that ran it has only "
                                             r"4 layers while this cache was built for a config with 6.*build the "
                                             r"cache from a config that lists the layers the model runs"):
            model(ids[:, -1:], past_key_values=cache, use_cache=True)


def test_layer_surgery_and_a_probing_subclass_are_named_in_the_refusal():
    """Three ways a model runs its layers other than the config says, refused by dynamic mode's per-forward check
    with a remedy that could not work (55th review): `model.model.layers` cut to 2 with the config unchanged ("build
    the cache from the model": that is what was done), the layers run in another order ("a forward stopped
    part-way": none did), and a layer subclass reading `cache.get_recurrent_state(i)` after its step (the same)."""
    import copy

    base, ids = tiny_model("qwen3_5"), prompt_ids(2, 5)
    cut = copy.deepcopy(base)
    cut.model.layers = torch.nn.ModuleList(cut.model.layers[:2])
    with pytest.raises(ValueError, match=r"has only 2 layers .* set its config's num_hidden_layers, and layer_types "
                                         r"where it has them, to match"):
        cut.generate(ids, max_new_tokens=3, do_sample=False, cache=DeltaLogCache(cut))
    swapped = copy.deepcopy(base)
    layers = swapped.model.layers
    swapped.model.layers = torch.nn.ModuleList([layers[2], layers[1], layers[0], layers[3]])
    config_advice = (r"the model runs other layers than its config lists: the cache expects layer 0, 1, 2, \.\.\. "
                     r"of the config, once each per forward, in that order \(after removing or reordering layers, "
                     r"renumber their layer_idx and set the config's num_hidden_layers, and layer_types where it "
                     r"has them, to match")
    with pytest.raises(ValueError, match=config_advice):
        swapped.generate(ids, max_new_tokens=3, do_sample=False, cache=DeltaLogCache(swapped))
    gapped = copy.deepcopy(base)  # layers 0 and 3 kept: "stopped part-way; reset()" alone (56th review)
    gapped.model.layers = torch.nn.ModuleList([gapped.model.layers[0], gapped.model.layers[3]])
    with pytest.raises(ValueError, match=config_advice):
        gapped.generate(ids, max_new_tokens=3, do_sample=False, cache=DeltaLogCache(gapped))
    # the advice works: layers renumbered, the config set to match
    for i, layer in enumerate(gapped.model.layers):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = i
    gapped.config.num_hidden_layers, gapped.config.layer_types = 2, ["linear_attention", "full_attention"]
    want = gapped.generate(ids, max_new_tokens=3, do_sample=False, cache=DynamicCache(config=gapped.config))
    got = gapped.generate(ids, max_new_tokens=3, do_sample=False, cache=DeltaLogCache(gapped))
    assert torch.equal(got, want)

    probed = copy.deepcopy(base)
    for module in probed.modules():
        if hasattr(module, "A_log") and hasattr(module, "layer_idx"):
            class Probe(type(module)):
                def forward(self, hidden_states, cache=None, **kwargs):
                    out = super().forward(hidden_states, cache=cache, **kwargs)
                    if cache is not None:
                        self.last_state = cache.get_recurrent_state(self.layer_idx)
                    return out

            module.__class__ = Probe
    with pytest.raises(ValueError, match=r"a module of layer 0 called cache.get_recurrent_state\(0\) a second time "
                                         r"in one forward .* cache.materialize\(0\) instead"):
        probed.generate(ids, max_new_tokens=3, do_sample=False, cache=DeltaLogCache(probed))


def test_the_fewer_layers_cause_is_named_when_the_unreached_layers_report_the_count():
    """The same with a cache built for [linear, linear, full, full] and run by a [linear, linear] model: the cache's
    count comes from an attention layer the model never reached (0 tokens), and the refusal named only the stopped
    forward (33rd review). It names both causes whatever layer the count is read from."""
    config = family_config("qwen3_5", layer_types=["linear_attention", "linear_attention", "full_attention",
                                                   "full_attention"])
    cache = DeltaLogCache(config, backend="torch")
    small = family_config("qwen3_5", num_hidden_layers=2, layer_types=["linear_attention", "linear_attention"])
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForCausalLM(small).eval()
    ids = prompt_ids(2, 5)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=r"layer 1: 5, layer 2: 0, layer 3: 0.*has only 2 layers while this "
                                             r"cache was built for a config with 4"):
            model(ids[:, -1:], past_key_values=cache, use_cache=True)


class _Wrapper(torch.nn.Module):
    """A serving / training wrapper that reads layer 0's state before each step of the model it wraps."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, cache):
        if cache.get_seq_length() > 0:
            cache.get_recurrent_state(0)
        return self.model(x, past_key_values=cache, use_cache=True).logits


class _Probe(torch.nn.Module):
    """An interpretability probe: a module whose hook method reads a linear layer's state after its step."""

    def __init__(self, cache):
        super().__init__()
        self.cache = cache

    def hook(self, module, args, output):
        self.cache.get_recurrent_state(module.layer_idx)


def test_a_state_read_from_another_module_is_only_a_read():
    """get_recurrent_state called from a wrapper module's forward, or from a probe module's hook method, was taken for
    the layer's own step call (any nn.Module method counted): the next manual forward was refused, and a probe on
    layer 0 refused the first prefill itself, both locking the cache (found by the sixteenth review). Only a module of
    that layer (its layer_idx) counts now; the wrapped and probed loops match a plain loop."""
    model = tiny_model("qwen3_5")
    ids, nxt = prompt_ids(2, 6), prompt_ids(2, 1, seed=5)
    plain = DeltaLogCache(model, backend="torch", merge_interval=3)
    with torch.no_grad():
        want = [model(x, past_key_values=plain, use_cache=True).logits for x in (ids, nxt, nxt)]
        wrapper, wrapped = _Wrapper(model), DeltaLogCache(model, backend="torch", merge_interval=3)
        assert all(torch.equal(wrapper(x, wrapped), w) for x, w in zip((ids, nxt, nxt), want))
        probed = DeltaLogCache(model, backend="torch", merge_interval=3)
        handle = _decoder_layers(model)[0].linear_attn.register_forward_hook(_Probe(probed).hook)
        try:
            got = [model(x, past_key_values=probed, use_cache=True).logits for x in (ids, nxt, nxt)]
        finally:
            handle.remove()
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def _qwen4_exp_with_per_layer_embeddings():
    """tests/utils.py's qwen4_exp config with per-layer embeddings on both linear layers (one-indexed ids 1 and 3): the
    config derives three conv states per layer from ``ple_layer_ids`` when it is built, so not as an override."""
    torch.manual_seed(0)
    cfg = transformers.Qwen4ExpTextConfig(**_drop("intermediate_size"), **GDN, **MOE, layer_types=family_config(
        "qwen4_exp").layer_types, hc_count=2, hc_lowrank=16, ngram_vocab_size_base=1000, indexer_n_heads=2,
        indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=8, indexer_compress_ratio=4, ple_layer_ids=[1, 3])
    assert cfg.number_of_conv_states == 3
    return transformers.Qwen4ExpForCausalLM(cfg).eval()


def test_qwen4_exp_per_layer_embeddings_decode_and_a_stop_after_them():
    """qwen4_exp's per-layer embeddings (PLE) keep two more conv states in a linear layer: state 1, a [B, D, W]
    window, and state 2, the [B, W] token history. The cache read dim 1 of every conv state as channels, so the first
    decode step was refused ("holds conv states of 2 channels but the model passed 1"); and a stop after a layer's PLE
    moved those states, before its recurrent step, was not seen: the next manual step decoded on (logits 0.031 off)
    (found by the sixteenth review). Now generate matches DynamicCache (greedy for M = 1, 3, 8 and a second turn) and a
    manual step after such a stop is refused."""
    model = _qwen4_exp_with_per_layer_embeddings()
    ids = prompt_ids(2, 6)
    greedy = dict(do_sample=False, return_dict_in_generate=True, output_logits=True, max_new_tokens=5)
    with torch.no_grad():
        for merge_interval in (1, 3, 8):
            ours, ref = DeltaLogCache(model, backend="torch", merge_interval=merge_interval), DynamicCache(
                config=model.config)
            got, want = (model.generate(ids, past_key_values=c, **greedy) for c in (ours, ref))
            assert torch.equal(got.sequences, want.sequences)
            assert max(max_abs(a, b) for a, b in zip(got.logits, want.logits)) < 1e-5
        turn2 = torch.cat([got.sequences, prompt_ids(2, 2, seed=4)], 1)
        got, want = (model.generate(turn2, past_key_values=c, **greedy) for c in (ours, ref))
        assert torch.equal(got.sequences, want.sequences)
        cache = DeltaLogCache(model, backend="torch", merge_interval=3)
        model(ids, past_key_values=cache, use_cache=True)
        nxt = prompt_ids(2, 1, seed=5)

        def stop(module, args):
            handle.remove()
            raise KeyboardInterrupt

        handle = model.model.layers[0].attn_hyper_connection.register_forward_pre_hook(stop)  # after layer 0's PLE
        with pytest.raises(KeyboardInterrupt):
            model(nxt, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=r"layer\(s\) \[0\] did not complete the last step.*cache.reset"):
            model(nxt, past_key_values=cache, use_cache=True)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "qwen4_exp"])  # qwen4_exp's n-gram code fails first
@pytest.mark.parametrize("rows", [3, 1])
def test_a_manual_step_with_another_number_of_rows_is_refused_before_anything_moves(family, rows):
    """A manual step with another number of rows than the cache holds failed inside the model's conv code with torch's
    "Sizes of tensors must match" RuntimeError, after layer 0 had read its state, so the next valid step was refused as
    a stopped forward (and on a GPU, transformers' layers run conv kernels that update the window in place without a
    row check). Now the forward's first cache call compares the rows with the cache's and raises a ValueError before
    anything moves; the next valid step matches a cache that never saw the call."""
    model = tiny_model(family)
    ids, nxt = prompt_ids(2, 5), prompt_ids(2, 1, seed=4)
    cache, clean = (DeltaLogCache(model, backend="torch", merge_interval=3) for _ in range(2))
    with torch.no_grad():
        for c in (cache, clean):
            model(ids, past_key_values=c, use_cache=True)
        with pytest.raises(ValueError, match=f"holds 2 rows but the model passed {rows}; call cache.reset"):
            model(prompt_ids(rows, 1, seed=3), past_key_values=cache, use_cache=True)
        got = model(nxt, past_key_values=cache, use_cache=True).logits
        assert torch.equal(got, model(nxt, past_key_values=clean, use_cache=True).logits)


def test_static_sliding_layer_first_refuses_another_number_of_rows():
    """A static lara_mini cache whose first layer is a sliding-window layer: once its window was full that layer's
    device length stayed 0, so a step with another number of rows reallocated it (wiping its keys) and the cache
    decoded on with wrong logits. Now the host length decides: ValueError before anything moves (static mode then
    locks the cache until reset(), as for every call it refuses inside a forward), and after reset() the cache
    decodes as one that never saw the call."""
    cfg = family_config("lara_mini", layer_types=["sliding_attention", "linear_attention", "full_attention",
                                                  "linear_attention", "sliding_attention"])
    torch.manual_seed(0)
    model = transformers.LaraMiniForCausalLM(cfg).eval()
    ids, nxt = prompt_ids(2, 8), prompt_ids(2, 1, seed=4)  # 8 tokens through the window of 6
    cache, clean = (DeltaLogCache(model, backend="torch", merge_interval=3, static=True, max_cache_len=20)
                    for _ in range(2))
    with torch.no_grad():
        for c in (cache, clean):
            model(ids, past_key_values=c, use_cache=True)
        keys = cache.layers[0].keys.clone()
        with pytest.raises(ValueError, match="layer 0 holds 2 rows but the model passed 3; call cache.reset"):
            model(prompt_ids(3, 1, seed=3), past_key_values=cache, use_cache=True)
        assert torch.equal(cache.layers[0].keys, keys) and cache.layers[0].get_seq_length() == 8
        with pytest.raises(ValueError, match="Call cache.reset"):
            model(nxt, past_key_values=cache, use_cache=True)
        cache.reset()
        model(ids, past_key_values=cache, use_cache=True)
        got = model(nxt, past_key_values=cache, use_cache=True).logits
        assert torch.equal(got, model(nxt, past_key_values=clean, use_cache=True).logits)


def test_triton_backend_decodes_with_past_recording():
    """With past recording transformers' GDN layers hand q, k, v to the recurrence as strided views of the conv
    output; the Triton kernels refused them ("must have unit stride"), so on the Triton backend (the default on CUDA)
    recording, and with it a crop of lara_mini's sliding-window layers past their window, was unusable. The cache now
    passes contiguous rows: the logits match the default cache, and a crop after the window is exact."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    model = tiny_model("lara_mini")
    ids = prompt_ids(2, 8)
    cache, dense = DeltaLogCache(model, merge_interval=8, backend="triton", crop_ring=True), DynamicCache(
        config=model.config)
    cache.activate_past_recording()
    steps = [forward(model, ids, cache)] + [None] * 3
    ref = [forward(model, ids, dense)]
    for t in range(3):  # the same greedy tokens into both
        nxt = ref[-1][:, -1:].argmax(-1)
        steps[t + 1], _ = forward(model, nxt, cache), ref.append(forward(model, nxt, dense))
    assert max(max_abs(a, b) for a, b in zip(steps, ref)) <= 1e-4
    cache.crop(-2)  # 11 -> 9 tokens: needs the sliding layers' recorded keys
    fresh = DeltaLogCache(model, merge_interval=8, backend="torch")
    forward(model, ids, fresh)
    forward(model, ref[0][:, -1:].argmax(-1), fresh)
    nxt = prompt_ids(2, 1, seed=7)
    assert max_abs(forward(model, nxt, cache), forward(model, nxt, fresh)) <= 1e-4


def test_materialize_is_contiguous_on_both_backends():
    """On the Triton backend the base is V-first: materialize returned the transposed layout of a new tensor (not
    contiguous, so ``.view`` failed on the GPU where it worked on the CPU; 71st review). Both backends now return
    the same contiguous ``[B, HV, K, V]`` fp32 state, mid-log."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    model = tiny_model("qwen3_5")
    states = []
    for backend in ("torch", "triton"):
        cache = DeltaLogCache(model, merge_interval=4, backend=backend)
        forward(model, prompt_ids(2, 6), cache)
        forward(model, prompt_ids(2, 1, seed=3), cache)
        state = cache.materialize(0)
        assert state.is_contiguous() and state.dtype == torch.float32 and state.shape == (2, 4, 8, 16)
        states.append(state.view(2, -1))
    assert max_abs(*states) <= 1e-6


def test_triton_backend_on_a_cpu_model_is_refused_when_generate_starts(monkeypatch):
    """backend="triton" with a CPU model (no interpreter) was accepted until the first linear-attention layer's step,
    which refused it after the layers before it had run, locking the cache (71st review). generate now refuses it
    before anything changes; the cache stays usable (here under the interpreter again)."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, backend="triton")
    monkeypatch.setattr(hf_deltalog.cache, "interpreting", lambda: False)
    with pytest.raises(ValueError, match=r"need a CUDA model .* parameters are on cpu: build a new "
                                         r"DeltaLogCache\(model, backend='torch'\) .* Nothing was changed"):
        model.generate(ids, cache=cache, max_new_tokens=2, do_sample=False)
    assert cache.get_seq_length() == 0
    monkeypatch.undo()
    with torch.no_grad():
        assert torch.equal(model.generate(ids, cache=cache, max_new_tokens=2, do_sample=False),
                           model.generate(ids, max_new_tokens=2, do_sample=False))


def test_a_shared_dsa_layer_without_indexer_keys_is_not_a_stopped_step():
    """Keys without indexer keys in a DSA layer count as a stopped step (a first prefill stopped between the two stores),
    except in GLM-5's "shared" layers, which reuse the previous layer's top-k and never store indexer keys: generate and
    a manual loop on such a config run as with DynamicCache."""
    cfg = family_config("glm5_next")
    cfg.text_config.layer_types = ["linear_attention", "indexed_attention", "indexed_attention", "linear_attention"]
    cfg.text_config.indexer_types = ["full", "full", "shared", "full"]  # layer 2 reuses layer 1's selection
    torch.manual_seed(0)
    model = transformers.Glm5NextForConditionalGeneration(cfg).eval()
    ids = prompt_ids(2, 6)
    greedy = dict(do_sample=False, return_dict_in_generate=True, output_logits=True, max_new_tokens=5)
    with torch.no_grad():
        ours = DeltaLogCache(model, backend="torch", merge_interval=3)
        got = model.generate(ids, past_key_values=ours, **greedy)
        want = model.generate(ids, past_key_values=DynamicCache(config=model.config), **greedy)
        assert torch.equal(got.sequences, want.sequences)
        assert max(max_abs(a, b) for a, b in zip(got.logits, want.logits)) < 1e-5
        assert [getattr(layer, "is_indexer_initialized", None) for layer in ours.layers] == [None, True, False, None]
        model(got.sequences[:, -1:], past_key_values=ours, use_cache=True)  # a manual step after generate


def test_a_manual_loop_with_reads_between_steps_is_not_refused():
    """The per-forward check must not refuse a valid manual loop: reads of the state between steps (conv window,
    materialize, the sequence length) are not a stopped forward, and the loop matches DynamicCache step by step."""
    model = tiny_model("glm5_next")
    ids = prompt_ids(2, 6)
    ours = DeltaLogCache(model, backend="torch", merge_interval=3)
    ref = DynamicCache(config=model.config)
    with torch.no_grad():
        step = ids
        for _ in range(5):
            got = model(step, past_key_values=ours, use_cache=True).logits
            want = model(step, past_key_values=ref, use_cache=True).logits
            assert max_abs(got, want) < 1e-5
            ours.get_conv_state(0), ours.materialize(2), ours.get_seq_length()
            step = want[:, -1:].argmax(-1)


def test_reading_the_state_between_turns_is_not_a_stopped_forward():
    """Reading a layer's conv window through the Cache API (get_conv_state) between two generate calls marked the
    layer as inside a step, and the valid continuation was refused. Only the model's own read at the start of a step
    (get_recurrent_state, which every family calls before it moves the window) marks it now."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(1, 6)
    cache = DeltaLogCache(model, backend="torch")
    out = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    assert cache.get_conv_state(0) is not None
    cache.materialize(0)
    turn2 = torch.cat([out, prompt_ids(1, 2, seed=3)], dim=1)
    assert torch.equal(model.generate(turn2, cache=cache, max_new_tokens=3, do_sample=False),
                       model.generate(turn2, cache=DeltaLogCache(model, backend="torch"), max_new_tokens=3,
                                      do_sample=False))


def test_a_refused_read_between_turns_leaves_the_cache_usable():
    """get_conv_state of a layer the cache does not have (or of an attention layer) between two generate calls is a
    read that changed nothing, yet it locked the cache: the valid continuation was refused with "left inconsistent by a
    call it refused part-way through a forward" until reset(). Now the read raises its ValueError and the cache goes on;
    the same refusal part-way through a forward (layers disagree) still locks it
    (test_cache_of_another_model_is_rejected)."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, backend="torch")
    out = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, do_sample=False)
    with pytest.raises(ValueError, match="layer 99 does not exist"):
        cache.get_conv_state(99)
    with pytest.raises(ValueError, match="layer 1 is a DynamicLayer"):
        cache.get_conv_state(1)
    assert torch.equal(model.generate(out, cache=cache, max_new_tokens=2, do_sample=False),
                       model.generate(out, cache=DeltaLogCache(model, backend="torch"), max_new_tokens=2,
                                      do_sample=False))


def test_reset_lets_a_model_of_another_conv_width_use_the_cache():
    """After reset() the conv buffers kept the old width (transformers reinitialises them only on a shape change of
    the other dims), so a model with another conv width was refused at every continuation, reset or not. reset() now
    lets it in, and it decodes as on a fresh cache."""
    model = tiny_model("qwen3_5")
    cfg = copy.deepcopy(model.config)
    cfg.linear_conv_kernel_dim = 2
    other = type(model)(cfg).eval()
    ids = prompt_ids(1, 6)
    cache = DeltaLogCache(model, backend="torch")
    model.generate(ids, cache=cache, max_new_tokens=2, do_sample=False)
    cache.reset()
    out = other.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    turn2 = torch.cat([out, prompt_ids(1, 2, seed=3)], dim=1)
    got = other.generate(turn2, cache=cache, max_new_tokens=3, do_sample=False)
    assert torch.equal(got, other.generate(turn2, cache=DeltaLogCache(other, backend="torch"), max_new_tokens=3,
                                           do_sample=False))

def test_is_croppable_says_whether_crop_would_work():
    """transformers reads ``is_croppable`` as "crop can put the cache back as it was"; it was always True. Now it is
    True exactly when crop(-1) succeeds (without kept recurrent states: see tests/test_assisted_generate.py): a decoded
    token in the log and a way to rebuild the conv window."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    plain, ring = DeltaLogCache(model, merge_interval=4), DeltaLogCache(model, merge_interval=4, crop_ring=True)
    for cache in (plain, ring):
        assert not cache.is_croppable  # empty
        first = forward(model, ids, cache)
        assert not cache.is_croppable  # right after the prefill: nothing in the log
        decode(model, cache, first, 1)
    assert not plain.is_croppable  # a token in the log, but no conv columns to rebuild the window
    with pytest.raises(ValueError):
        plain.crop(-1)
    assert ring.is_croppable
    ring.crop(-1)


# ---------------------------------------------------------------------------------------------- batch ops
def test_reorder_cache_keeps_the_generate_check_in_step():
    model = tiny_model("qwen3_5")
    ids = prompt_ids(3, 5)
    cache, dense = DeltaLogCache(model), DynamicCache(config=model.config)
    out = model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False)
    model.generate(ids, cache=dense, max_new_tokens=4, do_sample=False)
    idx = torch.tensor([2, 2, 0])
    cache.reorder_cache(idx)
    dense.reorder_cache(idx)
    follow = torch.cat([out[idx], prompt_ids(3, 2, seed=9)], dim=1)
    assert torch.equal(model.generate(follow, cache=cache, max_new_tokens=4, do_sample=False),
                       model.generate(follow, cache=dense, max_new_tokens=4, do_sample=False))
    cache.reorder_cache(torch.tensor([1, 0, 2]))
    stale = torch.cat([model.generate(follow, max_new_tokens=4, do_sample=False)[:, :-1],
                       prompt_ids(3, 2, seed=10)], dim=1)  # the rows in their order before this reorder
    with pytest.raises(ValueError, match="differ from the .* tokens this DeltaLogCache consumed"):
        model.generate(stale, cache=cache, max_new_tokens=2)


@pytest.mark.parametrize("operation", ["batch_select_indices", "batch_repeat_interleave", "crop"])
def test_row_operations_and_crop_keep_the_generate_check_in_step(operation):
    """The record of consumed ids follows batch_select_indices, batch_repeat_interleave and crop (a mutation test
    found no test failing when any of them dropped the record: the next turn's ids were then not compared, and a
    wrong conversation decoded silently). After each, a conversation of the wrong rows or with a cropped token kept
    is refused, and the right one decodes the default cache's tokens for that conversation."""
    model = tiny_model("qwen3_5")
    kw = dict(do_sample=False, eos_token_id=None)
    cache = DeltaLogCache(model, crop_ring=True)
    ids = torch.cat([prompt_ids(1, 5, seed=3), prompt_ids(1, 5, seed=4)])
    consumed = model.generate(ids, cache=cache, max_new_tokens=4, **kw)[:, :-1]
    if operation == "batch_select_indices":
        cache.batch_select_indices(torch.tensor([1]))
        right, wrong = consumed[[1]], consumed[[0]]
    elif operation == "batch_repeat_interleave":
        cache.batch_repeat_interleave(2)
        right, wrong = consumed[[0, 0, 1, 1]], consumed[[1, 1, 0, 0]]
    else:
        cache.crop(-2)
        right, wrong = consumed[:, :-2], torch.cat([consumed[:, :-3], consumed[:, -1:]], 1)  # a cropped token kept
    more = prompt_ids(right.shape[0], 2, seed=5)
    with pytest.raises(ValueError, match="differ from the .* tokens this DeltaLogCache consumed"):
        model.generate(torch.cat([wrong, more], 1), cache=cache, max_new_tokens=2, **kw)
    follow = torch.cat([right, more], 1)
    assert torch.equal(model.generate(follow, cache=cache, max_new_tokens=3, **kw),
                       model.generate(follow, max_new_tokens=3, **kw))


@pytest.mark.parametrize("bad, error", [([0.5, 1.0], TypeError), (torch.tensor([[0, 1]]), TypeError),
                                        (torch.tensor([True, False]), TypeError), (torch.tensor([0]), ValueError),
                                        (torch.tensor([1, 0], dtype=torch.uint8), TypeError),
                                        (torch.tensor([1, 0], dtype=torch.int8), TypeError),
                                        (torch.tensor([0, 2]), ValueError), ([-1, 0], ValueError)])
def test_reorder_cache_rejects_bad_indices(bad, error):
    """uint8 indices failed with index_select's RuntimeError (torch reads uint8 as a mask): now the TypeError. Rows
    outside [0, B) on the CPU failed with index_select's raw IndexError: now a ValueError naming them."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    forward(model, prompt_ids(2, 5), cache)
    S = cache.materialize(0)
    with pytest.raises(error, match="beam_idx"):
        cache.reorder_cache(bad)
    assert torch.equal(cache.materialize(0), S)


def test_get_recurrent_state_refuses_a_non_int_layer_index():
    """get_recurrent_state('0') failed with a raw comparison TypeError (materialize said what it takes); a numpy
    integer is taken."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    forward(model, prompt_ids(2, 5), cache)
    for bad in ("0", 0.0, True):
        with pytest.raises(TypeError, match="layer_idx must be an int"):
            cache.get_recurrent_state(bad)
    assert cache.get_recurrent_state(np.int64(0)) is cache.get_recurrent_state(0)


def test_reorder_cache_gathers_everything():
    model = tiny_model("qwen3_5")
    ids = prompt_ids(3, 5)
    cache = DeltaLogCache(model, merge_interval=4)
    first = forward(model, ids, cache)
    decode(model, cache, first, 2)  # two entries in the log
    before = [cache.materialize(i) for i in (0, 2)]
    beam_idx = torch.tensor([2, 0, 0])
    cache.reorder_cache(beam_idx)
    for i, S in zip((0, 2), before):
        assert torch.equal(cache.materialize(i), S[beam_idx])
    # Continuing after the reorder equals a cache that saw the reordered rows from the start.
    ref = DeltaLogCache(model, merge_interval=4)
    decode(model, ref, forward(model, ids, ref), 2)
    ref.reorder_cache(beam_idx)
    nxt = prompt_ids(3, 1, seed=3)
    assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) == 0


def test_batch_repeat_interleave_and_select_indices():
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, merge_interval=4)
    first = forward(model, ids, cache)
    decode(model, cache, first, 2)
    S = cache.materialize(0)
    cache.batch_repeat_interleave(2)
    assert torch.equal(cache.materialize(0), S.repeat_interleave(2, dim=0)) and cache.batch_size == 4
    nxt = prompt_ids(4, 1, seed=4)
    repeated = forward(model, nxt, cache)
    cache.batch_select_indices(torch.tensor([1, 2]))
    assert cache.batch_size == 2
    # Rows 1 and 2 of the repeated batch are rows 0 and 1 of the original, each fed nxt[1] / nxt[2].
    ref = DeltaLogCache(model, merge_interval=4)
    decode(model, ref, forward(model, ids, ref), 2)
    ref_logits = forward(model, nxt[1:3], ref)
    assert max_abs(repeated[1:3], ref_logits) <= 1e-5
    last = prompt_ids(2, 1, seed=5)
    assert max_abs(forward(model, last, cache), forward(model, last, ref)) <= 1e-5


def test_batch_select_indices_takes_lists_and_masks_and_refuses_floats():
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=4)
    decode(model, cache, forward(model, prompt_ids(3, 5), cache), 2)
    S = cache.materialize(0)
    with pytest.raises(TypeError, match="1-D int64 or int32 tensor .* of rows to keep"):
        cache.batch_select_indices(torch.tensor([0.0, 2.0]))
    assert cache.batch_size == 3 and torch.equal(cache.materialize(0), S)
    # uint8 was read as a mask by torch's indexing: [1, 0] kept row 0 only (integer indices keep rows 1 and 0)
    with pytest.raises(TypeError, match="uint8 tensor is neither"):
        cache.batch_select_indices(torch.tensor([1, 0, 2], dtype=torch.uint8))
    with pytest.raises(TypeError, match="int64 or int32"):  # int16 failed inside torch's indexing
        cache.batch_select_indices(torch.tensor([1, 0], dtype=torch.int16))
    assert cache.batch_size == 3 and torch.equal(cache.materialize(0), S)
    with pytest.raises(ValueError, match=r"one entry per row \(3\); got 2"):
        cache.batch_select_indices(torch.tensor([True, False]))
    assert cache.batch_size == 3 and torch.equal(cache.materialize(0), S)
    cache.batch_select_indices(torch.tensor([True, False, True]))  # a mask: rows 0 and 2
    assert torch.equal(cache.materialize(0), S[[0, 2]])
    cache.batch_select_indices([1])  # a list: row 2 of the original
    assert cache.batch_size == 1 and torch.equal(cache.materialize(0), S[[2]])


def test_reset_keeps_buffers_and_forgets_state():
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model)
    forward(model, ids, cache)
    pointers = [layer.base.data_ptr() for layer in cache.deltalog_layers]
    cache.reset()
    assert cache.get_recurrent_state(0) is None and cache.get_seq_length() == 0
    with pytest.raises(ValueError, match="layer 0 holds no state yet"):  # its zeroed buffers are not a state
        cache.materialize(0)
    assert max_abs(forward(model, ids, cache), forward(model, ids, DeltaLogCache(model))) == 0
    assert [layer.base.data_ptr() for layer in cache.deltalog_layers] == pointers


def test_decode_keeps_buffer_addresses():
    """Decode updates base and log in place (stable addresses, as CUDA graphs need)."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=2)
    first = forward(model, prompt_ids(2, 5), cache)
    layer = cache.deltalog_layers[0]
    before = {name: t.data_ptr() for name, t in layer._tensors().items()}
    decode(model, cache, first, 5)
    assert {name: t.data_ptr() for name, t in layer._tensors().items()} == before


# ---------------------------------------------------------------------------------------------- crop
@pytest.mark.parametrize("conv_history", ["crop_ring", "past_recording"])
@pytest.mark.parametrize("family", FAMILIES)
def test_crop_inside_the_log_is_exact(family, conv_history):
    """The conv window is rebuilt from the opt-in ring, or from transformers' past recording without the ring."""
    model = tiny_model(family)
    ids = prompt_ids(2, 8)
    cache = DeltaLogCache(model, merge_interval=8, crop_ring=conv_history == "crop_ring")
    if conv_history == "past_recording":
        cache.activate_past_recording()
    else:  # sliding-window attention layers (lara_mini) pass their window here: only recording keeps their keys
        for layer in cache.layers:
            if isinstance(layer, DynamicSlidingWindowLayer):
                layer.activate_past_recording()
    first = forward(model, ids, cache)
    decode(model, cache, first, 5)  # 5 entries in the log
    cache.crop(-3)
    assert cache.get_seq_length() == 10
    assert [int(layer.length[0]) for layer in cache.deltalog_layers] == [2, 2]
    # Reference: a fresh cache fed the same 10 tokens.
    ref = DeltaLogCache(model, merge_interval=8)
    first_ref = forward(model, ids, ref)
    decode(model, ref, first_ref, 2)
    for i in (0, 2):
        assert rel_err(cache.materialize(i), ref.materialize(i)) <= 1e-6
    nxt = prompt_ids(2, 1, seed=7)
    assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) <= 1e-5
    cache.crop(0)  # a no-op
    assert cache.get_seq_length() == 11


def _crop_snapshot(cache):
    """The logical states of layers 0 and 2 and every layer's first conv state, to check a refused crop."""
    return ([cache.materialize(i) for i in (0, 2)], [layer.conv_states[0].clone() for layer in cache.deltalog_layers])


def _assert_unchanged(cache, snapshot):
    states, conv = snapshot
    assert all(torch.equal(cache.materialize(i), S) for i, S in zip((0, 2), states))
    assert all(torch.equal(layer.conv_states[0], c) for layer, c in zip(cache.deltalog_layers, conv))


def _sliding_keys(cache):
    return [(layer.keys.clone(), layer.get_seq_length()) for layer in cache.layers
            if isinstance(layer, DynamicSlidingWindowLayer)]


def test_crop_past_a_sliding_window_needs_its_keys():
    """lara_mini's sliding-window attention layers (window 6) keep only their last 5 keys once they have seen 6
    tokens. A crop that would need older keys is refused before any layer changes; inside the window, or with past
    recording, it is exact; past recording keeps the keys since the last crop, so a second crop reaching before them
    is refused too."""
    model = tiny_model("lara_mini")
    ids = prompt_ids(2, 8)
    cache = DeltaLogCache(model, merge_interval=8, crop_ring=True)  # the ring rebuilds the linear layers' conv
    decode(model, cache, forward(model, ids, cache), 3)  # 11 tokens
    before, keys = _crop_snapshot(cache), _sliding_keys(cache)
    assert not cache.is_croppable  # the linear layers could crop; the sliding ones cannot
    with pytest.raises(ValueError, match=r"layer 1 is a sliding-window attention layer \(window 6\) that has seen 11 "
                                         r"tokens and keeps only its last 5 keys.*activate_past_recording"):
        cache.crop(-1)
    _assert_unchanged(cache, before)
    assert [int(layer.length[0]) for layer in cache.deltalog_layers] == [3, 3]
    assert all(torch.equal(k, k0) and n == n0 for (k, n), (k0, n0) in zip(_sliding_keys(cache), keys))
    cache.crop(0)  # nothing to trim: no error (transformers' layer alone would raise here)
    assert cache.get_seq_length() == 11

    # Inside the window the layers still hold every key: exact without recording.
    short, ref = DeltaLogCache(model, merge_interval=8, crop_ring=True), DeltaLogCache(model, merge_interval=8)
    decode(model, short, forward(model, ids[:, :2], short), 3)  # 5 tokens < 6
    short.crop(-2)
    decode(model, ref, forward(model, ids[:, :2], ref), 1)
    nxt = prompt_ids(2, 1, seed=7)
    assert max_abs(forward(model, nxt, short), forward(model, nxt, ref)) <= 1e-5

    # Past recording: the first crop is exact (test_crop_inside_the_log_is_exact); a second one needs the window
    # before the cropped tokens, and the first crop kept only that window.
    rec = DeltaLogCache(model, merge_interval=8, crop_ring=True)
    rec.activate_past_recording()
    decode(model, rec, forward(model, ids, rec), 5)  # 13 tokens
    assert rec.is_croppable
    rec.crop(-2)
    decode(model, rec, forward(model, prompt_ids(2, 1, seed=7), rec), 1)  # 13 tokens; the sliding layers keep 5 + 2
    before, keys = _crop_snapshot(rec), _sliding_keys(rec)
    with pytest.raises(ValueError, match=r"layer 1's recorded keys \(sliding window 6\) cover its last 7 tokens, and "
                                         r"the crop needs 8"):
        rec.crop(-3)
    _assert_unchanged(rec, before)
    assert all(torch.equal(k, k0) and n == n0 for (k, n), (k0, n0) in zip(_sliding_keys(rec), keys))
    rec.crop(-2)  # 2 + 5 keys: exactly what is kept
    assert rec.get_seq_length() == 11  # the prompt and the first 3 greedy tokens again
    ref = DeltaLogCache(model, merge_interval=8)
    decode(model, ref, forward(model, ids, ref), 3)
    assert max_abs(forward(model, nxt, rec), forward(model, nxt, ref)) <= 1e-5

    # The boundaries (mutation tests: no test failed when they moved by one). Exactly `window` tokens seen: the layer
    # keeps window - 1 keys, so without recording a crop is refused before any layer changes (transformers' crop
    # raised after the first layer had changed). With recording, fewer tokens before the crop than the window needs:
    # only those are needed, and the crop is exact.
    edge = DeltaLogCache(model, merge_interval=8, crop_ring=True)
    decode(model, edge, forward(model, ids[:, :4], edge), 2)  # 6 tokens: the window
    before, keys = _crop_snapshot(edge), _sliding_keys(edge)
    with pytest.raises(ValueError, match=r"\(window 6\) that has seen 6 tokens and keeps only its last 5 keys"):
        edge.crop(-1)
    _assert_unchanged(edge, before)
    assert all(torch.equal(k, k0) and n == n0 for (k, n), (k0, n0) in zip(_sliding_keys(edge), keys))
    few = DeltaLogCache(model, merge_interval=8, crop_ring=True)
    few.activate_past_recording()
    decode(model, few, forward(model, ids[:, :4], few), 3)  # 7 tokens
    few.crop(-3)  # 4 kept: the crop needs 3 + 4 recorded keys, not 3 + window - 1 = 8
    ref = DeltaLogCache(model, merge_interval=8)
    forward(model, ids[:, :4], ref)
    assert max_abs(forward(model, nxt, few), forward(model, nxt, ref)) <= 1e-5


def test_static_sliding_window_layers_crop_only_before_they_roll():
    """In static mode transformers' StaticSlidingWindowLayer of lara_mini has min(window, max_cache_len) = 6 slots and
    rolls them once it has taken more tokens: a crop after that is refused before anything changes; before it, the
    crop is exact (the next step's logits equal those of a cache fed only the kept tokens)."""
    model = tiny_model("lara_mini")
    ids = prompt_ids(2, 8)
    cache = DeltaLogCache(model, static=True, max_cache_len=16, merge_interval=8, crop_ring=True)
    decode(model, cache, forward(model, ids, cache), 1)  # 9 tokens through 6 slots
    before = _crop_snapshot(cache)
    assert not cache.is_croppable
    with pytest.raises(ValueError, match="layer 1 is a static sliding-window attention layer of 6 slots that has "
                                         "taken 9 tokens"):
        cache.crop(-1)
    _assert_unchanged(cache, before)
    assert int(cache.get_seq_length()) == 9

    short = DeltaLogCache(model, static=True, max_cache_len=16, merge_interval=8, crop_ring=True)
    decode(model, short, forward(model, ids[:, :3], short), 2)  # 5 tokens in 6 slots
    assert short.is_croppable
    short.crop(-1)
    ref = DeltaLogCache(model, static=True, max_cache_len=16, merge_interval=8)
    decode(model, ref, forward(model, ids[:, :3], ref), 1)
    nxt = prompt_ids(2, 1, seed=7)
    assert max_abs(forward(model, nxt, short), forward(model, nxt, ref)) <= 1e-5


def test_crop_without_conv_history_raises_and_changes_nothing():
    """The ring is off by default: a crop that needs the conv columns of cropped steps says how to get them."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=8)
    first = forward(model, prompt_ids(2, 8), cache)
    decode(model, cache, first, 3)
    before = _crop_snapshot(cache)
    with pytest.raises(ValueError, match=r"crop_ring=True.*activate_past_recording"):
        cache.crop(-1)
    assert cache.get_seq_length() == 11
    _assert_unchanged(cache, before)
    assert all(layer.conv_ring is None for layer in cache.deltalog_layers)
    cache.crop(0)  # nothing to rebuild


@pytest.mark.parametrize("family", KDA_FAMILIES)
def test_crop_past_recorded_conv_window_too_short_raises_and_changes_nothing(family):
    """With transformers 5.24 the KDA families' one-token step updates the conv state in place, so past recording
    keeps only the prefill's columns (8 here): a crop whose window would start before them is refused untouched; the
    ring crops the same tokens exactly. transformers 5.25's step stores its columns while recording (13 here): the
    crop is exact from the recording too."""
    model = tiny_model(family)
    ids = prompt_ids(2, 8)
    cache = DeltaLogCache(model, merge_interval=8)
    cache.activate_past_recording()
    decode(model, cache, forward(model, ids, cache), 5)  # 5 entries in the log
    layer = cache.deltalog_layers[0]
    W, have = layer.conv_kernel_size[0], layer.conv_states[0].shape[-1]
    ref = DeltaLogCache(model, merge_interval=8)
    forward(model, ids, ref)
    nxt = prompt_ids(2, 1, seed=7)
    if TRANSFORMERS_5_25:
        assert have == 13
        cache.crop(-5)
        assert cache.get_seq_length() == 8
        assert max_abs(forward(model, nxt, cache), forward(model, nxt, copy.deepcopy(ref))) <= 1e-5
    else:
        assert have == 8 and 5 + W > have  # the case under test: the recorded columns cannot hold the window
        before = _crop_snapshot(cache)
        with pytest.raises(ValueError,
                           match=rf"holds 8 columns, and rebuilding its window needs {5 + W}.*crop_ring=True"):
            cache.crop(-5)
        assert cache.get_seq_length() == 13
        _assert_unchanged(cache, before)
    # The same crop with the ring, against a fresh cache fed the 8 kept tokens.
    ring = DeltaLogCache(model, merge_interval=8, crop_ring=True)
    first = forward(model, ids, ring)
    decode(model, ring, first, 5)
    ring.crop(-5)
    assert max_abs(forward(model, nxt, ring), forward(model, nxt, ref)) <= 1e-5


def test_crop_beyond_the_log_raises_and_changes_nothing():
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=4, crop_ring=True)
    first = forward(model, prompt_ids(2, 8), cache)
    decode(model, cache, first, 5)  # 5 steps at M = 4: a merge after the 4th, one entry left
    states = [cache.materialize(i) for i in (0, 2)]
    with pytest.raises(ValueError, match="cannot crop 2 tokens exactly: .* keeps only its last 1 decoded token in the "
                                         "log"):  # "1 decoded tokens" (53rd review)
        cache.crop(-2)
    assert cache.get_seq_length() == 13 and all(torch.equal(cache.materialize(i), S) for i, S in zip((0, 2), states))
    with pytest.raises(ValueError, match="negative number of tokens"):
        cache.crop(5)
    with pytest.raises(ValueError, match="cannot crop 20 tokens: layer 0 holds 13"):
        cache.crop(-20)
    plain = DeltaLogCache(model, merge_interval=4)
    decode(model, plain, forward(model, prompt_ids(2, 8), plain), 2)
    with pytest.raises(ValueError, match="cannot crop 1 token: rebuilding layer 0's conv window"):  # "1 tokens"
        plain.crop(-1)


# ---------------------------------------------------------------------------------------------- staggered merges
@pytest.mark.parametrize("operator,state_v_first", [("gdn", False), ("gdn", True), ("kda", False)])
def test_restart_log_staggers_rows_with_exact_no_op_entries(operator, state_v_first):
    """Row r restarts at r mod M zero entries: the logical state is the base bit for bit, each row then merges every M
    steps from its own phase, and the staggered log decodes what the dense float64 recurrence gives, as the aligned
    log does (K != V, HV != Hk)."""
    from hf_deltalog.cache import restart_log
    from hf_deltalog.kernels.gdn.naive import (
        naive_deltalog_gdn_decode,
        naive_deltalog_gdn_materialize,
        naive_recurrent_gated_delta_rule,
    )
    from hf_deltalog.kernels.kda.naive import (
        naive_deltalog_kda_decode,
        naive_deltalog_kda_materialize,
        naive_recurrent_kda,
    )

    B, Hk, HV, K, V, M, steps = 5, 2, 4, 8, 6, 3, 7
    gen = torch.Generator().manual_seed(31)
    per_key = (K,) if operator == "kda" else ()
    S0 = torch.randn(B, HV, K, V, generator=gen)
    xs = [(torch.randn(B, 1, Hk, K, generator=gen), torch.randn(B, 1, Hk, K, generator=gen),
           torch.randn(B, 1, HV, V, generator=gen), -torch.rand(B, 1, HV, *per_key, generator=gen),
           torch.rand(B, 1, HV, generator=gen)) for _ in range(steps)]
    dense = naive_recurrent_kda if operator == "kda" else naive_recurrent_gated_delta_rule
    o_ref, S_ref = dense(*(torch.cat([x[i] for x in xs], 1).double() for i in range(5)), initial_state=S0.double(),
                         output_final_state=True, use_qk_l2norm_in_kernel=True)

    def run(stagger):
        base = (S0.transpose(-1, -2) if state_v_first else S0).contiguous().clone()  # decoding merges into it
        log = [torch.full((B, HV, *per_key), 7.0), torch.full((B, Hk, M - 1, K), 7.0),  # stale values must not count
               torch.full((B, HV, M - 1, V), 7.0), torch.full((B, HV, M - 1, *per_key), -7.0),
               torch.full((B,), 1, dtype=torch.int32)]
        assert restart_log(*log, stagger=stagger) is stagger  # B = 5 rows, M = 3: staggering moves rows 1-4
        layout = dict(state_v_first=state_v_first) if operator == "gdn" else {}
        materialize = naive_deltalog_kda_materialize if operator == "kda" else naive_deltalog_gdn_materialize
        decode_step = naive_deltalog_kda_decode if operator == "kda" else naive_deltalog_gdn_decode
        start = log[-1].clone()
        assert torch.equal(materialize(base, *log, **layout), S0)  # the zero entries add exactly nothing
        outs, lengths = [], []
        for x in xs:
            outs.append(decode_step(*x, base, *log, use_qk_l2norm_in_kernel=True, **layout))
            lengths.append(log[-1].clone())
        return start, torch.cat(outs, 1), materialize(base, *log, **layout), torch.stack(lengths)

    start, o, S, lengths = run(stagger=True)
    assert start.tolist() == [r % M for r in range(B)]
    assert lengths.T.tolist() == [[(r + t) % M for t in range(1, steps + 1)] for r in range(B)]
    aligned_start, o_aligned, S_aligned, aligned = run(stagger=False)
    assert aligned_start.tolist() == [0] * B and aligned.T.tolist() == [[t % M for t in range(1, steps + 1)]] * B
    for out, state in ((o, S), (o_aligned, S_aligned)):
        assert rel_err(out, o_ref) <= 1e-5 and rel_err(state, S_ref) <= 1e-5


def test_crop_counts_only_decoded_tokens_in_a_staggered_log():
    """A staggered row's log starts with zero entries: they are not tokens. With row 0 (no zero entries) dropped, the
    rows' shortest log is longer than the tokens decoded since the prefill, and a crop of more than those is refused;
    a crop inside them is exact."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 8, seed=13)
    cache = DeltaLogCache(model, merge_interval=4, crop_ring=True, stagger_merges=True)
    decode(model, cache, forward(model, ids, cache), 1)
    assert [layer.length.tolist() for layer in cache.deltalog_layers] == [[1, 2]] * 2
    cache.batch_select_indices(torch.tensor([1]))
    snapshot = _crop_snapshot(cache)
    with pytest.raises(ValueError, match="keeps only its last 1 decoded token in the log") as refused:
        cache.crop(-2)
    assert "staggered" not in str(refused.value)  # the bound is the one decoded token, as for aligned rows
    _assert_unchanged(cache, snapshot)
    cache.crop(-1)
    ref = DeltaLogCache(model, merge_interval=4)
    forward(model, ids[1:], ref)
    for i in (0, 2):
        assert rel_err(cache.materialize(i), ref.materialize(i)) <= 1e-6
    nxt = prompt_ids(1, 1, seed=7)
    assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) <= 1e-5


def test_crop_refused_by_staggered_phases_says_so():
    """A crop that aligned rows could have made is refused with the staggered phases named, and the remedy
    (stagger_merges=False, the default); the cache is left as it was."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=4, crop_ring=True, stagger_merges=True)
    decode(model, cache, forward(model, prompt_ids(4, 6, seed=15), cache), 2)
    assert [layer.length.tolist() for layer in cache.deltalog_layers] == [[2, 3, 0, 1]] * 2
    snapshot = _crop_snapshot(cache)
    with pytest.raises(ValueError, match=r"keeps only its last 0 decoded tokens.*staggered merge phases.*built with "
                                         r"stagger_merges=False \(the default\) would keep these tokens"):
        cache.crop(-1)
    _assert_unchanged(cache, snapshot)


# ---------------------------------------------------------------------------------------------- state and memory
def test_materialize_and_dtype_contract_with_a_bf16_model():
    model = tiny_model("qwen3_5", torch.bfloat16)
    ids = prompt_ids(2, 5)
    cache, dense = DeltaLogCache(model, merge_interval=4), DynamicCache(config=model.config)
    decode(model, cache, forward(model, ids, cache), 3)
    decode(model, dense, forward(model, ids, dense), 3)
    S = cache.materialize(0)
    assert S.shape == (2, 4, 8, 16) and S.dtype == torch.float32
    assert rel_err(S, dense.layers[0].recurrent_states[0]) <= 1e-5
    with pytest.raises(ValueError, match="layer 1 is a DynamicLayer, not a linear-attention layer"):
        cache.materialize(1)
    with pytest.raises(ValueError, match="holds no state yet"):
        DeltaLogCache(model).materialize(0)


@pytest.mark.parametrize("crop_ring", [False, True])
def test_memory_footprint_counts_every_buffer(crop_ring):
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, merge_interval=8, crop_ring=crop_ring)
    # transformers 5.25's linear-attention layers hold an int64 token count (cumulative_length_linear) from the start
    upstream_count = 8 if TRANSFORMERS_5_25 else 0
    assert cache.memory_footprint() == 2 * upstream_count
    forward(model, prompt_ids(2, 5), cache)
    B, Hk, HV, K, V, C = 2, 2, 4, 8, 16, 7
    conv_dim, W = 2 * Hk * K + HV * V, 4
    # base, log_decay, k_log, u_log, decay_log (fp32), length (int32), [conv ring (fp32 model), conv_pos (int64)],
    # conv state; no kernel workspace on the torch backend.
    state = 4 * B * HV * K * V
    log = 4 * (B * HV + B * Hk * C * K + B * HV * C * V + B * HV * C) + 4 * B
    ring = (4 * B * (C + W) * conv_dim + 8 * B) if crop_ring else 0
    per_linear = state + log + ring + 4 * B * conv_dim * W + upstream_count
    per_attention = 2 * 4 * B * 2 * 5 * 16  # keys and values [B, kv_heads=2, T=5, head_dim=16] fp32
    assert cache.memory_footprint() == 2 * per_linear + 2 * per_attention
    assert cache.memory_breakdown() == dict(state=2 * state, log=2 * log, workspace=0, crop_ring=2 * ring)


def test_memory_footprint_of_a_static_cache_counts_its_counters():
    """Static mode: the shared device step counter and the static attention layers' length tensors were left out of
    memory_footprint() (8 bytes each), which its docstring says counts counters. Now every tensor the layers hold
    is counted once (the shared counter once): KV, conv states, bases, logs and the counters."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, static=True, max_cache_len=16, merge_interval=3)
    with torch.no_grad():
        model.generate(prompt_ids(2, 6), cache=cache, max_new_tokens=5, do_sample=False)
    B, Hk, HV, K, V, C = 2, 2, 4, 8, 16, 2
    conv_dim, W = 2 * Hk * K + HV * V, 4
    state = 4 * B * HV * K * V
    log = 4 * (B * HV + B * Hk * C * K + B * HV * C * V + B * HV * C) + 4 * B
    per_linear = state + log + 4 * B * conv_dim * W + (8 if TRANSFORMERS_5_25 else 0)  # 5.25: upstream's int64 count
    per_attention = 2 * 4 * B * 2 * 16 * 16 + 8  # static keys and values [B, 2, 16 slots, 16] fp32, their length
    step_counter = 8  # int64, one per device, shared by the linear layers
    assert cache.memory_footprint() == 2 * per_linear + 2 * per_attention + step_counter
    assert cache.memory_breakdown() == dict(state=2 * state, log=2 * log, workspace=0, crop_ring=0)


def _storage_bytes(cache) -> int:
    """Bytes of the distinct buffers the cache's layers keep alive in tensors (the footprint's definition)."""
    seen, total = set(), 0
    for layer in cache.layers:
        for value in vars(layer).values():
            for t in value.values() if isinstance(value, dict) else [value]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                    seen.add(t.untyped_storage().data_ptr())
                    total += t.untyped_storage().nbytes()
    return total


def test_memory_footprint_counts_whole_buffers_behind_views():
    """A view keeps its whole buffer alive, but the footprint counted only its visible elements: LaraMini's
    sliding-window keys right after a 40-token prefill (a [1, 2, 5, 16] view of the prefill's keys: 640 bytes
    counted of 5,120), conv windows and keys after a crop under past recording. Now each buffer counts whole."""
    model = tiny_model("lara_mini")  # sliding window 6
    cache = DeltaLogCache(model)
    with torch.no_grad():
        model.generate(prompt_ids(1, 40), cache=cache, max_new_tokens=1, do_sample=False)
    sliding = [layer for layer in cache.layers if getattr(layer, "is_sliding", False)][0]
    assert sliding.keys.untyped_storage().nbytes() > sliding.keys.numel() * sliding.keys.element_size()
    assert cache.memory_footprint() == _storage_bytes(cache)
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    cache.activate_past_recording()
    with torch.no_grad():
        model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, do_sample=False)
    cache.crop(-1)
    assert cache.memory_footprint() == _storage_bytes(cache)


def test_row_selection_reads_bool_lists_as_masks_and_refuses_empty_or_out_of_range_rows():
    """[True, False] was read as the row numbers [1, 0] (both rows kept, swapped); an empty selection left every
    layer with 0 rows and the next generate called the cache inconsistent; row 5 of 2 failed with a raw IndexError.
    Now a list of bools is a mask, and an empty or out-of-range selection is a ValueError before anything changes."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    forward(model, prompt_ids(2, 5), cache)
    state = cache.materialize(0)
    for bad, err, match in (([], ValueError, "at least one row to keep"), ([False, False], ValueError, "at least one"),
                            ([5], ValueError, r"got row 5, but the cache holds 2 rows \(indices in \[-2, 2\)\)"),
                            ([-3], ValueError, "got row -3"), ([True, 0], TypeError, "not a mix"),
                            # (74th review: torch.tensor(list, dtype=long) truncated 0.9 to row 0 and 1.5 to row 1; a
                            # str or None gave torch's own errors)
                            ([0.9], TypeError, r"a list of ints .* with the entry 0.9"),
                            ([0, 1.5], TypeError, "with the entry 1.5"), (["1"], TypeError, "with the entry '1'"),
                            ([None], TypeError, "with the entry None")):
        with pytest.raises(err, match=match):
            cache.batch_select_indices(bad)
        assert cache.batch_size == 2 and torch.equal(cache.materialize(0), state)
    cache.batch_select_indices([np.int64(1), torch.tensor(0)])  # numpy and 0-dim tensor ints are row numbers
    assert torch.equal(cache.materialize(0), state[[1, 0]])
    cache.batch_select_indices([1, 0])
    cache.batch_select_indices([True, False])
    assert cache.batch_size == 1 and torch.equal(cache.materialize(0), state[:1])
    cache.batch_repeat_interleave(np.int64(2))
    assert cache.batch_size == 2 and torch.equal(cache.materialize(np.int64(0)), state[:1].expand(2, -1, -1, -1))


def test_the_triton_backend_is_refused_only_for_a_model_with_no_cuda_or_meta_parameter(monkeypatch):
    """check_kernel_dtype refuses backend='triton' for a CPU model (the interpreter off), but not for a model a
    device_map split, whose first parameters (the embeddings) may be on the CPU and the rest on a GPU or, loading,
    on the meta device (a mutation test, 76th review: a check of the first parameter alone failed no test)."""
    import hf_deltalog.cache as cache_module

    monkeypatch.setattr(cache_module, "interpreting", lambda: False)
    split = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))
    cache_module.check_kernel_dtype("triton", split, "backend='torch'")
    cache_module.check_kernel_dtype("torch", torch.nn.Linear(2, 2), "backend='torch'")
    with pytest.raises(ValueError, match="the model's parameters are on cpu"):
        cache_module.check_kernel_dtype("triton", torch.nn.Linear(2, 2), "backend='torch'")


def test_plan_is_a_query_that_never_locks_the_cache():
    """layer.plan(...) is documented as a query, but its refusal (backend='triton' on the CPU without the
    interpreter) went through the cache's reject and locked it: every later forward was refused until reset()."""
    import hf_deltalog.cache as cache_module

    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, backend="triton")
    interpreting = cache_module.interpreting
    cache_module.interpreting = lambda: False  # as on a CPU without TRITON_INTERPRET
    try:
        with pytest.raises(ValueError, match="backend='triton' needs CUDA tensors"):
            cache.deltalog_layers[0].plan(2, torch.device("cpu"))
    finally:
        cache_module.interpreting = interpreting
    assert cache._status.broken is None
    cache._status.check()


def test_numpy_integers_for_crop_and_a_capture_that_is_not_a_bool_or_auto():
    """crop(np.int64(-1)) was refused ("crop takes an int") where merge_interval and max_cache_len take numpy
    integers; GraphDecoder(capture="false") counted as capture=True."""
    from hf_deltalog.graph import GraphDecoder

    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, crop_ring=True)
    model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, do_sample=False)
    cache.crop(np.int64(-1))
    assert cache.get_seq_length() == 6
    static = DeltaLogCache(model, static=True, max_cache_len=16)
    for bad in ("false", "yes", 1, None):
        with pytest.raises(ValueError, match=f"capture must be True, False or 'auto'; got {bad!r}"):
            GraphDecoder(model, static, capture=bad)


def test_compileability_is_stated_truthfully():
    cache = DeltaLogCache(tiny_model("qwen3_5"))
    assert cache.is_compileable is False
    assert all(layer.is_compileable is False for layer in cache.deltalog_layers)


def test_gpu_plan_of_the_triton_backend():
    """What a layer would run on a GPU (planned without allocating): the merge-interval policy by state size, the
    V-first base, FLA's dense kernel for M = 1 GDN layers. Needs triton importable (the dev extra)."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    cuda = torch.device("cuda")  # only a device object: nothing is allocated
    heads = dict(linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                 linear_value_head_dim=128)
    gdn = DeltaLogCache(family_config("qwen3_5", **heads)).deltalog_layers[0]
    # 32 value heads of 128 x 128 fp32: 2 MiB per row; dense below 64 MiB (B < 32).
    assert gdn.plan(8, cuda) == dict(backend="triton", merge_interval=1, state_v_first=True, dense_fla=True)
    assert gdn.plan(32, cuda) == dict(backend="triton", merge_interval=8, state_v_first=True, dense_fla=False)
    fixed = DeltaLogCache(family_config("qwen3_5", **heads), merge_interval=4).deltalog_layers[0]
    assert fixed.plan(8, cuda)["merge_interval"] == 4
    kda = DeltaLogCache(family_config("kimi_linear", linear_num_heads=32, linear_head_dim=128)).deltalog_layers[0]
    # KDA: 32 heads of 128 x 128: 2 MiB per row; dense below 16 MiB (B < 8).
    assert kda.plan(1, cuda) == dict(backend="triton", merge_interval=1, state_v_first=True, dense_fla=True)
    assert kda.plan(8, cuda) == dict(backend="triton", merge_interval=4, state_v_first=True, dense_fla=False)
    # a device string, as torch takes it everywhere (was AttributeError: 'str' object has no attribute 'type'), and
    # the batch checked (a negative one was planned)
    assert kda.plan(8, "cuda") == kda.plan(8, cuda) and gdn.plan(32, "cuda:0") == gdn.plan(32, cuda)
    with pytest.raises(ValueError, match="batch must be ≥ 0; got -1"):
        gdn.plan(-1, cuda)
    with pytest.raises(TypeError, match="batch must be an int; got 2.0"):
        gdn.plan(2.0, cuda)
    assert gdn.plan(8, torch.device("cpu"))["backend"] == "torch"



def test_a_float64_model_decodes_on_the_torch_backend():
    """The Triton kernels take bf16 / fp16 / fp32 activations. A float64 model on backend='triton' (what 'auto' picked
    on a GPU) prefilled and then failed at the first decode step with the kernel's TypeError, naming no way out. Now
    'auto' plans the PyTorch backend for a float64 layer, and backend='triton' refuses the model at the prefill with
    a ValueError naming backend='torch'; the torch backend decodes it as transformers' default cache does."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    cuda = torch.device("cuda")  # only a device object: nothing is allocated
    gdn = DeltaLogCache(family_config("qwen3_5")).deltalog_layers[0]
    assert gdn.plan(32, cuda, torch.float64)["backend"] == "torch"
    assert gdn.plan(32, cuda, torch.bfloat16)["backend"] == "triton"
    model = copy.deepcopy(tiny_model("qwen3_5")).to(torch.float64)
    ids = prompt_ids(2, 6)
    with pytest.raises(ValueError, match=r"run.* in torch.float64; use backend='torch'"):
        model.generate(ids, cache=DeltaLogCache(model, backend="triton"), max_new_tokens=2, do_sample=False)
    out = model.generate(ids, cache=DeltaLogCache(model), max_new_tokens=4, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    ref = model.generate(ids, max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref.sequences)
    # a cache that decoded an fp32 model on the Triton backend plans again for a float64 model after reset() (here
    # backend='triton', so the float64 model is refused at its prefill, not at its first decode step)
    cache = DeltaLogCache(model, backend="triton")
    copy.deepcopy(model).float().generate(ids, cache=cache, max_new_tokens=2, do_sample=False)
    cache.reset()
    with pytest.raises(ValueError, match=r"run.* in torch.float64; use backend='torch'"):
        model.generate(ids, cache=cache, max_new_tokens=2, do_sample=False)
    # transformers' torch recurrences compute in float32 even for a float64 model, and the DeltaLog state is float32:
    # the two paths differ by float32 rounding in another summation order (measured: 3e-8)
    torch.testing.assert_close(torch.stack(out.logits), torch.stack(ref.logits), rtol=0, atol=1e-6)


def test_reset_then_a_model_of_another_dtype():
    """After reset() a model of another dtype (same config) got conv windows kept in the first model's dtype
    (transformers' DynamicCache does the same: bf16-rounded windows for an fp32 model, logits 3.4e-4 off). Now the
    conv buffers are reallocated, and the fp32 model decodes exactly as on a fresh cache."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, backend="torch")
    copy.deepcopy(model).to(torch.bfloat16).generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    cache.reset()
    kw = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
    out = model.generate(ids, cache=cache, **kw)
    ref = model.generate(ids, cache=DeltaLogCache(model, backend="torch"), **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert torch.equal(torch.stack(out.logits), torch.stack(ref.logits))


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
def test_continuing_on_a_model_with_another_conv_width_is_refused(family):
    """The configuration check compared model type, layer types and head sizes only: a cache filled by a model with
    width-4 short convolutions, continued on one with width 2, decoded silently from windows of the wrong width. Now
    generate refuses it before anything changes, and the cache still continues on its own model."""
    model = tiny_model(family)
    cfg = copy.deepcopy(model.config)
    cfg.linear_conv_kernel_dim = 2  # both families name it so in transformers 5.x
    other = type(model)(cfg).eval()
    assert {m.conv_kernel_size for m in other.modules() if hasattr(m, "conv_kernel_size")} == {2}
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, backend="torch")
    first = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    turn2 = torch.cat([first, prompt_ids(2, 2, seed=9)], dim=1)
    with pytest.raises(ValueError, match="conv windows of width 4 in layer 0.*has width 2"):
        other.generate(turn2, cache=cache, max_new_tokens=2, do_sample=False)
    out = model.generate(turn2, cache=cache, max_new_tokens=2, do_sample=False)
    assert torch.equal(out, model.generate(turn2, cache=DeltaLogCache(model, backend="torch"), max_new_tokens=2,
                                           do_sample=False))


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
@pytest.mark.parametrize("step", [1, 2], ids=["one-token-step", "two-token-continuation"])
def test_backward_through_cached_decoding_raises(family, step):
    """A manual loop without torch.no_grad(): the cached state is read outside autograd, so a backward pass returned
    gradients that missed the path through the recurrent state (relative errors 0.44-1.87 in the linear-attention
    parameters), silently; transformers' default cache fails such a backward. Now the backward raises a
    RuntimeError saying why, and the forward is unchanged (same logits as under no_grad)."""
    model = tiny_model(family)
    ids = prompt_ids(2, 6)
    nxt = prompt_ids(2, step, seed=5)
    cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    model(ids, cache=cache, use_cache=True)  # grad mode on: the prefill's own outputs keep their graph
    logits = model(nxt, cache=cache, use_cache=True).logits
    assert logits.requires_grad
    ref_cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    forward(model, ids, ref_cache)
    assert torch.equal(logits.detach(), forward(model, nxt, ref_cache))
    with pytest.raises(RuntimeError, match="backpropagation through a DeltaLogCache is not supported"):
        logits.logsumexp(-1).sum().backward()


def test_generate_checks_read_the_model_generation_defaults():
    """With a generation_config object passed, the checks read num_beams / num_return_sequences / use_cache from it
    alone, but generate completes it with the model's own generation_config: with a model default of num_beams=4 a
    beam search went unnoticed and its beams were continued (other tokens than a fresh cache), and a model default of
    use_cache=False re-fed the whole sequence into the cache (wrong tokens, 51 tokens held). Now the checks read the
    config generate runs with."""
    from transformers import GenerationConfig

    model = copy.deepcopy(tiny_model("qwen3_5"))  # tiny_model is cached: its generation_config is changed here
    model.generation_config.num_beams = 4
    ids = prompt_ids(1, 6)
    cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    out = model.generate(ids, cache=cache, generation_config=GenerationConfig(max_new_tokens=5, pad_token_id=0),
                         num_return_sequences=4)
    assert out.shape[0] == 4
    turn2 = torch.cat([out, torch.full((4, 2), 9)], dim=1)
    with pytest.raises(ValueError, match="from a beam search"):
        model.generate(turn2, cache=cache, generation_config=GenerationConfig(max_new_tokens=5, num_beams=1,
                                                                              pad_token_id=0))
    held = DeltaLogCache(model, backend="torch")
    first = model.generate(ids, cache=held, max_new_tokens=4, num_beams=1, pad_token_id=0)
    with pytest.raises(ValueError, match="num_beams / num_return_sequences = 4"):  # refused before any change
        model.generate(torch.cat([first, torch.full((1, 2), 9)], dim=1), cache=held,
                       generation_config=GenerationConfig(max_new_tokens=4, pad_token_id=0))
    assert held.get_seq_length() == first.shape[1] - 1
    model.generation_config.num_beams = 1
    model.generation_config.use_cache = False
    with pytest.raises(ValueError, match="use_cache=False"):
        model.generate(ids, cache=DeltaLogCache(model, backend="torch"),
                       generation_config=GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0))


def test_the_consumed_tokens_are_a_copy_of_the_returned_ids():
    """The record of what the cache consumed was a view of the tensor generate returned: editing that tensor in place
    afterwards made a valid continuation fail the check (and an edited one pass it). Now it is a copy."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    cache = DeltaLogCache(model, backend="torch")
    out = model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False)
    turn2 = torch.cat([out, torch.full((2, 2), 9)], dim=1)
    out[:, 2] = 50  # the caller post-processes the returned ids in place
    got = model.generate(turn2, cache=cache, max_new_tokens=3, do_sample=False)
    assert torch.equal(got, model.generate(turn2, cache=DeltaLogCache(model, backend="torch"), max_new_tokens=3,
                                           do_sample=False))

def test_failing_dense_kernel_falls_back_to_our_kernel():
    """If FLA's dense kernel fails, the layer warns once and decodes with its own kernel (M = 1), exactly."""
    pytest.importorskip("triton", reason="the Triton backend needs triton (the dev extra installs it)")
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, merge_interval=1, backend="triton")
    first = forward(model, ids, cache)

    def broken(*args, **kwargs):
        raise RuntimeError("no GPU here")

    for layer in cache.deltalog_layers:
        layer.dense_kernel = broken
    with pytest.warns(RuntimeWarning, match="FLA's dense decode kernel failed"):
        ours = decode(model, cache, first, 3)
    assert all(layer.dense_kernel is None for layer in cache.deltalog_layers)
    ref = DynamicCache(config=model.config)
    assert max_abs(ours, decode(model, ref, forward(model, ids, ref), 3)) <= 1e-4


def test_bad_arguments_of_the_cache_api_get_clear_errors():
    """Found by a breaker review: materialize("0") failed inside a comparison and materialize(True) returned layer 1;
    batch_repeat_interleave(2.5) raised torch's TypeError and (0) left every layer with no rows; crop_ring="no" was
    kept as a truthy string; hf_deltalog.patch(5) failed with "'int' object is not iterable"."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    forward(model, prompt_ids(2, 5), cache)
    for bad in ("0", True, 0.0):
        with pytest.raises(TypeError, match="layer_idx must be an int"):
            cache.materialize(bad)
    with pytest.raises(TypeError, match="repeats must be an int"):
        cache.batch_repeat_interleave(2.5)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        cache.batch_repeat_interleave(0)
    assert cache.batch_size == 2
    for kw in (dict(crop_ring="no"), dict(static="yes", max_cache_len=8)):
        with pytest.raises(TypeError, match="must be True or False"):
            DeltaLogCache(model, **kw)
    with pytest.raises(TypeError, match="model_types must be None, a model type name or a list"):
        hf_deltalog.patch(5)


@pytest.mark.parametrize("ring,past", [(False, True), (True, True), (True, False)],
                         ids=["past-recording", "ring+past-recording", "ring"])
def test_crop_after_a_prompt_shorter_than_the_conv_window(ring, past):
    """Found by a breaker review: with past recording the conv state of a 2-token prompt holds 2 columns, not the
    window's 4. With crop_ring as well the prefill failed with a shape error (the ring was seeded with 4 columns from
    2); with past recording alone crop(-2) of tokens still in the log was refused, blaming KDA's in-place conv
    updates. Both now work, and the continuation matches a default cache fed only the kept tokens."""
    model = tiny_model("qwen3_5")
    prompt, steps = prompt_ids(1, 2), [prompt_ids(1, 1, seed=50 + i) for i in range(3)]
    cache = DeltaLogCache(model, merge_interval=8, crop_ring=ring)
    if past:
        cache.activate_past_recording()
    forward(model, prompt, cache)
    for s in steps:
        forward(model, s, cache)
    cache.crop(-2)
    ref = DynamicCache(config=model.config)
    forward(model, prompt, ref)
    forward(model, steps[0], ref)
    nxt = prompt_ids(1, 1, seed=9)
    assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) < 1e-5


@pytest.mark.parametrize("ring", [False, True])
@pytest.mark.parametrize("family", ["kimi_linear", "bailing_hybrid", "glm5_next"])
def test_past_recording_with_a_prompt_shorter_than_the_conv_window_kda(family, ring):
    """Found by the 57th review (a differential fuzz): with past recording, a prompt shorter than the conv window left
    the KDA families' stored window short (transformers pads it only without recording), and their first decode step
    failed in causal_conv1d_update ("Kernel size can't be greater than actual input size"; transformers 5.24's
    DynamicCache fails the same way). The window is stored zero-padded now: decoding matches a cache without
    recording, and a crop back into a 1-token prompt's window (which the recording then holds whole) continues as a
    default cache fed the kept tokens; with transformers 5.24 a crop past the recorded width stays refused with the
    documented message (5.25's one-token step records its columns, and the crop is exact)."""
    model = tiny_model(family)
    steps = [prompt_ids(1, 1, seed=50 + i) for i in range(3)]
    for length in (1, 2, 3):
        prompt = prompt_ids(1, length)
        cache = DeltaLogCache(model, merge_interval=8, crop_ring=ring)
        cache.activate_past_recording()
        plain = DeltaLogCache(model, merge_interval=8)
        for x in [prompt, *steps]:
            assert max_abs(forward(model, x, cache), forward(model, x, plain)) == 0
        # transformers 5.24: the recording holds 4 columns, not the whole history (5.25's step stores its columns)
        if length > 1 and not ring and not TRANSFORMERS_5_25:
            with pytest.raises(ValueError, match=r"cannot crop 2 tokens: layer \d+'s recorded conv state 0 holds 4 "
                                                 r"columns.*crop_ring=True"):
                cache.crop(-2)
            continue
        cache.crop(-2)
        ref = DynamicCache(config=model.config)
        forward(model, prompt, ref)
        forward(model, steps[0], ref)
        nxt = prompt_ids(1, 1, seed=9)
        assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) < 1e-5


@pytest.mark.parametrize("ring", [False, True])
@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear", "qwen4_exp"])
def test_a_second_crop_into_a_short_history(family, ring):
    """Found by the 58th review: after 86050d5 padded a 1-token prompt's recorded window to the conv width, a second
    crop back into that prompt (decode 3, crop 2, decode 2, crop 3) was refused ("holds 6 columns ... needs 7"),
    though the recording holds every token seen. It continues as a default cache fed the prompt alone now, in the GDN
    and KDA families and in qwen4_exp, whose [B, W] token history (state 2, padded by the model with eos) is never
    zero-padded."""
    model = tiny_model(family)
    prompt = prompt_ids(1, 1)
    cache = DeltaLogCache(model, merge_interval=8, crop_ring=ring)
    cache.activate_past_recording()
    forward(model, prompt, cache)
    for i in range(3):
        forward(model, prompt_ids(1, 1, seed=50 + i), cache)
    cache.crop(-2)
    for i in range(2):
        forward(model, prompt_ids(1, 1, seed=60 + i), cache)
    cache.crop(-3)
    assert int(cache.get_seq_length()) == 1
    ref = DynamicCache(config=model.config)
    forward(model, prompt, ref)
    for i in range(2):
        nxt = prompt_ids(1, 1, seed=9 + i)
        assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) < 1e-5


@pytest.mark.parametrize("ring", [False, True])
def test_a_static_crop_cuts_the_indexer_positions(ring):
    """Found by the 59th review: transformers' StaticIndexedLayer.crop leaves qwen4_exp's indexer position record at the
    old length (its dynamic layer cuts it), so after a static cache's crop the indexer read shifted positions and
    the logits moved by ~3e-2 some steps later. The cache cuts the record itself now: every step after the crop
    matches a full forward of the kept tokens."""
    model = tiny_model("qwen4_exp")
    cache = DeltaLogCache(model, static=True, max_cache_len=40, merge_interval=4, crop_ring=ring)
    if not ring:
        cache.activate_past_recording()
    toks = prompt_ids(1, 4, seed=3)
    forward(model, toks, cache)
    for j in range(3):
        x = prompt_ids(1, 1, seed=9 + j)
        forward(model, x, cache)
        toks = torch.cat([toks, x], 1)
    cache.crop(-1)
    toks = toks[:, :-1]
    indexed = [layer for layer in cache.layers if getattr(layer, "indexer_position_ids", None) is not None]
    assert indexed and all(layer.indexer_position_ids.shape[-1] == 6 for layer in indexed)
    for i in range(7):
        x = prompt_ids(1, 1, seed=20 + i)
        toks = torch.cat([toks, x], 1)
        with torch.no_grad():
            full = model(toks, use_cache=False).logits[:, -1:]
        assert max_abs(forward(model, x, cache), full) < 1e-5, toks.shape[1]


@pytest.mark.parametrize("family", ["qwen3_5", "lara_mini"])
def test_crop_zero_is_a_no_op_and_an_empty_cache_refuses_a_crop(family):
    """crop(0) cut past recording's history back to the window (a later crop of tokens still in the log was then
    refused) — in the linear layers, and in lara_mini's sliding-window layers (transformers' crop(0) trims their
    recorded keys) — and crop(-5) on an empty cache passed silently (transformers' DynamicCache raises). crop(0) on an
    empty recording cache raised AttributeError from transformers' sliding-window layer."""
    model = tiny_model(family)
    with pytest.raises(ValueError, match="cannot crop 5 tokens"):
        DeltaLogCache(model).crop(-5)
    cache = DeltaLogCache(model, merge_interval=8)
    cache.activate_past_recording()
    cache.crop(0)  # empty: nothing to do
    first = forward(model, prompt_ids(2, 6), cache)
    decode(model, cache, first, 3)  # 9 tokens, past lara_mini's window of 6
    assert cache.is_croppable
    keys = [layer.keys.clone() for layer in cache.layers if isinstance(layer, DynamicSlidingWindowLayer)]
    cache.crop(0)
    assert all(torch.equal(layer.keys, k) for layer, k in
               zip([layer for layer in cache.layers if isinstance(layer, DynamicSlidingWindowLayer)], keys))
    assert cache.is_croppable and int(cache.get_seq_length()) == 9
    cache.crop(-2)
    assert int(cache.get_seq_length()) == 7
    ref = DeltaLogCache(model, merge_interval=8)
    decode(model, ref, forward(model, prompt_ids(2, 6), ref), 1)
    nxt = prompt_ids(2, 1, seed=7)
    assert max_abs(forward(model, nxt, cache), forward(model, nxt, ref)) <= 1e-5


def test_static_batch_ops_are_refused_before_any_layer_changes():
    """transformers' StaticLayer has no batch_select_indices / batch_repeat_interleave: the DeltaLog layers before the
    first attention layer changed their rows and the rest did not (found by a breaker review). Now refused up front."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model, static=True, max_cache_len=16)
    first = forward(model, prompt_ids(2, 5), cache)
    decode(model, cache, first, 2)
    states = [cache.materialize(i) for i, layer in enumerate(cache.layers) if isinstance(layer, DeltaLogLayer)]
    for call in (lambda: cache.batch_select_indices([1]), lambda: cache.batch_repeat_interleave(2)):
        with pytest.raises(NotImplementedError, match="nothing was changed"):
            call()
    after = [cache.materialize(i) for i, layer in enumerate(cache.layers) if isinstance(layer, DeltaLogLayer)]
    assert all(torch.equal(a, b) for a, b in zip(states, after)) and cache.batch_size == 2
    decode(model, cache, first, 1)  # still usable


def test_deltalog_layer_checks_its_arguments():
    """The exported DeltaLogLayer validated nothing (found by the eleventh review): backend="gpu" acted as "auto",
    merge_interval=0 gave a log of capacity -1, and dims with HV not a multiple of Hk were accepted."""
    from hf_deltalog.patches import FAMILIES

    spec = FAMILIES["qwen3_5_text"]
    good = dict(spec=spec, dims=(2, 4, 8, 16), merge_interval=3, backend="torch", layer_idx=0)
    assert DeltaLogLayer(**good).capacity == 2
    for bad, error, match in ((dict(backend="gpu"), ValueError, "backend must be one of"),
                              (dict(merge_interval=0), ValueError, "merge_interval must be an integer in"),
                              (dict(merge_interval=None), TypeError, "merge_interval must be an integer"),
                              (dict(merge_interval=2.0), TypeError, "merge_interval must be an integer"),
                              (dict(dims=(3, 4, 8, 16)), ValueError, "HV a multiple of Hk"),
                              (dict(dims=(2, 4, 0, 16)), ValueError, "positive ints"),
                              (dict(dims=(2, 4, 8)), ValueError, "dims must be")):
        with pytest.raises(error, match=match):
            DeltaLogLayer(**{**good, **bad})


def _model_of(config, seed):
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_a_model_with_more_layers_refused_past_the_last_layer_locks_the_cache(static):
    """A manual forward of a model with more layers than the cache advanced every cache layer (consistently) before
    it was refused at layer 2; after the change that stopped refused reads from locking the cache, that refusal did
    not lock it either, and the right model then decoded silently from the foreign tokens (logits 0.06-0.21 off;
    found by the thirteenth review). A refusal called from a model's forward locks the cache again."""
    short = ["linear_attention", "full_attention"]
    right = _model_of(family_config("qwen3_5", num_hidden_layers=2, layer_types=short), 0)
    longer = _model_of(family_config("qwen3_5", num_hidden_layers=4, layer_types=short * 2), 1)
    ids = prompt_ids(2, 5)
    kw = dict(static=True, max_cache_len=32) if static else {}
    cache = DeltaLogCache(right, backend="torch", merge_interval=3, **kw)
    out = right.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    with pytest.raises(ValueError, match="layer 2 does not exist"):
        forward(longer, out[:, -1:], cache)
    follow = torch.cat([out, prompt_ids(2, 2, seed=9)], 1)
    with pytest.raises(ValueError, match="was locked by a call it refused inside a forward.*cache.reset"):
        right.generate(follow, cache=cache, max_new_tokens=2, do_sample=False)
    with pytest.raises(ValueError, match="locked by a call it refused"):
        forward(right, out[:, -1:], cache)
    cache.reset()
    fresh = DeltaLogCache(right, backend="torch", merge_interval=3, **kw)
    assert torch.equal(right.generate(follow, cache=cache, max_new_tokens=2, do_sample=False),
                       right.generate(follow, cache=fresh, max_new_tokens=2, do_sample=False))


def test_update_indexer_on_a_linear_layer_is_refused_and_locks():
    """update_indexer checked only that the layer existed: a model whose layer 2 is an indexed attention layer, on a
    cache whose layer 2 is linear attention, failed in transformers after layers 0-1 had advanced, and the cache was
    not locked (static mode then decoded 0.024 off; found by the thirteenth review)."""
    cache_layers = ["linear_attention", "indexed_attention"] * 2
    right = _model_of(family_config("qwen4_exp", layer_types=cache_layers), 0)
    other = _model_of(family_config("qwen4_exp", layer_types=["linear_attention", "indexed_attention",
                                                              "indexed_attention", "linear_attention"]), 0)
    cache = DeltaLogCache(right, backend="torch", merge_interval=3)
    nxt = forward(right, prompt_ids(2, 5), cache)[:, -1:].argmax(-1)
    with pytest.raises(ValueError, match="treats layer 2 as an indexed attention layer"):
        forward(other, nxt, cache)
    with pytest.raises(ValueError, match="locked by a call it refused"):
        forward(right, nxt, cache)


def test_generate_refuses_a_model_with_other_attention_heads():
    """The configuration check compared the model type, layer kinds and linear-attention dims only: a model with other
    attention heads passed it and failed part-way through the forward with torch's RuntimeError, layer 0 advanced
    (found by the thirteenth review). Now generate refuses it before anything changes."""
    model = tiny_model("qwen3_5")
    other = _model_of(family_config("qwen3_5", num_key_value_heads=4), 1)
    cache = DeltaLogCache(model, backend="torch", merge_interval=3)
    out = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=3, do_sample=False)
    state, held = cache.materialize(0), int(cache.get_seq_length())
    follow = torch.cat([out, prompt_ids(2, 2, seed=9)], 1)
    with pytest.raises(ValueError, match="attention geometry .*num_key_value_heads.*another configuration"):
        other.generate(follow, cache=cache, max_new_tokens=2, do_sample=False)
    assert torch.equal(cache.materialize(0), state) and int(cache.get_seq_length()) == held
    assert torch.equal(model.generate(follow, cache=cache, max_new_tokens=2, do_sample=False),
                       model.generate(follow, cache=DeltaLogCache(model, backend="torch", merge_interval=3),
                                      max_new_tokens=2, do_sample=False))


def test_max_cache_len_without_static_mode_is_refused():
    """max_cache_len without static=True was silently ignored (found by the fourteenth review)."""
    with pytest.raises(ValueError, match="max_cache_len=64 sizes the attention slots of static mode; pass static=True"):
        DeltaLogCache(tiny_model("qwen3_5"), max_cache_len=64)


# ---------------------------------------------------------------------------------------------- dtype and device changes
def test_a_model_with_another_sliding_window_is_refused():
    """The sliding window sizes the sliding-window layers' caches: a cache built for window 6, used by the same weights
    with window 12, kept other keys than that model's default cache and decoded other tokens without an error."""
    narrow = tiny_model("lara_mini")
    wide = type(narrow)(family_config("lara_mini", sliding_window=narrow.config.sliding_window * 2)).eval()
    wide.load_state_dict(narrow.state_dict())
    ids = prompt_ids(2, 6)
    with torch.no_grad():
        for kw in ({}, dict(static=True, max_cache_len=20)):
            cache = DeltaLogCache(narrow, **kw)
            with pytest.raises(ValueError, match=r"generate was called on a 'lara_mini' model with another configuration"):
                wide.generate(ids, cache=cache, max_new_tokens=2, do_sample=False)
        first = narrow.generate(ids, cache=cache, max_new_tokens=2, do_sample=False)  # the matching model decodes
        assert torch.equal(first, narrow.generate(ids, max_new_tokens=2, do_sample=False))


@pytest.mark.parametrize("family", ["qwen3_5", "kimi_linear"])
@pytest.mark.parametrize("merge_interval", [None, 1])
def test_autocast_keeps_the_state_in_fp32(family, merge_interval):
    """Under torch.autocast(bf16) the PyTorch references ran their einsums in bf16 (the replay, the merged base and
    M = 1's dense state rounded to bf16: 1.8e-3 / 3.0e-3 from the default cache after 64 steps); transformers'
    elementwise recurrence stays fp32. Same teacher-forced tokens into both caches; the bound is fp32 rounding."""
    model = tiny_model(family)
    dense, ours = DynamicCache(config=model.config), DeltaLogCache(model, merge_interval=merge_interval, backend="torch")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        forward(model, prompt_ids(2, 7), dense), forward(model, prompt_ids(2, 7), ours)
        for _ in range(24):
            nxt = torch.randint(3, 96, (2, 1), generator=g)
            a, b = forward(model, nxt, dense), forward(model, nxt, ours)
    i = ours.deltalog_layers[0].layer_idx
    assert rel_err(ours.materialize(i), dense.layers[i].recurrent_states[0]) < 1e-5
    assert max_abs(a, b) < 1e-5


def test_a_float64_model_after_an_fp32_turn_is_refused_by_the_triton_backend_before_anything_changes():
    """backend='triton' after model.double() between turns: refused by generate's check (it failed at the first decode
    step with the kernel's TypeError, after layer 0's conv window had moved, which locked the cache); back in fp32 the
    conversation goes on as with the default cache."""
    model = copy.deepcopy(tiny_model("qwen3_5"))
    ids = prompt_ids(2, 6)
    cache, dense = DeltaLogCache(model, backend="triton"), DynamicCache(config=model.config)
    with torch.no_grad():
        first = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
        model.generate(ids, cache=dense, max_new_tokens=3, do_sample=False)
        turn2 = torch.cat([first, prompt_ids(2, 2, seed=5)], 1)
        state = cache.materialize(0)
        model.double()
        with pytest.raises(ValueError, match=r"backend='triton'.*runs in torch.float64.*Nothing was changed"):
            model.generate(turn2, cache=cache, max_new_tokens=3, do_sample=False)
        assert torch.equal(cache.materialize(0), state) and not any(l._in_step for l in cache.deltalog_layers)
        model.float()
        out = model.generate(turn2, cache=cache, max_new_tokens=3, do_sample=False)
        ref = model.generate(turn2, cache=dense, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, ref)


def test_auto_plans_the_torch_backend_for_a_float64_turn_after_an_fp32_one(monkeypatch):
    """backend='auto' where it picks Triton (a CUDA device: simulated here by planning as for one, the kernels run
    interpreted), an fp32 turn, then model.double(): the continuation must move to the PyTorch backend. The held conv
    buffer keeps fp32 (transformers copies the new columns into it), so planning from it kept the layers on Triton,
    whose first decode step failed on float64 and locked the cache. The dtype of the columns the model passes is
    what counts; tokens as the default cache's."""
    resolve = hf_deltalog.cache.DeltaLogLayer._resolve_backend
    monkeypatch.setattr(hf_deltalog.cache.DeltaLogLayer, "_resolve_backend", lambda self, device, act_dtype=None:
                        resolve(self, torch.device("cuda") if device.type == "cpu" else device, act_dtype))
    ids = prompt_ids(2, 6)
    outs = []
    for kind in ("dynamic", "deltalog"):
        model = copy.deepcopy(tiny_model("qwen3_5"))
        cache = DynamicCache(config=model.config) if kind == "dynamic" else DeltaLogCache(model, merge_interval=3)
        with torch.no_grad():
            first = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
            if kind == "deltalog":
                assert {layer.backend for layer in cache.deltalog_layers} == {"triton"}
            model.double()
            outs.append(model.generate(torch.cat([first, prompt_ids(2, 2, seed=5)], 1), cache=cache, max_new_tokens=3,
                                       do_sample=False))
    assert {layer.backend for layer in cache.deltalog_layers} == {"torch"}
    assert cache.deltalog_layers[0].conv_states[0].dtype == torch.float32  # the held buffer kept its dtype
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("switch", [(torch.bfloat16, torch.float32), (torch.float32, torch.float64)],
                         ids=["bf16-to-fp32", "fp32-to-fp64"])  # a narrower model fails in transformers, either cache
def test_crop_ring_with_past_recording_follows_a_dtype_change(switch):
    """crop_ring=True with past recording: the recorded conv window takes the model's dtype, which may change between
    turns; the ring widens to hold its columns exactly (it failed with scatter's dtype error and locked the cache).
    The continuation matches the default cache, and a crop afterwards rolls back exactly."""
    first_dtype, second_dtype = switch
    ids = prompt_ids(2, 6)
    outs = []
    for kind in ("dynamic", "deltalog"):
        model = copy.deepcopy(tiny_model("qwen3_5")).to(first_dtype)
        cache = DynamicCache(config=model.config) if kind == "dynamic" else \
            DeltaLogCache(model, backend="torch", merge_interval=8, crop_ring=True)
        record_past(cache)  # transformers 5.25: its own caches need the count of kept states
        with torch.no_grad():
            first = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
            model.to(second_dtype)
            turn2 = torch.cat([first, prompt_ids(2, 2, seed=5)], 1)
            outs.append(model.generate(turn2, cache=cache, max_new_tokens=4, do_sample=False))
            if kind == "deltalog":  # two more tokens, crop them, feed the first again: the same logits
                x = prompt_ids(2, 2, seed=7)
                state, window = cache.materialize(0), cache.layers[0].conv_states[0][..., -4:].clone()
                logits = forward(model, x[:, :1], cache)
                forward(model, x[:, 1:], cache)
                cache.crop(-2)
                assert torch.equal(cache.materialize(0), state)
                assert torch.equal(cache.layers[0].conv_states[0][..., -4:], window)
                assert torch.equal(forward(model, x[:, :1], cache), logits)
    assert torch.equal(outs[0], outs[1])


def test_a_model_on_the_meta_device_is_refused_before_anything_changes():
    """A model on the meta device cannot decode: generate refuses it up front (it left meta buffers in the cache that
    no reset() could replace: every later generate failed copying out of a meta tensor)."""
    model = tiny_model("kimi_linear")
    cache = DeltaLogCache(model)
    meta = copy.deepcopy(model).to("meta")
    with pytest.raises(ValueError, match="meta device"):
        meta.generate(prompt_ids(2, 6).to("meta"), cache=cache, max_new_tokens=2)
    assert all(layer.base is None for layer in cache.deltalog_layers)
    with torch.no_grad():
        out = model.generate(prompt_ids(2, 6), cache=cache, max_new_tokens=3, do_sample=False)
        assert torch.equal(out, model.generate(prompt_ids(2, 6), max_new_tokens=3, do_sample=False))


def test_a_forward_on_the_meta_device_runs_shapes_only_as_with_the_default_cache():
    """Outside generate a model on the meta device runs shapes only (tracing, FLOP or memory planning), as with the
    default cache: the steps' aliasing check took the meta buffers' addresses (all 0) for shared memory and raised
    "length and beta share memory", and memory_footprint() counted every meta buffer as one."""
    model = tiny_model("qwen3_5")
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(model.config)
    ids = prompt_ids(2, 6)
    caches = {}
    for name, m, dev in [("meta", meta, "meta"), ("cpu", model, "cpu")]:
        for kind, cache in [("deltalog", DeltaLogCache(model, merge_interval=3)),
                            ("default", DynamicCache(config=model.config))]:
            with torch.no_grad():
                logits = [m(ids.to(dev), past_key_values=cache, use_cache=True).logits]
                for t in range(4):
                    logits.append(m(ids[:, t:t + 1].to(dev), past_key_values=cache, use_cache=True).logits)
            assert [x.shape for x in logits] == [(2, 6, VOCAB)] + [(2, 1, VOCAB)] * 4
            assert {x.device.type for x in logits} == {dev}
            if kind == "deltalog" or dev == "cpu":  # the default cache counts in a tensor, on the meta device there
                assert cache.get_seq_length() == 10
            caches[name, kind] = cache
    assert caches["meta", "deltalog"].memory_footprint() == caches["cpu", "deltalog"].memory_footprint()


def test_a_model_offloaded_by_accelerate_decodes():
    """accelerate's offloading keeps the parameters on the meta device and loads them in its hooks at each module's
    forward: such a model is not refused as one without data, and decodes the default cache's tokens."""
    from accelerate import cpu_offload

    model = tiny_model("qwen3_5")
    offloaded = cpu_offload(copy.deepcopy(model), execution_device=torch.device("cpu"))
    assert next(offloaded.parameters()).device.type == "meta"
    with torch.no_grad():
        out = offloaded.generate(prompt_ids(2, 6), cache=DeltaLogCache(offloaded), max_new_tokens=4, do_sample=False)
        assert torch.equal(out, model.generate(prompt_ids(2, 6), max_new_tokens=4, do_sample=False))


def test_a_cache_loaded_in_a_fresh_process_continues(tmp_path):
    """torch.save a conversation's cache, torch.load it in a process that built no DeltaLogCache: unpickling binds the
    recurrences as the constructor does (generate failed with 'a DeltaLogState reached a recurrence that hf_deltalog
    has not bound'). The continuation matches the default cache continued the same way."""
    import subprocess
    import sys
    from pathlib import Path

    from conftest import HIDE_FLA

    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 6)
    cache, dense = DeltaLogCache(model, merge_interval=3), DynamicCache(config=model.config)
    with torch.no_grad():
        first = model.generate(ids, cache=cache, max_new_tokens=4, do_sample=False)
        model.generate(ids, cache=dense, max_new_tokens=4, do_sample=False)
        turn = torch.cat([first, prompt_ids(2, 2, seed=3)], 1)
        ref = model.generate(turn, cache=dense, max_new_tokens=4, do_sample=False)
    torch.save({"cache": cache, "turn": turn}, tmp_path / "conversation.pt")
    child = f"""{HIDE_FLA}
import os; os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, {str(Path(__file__).parent)!r})
import torch
from utils import tiny_model
saved = torch.load({str(tmp_path / "conversation.pt")!r}, weights_only=False)
with torch.no_grad():
    out = tiny_model("qwen3_5").generate(saved["turn"], cache=saved["cache"], max_new_tokens=4, do_sample=False)
torch.save(out, {str(tmp_path / "out.pt")!r})
"""
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert torch.equal(torch.load(tmp_path / "out.pt"), ref)


@pytest.mark.parametrize("family, static", [("qwen3_5", False), ("qwen3_5", True), ("kimi_linear", False)])
def test_a_turn_after_one_under_inference_mode(family, static):
    """A cache filled under torch.inference_mode() holds inference tensors, which torch refuses to update in place
    outside it: the next no_grad turn failed inside the conv update, and reset() — which the error then named —
    failed as well (43rd review). Now a later generate turn, a manual decode loop (static mode too) and reset() go on
    as after a no_grad turn: tokens and logits as DynamicCache's with both turns under no_grad."""
    model = tiny_model(family)
    ids, new = prompt_ids(2, 5), prompt_ids(2, 2, seed=7)
    kw = dict(max_new_tokens=3, do_sample=False, output_logits=True, return_dict_in_generate=True)
    ref = DynamicCache(config=model.config)
    with torch.no_grad():
        r1 = model.generate(ids, cache=ref, **kw)
        r2 = model.generate(torch.cat([r1.sequences, new], 1), cache=ref, **kw)
    cache = DeltaLogCache(model, merge_interval=3, **(dict(static=True, max_cache_len=32) if static else {}))
    with torch.inference_mode():
        o1 = model.generate(ids, cache=cache, **kw)
    # the cache allocates its own buffers as ordinary tensors; the dynamic attention layers' keys (torch.cat results)
    # are inference tensors, which the next turn replaces
    assert not cache.deltalog_layers[0].base.is_inference() and cache._holds_inference_tensors() == (not static)
    o2 = model.generate(torch.cat([o1.sequences, new], 1), cache=cache, **kw)
    assert torch.equal(o2.sequences, r2.sequences)
    assert max(max_abs(a, b) for a, b in zip(o2.logits, r2.logits)) <= 1e-5
    with torch.inference_mode():
        model.generate(ids, cache=DeltaLogCache(model), max_new_tokens=1)  # (another cache: this one holds 15)
        cache.reorder_cache(torch.tensor([1, 0]))  # in-place work on this cache under inference_mode ...
    cache.reset()  # ... then reset() outside it
    with torch.no_grad():
        assert torch.equal(model.generate(ids, cache=cache, **kw).sequences, r1.sequences)
    # reset() outside inference mode of a cache filled inside it zeroes the buffers in place (it moved them, so a
    # CUDA graph captured on them replayed on freed memory; 44th review); the next turn inside inference mode
    # decodes as a fresh cache
    kept = DeltaLogCache(model, merge_interval=3, **(dict(static=True, max_cache_len=32) if static else {}))
    with torch.inference_mode():
        model.generate(ids, cache=kept, **kw)
    addresses = [t.data_ptr() for layer in kept.deltalog_layers for t in layer._tensors().values()]
    kept.reset()
    assert [t.data_ptr() for layer in kept.deltalog_layers for t in layer._tensors().values()] == addresses
    with torch.inference_mode():
        assert torch.equal(model.generate(ids, cache=kept, **kw).sequences, r1.sequences)
    # a manual decode loop (static mode too): prefill under inference_mode, steps under no_grad
    kw_cache = dict(static=True, max_cache_len=32) if static else {}
    ours, theirs = DeltaLogCache(model, merge_interval=3, **kw_cache), DynamicCache(config=model.config)
    with torch.inference_mode():
        model(ids, past_key_values=ours, use_cache=True)
    with torch.no_grad():
        model(ids, past_key_values=theirs, use_cache=True)
        for step in range(4):
            x = prompt_ids(2, 1, seed=20 + step)
            a = model(x, past_key_values=ours, use_cache=True).logits
            b = model(x, past_key_values=theirs, use_cache=True).logits
            assert max_abs(a, b) <= 1e-5, step


# (static mode keeps transformers' StaticLayer for attention, which has no batch_select_indices)
@pytest.mark.parametrize("op, static", [("reorder_cache", False), ("reorder_cache", True), ("crop", False),
                                        ("crop", True), ("batch_select_indices", False)])
def test_batch_operations_after_an_inference_mode_turn(op, static):
    """reorder_cache / crop outside inference mode after a generate inside it updated inference tensors in place:
    with an attention layer first, reorder_cache reordered layer 0 and then failed at layer 1, unlocked, and the
    next generate decoded from the half-reordered cache (44th review). Now the buffers are replaced first: the
    result is DynamicCache's, which runs both turns under no_grad on a dynamic cache."""
    layers = ["full_attention", "linear_attention", "full_attention", "linear_attention"]
    model = _model_of(family_config("qwen3_5", layer_types=layers), 0)
    ids, new = prompt_ids(2, 5), prompt_ids(2, 2, seed=7)
    kw = dict(max_new_tokens=3, do_sample=False, output_logits=True, return_dict_in_generate=True, eos_token_id=None)
    extra = dict(static=True, max_cache_len=32) if static else {}
    cache = DeltaLogCache(model, merge_interval=4, crop_ring=True, **extra)
    with torch.inference_mode():
        first = model.generate(ids, cache=cache, **kw).sequences
    if op == "reorder_cache":
        cache.reorder_cache(torch.tensor([1, 0]))
        rows, cut = [1, 0], 0
    elif op == "crop":
        cache.crop(-1)
        rows, cut = [0, 1], 1
    else:
        cache.batch_select_indices([1])
        rows, cut = [1], 0
    turn2 = torch.cat([first[rows, :first.shape[1] - cut], new[rows]], 1)
    ours = model.generate(turn2, cache=cache, **kw)
    with torch.no_grad():
        ref = DynamicCache(config=model.config)
        model.generate(ids[rows], cache=ref, max_new_tokens=3 - cut, do_sample=False, eos_token_id=None)
        want = model.generate(turn2, cache=ref, **kw)
    assert torch.equal(ours.sequences, want.sequences)
    assert max(max_abs(a, b) for a, b in zip(ours.logits, want.logits)) <= 1e-5


def test_generate_on_a_model_without_a_model_type_names_the_mismatch():
    """A model whose text config's model_type is None got a raw "model_type must be a model type name" TypeError from
    generate (the name check became a TypeError, which the model check did not catch; 44th review): it gets the
    ValueError saying which model the cache was built for."""
    model = copy.deepcopy(tiny_model("qwen3_5"))
    model.config.get_text_config(decoder=True).model_type = None
    cache = DeltaLogCache(tiny_model("qwen3_5"))
    with pytest.raises(ValueError, match="was built for a 'qwen3_5_text' model"):
        model.generate(prompt_ids(2, 4), cache=cache, max_new_tokens=1, do_sample=False)


def test_compiled_static_steps_after_an_inference_mode_prefill():
    """A static decode step compiled with torch.compile runs no Python check, so after a prefill under
    torch.inference_mode() it updated inference tensors in place: torch wrote layer 0's conv window and then raised,
    the cache was not locked, and later steps decoded from the changed state (45th review). The cache now allocates
    its buffers (and transformers' static attention and indexer buffers) as ordinary tensors even under inference
    mode: the compiled steps give DynamicCache's logits, compiled once. Also an indexed-attention layer first
    (qwen4_exp): its indexer buffers are allocated the same way."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    ours = DeltaLogCache(model, merge_interval=3, static=True, max_cache_len=32)
    theirs = DynamicCache(config=model.config)
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(1)
        return gm.forward

    step = torch.compile(lambda x: model(x, past_key_values=ours, use_cache=True).logits, fullgraph=True,
                         backend=backend)
    with torch.inference_mode():
        model(ids, past_key_values=ours, use_cache=True)
    assert not ours._holds_inference_tensors()
    with torch.no_grad():
        model(ids, past_key_values=theirs, use_cache=True)
        for s in range(4):
            x = prompt_ids(2, 1, seed=20 + s)
            assert max_abs(step(x), model(x, past_key_values=theirs, use_cache=True).logits) <= 1e-5, s
    assert len(compiles) == 1
    indexed = _model_of(family_config("qwen4_exp", layer_types=["indexed_attention", "linear_attention"] * 2), 0)
    ours, theirs = DeltaLogCache(indexed, merge_interval=3, static=True, max_cache_len=32), \
        DynamicCache(config=indexed.config)
    with torch.inference_mode():
        first = indexed.generate(ids, cache=ours, max_new_tokens=3, do_sample=False, eos_token_id=None)
    with torch.no_grad():
        indexed.generate(ids, cache=theirs, max_new_tokens=3, do_sample=False, eos_token_id=None)
        for x in (first[:, -1:], prompt_ids(2, 1, seed=30)):
            assert max_abs(indexed(x, past_key_values=ours, use_cache=True).logits,
                           indexed(x, past_key_values=theirs, use_cache=True).logits) <= 1e-5


def test_user_mistakes_get_messages_that_say_what_to_do():
    """Messages the 52nd review found unclear, each for a likely mistake; none of these reads changes the cache."""
    model = tiny_model("qwen3_5")  # layers: linear, attention, linear, attention
    cache = DeltaLogCache(model, backend="torch")
    out = model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=2, do_sample=False)
    state = cache.materialize(0)
    # the handle taken for a tensor: was a bare "'DeltaLogState' object has no attribute 'shape'"
    with pytest.raises(AttributeError, match=r"has no attribute 'shape': .* is a handle, not a tensor; "
                                             r"cache.materialize\(0\) gives"):
        cache.get_recurrent_state(0).shape  # noqa: B018
    # .to(device) on the handle locked the cache as if a forward had stopped part-way (71st review); .to(dtype), what
    # KDA layers call, stays the identity
    for args, kwargs in ((("cpu",), {}), ((torch.device("cpu"),), {}), ((), dict(device="cpu")),
                         (("cpu", torch.float32), {})):
        with pytest.raises(TypeError, match=r"is a handle, not a tensor: .* cache.materialize\(0\) gives"):
            cache.get_recurrent_state(0).to(*args, **kwargs)
    with pytest.raises(TypeError, match=r"\.to\(device='cpu', dtype=torch.float32\) cannot move it"):
        cache.get_recurrent_state(0).to(device="cpu", dtype=torch.float32)
    handle = cache.get_recurrent_state(0)
    assert handle.to(torch.float32) is handle and handle.to(dtype=torch.float32) is handle
    # get_conv_state's arguments: were KeyError: 5 and raw TypeErrors
    with pytest.raises(ValueError, match=r"layer 0 keeps conv states \[0\]; got state_idx 5"):
        cache.get_conv_state(0, 5)
    with pytest.raises(TypeError, match="layer_idx must be an int; got 'a'"):
        cache.get_conv_state("a")
    with pytest.raises(TypeError, match="state_idx must be an int; got 1.0"):
        cache.get_conv_state(0, 1.0)
    # an attention layer read from user code: was "the model treats layer 1 as linear attention ... build the cache"
    with pytest.raises(ValueError, match=r"layer 1 is a DynamicLayer \(attention\), not a linear-attention layer; "
                                         r"the linear-attention layers are \[0, 2\]"):
        cache.get_recurrent_state(1)
    with pytest.raises(ValueError, match=r"layer -1 does not exist: .* 4 layers \(indices 0 to 3\)"):
        cache.get_recurrent_state(-1)
    # generate given only the held tokens: was "... but generate got 6" next to "holds 6"
    with pytest.raises(ValueError, match=r"holds 6 tokens; .* at least one new one\), but generate got 6 tokens, "
                                         r"none new"):
        model.generate(out[:, :6], cache=cache, max_new_tokens=1, do_sample=False)
    assert torch.equal(cache.materialize(0), state) and cache.get_seq_length() == 6
    assert model.generate(out, cache=cache, max_new_tokens=1, do_sample=False).shape == (2, 8)
    # a model passed to patch / is_patched: the message held the model's whole module tree
    with pytest.raises(TypeError, match=r"got a Qwen3_5ForCausalLM \(pass its config.model_type, 'qwen3_5_text'\)$"):
        hf_deltalog.is_patched(model)
    with pytest.raises(TypeError, match=r"list of them; got a Qwen3_5ForCausalLM \(pass its config.model_type"):
        hf_deltalog.patch(model)
    # a 0-dim state: was an IndexError (refused from user code, it leaves the cache as it was)
    with pytest.raises(ValueError, match="the model produced a recurrent state of shape \\(\\)"):  # was IndexError
        cache.update_recurrent_state(torch.tensor(1.0), 0)


def test_triton_backend_on_the_cpu_says_a_new_cache_is_needed(monkeypatch):
    """backend='triton' on a CPU model without the interpreter: the refusal now says that reset() keeps the backend
    (a reset cache repeated the refusal) and that a new cache with backend='torch' is the way on. (This process runs
    Triton under the interpreter, where the backend works on the CPU: the cache is told it does not.)"""
    monkeypatch.setattr("hf_deltalog.cache.interpreting", lambda: False)
    model = tiny_model("qwen3_5")
    with pytest.raises(ValueError, match=r"build a new DeltaLogCache\(model, backend='torch'\) for the CPU "
                                         r"\(reset\(\) keeps the backend\)"):
        model.generate(prompt_ids(2, 5), cache=DeltaLogCache(model, backend="triton"), max_new_tokens=1)


def test_a_store_refused_from_user_code_changes_nothing_and_does_not_lock():
    """update_recurrent_state called by user code with a state the layer cannot take: every check now runs before
    anything changes, and only a refusal inside a model's forward locks the cache (the layers before it in that
    forward have advanced). Before: a state of another shape or another cache's handle locked the cache with a message
    about a forward that was not running; an int / bool state was copied into the fp32 base; a state on another device
    (here: meta) moved the layer's buffers there, away from its conv window, and the next generate failed in torch; a
    list of kept states of unlike shapes replaced the base before it was refused."""
    model = tiny_model("qwen3_5")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, merge_interval=4)
    out = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
    layer = cache.layers[0]
    hv, k, v = layer.num_v_heads, layer.k_head_dim, layer.v_head_dim
    assert k != v  # a [B, HV, V, K] state is of another shape
    state, seen = cache.materialize(0), cache.get_seq_length()
    other = DeltaLogCache(model, merge_interval=4)
    model.generate(ids, cache=other, max_new_tokens=1, do_sample=False)
    if TRANSFORMERS_5_25:  # kept recurrent states (the list form) are 5.25's; 5.24 records no states
        cache.activate_past_recording(recurrent_states_to_keep=2)
    refused = [
        (ValueError, r"recurrent state of shape \(2, 4, 16, 8\), but .* \[B, HV, K, V\] = \[B, 4, 8, 16\]",
         torch.zeros(2, hv, v, k)),
        (ValueError, "handed the DeltaLog state of another layer or cache", other.get_recurrent_state(0)),
        (TypeError, "must be a floating tensor or a DeltaLogState; got torch.int32",
         torch.ones(2, hv, k, v, dtype=torch.int32)),
        (TypeError, "got torch.bool", torch.ones(2, hv, k, v, dtype=torch.bool)),
        (ValueError, "holds its conv window on cpu but was handed a recurrent state on meta",
         torch.empty(2, hv, k, v, device="meta")),
        (TypeError, "got torch.int64", [torch.ones(2, hv, k, v, dtype=torch.int64), torch.randn(2, hv, k, v)]),
    ]
    if TRANSFORMERS_5_25:
        refused.append((ValueError, r"kept recurrent states have shapes \[\(2, 4, 8, 17\)\] on \['cpu'\], the last "
                                    r"one \(2, 4, 8, 16\)", [torch.zeros(2, hv, k, v + 1), torch.randn(2, hv, k, v)]))
    for error, says, bad in refused:
        with pytest.raises(error, match=says):
            cache.update_recurrent_state(bad, 0)
        assert cache._status.broken is None, says
        assert layer.base.device == state.device and torch.equal(cache.materialize(0), state), says
        assert cache.get_seq_length() == seen and not layer._in_step and not layer._moved, says
    # still usable, and what a fresh cache gives
    more = model.generate(out, cache=cache, max_new_tokens=3, do_sample=False)
    reference = model.generate(ids, cache=DynamicCache(config=model.config), max_new_tokens=6, do_sample=False)
    assert torch.equal(more, reference)


def test_the_recurrent_state_calls_take_an_int_state_idx():
    """get_recurrent_state(0, 0.0) and state_idx=False were taken as 0, while get_conv_state refuses a non-int
    state_idx: now the same TypeError, and the cache unchanged."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=2, do_sample=False)
    state, handle = cache.materialize(0), cache.get_recurrent_state(0)
    for bad in (0.0, False, "0"):
        with pytest.raises(TypeError, match=f"state_idx must be an int; got {bad!r}"):
            cache.get_recurrent_state(0, bad)
        with pytest.raises(TypeError, match=f"state_idx must be an int; got {bad!r}"):
            cache.update_recurrent_state(handle, 0, state_idx=bad)
    with pytest.raises(ValueError, match=r"keep one recurrent state \(state_idx 0\); got 1"):
        cache.get_recurrent_state(0, np.int64(1))
    assert cache.get_recurrent_state(0, np.int64(0)) is handle
    assert torch.equal(cache.materialize(0), state) and cache._status.broken is None


@pytest.mark.skipif(not TRANSFORMERS_5_25, reason="kept recurrent states (recurrent_states_to_keep) are transformers "
                    "5.25's")
def test_kept_states_on_another_device_are_refused():
    """The list form of update_recurrent_state (the states after a forward's last tokens, kept under past recording)
    checked the kept states' shapes only: a kept state on another device (here: meta) was stored as the history."""
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    model.generate(prompt_ids(2, 5), cache=cache, max_new_tokens=2, do_sample=False)
    cache.activate_past_recording(recurrent_states_to_keep=2)
    layer = cache.layers[0]
    state = cache.materialize(0)
    shape = (2, layer.num_v_heads, layer.k_head_dim, layer.v_head_dim)
    with pytest.raises(ValueError, match=r"kept recurrent states have shapes \[\(2, 4, 8, 16\)\] on \['meta'\], the "
                                         r"last one \(2, 4, 8, 16\) on cpu: they must all be alike"):
        cache.update_recurrent_state([torch.empty(shape, device="meta"), torch.randn(shape)], 0)
    assert torch.equal(cache.materialize(0), state) and layer._history == [] and cache._status.broken is None
