"""FLADeltaLogCache against FLA's Cache step by step, the kernel binding option by option, patching and bad input."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
import transformers
from fla.models.utils import Cache
from helpers import (
    DIMS,
    FAMILIES,
    fla_cache_reaches_model,
    generate_ours,
    generate_ref,
    max_abs,
    prompt_ids,
    rel_err,
    tiny_model,
)

import hf_deltalog
from hf_deltalog import DeltaLogCache
from hf_deltalog.fla_cache import FLADeltaLogCache, FLADeltaLogState
from hf_deltalog.patches.fla import FLA_FAMILIES, is_fla_patched, patch_fla, unpatch_fla

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _states_close(ours: FLADeltaLogCache, ref: Cache, step) -> None:
    for i in range(len(ref)):
        mine, theirs = ours[i], ref[i]
        assert rel_err(ours.materialize(i), theirs["recurrent_state"]) <= 1e-5, (step, i)
        dense = [(name, a, b) for name in ("conv_state", "ffn_state") for a, b in
                 zip(*(x[name] if isinstance(x[name], (tuple, list)) else (x[name],) for x in (mine, theirs)))]
        for name, a, b in dense:
            assert (a is None and b is None) or (a.shape == b.shape and max_abs(a, b) <= 1e-5), (step, i, name)


def _decode_both(model, ref: Cache, ours: FLADeltaLogCache, ids, steps: int, reorder_at: int, with_mask: bool) -> None:
    """Prefill ``ids`` and decode ``steps`` greedy tokens through FLA's cache and ours side by side (optionally with
    an attention mask): last logits and states agree after every step and after a row reorder at ``reorder_at``."""
    mask = torch.ones_like(ids) if with_mask else None
    with torch.no_grad():
        a = model(ids, attention_mask=mask, past_key_values=ref, use_cache=True)
        b = model(ids, attention_mask=mask, past_key_values=ours, use_cache=True)
        for step in range(steps):
            assert max_abs(b.logits[:, -1], a.logits[:, -1]) <= 1e-4, step
            _states_close(ours, ref, step)
            if step == reorder_at:
                ref.reorder_cache(torch.tensor([1, 0]))
                ours.reorder_cache(torch.tensor([1, 0]))
                _states_close(ours, ref, "reorder")
            nxt = a.logits[:, -1:].argmax(-1)
            if with_mask:
                mask = torch.cat([mask, torch.ones_like(nxt)], 1)
            a = model(nxt, attention_mask=mask, past_key_values=ref, use_cache=True)
            b = model(nxt, attention_mask=mask, past_key_values=ours, use_cache=True)


def test_batch_select_indices_takes_a_list_and_keeps_the_rows():
    """A list (as for reorder_cache) keeps those rows of every layer's recurrent state; floats are refused before
    anything changes."""
    model = tiny_model("rwkv6")
    cache = DeltaLogCache(model, merge_interval=4, backend="torch")
    with torch.no_grad():
        out = model(prompt_ids(3, 5, seed=13), past_key_values=cache, use_cache=True)
        model(out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
    states = [cache.materialize(i) for i in range(len(cache))]
    with pytest.raises(TypeError, match="of rows to keep"):
        cache.batch_select_indices(torch.tensor([0.0]))
    cache.batch_select_indices([2, 0])
    assert all(torch.equal(cache.materialize(i), S[[2, 0]]) for i, S in enumerate(states))
    # negative rows, as torch indexes (and as the docstring says): FLA's layers' index_select raised IndexError
    twin = copy.deepcopy(cache)
    twin.batch_select_indices(torch.tensor([-1, -2, 0]))
    assert all(torch.equal(twin.materialize(i), S[[0, 2, 2]]) for i, S in enumerate(states))
    # rows outside [0, B) on the CPU failed with index_select's raw IndexError: now a ValueError, nothing changed
    for bad in ([0, 2], [-1, 0]):
        with pytest.raises(ValueError, match=r"beam_idx entries must be row numbers in \[0, 2\)"):
            cache.reorder_cache(bad)
    assert all(torch.equal(cache.materialize(i), S[[2, 0]]) for i, S in enumerate(states))


@pytest.mark.parametrize("family", FAMILIES)
def test_memory_breakdown_and_bad_arguments(family):
    """The README lists cache.memory_breakdown(); DeltaLogCache(model) of an FLA model had none (AttributeError; found
    by a breaker review). It counts every DeltaLog buffer by role: state + log + workspace = the DeltaLog part of
    memory_footprint. Bad layer indices and repeats get the transformers cache's errors."""
    model = tiny_model(family)
    cache = DeltaLogCache(model, merge_interval=4, backend="torch")
    assert cache.memory_breakdown() == dict(state=0, log=0, workspace=0, crop_ring=0)
    with torch.no_grad():
        model(prompt_ids(3, 5, seed=13), past_key_values=cache, use_cache=True)
    B, (Hk, HV, K, V), C = 3, DIMS[family], 3
    layers = len(cache.deltalog_layers)
    per_key = K if family != "gated_deltanet" else 1  # KDA and RWKV6 decay every key channel
    expect_log = 4 * B * (HV * per_key + Hk * C * K + HV * C * V + HV * C * per_key) + 4 * B  # fp32 logs, int32 length
    report = cache.memory_breakdown()
    assert report == dict(state=layers * 4 * B * HV * K * V, log=layers * expect_log, workspace=0, crop_ring=0)
    for bad in ("0", True):
        with pytest.raises(TypeError, match="layer_idx must be an int"):
            cache.materialize(bad)
    for bad in ("yes", 0):  # the layer's layout flag went by truth value (71st review)
        with pytest.raises(TypeError, match=f"state_v_first must be None, True or False; got {bad!r}"):
            cache.deltalog_layers[0].materialize(state_v_first=bad)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        cache.batch_repeat_interleave(0)
    assert cache.batch_size == B


@pytest.mark.parametrize("family,backend", [(f, "torch") for f in FAMILIES] + [("gated_deltanet", "triton")])
def test_state_matches_fla_cache_every_step(family, backend):
    """Drive both caches by hand (with an attention mask, so GDN/KDA unpad to packed one-token sequences): logits, the
    materialised recurrent state (FLA's layout) and FLA's dense conv / token-shift states agree after every step,
    through merges and a beam-style row reorder."""
    model = tiny_model(family)
    ref, ours = Cache(), DeltaLogCache(model, merge_interval=2, backend=backend)
    _decode_both(model, ref, ours, prompt_ids(2, 5, seed=11), steps=5, reorder_at=2, with_mask=True)
    assert ours.get_seq_length() == ref.get_seq_length() == 10
    assert [layer.length.tolist() for layer in ours.deltalog_layers] == [[1, 1]] * 2  # 5 steps at M = 2
    assert isinstance(ours[0]["recurrent_state"], FLADeltaLogState)


