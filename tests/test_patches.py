"""hf_deltalog.patch / unpatch: idempotent, revertible, and invisible to models used with other caches."""

import importlib

import pytest
import torch
from transformers import DynamicCache
from transformers.generation.utils import GenerationMixin
from utils import FAMILIES as TINY_FAMILIES
from utils import prompt_ids, tiny_model

import hf_deltalog
from hf_deltalog import DeltaLogCache
from hf_deltalog.patches import FAMILIES
from hf_deltalog.patches.registry import install_generate_checks

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def upstream_functions():
    """The functions transformers defines, whether or not a patch is in place now."""
    out = {}
    for spec in FAMILIES.values():
        module = importlib.import_module(spec.module)
        for name in (spec.recurrent, spec.chunk):
            fn = getattr(module, name)
            out[(spec.module, name)] = getattr(fn, "__deltalog_upstream__", fn)
    gen = GenerationMixin.__dict__["generate"]
    out[("GenerationMixin", "generate")] = getattr(gen, "__deltalog_upstream__", gen)
    return out


def current_functions():
    out = {}
    for spec in FAMILIES.values():
        module = importlib.import_module(spec.module)
        for name in (spec.recurrent, spec.chunk):
            out[(spec.module, name)] = getattr(module, name)
    out[("GenerationMixin", "generate")] = GenerationMixin.__dict__["generate"]
    return out


@pytest.fixture
def clean():
    originals = upstream_functions()
    hf_deltalog.unpatch()
    yield originals
    hf_deltalog.unpatch()
    install_generate_checks()  # the state importing hf_deltalog.cache leaves, for the tests that follow


def test_unpatch_restores_upstream_functions(clean):
    assert current_functions() == clean
    DeltaLogCache(tiny_model("qwen3_5"))  # building a cache patches every family
    assert all(hf_deltalog.is_patched(f) for f in ("qwen3_5", "qwen3_5_text", "qwen3_next", "olmo_hybrid"))
    patched = current_functions()
    assert all(patched[key] is not fn for key, fn in clean.items())
    hf_deltalog.unpatch()
    assert current_functions() == clean
    assert not hf_deltalog.is_patched("qwen3_5")
    hf_deltalog.unpatch()  # idempotent
    assert current_functions() == clean


def test_patch_is_idempotent(clean):
    hf_deltalog.patch("qwen3_5")
    first = current_functions()
    assert hf_deltalog.patch(["qwen3_5", "qwen3_5_text"]) == ["qwen3_5_text"]
    assert current_functions() == first
    hf_deltalog.patch()
    assert hf_deltalog.patches.patched_families() == sorted(FAMILIES)
    again = current_functions()
    hf_deltalog.patch()
    assert current_functions() == again