@pytest.mark.parametrize("family", FAMILIES)
def test_dense_fla_path_matches_fla_cache(family, monkeypatch):
    """The GPU policy's small-state path (M = 1 with the base in FLA's own layout: FLA's fused-recurrent kernel decodes
    on it, ``dense_fla``), forced on the CPU (FLA's kernels under the interpreter): logits and states agree with FLA's
    cache after every step and a row reorder, and the base stays in FLA's layout (``[K, V]`` for RWKV6)."""
    from hf_deltalog.fla_cache import FLADeltaLogLayer

    plan = FLADeltaLogLayer.plan
    monkeypatch.setattr(FLADeltaLogLayer, "plan", lambda self, batch, device: dict(
        plan(self, batch, device), merge_interval=1, state_v_first=self.spec.state_v_first, dense_fla=True))
    model = tiny_model(family)
    ref, ours = Cache(), DeltaLogCache(model)
    _decode_both(model, ref, ours, prompt_ids(2, 5, seed=12), steps=4, reorder_at=1, with_mask=False)
    layer = ours.deltalog_layers[0]
    assert layer.dense_fla and layer.merge_interval == 1
    assert layer.base.shape == ref[0]["recurrent_state"].shape  # FLA's own layout


def _layer_cache(family, rows, merge_interval=3, backend="torch"):
    """A cache of the tiny config with layer 0 holding a random dense state (FLA's layout), as after a prefill."""
    cache = DeltaLogCache(tiny_model(family).config, merge_interval=merge_interval, backend=backend)
    Hk, HV, K, V = DIMS[family]
    shape = (rows, HV, V, K) if FLA_FAMILIES[family].state_v_first else (rows, HV, K, V)
    state = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 0.5
    cache.update(recurrent_state=state.clone(), layer_idx=0, offset=3)
    return cache, state


def _inputs(family, rows, packed, gen, **options):
    """Random kernel arguments for one token per row, as FLA's layer passes them (packed: [1, N, ...] + cu_seqlens)."""
    Hk, HV, K, V = DIMS[family]
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    if family == "rwkv6":
        x = dict(r=r(rows, 1, HV, K), k=r(rows, 1, HV, K) * 0.5, v=r(rows, 1, HV, V),
                 w=-torch.rand(rows, 1, HV, K, generator=gen) * 0.8, u=options.pop("u"))
    else:
        g = r(rows, 1, HV, K) if family == "kda" else r(rows, 1, HV)
        x = dict(q=r(rows, 1, Hk, K), k=r(rows, 1, Hk, K), v=r(rows, 1, HV, V), g=g, beta=r(rows, 1, HV))
    if packed:
        x = {n: t.transpose(0, 1) if n != "u" else t for n, t in x.items()}
        x["cu_seqlens"] = torch.arange(rows + 1)
    return {**x, **options}


_GATE = {
    "gated_deltanet": dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                           state_v_first=True),
    "kda": dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                state_v_first=True),
}
CASES = [
    ("rwkv6", False, dict(scale=1.0)),  # what FLA's RWKV6 layer passes
    ("rwkv6", False, dict()),  # default scale K^-0.5
    ("gated_deltanet", True, dict(allow_neg_eigval=True)),  # FLA's layer under an attention mask
    ("gated_deltanet", False, dict(allow_neg_eigval=False, scale=0.3)),
    ("gated_deltanet", False, dict(use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False)),  # raw g, β
    ("kda", True, dict(allow_neg_eigval=True, lower_bound=-5.0)),
    ("kda", False, dict()),
    ("kda", False, dict(use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False)),
]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("family,packed,options", CASES)
def test_bound_kernel_matches_fla_kernel(family, packed, options, backend):
    """The patched FLA kernel symbol with our handle equals FLA's kernel on the dense state, output and state, over
    five steps at M = 3 (a merge), for every gate option FLA's kernels take."""
    spec = FLA_FAMILIES[family]
    patch_fla()
    module = importlib.import_module(spec.module)
    bound = getattr(module, spec.recurrent)
    upstream = bound.__deltalog_upstream__
    rows, gen = 3, torch.Generator().manual_seed(1)
    cache, dense = _layer_cache(family, rows, backend=backend)
    Hk, HV, K, V = DIMS[family]
    options = dict(_GATE.get(family, {}), **options)
    if family == "rwkv6":
        options["u"] = torch.randn(HV, K, generator=gen)
    elif options.get("use_gate_in_kernel"):
        options["A_log"] = torch.rand(HV, generator=gen) - 1.0
        options["dt_bias"] = torch.randn(HV * K if family == "kda" else HV, generator=gen)
    for step in range(5):
        x = _inputs(family, rows, packed, gen, **dict(options))
        if family != "rwkv6" and not x.get("use_gate_in_kernel"):
            x["g"] = -torch.rand_like(x["g"]) * 0.7  # already a log-decay
            x["beta"] = torch.rand_like(x["beta"])
        o_ref, dense = upstream(**x, initial_state=dense, output_final_state=True)
        o, state = bound(**x, initial_state=cache[0]["recurrent_state"], output_final_state=True)
        assert state is cache[0]["recurrent_state"]
        cache.update(recurrent_state=state, layer_idx=0, offset=1)
        assert max_abs(o, o_ref) <= 1e-5, step
        assert rel_err(cache.materialize(0), dense) <= 1e-5, step
    assert cache.deltalog_layers[0].length.tolist() == [2] * rows  # 5 steps at M = 3: merged at the third


@pytest.mark.parametrize("packed", [False, True])
def test_a_per_value_beta_runs_fla_kernel_on_the_dense_state(packed):
    """FLA's GatedDeltaNet kernel also takes one β per value channel, ``[B, T, HV, V]``; the DeltaLog step implements
    one per head only, so such a call runs FLA's kernel on the materialised state and its returned state restarts the
    log. A mutant that refused it ("beta must be [B, T, HV]") was not caught (73rd review). Pins: per-head and per-V
    steps interleaved give FLA's kernel's outputs and states, one DeltaLog step per per-head call."""
    spec = FLA_FAMILIES["gated_deltanet"]
    patch_fla()
    bound = getattr(importlib.import_module(spec.module), spec.recurrent)
    upstream = bound.__deltalog_upstream__
    rows, gen = 3, torch.Generator().manual_seed(4)
    cache, dense = _layer_cache("gated_deltanet", rows)
    _, HV, _, V = DIMS["gated_deltanet"]
    options = dict(_GATE["gated_deltanet"], A_log=torch.rand(HV, generator=gen) - 1.0,
                   dt_bias=torch.randn(HV, generator=gen))
    for step, per_value in enumerate([False, True, False, False, True]):
        x = _inputs("gated_deltanet", rows, packed, gen, **dict(options))
        if per_value:
            shape = (1, rows, HV, V) if packed else (rows, 1, HV, V)
            x["beta"] = torch.randn(shape, generator=gen)
        o_ref, dense = upstream(**x, initial_state=dense, output_final_state=True)
        o, state = bound(**x, initial_state=cache[0]["recurrent_state"], output_final_state=True)
        assert (state is cache[0]["recurrent_state"]) != per_value, step  # per-V β: FLA's dense state comes back
        cache.update(recurrent_state=state, layer_idx=0, offset=1)
        assert max_abs(o, o_ref) <= 1e-5, step
        assert rel_err(cache.materialize(0), dense) <= 1e-5, step
        assert cache.deltalog_layers[0].length.tolist() == [0 if per_value else 1 + (step == 3)] * rows, step


@pytest.mark.parametrize("family", FAMILIES)
def test_calls_the_log_does_not_cover_run_fla_on_the_dense_state(family):
    """Two tokens per row, a packed row without a token, or output_final_state=False (with one token per row too:
    dropping that condition from the one-token path was not caught, 73rd review): FLA's kernel runs on the
    materialised state; a returned state restarts the log, and use_cache=False returns no state and leaves the cache
    (state and log) untouched."""
    spec = FLA_FAMILIES[family]
    patch_fla()
    bound = getattr(importlib.import_module(spec.module), spec.recurrent)
    upstream = bound.__deltalog_upstream__
    gen = torch.Generator().manual_seed(2)
    cache, dense = _layer_cache(family, 2)
    Hk, HV, K, V = DIMS[family]
    options = dict(_GATE.get(family, {}))
    if family == "rwkv6":
        options["u"] = torch.randn(HV, K, generator=gen)
    else:
        options["A_log"] = torch.rand(HV, generator=gen) - 1.0
    one = _inputs(family, 2, False, gen, **dict(options))
    o, state = bound(**one, initial_state=cache[0]["recurrent_state"], output_final_state=True)  # one DeltaLog step
    _, dense = upstream(**one, initial_state=dense, output_final_state=True)
    cache.update(recurrent_state=state, layer_idx=0, offset=1)
    # one token per row with output_final_state=False (use_cache=False): FLA's kernel on the dense state, nothing
    # stored (without the output_final_state condition the DeltaLog step ran here, advanced the buffers and
    # returned the handle where FLA returns None)
    lone = _inputs(family, 2, False, torch.Generator().manual_seed(3), **dict(options))
    before, length = cache.materialize(0).clone(), cache.deltalog_layers[0].length.clone()
    o_ref, none = upstream(**lone, initial_state=dense.clone(), output_final_state=False)
    o, state = bound(**lone, initial_state=cache[0]["recurrent_state"], output_final_state=False)
    assert state is None and none is None and max_abs(o, o_ref) <= 1e-5
    assert torch.equal(cache.materialize(0), before) and torch.equal(cache.deltalog_layers[0].length, length)
    two = {n: torch.cat([t, t.flip(0)], 1) if isinstance(t, torch.Tensor) and t.dim() >= 3 else t
           for n, t in _inputs(family, 2, False, gen, **dict(options)).items()}
    o, state = bound(**two, initial_state=cache[0]["recurrent_state"], output_final_state=False)
    assert state is None and rel_err(cache.materialize(0), dense) <= 1e-6  # use_cache=False: untouched
    o_ref, dense = upstream(**two, initial_state=dense, output_final_state=True)
    o, state = bound(**two, initial_state=cache[0]["recurrent_state"], output_final_state=True)
    assert isinstance(state, torch.Tensor) and max_abs(o, o_ref) <= 1e-5
    cache.update(recurrent_state=state, layer_idx=0, offset=2)
    assert cache.deltalog_layers[0].length.tolist() == [0, 0] and rel_err(cache.materialize(0), dense) <= 1e-5
    if family != "rwkv6":  # packed rows, the second without a token (FLA's unpadding of a masked decode position)
        x = _inputs(family, 1, True, gen, **dict(options))
        x["cu_seqlens"] = torch.tensor([0, 0, 1])
        o_ref, dense = upstream(**x, initial_state=dense, output_final_state=True)
        o, state = bound(**x, initial_state=cache[0]["recurrent_state"], output_final_state=True)
        cache.update(recurrent_state=state, layer_idx=0, offset=1)
        assert max_abs(o, o_ref) <= 1e-5 and rel_err(cache.materialize(0), dense) <= 1e-5


def test_patch_is_idempotent_and_revertible():
    import fla.layers.gated_deltanet as gdn
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    patch_fla()
    bound = gdn.fused_recurrent_gated_delta_rule
    assert hf_deltalog.patch(["gated_deltanet"]) == hf_deltalog.patches.patched_families()
    assert gdn.fused_recurrent_gated_delta_rule is bound and is_fla_patched("gated_deltanet")
    assert hf_deltalog.is_patched("kda")
    hf_deltalog.unpatch()  # the transformers families and the FLA ones
    assert gdn.fused_recurrent_gated_delta_rule is fused_recurrent_gated_delta_rule
    assert gdn.chunk_gated_delta_rule is chunk_gated_delta_rule and not is_fla_patched("gated_deltanet")
    unpatch_fla()  # idempotent
    patch_fla("gated_deltanet")
    assert gdn.fused_recurrent_gated_delta_rule.__deltalog_upstream__ is fused_recurrent_gated_delta_rule
    patch_fla()


FLA_RELOAD_SCRIPT = """
import importlib, os, sys
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, {tests!r})
import torch
from hf_deltalog.interpreter import collapse_autotuners
collapse_autotuners()
import fla.layers.gated_deltanet as layer_module
from helpers import generate_ref, prompt_ids, tiny_model
import hf_deltalog
from hf_deltalog import DeltaLogCache
from hf_deltalog.patches.fla import is_fla_patched, patch_fla, unpatch_fla

patch_fla()
importlib.reload(layer_module)  # FLA's own kernels in the module's globals again
assert not is_fla_patched("gated_deltanet")
hf_deltalog.patch()  # what the unbound-kernel error advises
assert is_fla_patched("gated_deltanet")
model, ids = tiny_model("gated_deltanet"), prompt_ids(1, 4)
kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
with torch.no_grad():
    out = model.generate(ids, past_key_values=DeltaLogCache(model, backend="torch"), **kw)
assert torch.equal(out, generate_ref(model, ids, **kw)[0])

ours = layer_module.fused_recurrent_gated_delta_rule
def mine(*args, **kwargs):  # a rebinding made after patch_fla(), by the user or another library
    return ours(*args, **kwargs)
layer_module.fused_recurrent_gated_delta_rule = mine
unpatch_fla()
assert layer_module.fused_recurrent_gated_delta_rule is mine  # unpatch_fla() restores only its own dispatchers
assert not hasattr(layer_module.chunk_gated_delta_rule, "__deltalog_upstream__")
print("ok")
"""