def test_a_rebinding_between_two_patches_is_undone_to_upstream(clean):
    """A third party rebinds one of a family's two functions after patch(); the next patch() binds again what the
    module holds, and unpatch() then restores transformers' recurrence and the third party's chunk function, never
    leaving a dispatcher of ours bound (a mutation test: binding the other, still patched, function without unwrapping
    it to its upstream failed no test, and unpatch() then left our dispatcher in place)."""
    spec = FAMILIES["qwen3_next"]
    module = importlib.import_module(spec.module)
    hf_deltalog.patch("qwen3_next")

    def third_party_chunk(*args, **kwargs):
        return clean[(spec.module, spec.chunk)](*args, **kwargs)

    setattr(module, spec.chunk, third_party_chunk)
    assert not hf_deltalog.is_patched("qwen3_next")
    hf_deltalog.patch("qwen3_next")
    assert hf_deltalog.is_patched("qwen3_next")
    hf_deltalog.unpatch()
    assert getattr(module, spec.recurrent) is clean[(spec.module, spec.recurrent)]
    assert getattr(module, spec.chunk) is third_party_chunk
    setattr(module, spec.chunk, clean[(spec.module, spec.chunk)])


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_other_caches_are_untouched(clean, family):
    """Bit-identical outputs with the default cache before patching, while patched, and after a DeltaLog run."""
    model = tiny_model(family)
    ids = prompt_ids(2, 6)
    kw = dict(max_new_tokens=10, do_sample=False, return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        before = model.generate(ids, **kw)
        model.generate(ids, cache=DeltaLogCache(model, merge_interval=3), **kw)
        after = model.generate(ids, **kw)
        static = DynamicCache(config=model.config)
        explicit = model.generate(ids, cache=static, **kw)
    assert torch.equal(before.sequences, after.sequences) and torch.equal(before.sequences, explicit.sequences)
    assert all(torch.equal(x, y) for x, y in zip(before.logits, after.logits))
    assert type(static.layers[0]).__name__ == "LinearAttentionLayer"


def test_unknown_family_and_missing_upstream_name(clean, monkeypatch):
    with pytest.raises(ValueError, match="model_type 'llama' has no DeltaLog binding") as err:
        hf_deltalog.patch("llama")
    assert "qwen3_5," in str(err.value) and "rwkv6" in str(err.value)  # wrapper and FLA types named too
    # a non-string failed with a raw "unhashable type" (is_patched) or "'int' object is not iterable" (patch_fla)
    from hf_deltalog.patches.fla import is_fla_patched, patch_fla

    for call, bad in ((hf_deltalog.is_patched, ["qwen3_5"]), (hf_deltalog.is_patched, 5), (patch_fla, 5),
                      (patch_fla, ["rwkv6", 5]), (is_fla_patched, 5)):
        with pytest.raises(TypeError, match="must be (None, )?a(n FLA)? model type name"):
            call(bad)
    module = importlib.import_module(FAMILIES["qwen3_5_text"].module)
    monkeypatch.delattr(module, "torch_recurrent_gated_delta_rule")
    with pytest.raises(RuntimeError, match=r"torch_recurrent_gated_delta_rule no longer exists in transformers 5\."):
        hf_deltalog.patch("qwen3_5")
    assert not hf_deltalog.is_patched("qwen3_5")


def test_state_reaching_an_unbound_recurrence_says_so(clean):
    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    with torch.no_grad():
        model(prompt_ids(1, 4), cache=cache, use_cache=True)
        hf_deltalog.unpatch()
        with pytest.raises(RuntimeError, match=r"reached a recurrence that hf_deltalog has not bound .* call "
                                               r"hf_deltalog.patch\(\), then cache.reset\(\)"):
            model(prompt_ids(1, 1), cache=cache, use_cache=True)
        # the advice works as given: patch() alone leaves the cache locked (the first message said only "call
        # hf_deltalog.patch()": 53rd review), reset() then frees it
        hf_deltalog.patch()
        with pytest.raises(ValueError, match="inconsistent"):
            model(prompt_ids(1, 1), cache=cache, use_cache=True)
        cache.reset()
        fresh = DeltaLogCache(model)
        assert torch.equal(model(prompt_ids(1, 4), cache=cache, use_cache=True).logits,
                           model(prompt_ids(1, 4), cache=fresh, use_cache=True).logits)


def test_a_deepcopy_after_unpatch_leaves_the_families_unbound(clean):
    """Restoring a cache (copy.deepcopy, pickle) binds the recurrences as building one does, except after a deliberate
    unpatch(): only patch() (or building a cache) undoes that. The cache decodes again once patched."""
    import copy

    model = tiny_model("qwen3_5")
    cache = DeltaLogCache(model)
    with torch.no_grad():
        model(prompt_ids(1, 4), cache=cache, use_cache=True)
    hf_deltalog.unpatch()
    restored = copy.deepcopy(cache)
    assert not hf_deltalog.is_patched("qwen3_5") and current_functions() == clean
    hf_deltalog.patch()
    copy.deepcopy(cache)
    assert hf_deltalog.is_patched("qwen3_5")
    with torch.no_grad():
        step = prompt_ids(1, 1, seed=5)
        assert torch.equal(model(step, cache=restored, use_cache=True).logits,
                           model(step, cache=cache, use_cache=True).logits)


@pytest.mark.parametrize("module,name", [
    ("transformers.models.qwen3_5.modeling_qwen3_5", "torch_chunk_gated_delta_rule"),
    ("transformers.models.kimi_linear.modeling_kimi_linear", "chunk_kimi_delta_attention"),
])
def test_patched_chunk_recurrence_takes_upstream_positional_calls(module, name):
    """The bound multi-token recurrence took (q, k, v, g, beta, initial_state, ...) while upstream takes chunk_size
    before initial_state: a positional call valid upstream put chunk_size into initial_state and failed with
    "'int' object has no attribute 'to'" (found by a breaker review). It now reads arguments through upstream's own
    signature and hands every call without a DeltaLog state over unchanged: same outputs as upstream."""
    hf_deltalog.patch()
    mod = importlib.import_module(module)
    patched = getattr(mod, name)
    upstream = patched.__deltalog_upstream__
    torch.manual_seed(0)
    B, T, H, K = 1, 5, 2, 8
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    g = -torch.rand(B, T, H, K) if "kimi" in module else -torch.rand(B, T, H)
    beta = torch.rand(B, T, H)
    S0 = torch.randn(B, H, K, K)
    for args, kwargs in (((q, k, v, g, beta, 4, None, True), {}), ((q, k, v, g, beta, 4, S0, True), {}),
                         ((q, k, v), dict(g=g, beta=beta, chunk_size=2, initial_state=S0, output_final_state=True))):
        ours, ref = patched(*args, **kwargs), upstream(*args, **kwargs)
        assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])