def test_patch_fla_follows_the_module_globals_after_a_reload(tmp_path):
    """After importlib.reload of an FLA layer module, patch_fla() did nothing and is_fla_patched() said True (the
    bookkeeping said so) while the module held FLA's own kernels again: generate with a DeltaLogCache failed with the
    unbound-kernel error, whose advice (hf_deltalog.patch()) did not help. unpatch_fla() also wrote its saved originals
    over whatever was bound by then. Now both read the module's globals, as the transformers side does. Runs in a
    subprocess: a reload redefines the module's classes for the rest of the process."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "fla_reload.py"
    script.write_text(FLA_RELOAD_SCRIPT.format(tests=str(pathlib.Path(__file__).parent)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.parametrize("family", FAMILIES)
def test_fla_cache_runs_fla_unchanged_when_patched(family):
    """With FLA's own cache the patched symbols call FLA's kernels with the same arguments: bit-identical logits."""
    model, ids = tiny_model(family, layers=1), prompt_ids(2, 4, seed=12)
    with torch.no_grad():
        unpatch_fla()
        plain = [model(ids, past_key_values=(c := Cache()), use_cache=True).logits,
                 model(ids[:, :1], past_key_values=c, use_cache=True).logits]
        patch_fla()
        patched = [model(ids, past_key_values=(c := Cache()), use_cache=True).logits,
                   model(ids[:, :1], past_key_values=c, use_cache=True).logits]
    assert all(torch.equal(a, b) for a, b in zip(plain, patched))


@pytest.mark.parametrize("family", FAMILIES)
def test_unbound_handle_raises_clearly(family):
    """After unpatch_fla() a decode step hands the handle to FLA's own kernel: the first read of a tensor attribute
    raises the unbound-kernel RuntimeError and locks the cache, whichever code reads it first (for GatedDeltaNet and
    RWKV6 it is Triton's launcher, not FLA's code)."""
    model, ids = tiny_model(family, layers=1), prompt_ids(1, 3)
    cache = DeltaLogCache(model)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        unpatch_fla()
        try:
            with pytest.raises(RuntimeError, match=r"has not bound .* call hf_deltalog.patch\(\), then cache.reset"):
                model(ids[:, :1], past_key_values=cache, use_cache=True)
        finally:
            patch_fla()
        with pytest.raises(ValueError, match="left inconsistent"):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
        cache.reset()
        model(ids, past_key_values=cache, use_cache=True)  # usable again after reset()


def test_construction_errors():
    model = tiny_model("kda", layers=1)
    assert isinstance(DeltaLogCache(model.config), FLADeltaLogCache)  # a config works too
    keyword = DeltaLogCache(config=model.config, merge_interval=3)  # transformers' DynamicCache(config=...) spelling
    assert isinstance(keyword, FLADeltaLogCache) and keyword.merge_interval == 3
    with pytest.raises(TypeError, match="got both a model_or_config and config="):
        DeltaLogCache(model, config=model.config)
    assert DeltaLogCache(model).merge_interval == 4 and DeltaLogCache(model, merge_interval=5).merge_interval == 5
    with pytest.raises(ValueError, match="merge_interval"):
        DeltaLogCache(model, merge_interval=0)
    with pytest.raises(TypeError, match="merge_interval"):
        DeltaLogCache(model, merge_interval=2.5)
    with pytest.raises(ValueError, match="backend"):
        DeltaLogCache(model, backend="cuda")
    with pytest.raises(ValueError, match="serves flash-linear-attention"):
        FLADeltaLogCache(transformers.LlamaConfig())
    # transformers-only options: a clear ValueError (it was a TypeError from FLADeltaLogCache.__init__, a class the
    # user never called, not saying what is accepted)
    for kw in (dict(static=True, max_cache_len=16), dict(crop_ring=True)):
        with pytest.raises(ValueError, match="options of DeltaLogCache for transformers' models; .* merge_interval, "
                                             "backend and stagger_merges only"):
            DeltaLogCache(model, **kw)
    # spelled out at their defaults (generic code) they ask nothing of FLA's cache: accepted (they were refused)
    assert isinstance(DeltaLogCache(model, static=False, max_cache_len=None, crop_ring=False), FLADeltaLogCache)


def test_generate_refuses_mismatched_use_before_touching_the_cache():
    gdn, kda = tiny_model("gated_deltanet", layers=1), tiny_model("kda", layers=1)
    ids = prompt_ids(2, 4, seed=13)
    cache = DeltaLogCache(gdn, merge_interval=2)
    with pytest.raises(ValueError, match="another configuration"):
        generate_ours(kda, ids, cache, max_new_tokens=2)
    assert cache.get_seq_length() == 0
    out = generate_ours(gdn, ids, cache, max_new_tokens=2, do_sample=False)
    held = cache.get_seq_length()
    with pytest.raises(ValueError, match="holds 2 rows"):
        generate_ours(gdn, ids[:1], cache, max_new_tokens=2)
    with pytest.raises(ValueError, match="differ from"):
        generate_ours(gdn, torch.cat([out.flip(1), out[:, :1]], 1), cache, max_new_tokens=2)
    with pytest.raises(ValueError, match="whole conversation"):
        generate_ours(gdn, ids, cache, max_new_tokens=2)
    assert cache.get_seq_length() == held
    with pytest.raises(NotImplementedError, match="rollback"):  # FLA's own cache cannot roll a state back either
        cache.crop(-1)


def test_wrong_state_shape_is_refused():
    cache, _ = _layer_cache("gated_deltanet", 2)
    Hk, HV, K, V = DIMS["gated_deltanet"]
    with pytest.raises(ValueError, match=r"layout \[N, HV, V, K\]"):
        cache.update(recurrent_state=torch.zeros(2, HV, K, V), layer_idx=0)  # K-major: FLA's GDN keeps V-first
    with pytest.raises(ValueError, match="does not exist"):
        DeltaLogCache(tiny_model("rwkv6").config).update(recurrent_state=torch.zeros(1), layer_idx=7)


def test_a_store_refused_inside_a_forward_locks_the_cache():
    """The same refusal inside FLA's forward (a cache built for other value-head sizes): the layers before the refusing
    one have advanced, so the cache is locked until reset()."""
    model = tiny_model("gated_deltanet")
    other = copy.deepcopy(model.config)
    other.expand_v = 4.0  # V = 32 instead of 16
    cache = DeltaLogCache(other)
    with torch.no_grad(), pytest.raises(ValueError, match=r"layout \[N, HV, V, K\] = \[2, 32, 8\]: it belongs to a "):
        model(prompt_ids(2, 5), past_key_values=cache, use_cache=True)
    assert cache._shared.status.broken is not None
    with pytest.raises(ValueError, match="locked by a call it refused"):
        cache.update(recurrent_state=torch.zeros(2, 2, 16, 8), layer_idx=0)


def test_a_store_refused_from_user_code_changes_nothing_and_does_not_lock():
    """``cache.update`` called by code other than FLA's model with a recurrent state the layer cannot take: checked
    before anything changes, and only a refusal inside a forward locks the cache. Before: an int32 or bool state was
    copied into the fp32 base; a state on another device (here: meta) moved the layer's buffers there, away from its
    conv state; a wrong shape or another cache's handle locked the cache with a message about a forward that was not
    running."""
    model = tiny_model("gated_deltanet")
    ids = prompt_ids(2, 5)
    cache = DeltaLogCache(model, merge_interval=3)
    out = generate_ours(model, ids, cache, max_new_tokens=2, do_sample=False)
    _, HV, K, V = DIMS["gated_deltanet"]
    assert K != V  # FLA's GDN layout is [N, HV, V, K]: a [N, HV, K, V] state is of another shape
    state, held = cache.materialize(0), cache.get_seq_length()
    other = DeltaLogCache(model, merge_interval=3)
    generate_ours(model, ids, other, max_new_tokens=1, do_sample=False)
    refused = [
        (ValueError, r"layout \[N, HV, V, K\]", dict(recurrent_state=torch.zeros(2, HV, K, V))),
        (TypeError, "must be a floating tensor; got torch.int32",
         dict(recurrent_state=torch.ones(2, HV, V, K, dtype=torch.int32))),
        (TypeError, "got torch.bool", dict(recurrent_state=torch.ones(2, HV, V, K, dtype=torch.bool))),
        (ValueError, "a recurrent state on meta, but the layer's conv state is on cpu",
         dict(recurrent_state=torch.empty(2, HV, V, K, device="meta"))),
        (ValueError, "handed the DeltaLog state of another layer or cache",
         dict(recurrent_state=other[0]["recurrent_state"])),
        (ValueError, "a recurrent state must be a tensor; got list", dict(recurrent_state=[torch.zeros(2, HV, V, K)])),
        (ValueError, r"consumed 1 token\(s\) without storing a recurrent state", dict(conv_state=None)),
    ]
    for error, says, bad in refused:
        with pytest.raises(error, match=says):
            cache.update(**bad, layer_idx=0)
        assert cache._shared.status.broken is None, says
        layer = cache.deltalog_layers[0]
        assert layer.base.device == state.device and torch.equal(cache.materialize(0), state), says
        assert cache.get_seq_length() == held, says
    with pytest.raises(ValueError, match="does not exist"):
        cache.update(recurrent_state=state, layer_idx=7)
    assert cache._shared.status.broken is None
    # still usable, and what FLA's own cache gives
    more = generate_ours(model, out, cache, max_new_tokens=2, do_sample=False)
    reference, _ = generate_ref(model, ids, max_new_tokens=4, do_sample=False)
    assert torch.equal(more, reference)


def test_gpu_plan():
    """What a layer would do on a GPU (decided from the device type; nothing runs on one here)."""
    cuda = torch.device("cuda")
    gdn = DeltaLogCache(tiny_model("gated_deltanet").config)._new_layer(0)
    assert gdn.plan(2, cpu := torch.device("cpu")) == dict(backend="torch", merge_interval=8, state_v_first=False,
                                                           dense_fla=False)
    # 1 KiB of fp32 state per row here: under 64 MiB FLA's dense kernel decodes (M = 1, FLA's V-first layout).
    assert gdn.plan(2, cuda) == dict(backend="triton", merge_interval=1, state_v_first=True, dense_fla=True)
    assert gdn.plan(2, "cuda") == gdn.plan(2, cuda)  # a device string (was an AttributeError)
    with pytest.raises(ValueError, match="batch must be ≥ 0; got -1"):
        gdn.plan(-1, cuda)
    assert gdn.plan(1 << 16, cuda) == dict(backend="triton", merge_interval=8, state_v_first=True, dense_fla=False)
    # RWKV6: under 16 MiB FLA's dense kernel decodes in FLA's own [K, V] layout; above, DeltaLog with the V-first base
    rwkv6 = DeltaLogCache(tiny_model("rwkv6").config)._new_layer(0)
    assert rwkv6.plan(2, cuda) == dict(backend="triton", merge_interval=1, state_v_first=False, dense_fla=True)
    assert rwkv6.plan(1 << 16, cuda) == dict(backend="triton", merge_interval=8, state_v_first=True, dense_fla=False)
    assert DeltaLogCache(tiny_model("rwkv6").config, merge_interval=1)._new_layer(0).plan(1 << 16, cuda)["dense_fla"]
    forced = DeltaLogCache(tiny_model("kda").config, merge_interval=3, backend="torch")._new_layer(0)
    assert forced.plan(2, cuda) == dict(backend="torch", merge_interval=3, state_v_first=False, dense_fla=False)
    assert forced.plan(2, cpu)["merge_interval"] == 3


def test_a_cu_seqlens_buffer_refilled_in_place_is_read_again():
    """Packed decoding with the caller's own cu_seqlens buffer, refilled in place between steps: the cache kept its
    "one token per sequence" answer by the tensor's identity, so [0, 1, 2] refilled as [0, 2, 2] (two tokens for row A,
    none for B) ran the one-token DeltaLog step (logits 0.12 off FLA's Cache, the state corrupted; found by the
    fifteenth review). The answer now follows the tensor's version."""
    model = tiny_model("gated_deltanet")
    g = torch.Generator().manual_seed(3)
    seq_a, seq_b = torch.randint(3, 90, (9,), generator=g), torch.randint(3, 90, (9,), generator=g)
    steps = [(torch.cat([seq_a[:5], seq_b[:5]]), [0, 5, 10]), (torch.stack([seq_a[5], seq_b[5]]), [0, 1, 2]),
             (seq_a[6:8], [0, 2, 2]), (torch.stack([seq_a[8], seq_b[6]]), [0, 1, 2])]

    def run(cache):
        cu = torch.tensor(steps[0][1])
        out = []
        with torch.no_grad():
            for x, lengths in steps:
                cu.copy_(torch.tensor(lengths))  # one buffer, refilled in place
                out.append(model(x[None], cu_seqlens=cu, past_key_values=cache, use_cache=True).logits)
        return out

    ours, ref = run(DeltaLogCache(model, merge_interval=3, backend="torch")), run(Cache())
    assert max(max_abs(a, b) for a, b in zip(ours, ref)) <= 1e-5


def test_the_configuration_check_covers_conv_width_and_attention_specs():
    """The FLA configuration check compared the model type, the recurrent-layer pattern and the head dims only: a cache
    filled by a model with width-4 short convolutions was continued by one with width 2, decoding from windows of the
    wrong width; and FLA's list form of `attn` was not read, so its attention layers counted as recurrent (found by the
    fifteenth review). Both are now in the check."""
    from fla.models import GatedDeltaNetForCausalLM
    from helpers import family_config

    from hf_deltalog.fla_cache import _linear_layers

    model = tiny_model("gated_deltanet")
    cache = DeltaLogCache(model, merge_interval=3, backend="torch")
    out = generate_ours(model, prompt_ids(2, 4, seed=8), cache, max_new_tokens=3, do_sample=False)
    narrow = GatedDeltaNetForCausalLM(family_config("gated_deltanet", 2)).eval()
    narrow.config.conv_size = 2  # the check reads the config
    held = cache.get_seq_length()
    with pytest.raises(ValueError, match="short-conv / attention settings .*another configuration"):
        generate_ours(narrow, torch.cat([out, prompt_ids(2, 1, seed=9)], 1), cache, max_new_tokens=2)
    assert cache.get_seq_length() == held
    config = family_config("gated_deltanet", 4)
    config.attn = [{"layers": [1], "num_heads": 2}, {"layers": [3], "num_heads": 2, "window_size": 3}]
    assert _linear_layers(config) == [True, False, True, False]