RELOAD_SCRIPT = """
import importlib, sys
sys.modules.setdefault("fla", None)  # as tests/conftest.py: transformers' own path, not FLA's kernels
sys.path.insert(0, {tests!r})
import torch
from transformers import DynamicCache
import hf_deltalog
from utils import family_config, prompt_ids

hf_deltalog.patch()
mod = importlib.import_module("transformers.models.qwen3_5.modeling_qwen3_5")
importlib.reload(mod)  # the module's globals are upstream's again
assert not hf_deltalog.is_patched("qwen3_5")
assert "qwen3_5" not in hf_deltalog.patches.patched_families()
torch.manual_seed(0)
model = mod.Qwen3_5ForCausalLM(family_config("qwen3_5")).eval()
ids = prompt_ids(2, 5)
kw = dict(max_new_tokens=4, do_sample=False)
out = model.generate(ids, past_key_values=hf_deltalog.DeltaLogCache(model, backend="torch"), **kw)  # patches again
assert hf_deltalog.is_patched("qwen3_5")
ref = model.generate(ids, past_key_values=DynamicCache(config=model.config), **kw)
assert torch.equal(out, ref)

def mine(*args, **kwargs):  # a rebinding made after patch(), by the user or another library
    raise NotImplementedError
mod.torch_recurrent_gated_delta_rule = mine
hf_deltalog.unpatch()
assert mod.torch_recurrent_gated_delta_rule is mine  # unpatch() restores only its own dispatchers
assert not hasattr(mod.torch_chunk_gated_delta_rule, "__deltalog_upstream__")
print("ok")
"""


def test_patch_follows_the_module_globals_after_a_reload(tmp_path):
    """After importlib.reload of a modeling module, patch() did nothing and is_patched() said True (the bookkeeping
    said so), while the module held upstream's functions again: a DeltaLogCache could not decode, and the error's
    advice (call patch()) did not help. unpatch() also wrote its saved originals over whatever was bound by then.
    Now patch() / is_patched() read the module's globals, and unpatch() restores only its own dispatchers. Runs in a
    subprocess: a reload redefines the module's classes for the rest of the process."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "reload.py"
    script.write_text(RELOAD_SCRIPT.format(tests=str(pathlib.Path(__file__).parent)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


FIRST_CALL_SCRIPT = """
import sys
sys.modules.setdefault("fla", None)  # as tests/conftest.py: transformers' own path, not FLA's kernels
sys.path.insert(0, {tests!r})
import torch
from hf_deltalog import DeltaLogCache
from utils import prompt_ids, tiny_model

model = tiny_model("qwen3_5")
ids = prompt_ids(2, 6, seed=3)
# the README's one-line form, first call of the process: model.generate is looked up before the cache is built
out = model.generate(ids, num_beams=3, num_return_sequences=3, max_new_tokens=4, do_sample=False, eos_token_id=None,
                     pad_token_id=0, cache=DeltaLogCache(model), return_dict_in_generate=True)
try:
    model.generate(torch.cat([out.sequences, prompt_ids(6, 2, seed=4)], 1), cache=out.cache, max_new_tokens=2,
                   do_sample=False, pad_token_id=0)
except ValueError as error:
    assert "from a beam search" in str(error), error
    print("ok")