def test_a_model_of_another_hidden_size_is_refused():
    """RWKV6's token-shift states are [B, hidden_size], and the configuration check left the hidden size out: a model
    with the same heads (H, K, V) but twice the hidden size failed inside FLA's layer with a raw RuntimeError, through
    generate and through a manual forward, and the cache was then locked as if a forward had been interrupted (found
    by the 48th review). generate now refuses it up front and a manual forward at the layer's first read, both with a
    ValueError, changing nothing: the cache's own model continues with FLA's cache's tokens."""
    from fla.models import RWKV6Config, RWKV6ForCausalLM
    from helpers import COMMON, generate_ref

    model, ids = tiny_model("rwkv6", layers=1), prompt_ids(2, 3)
    torch.manual_seed(0)
    wide = RWKV6ForCausalLM(RWKV6Config(**dict(COMMON, hidden_size=128, num_hidden_layers=1), num_heads=2,
                                        expand_k=0.125, expand_v=0.25, proj_low_rank_dim=8,
                                        gate_low_rank_dim=8)).eval()  # the same H = 2, K = 8, V = 16
    cache = DeltaLogCache(model, merge_interval=2, backend="torch")
    out = generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
    ref_out, ref = generate_ref(model, ids, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, ref_out)
    with pytest.raises(ValueError, match="hidden-size / short-conv / attention settings .*another configuration"):
        generate_ours(wide, out, cache, max_new_tokens=2, do_sample=False)
    with torch.no_grad(), pytest.raises(ValueError, match="hidden size 64, but the layer's input has 128"):
        wide(out[:, -1:], past_key_values=cache, use_cache=True)
    more = torch.cat([out, prompt_ids(2, 1, seed=5)], 1)
    with torch.no_grad(), fla_cache_reaches_model(model):
        expected = model.generate(more, past_key_values=ref, max_new_tokens=3, do_sample=False)
    assert torch.equal(generate_ours(model, more, cache, max_new_tokens=3, do_sample=False), expected)


def test_a_cache_pickled_before_the_hidden_size_was_recorded_continues():
    """A cache pickled by the version before the hidden-size check has no `_hidden_size` and a configuration
    fingerprint without it: generate refused it on the very model it was built for (found by the 50th review).
    Unpickling now compares such a cache without the hidden size, and it continues with FLA's cache's tokens."""
    import json
    import pickle

    from helpers import generate_ref

    model, ids = tiny_model("gated_deltanet"), prompt_ids(2, 3, seed=21)
    cache = DeltaLogCache(model, merge_interval=2, backend="torch")
    out = generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
    del cache._hidden_size  # what the older version pickled
    geometry = json.loads(cache._fingerprint[3])
    del geometry["hidden_size"]
    cache._fingerprint = (*cache._fingerprint[:3], json.dumps(geometry, sort_keys=True, default=str))
    restored = pickle.loads(pickle.dumps(cache))
    more = torch.cat([out, prompt_ids(2, 1, seed=22)], 1)
    ref_out, ref = generate_ref(model, ids, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, ref_out)
    with torch.no_grad(), fla_cache_reaches_model(model):
        expected = model.generate(more, past_key_values=ref, max_new_tokens=3, do_sample=False)
    assert torch.equal(generate_ours(model, more, restored, max_new_tokens=3, do_sample=False), expected)


def test_a_legacy_copy_is_a_snapshot():
    """to_legacy_cache() hands out the dense state (materialize), not the live handle: a step decoded through the
    tuple (FLA wraps it with Cache.from_legacy_cache) leaves the cache as it was. With the handle it advanced this
    cache's buffers in place while its token count and token-shift state stayed: the next step's logits were 0.0058
    off FLA's and a token flipped, with no error. The class method from_legacy_cache refuses with a TypeError."""
    model, ids = tiny_model("rwkv6", layers=1), prompt_ids(2, 5)
    side, nxt = prompt_ids(2, 1, seed=77), prompt_ids(2, 1, seed=78)

    def last_logits(cache, peek):
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True)
            if peek:
                legacy = cache.to_legacy_cache()
                model(side, past_key_values=legacy, use_cache=True)
            return model(nxt, past_key_values=cache, use_cache=True).logits[:, -1]

    clean = last_logits(Cache(), peek=False)
    ours = DeltaLogCache(model, merge_interval=4)
    assert max_abs(last_logits(ours, peek=True), clean) <= 1e-5
    legacy = ours.to_legacy_cache()
    assert isinstance(legacy[0]["recurrent_state"], torch.Tensor)
    assert torch.equal(legacy[0]["recurrent_state"], ours.materialize(0))
    with pytest.raises(TypeError, match="cannot be built from a legacy tuple"):
        FLADeltaLogCache.from_legacy_cache(legacy)


@pytest.mark.parametrize("family", ["gated_deltanet", "rwkv6"])
def test_a_turn_under_inference_mode_then_a_plain_turn(family):
    """Buffers allocated under torch.inference_mode() are inference tensors; a plain generate (no_grad) afterwards
    failed with PyTorch's in-place error, and so did reset(). They are copied into ordinary tensors there, as FLA's own
    cache goes on (it reassigns its states): tokens equal to FLA's cache doing the same."""
    model, ids = tiny_model(family, layers=1), prompt_ids(2, 5)
    kw = dict(max_new_tokens=3, do_sample=False)
    ref = Cache()
    with torch.inference_mode(), fla_cache_reaches_model(model):
        first = model.generate(ids, past_key_values=ref, **kw)
    turn = torch.cat([first, prompt_ids(2, 2, seed=9)], 1)
    with fla_cache_reaches_model(model):
        expected = model.generate(turn, past_key_values=ref, **kw)
    cache = DeltaLogCache(model, merge_interval=2)
    with torch.inference_mode():
        assert torch.equal(model.generate(ids, past_key_values=cache, **kw), first)
    assert torch.equal(model.generate(turn, past_key_values=cache, **kw), expected)
    with torch.inference_mode():
        model.generate(ids, past_key_values=DeltaLogCache(model, merge_interval=2), **kw)
        cache.reset()
    cache.reset()  # a reset outside inference mode of buffers made inside it
    assert torch.equal(model.generate(ids, past_key_values=cache, **kw), first)


def test_reading_an_attribute_of_the_state_handle_is_only_a_read():
    """cache[i]['recurrent_state'].shape from user code raises AttributeError naming materialize() and changes nothing
    (it raised the unbound-kernel RuntimeError and locked the cache; hasattr() did too). An FLA kernel reaching the
    handle still raises that RuntimeError (test_unbound_handle_raises_clearly)."""
    model, ids = tiny_model("gated_deltanet", layers=1), prompt_ids(2, 4)
    cache, ref = DeltaLogCache(model, merge_interval=3), Cache()
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        model(ids, past_key_values=ref, use_cache=True)
        handle = cache[0]["recurrent_state"]
        with pytest.raises(AttributeError, match=r"DeltaLog handle, not a tensor; cache.materialize\(0\)"):
            handle.shape  # noqa: B018 - the read under test
        assert not hasattr(handle, "dtype")
        step = prompt_ids(2, 1, seed=5)
        ours, theirs = (model(step, past_key_values=c, use_cache=True).logits for c in (cache, ref))
    assert max_abs(ours, theirs) <= 1e-5


def test_a_float64_model_with_the_triton_backend_is_refused_up_front():
    """backend='triton' takes bf16 / fp16 / fp32 activations: generate refuses a float64 model before anything changes
    (it failed at the first decode step with the kernel's TypeError)."""
    model = copy.deepcopy(tiny_model("rwkv6", layers=1)).double()
    cache = DeltaLogCache(model, backend="triton")
    with pytest.raises(ValueError, match=r"backend='triton'.*torch.float64.*Nothing was changed"):
        generate_ours(model, prompt_ids(2, 4), cache, max_new_tokens=2, do_sample=False)
    assert cache.get_seq_length() == 0


def test_a_deepcopy_after_unpatch_fla_leaves_the_layers_unbound():
    """Restoring a cache (copy.deepcopy, pickle) binds FLA's layers, except after a deliberate unpatch_fla(): only
    patch_fla() undoes that."""
    model, ids = tiny_model("rwkv6", layers=1), prompt_ids(1, 3)
    cache = DeltaLogCache(model)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    unpatch_fla()
    try:
        copy.deepcopy(cache)
        assert not is_fla_patched("rwkv6")
    finally:
        patch_fla()
    copy.deepcopy(cache)
    assert is_fla_patched("rwkv6")


def test_reading_the_handle_after_unpatch_is_only_a_read():
    """A user's read of the handle's .shape after unpatch_fla() raises AttributeError and changes nothing (it was taken
    for an unbound kernel and locked the cache for good); after patch_fla() the cache decodes as FLA's."""
    model, ids = tiny_model("gated_deltanet", layers=1), prompt_ids(2, 4)
    cache, ref = DeltaLogCache(model, merge_interval=3), Cache()
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        model(ids, past_key_values=ref, use_cache=True)
        unpatch_fla()
        try:
            with pytest.raises(AttributeError, match="materialize"):
                cache[0]["recurrent_state"].shape  # noqa: B018 - the read under test
        finally:
            patch_fla()
        step = prompt_ids(2, 1, seed=5)
        ours, theirs = (model(step, past_key_values=c, use_cache=True).logits for c in (cache, ref))
    assert max_abs(ours, theirs) <= 1e-5


def test_restoring_a_transformers_cache_after_unpatch_fla_leaves_fla_unbound():
    """After unpatch_fla() alone, restoring a transformers DeltaLogCache binds the transformers families only."""
    cache = DeltaLogCache(transformers.Qwen3NextConfig(num_hidden_layers=4))
    unpatch_fla()
    try:
        copy.deepcopy(cache)
        assert not any(is_fla_patched(f) for f in FAMILIES)
        assert hf_deltalog.is_patched("qwen3_next")
    finally:
        patch_fla()


def test_a_wraps_wrapper_of_an_fla_dispatcher_survives_unpatch_fla():
    """As for transformers' families: a functools.wraps wrapper of a bound FLA dispatcher was taken for ours and
    unpatch_fla() replaced it with FLA's kernel (33rd review); it stays now, and patch_fla() wraps it."""
    import functools

    import fla.layers.gated_deltanet as gdn
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    patch_fla()
    ours = gdn.fused_recurrent_gated_delta_rule

    @functools.wraps(ours)
    def instrumented(*args, **kwargs):
        return ours(*args, **kwargs)

    gdn.fused_recurrent_gated_delta_rule = instrumented
    try:
        assert not is_fla_patched("gated_deltanet")
        unpatch_fla()
        assert gdn.fused_recurrent_gated_delta_rule is instrumented
        patch_fla()
        assert gdn.fused_recurrent_gated_delta_rule.__deltalog_upstream__ is instrumented
    finally:
        unpatch_fla()
        gdn.fused_recurrent_gated_delta_rule = fused_recurrent_gated_delta_rule
        patch_fla()