"""


def test_generate_checks_cover_the_first_call_with_a_cache_built_in_its_arguments(tmp_path):
    """In `model.generate(..., cache=DeltaLogCache(model))` Python looks model.generate up before it builds the
    cache. The checks were bound only when a cache was built, so the first such call of a process ran none of them:
    a beam search's cache was then continued into wrong tokens (found by a breaker review). They are bound when
    hf_deltalog.cache is imported now. Runs in a subprocess: the first call of a fresh process is what is tested."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "first_call.py"
    script.write_text(FIRST_CALL_SCRIPT.format(tests=str(pathlib.Path(__file__).parent)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (done.stdout[-2000:], done.stderr[-3000:])


def test_patch_after_unpatch_lets_a_restored_fla_cache_bind_again(clean):
    """patch() (every family) undoes a deliberate unpatch() for FLA's layers too, also when FLA is not imported yet
    (as in this process): a later restored FLA cache binds them."""
    from hf_deltalog.patches import fla

    hf_deltalog.unpatch()
    assert fla._UNPATCHED["by_user"]
    hf_deltalog.patch()
    assert not fla._UNPATCHED["by_user"]


def test_a_wraps_wrapper_of_a_dispatcher_is_a_third_party_rebinding():
    """A third party's functools.wraps wrapper of a bound dispatcher (instrumentation) copies its
    __deltalog_upstream__ attribute, and was taken for a dispatcher: unpatch() replaced it with upstream's function and
    patch() unwrapped it (33rd review). Dispatchers are known by identity now: unpatch() keeps the wrapper, and the
    next patch() wraps it (a DeltaLog step replaces the call; any other goes through the wrapper), and generate
    matches DynamicCache."""
    import functools

    hf_deltalog.patch(["qwen3_5"])
    module = importlib.import_module(FAMILIES["qwen3_5_text"].module)
    name = FAMILIES["qwen3_5_text"].recurrent
    ours = getattr(module, name)

    @functools.wraps(ours)
    def instrumented(*args, **kwargs):
        return ours(*args, **kwargs)

    original = upstream_functions()[(module.__name__, name)]
    setattr(module, name, instrumented)
    try:
        assert not hf_deltalog.is_patched("qwen3_5")
        hf_deltalog.unpatch()
        assert getattr(module, name) is instrumented
        hf_deltalog.patch(["qwen3_5"])
        assert getattr(module, name).__deltalog_upstream__ is instrumented
        model, ids = tiny_model("qwen3_5"), prompt_ids(2, 5)
        kw = dict(max_new_tokens=3, do_sample=False)
        out = model.generate(ids, cache=DeltaLogCache(model, backend="torch"), **kw)
        assert torch.equal(out, model.generate(ids, cache=DynamicCache(config=model.config), **kw))
    finally:
        hf_deltalog.unpatch()
        setattr(module, name, original)
        hf_deltalog.patch()


MODULE_RELOAD_SCRIPT = """
import sys
sys.modules.setdefault("fla", None)  # as tests/conftest.py
import importlib
from transformers.generation.utils import GenerationMixin
import hf_deltalog
from hf_deltalog.patches import registry

spec = registry.FAMILIES["qwen3_5_text"]
module = importlib.import_module(spec.module)
hf_deltalog.patch(["qwen3_5"])
upstream = getattr(module, spec.recurrent).__deltalog_upstream__
upstream_generate = GenerationMixin.__dict__["generate"].__deltalog_upstream__
importlib.reload(registry)  # as IPython's autoreload does
assert registry.is_patched("qwen3_5")
registry.unpatch()
assert getattr(module, spec.recurrent) is upstream and GenerationMixin.__dict__["generate"] is upstream_generate
registry.patch(["qwen3_5"])
assert getattr(module, spec.recurrent).__deltalog_upstream__ is upstream  # one dispatcher, not two
assert GenerationMixin.__dict__["generate"].__deltalog_upstream__ is upstream_generate
print("ok")
"""


def test_patch_state_survives_a_reload_of_the_registry(tmp_path):
    """importlib.reload(hf_deltalog.patches.registry) (IPython's autoreload) emptied the set of known dispatchers and
    the saved originals: unpatch() then left the dispatchers bound, and patch() wrapped them a second time (generate's
    checks ran twice; 34th review). The patch state is kept through a reload now. Runs in a subprocess."""
    import subprocess
    import sys

    script = tmp_path / "reload_registry.py"
    script.write_text(MODULE_RELOAD_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


CACHE_RELOAD_SCRIPT = """
import sys
sys.modules.setdefault("fla", None)  # as tests/conftest.py
sys.path.insert(0, {tests!r})
import importlib
import torch
from utils import prompt_ids, tiny_model
import hf_deltalog.cache as cache_module

model, ids = tiny_model("qwen3_5"), prompt_ids(2, 5)
cache = cache_module.DeltaLogCache(model, backend="torch")
out = model.generate(ids, cache=cache, max_new_tokens=3, do_sample=False)
importlib.reload(cache_module)  # as IPython's autoreload does
try:
    model.generate(torch.cat([out, prompt_ids(2, 2, seed=9)], 1), cache=cache, max_new_tokens=3, do_sample=False)
    raise SystemExit("a cache built before the reload decoded")
except RuntimeError as error:
    assert "built before hf_deltalog.cache was reloaded" in str(error), error
print("ok")
"""


def test_a_cache_built_before_a_reload_of_the_cache_module_says_so(tmp_path):
    """As for the FLA cache (35th review): after importlib.reload(hf_deltalog.cache) a cache built before is refused
    naming the reload, not an unpatch() that never happened. Subprocess."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "reload_cache.py"
    script.write_text(CACHE_RELOAD_SCRIPT.format(tests=str(pathlib.Path(__file__).parent)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:] + done.stdout[-1000:]