CACHE_MODULE_RELOAD_SCRIPT = """
import importlib, os, sys
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, {tests!r})
import torch
from hf_deltalog.interpreter import collapse_autotuners
collapse_autotuners()
from helpers import generate_ours, generate_ref, prompt_ids, tiny_model
from hf_deltalog import DeltaLogCache
import hf_deltalog.fla_cache as fla_cache

model, ids = tiny_model("gated_deltanet", layers=1), prompt_ids(2, 4, seed=8)
cache = DeltaLogCache(model, merge_interval=3)
out = generate_ours(model, ids, cache, max_new_tokens=3, do_sample=False)
importlib.reload(fla_cache)  # as IPython's autoreload does
try:
    generate_ours(model, torch.cat([out, prompt_ids(2, 2, seed=9)], 1), cache, max_new_tokens=4, do_sample=False)
    raise SystemExit("a cache built before the reload decoded")
except RuntimeError as error:
    assert "built before hf_deltalog.fla_cache was reloaded" in str(error), error
fresh = DeltaLogCache(model, merge_interval=3)
assert torch.equal(generate_ours(model, ids, fresh, max_new_tokens=3, do_sample=False),
                   generate_ref(model, ids, max_new_tokens=3, do_sample=False)[0])
print("ok")
"""


def test_a_cache_built_before_a_reload_of_the_module_says_so(tmp_path):
    """After importlib.reload(hf_deltalog.fla_cache) (IPython's autoreload), a cache built before failed with "reached
    an FLA kernel that hf_deltalog has not bound (was hf_deltalog.unpatch() called ...)", which sent the user after an
    unpatch that never happened (35th review). It names the reload now; a new cache decodes as FLA's. Subprocess."""
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "reload_cache_module.py"
    script.write_text(CACHE_MODULE_RELOAD_SCRIPT.format(tests=str(pathlib.Path(__file__).parent)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:] + done.stdout[-1000:]


@pytest.mark.parametrize("owner, other, held", [("gated_deltanet", "kda", False), ("kda", "gated_deltanet", False),
                                                ("gated_deltanet", "rwkv6", True), ("rwkv6", "kda", True)])
def test_a_model_of_another_family_is_refused_with_the_cause(owner, other, held):
    """A forward of a model of another FLA family with the same head sizes (GDN and KDA here) prefilled an empty cache
    silently (its state passed the shape checks; 36th review); on a cache holding tokens, RWKV6's layer failed inside
    FLA's code with an AttributeError that did not name the cause. Both are refused naming the two families, and the
    cache is locked until reset()."""
    model, stranger = tiny_model(owner), tiny_model(other)
    ids = prompt_ids(2, 4)
    cache = DeltaLogCache(model, backend="torch")
    with torch.no_grad():
        if held:
            model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=f"built for FLA's '{owner}' models but is used by a '{other}' layer"):
            stranger(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=f"locked by a call it refused.*used by a '{other}' layer"):
            model(ids, past_key_values=cache, use_cache=True)
        cache.reset()
        ref = Cache()
        a = model(ids, past_key_values=ref, use_cache=True).logits
        b = model(ids, past_key_values=cache, use_cache=True).logits
    assert max_abs(a, b) <= 1e-5


def test_a_recurrent_layer_of_a_family_not_served_is_refused():
    """FLA's other recurrent layers (DeltaNet, GLA, ...) store through the same cache helpers: a DeltaNet model
    prefilled a GatedDeltaNet DeltaLog cache without complaint, and only its decode failed, naming unbound kernels
    (44th review). The store is refused naming its layer module; the cache is locked until reset()."""
    from fla.models import DeltaNetConfig, DeltaNetForCausalLM
    from helpers import COMMON

    torch.manual_seed(0)
    stranger = DeltaNetForCausalLM(DeltaNetConfig(**dict(COMMON, num_hidden_layers=2), num_heads=2,
                                                  expand_k=0.5, expand_v=0.5)).eval()
    model, ids = tiny_model("gated_deltanet"), prompt_ids(2, 4)
    cache = DeltaLogCache(model, backend="torch")
    with torch.no_grad():
        with pytest.raises(ValueError, match="built for FLA's 'gated_deltanet' models but is used by a 'delta_net' "
                                             r"layer \(fla.layers.delta_net\)"):
            stranger(ids, past_key_values=cache, use_cache=True)
        cache.reset()
        a = model(ids, past_key_values=Cache(), use_cache=True).logits
        b = model(ids, past_key_values=cache, use_cache=True).logits
    assert max_abs(a, b) <= 1e-5


def test_a_subclass_of_flas_config_or_a_copied_config_class_with_flas_model_is_served():
    """FLA was recognised by the config's class living in ``fla.``: a user's subclass of FLA's config (defined
    elsewhere), or FLA's model class with a config class copied from FLA's (as remote code does), was refused with
    "does not support 'gated_deltanet' models (it serves ... flash-linear-attention's gated_deltanet ...)". Both are
    served now, with FLA's cache's tokens; a copied config class alone (no FLA class anywhere) is refused with a
    message that says what is missing."""
    from fla.models import GatedDeltaNetConfig, GatedDeltaNetForCausalLM
    from helpers import family_config, generate_ref

    class UserConfig(GatedDeltaNetConfig):  # a subclass defined outside fla.*
        pass

    class CopiedConfig(transformers.PretrainedConfig):  # a copy of FLA's config class (not derived from it)
        model_type = "gated_deltanet"

    base = family_config("gated_deltanet")
    torch.manual_seed(0)
    model = GatedDeltaNetForCausalLM(UserConfig(**base.to_dict())).eval()
    copied = copy.deepcopy(model)
    copied.config = CopiedConfig(**model.config.to_dict())
    ids = prompt_ids(2, 5)
    ref, _ = generate_ref(model, ids, max_new_tokens=9, do_sample=False)
    for m in (model, copied):
        cache = DeltaLogCache(m, merge_interval=4)
        assert isinstance(cache, FLADeltaLogCache)
        out = generate_ours(m, ids, cache, max_new_tokens=9, do_sample=False)
        assert torch.equal(out if isinstance(out, torch.Tensor) else out.sequences,
                           ref if isinstance(ref, torch.Tensor) else ref.sequences)
    with pytest.raises(ValueError, match=r"serves 'gated_deltanet' models of flash-linear-attention's classes .*"
                                         r"neither this config's class, .*CopiedConfig, is FLA's or derived from it"):
        DeltaLogCache(copied.config)

    class RemoteModel(torch.nn.Module):  # neither class is FLA's: the message names both
        def __init__(self, config):
            super().__init__()
            self.config = config

    with pytest.raises(ValueError, match=r"neither this config's class, .*CopiedConfig, nor the model's, "
                                         r".*RemoteModel, is FLA's or derived from it"):
        DeltaLogCache(RemoteModel(copied.config))

